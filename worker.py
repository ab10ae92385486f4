"""The worker: function calls and webhook deliveries, with the delivery sweeper.

`python worker.py` serves both queues; `python worker.py functions` and
`python worker.py webhooks` split them (deploy/systemd/voiceagent-worker@.service runs one of
each). Function calls are popped from their Redis list by FUNCTION_WORKER_THREADS threads, so
they never wait behind deliveries or behind each other; webhook deliveries go through an RQ
worker in the main thread, and the sweeper runs every SWEEP_INTERVAL seconds beside it.
SIGTERM or SIGINT stops the worker once the jobs in hand are done.
"""

import logging
import os
import signal
import sys
import threading
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


def serve_rq(queues: list[str]) -> None:
    """Run an RQ worker until it is asked to stop (it handles SIGTERM and SIGINT itself)."""
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


def yield_cpu_to_calls(niceness: int) -> None:
    """Deliveries are background work: a webhooks-only worker runs at a lower CPU priority."""
    if niceness > 0:
        os.nice(niceness)
        log.info("webhooks worker running at niceness +%d", niceness)


def wait_for_signal() -> None:
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()


def main(argv: list[str]) -> None:
    app = create_app()
    queues = argv or QUEUES
    unknown = sorted(set(queues) - set(QUEUES))
    if unknown:
        sys.exit(f"unknown queue {', '.join(unknown)}: choose from {', '.join(QUEUES)}")
    with app.app_context():
        if not app.config.get("REDIS_URL"):
            sys.exit("worker.py needs REDIS_URL (without Redis, jobs run inline in the web app).")
        wait_for_redis()
        functions = None
        if "functions" in queues:
            functions = queue.DirectWorker(
                app, "functions", threads=app.config["FUNCTION_WORKER_THREADS"]
            )
            functions.start()
        try:
            if "webhooks" in queues:
                if functions is None:
                    yield_cpu_to_calls(app.config["WEBHOOK_WORKER_NICENESS"])
                queue.start_sweeper(app)
                serve_rq(["webhooks"])
            else:
                wait_for_signal()
        finally:
            if functions is not None:
                functions.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
