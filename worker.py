"""RQ worker: builds the app once, serves the queues functions (first) then webhooks, and runs
the delivery sweeper in a background thread every SWEEP_INTERVAL seconds.

`python worker.py` serves both queues; `python worker.py functions` and
`python worker.py webhooks` split them, so a function call never waits behind a backlog of
deliveries (deploy/systemd/voiceagent-worker@.service runs one of each)."""

import logging
import sys
import time

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from rq import SimpleWorker

from app import create_app, queue
from app.queue import redis_connection

QUEUES = ["functions", "webhooks"]

log = logging.getLogger("worker")


def wait_for_redis() -> None:
    """Return once Redis answers; a worker started during an outage waits instead of exiting."""
    delay = 0.5
    while True:
        try:
            redis_connection().ping()
            return
        except (RedisConnectionError, RedisTimeoutError) as exc:
            log.warning("Redis is not answering (%s); trying again in %.1fs", exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, 10.0)


def main(argv: list[str]) -> None:
    app = create_app()
    queues = argv or QUEUES
    with app.app_context():
        if not app.config.get("REDIS_URL"):
            sys.exit("worker.py needs REDIS_URL (without Redis, jobs run inline in the web app).")
        if "webhooks" in queues:
            queue.start_sweeper(app)
        while True:
            wait_for_redis()
            # Jobs run in this process rather than a fork per job: they are short, bounded by
            # their HTTP timeouts, and forking beside the sweeper thread is unsafe.
            worker = SimpleWorker(queues, connection=redis_connection())
            try:
                worker.work(with_scheduler=False)
                return  # asked to stop
            except (RedisConnectionError, RedisTimeoutError):
                log.exception("lost Redis; starting over once it answers")


if __name__ == "__main__":
    main(sys.argv[1:])
