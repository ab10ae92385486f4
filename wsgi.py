"""WSGI entry point: gunicorn wsgi:app."""

import gc

from app import create_app

app = create_app()

# Everything built so far (modules, the app, its schemas) lives as long as the process.
# gc.freeze() moves it out of the collector's view, so a full collection walks only what
# requests allocate instead of every long-lived object, and the request that triggers one
# (with the GIL held) is not held up for long.
gc.freeze()
