"""RQ worker: builds the app once and serves the queues functions (first), then webhooks."""

import sys

from rq import Worker

from app import create_app
from app.queue import redis_connection

QUEUES = ["functions", "webhooks"]


def main(argv: list[str]) -> None:
    app = create_app()
    queues = argv or QUEUES
    with app.app_context():
        if not app.config.get("REDIS_URL"):
            sys.exit("worker.py needs REDIS_URL (without Redis, jobs run inline in the web app).")
        worker = Worker(queues, connection=redis_connection())
        worker.work(with_scheduler=False)


if __name__ == "__main__":
    main(sys.argv[1:])
