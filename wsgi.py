"""WSGI entry point: gunicorn wsgi:app."""

import gc

from app import create_app

app = create_app()

# Everything built so far (modules, the app, its schemas) lives as long as the process. Kept
# out of the collector's view, a full collection walks only what requests allocate instead
# of some 75,000 long-lived objects: otherwise every few seconds one request in the process
# waited ~40 ms for it while the GIL was held (the calls list's p99 under load).
gc.freeze()
