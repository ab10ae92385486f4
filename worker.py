"""The worker: RQ workers for function calls and webhook deliveries, and the sweeper (due
deliveries, lapsed call holds, campaigns' due calls).

`python worker.py` serves both kinds of work; `python worker.py functions` and
`python worker.py webhooks` split them (deploy/systemd/voiceagent-worker@.service runs one of
each). Each queue has a pool of RQ workers of its own (RQ's WorkerPool of SimpleWorkers,
which run jobs in their own process without a fork per job): FUNCTION_WORKERS make that many
function calls at once and never wait behind deliveries or function tests (the
function_tests queue, served by FUNCTION_TEST_WORKERS beside them), and WEBHOOK_WORKERS send
that many deliveries at once, so one slow receiver does not hold up the others; beside them
WEBHOOK_SLOW_WORKERS serve the slow lane (webhooks_slow), where a webhook whose attempts
time out is sent until it answers in time again, WHATSAPP_WORKERS the whatsapp queue
(campaign contacts' call permission checks and requests to Meta), and ANALYSIS_WORKERS the
analysis queue (post-call analyses; their RQ scheduler brings back the ones scheduled for
later: retries, and a tenant's analyses beyond its share). The main process
builds the app once, starts a process per pool and, when it serves webhooks, sweeps due
deliveries every SWEEP_INTERVAL seconds. SIGTERM or SIGINT stops it once the jobs in hand
are done.
"""

import gc
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time

from flask import Flask
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from rq import SimpleWorker
from rq.worker_pool import WorkerPool

from app import create_app, jobs
from app.queue import redis_connection

QUEUES = ["functions", "webhooks"]
# The pools each of those runs: an RQ queue, and the setting that says how many workers.
POOLS = {
    "functions": (("functions", "FUNCTION_WORKERS"), ("function_tests", "FUNCTION_TEST_WORKERS")),
    "webhooks": (
        ("webhooks", "WEBHOOK_WORKERS"),
        ("webhooks_slow", "WEBHOOK_SLOW_WORKERS"),
        ("whatsapp", "WHATSAPP_WORKERS"),
        ("analysis", "ANALYSIS_WORKERS"),
    ),
}

log = logging.getLogger("worker")


class QueueWorker(SimpleWorker):
    """RQ's SimpleWorker, trying a Redis that stopped answering again every 2 s at most.

    RQ doubles its wait between tries up to a minute, so after an outage of a minute or two
    the queues would stay unread for up to a minute more once Redis is back.
    """

    max_connection_wait_time = 2.0


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


def yield_cpu_to_calls(niceness: int) -> None:
    """Deliveries are background work: webhooks workers run at a lower CPU priority."""
    if niceness > 0:
        os.nice(niceness)
        log.info("webhooks workers running at niceness +%d", niceness)


def serve(app: Flask, queue_name: str, size_setting: str, lower_priority: bool) -> None:
    """A pool of RQ workers on one queue, until it is asked to stop (in its own process)."""
    with app.app_context():
        if lower_priority:
            yield_cpu_to_calls(app.config["WEBHOOK_WORKER_NICENESS"])
        pool = WorkerPool(
            [queue_name],
            connection=redis_connection(),
            num_workers=app.config[size_setting],
            worker_class=QueueWorker,
        )
        pool.start(logging_level=app.config["JOB_LOG_LEVEL"])


def sweep_once(app: Flask) -> None:
    """Enqueue the due deliveries, release lapsed call holds and place the campaigns' due
    calls; log, never raise (it runs in a loop)."""
    try:
        jobs.sweep()
    except Exception:
        log.exception("sweep failed; trying again in %ss", app.config["SWEEP_INTERVAL"])


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
        if queues == ["webhooks"]:
            yield_cpu_to_calls(app.config["WEBHOOK_WORKER_NICENESS"])
        fork = multiprocessing.get_context("fork")
        # Everything built so far (modules, the app, its schemas) lives as long as the
        # processes: frozen, a full collection in a pool worker walks only what its jobs
        # allocate instead of every long-lived object, so it no longer holds up the job in
        # hand (a function call) for as long, and the forked workers share those pages.
        gc.freeze()
        # The pools are forked before this process opens a database connection or a thread.
        pools = [
            fork.Process(
                target=serve,
                args=(app, queue_name, size_setting, name == "webhooks" and len(queues) > 1),
                name=f"{queue_name} workers",
            )
            for name in queues
            for queue_name, size_setting in POOLS[name]
        ]
        for pool in pools:
            pool.start()
        stop = threading.Event()

        def request_stop(signum: int, frame: object) -> None:
            stop.set()
            for pool in pools:
                if pool.pid is not None and pool.is_alive():
                    os.kill(pool.pid, signal.SIGTERM)

        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, request_stop)
        while not stop.is_set():
            if "webhooks" in queues:
                sweep_once(app)
            if not all(pool.is_alive() for pool in pools):
                log.error("a pool of workers stopped; stopping the others")
                request_stop(signal.SIGTERM, 0)
                break
            stop.wait(app.config["SWEEP_INTERVAL"])
        for pool in pools:
            pool.join()
        sys.exit(0 if all(pool.exitcode == 0 for pool in pools) else 1)


if __name__ == "__main__":
    main(sys.argv[1:])
