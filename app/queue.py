"""Job queues: RQ on Redis, or inline in the web process when there is no Redis.

Work that a transaction causes (a webhook delivery, say) is deferred with defer(), which
enqueues it once that transaction commits (peewee's after_commit), so a job never sees
uncommitted rows and a rolled-back change sends nothing. The database row stays the truth;
a lost enqueue is picked up again by the delivery sweeper.

Six RQ queues: `functions` (a caller waits on the line for each job's return value),
`function_tests` (the same for function tests, served apart so that they never hold up a
call), `webhooks` and `webhooks_slow` (the slow lane of deliveries), `whatsapp` (campaign
contacts' call permission checks and requests to Meta) and `analysis` (post-call analyses,
each a request to Gemini). Inline mode (no Redis) runs the same job functions in the process
that enqueues them: a delivery's or an analysis' job enqueued during an HTTP request goes to
one background thread of the web process, so the response never waits on a slow receiver,
and that thread also sweeps, which is how retries happen; anything else runs at once in the
calling thread. A job enqueued for later (enqueue_in) waits in RQ's schedule, which the
workers' scheduler moves to its queue when due; inline, on a timer that hands it to the
background thread.

Work that needs no worker but must not hold up a response (dispatching a function call's
deliveries) runs in the web process once the response is sent (after_response).

A job is named by its dotted path ("app.jobs.deliver_webhook"), as RQ allows, so the modules
that enqueue jobs never import the module that runs them; inline mode imports it by that
name too.
"""

import logging
import queue as stdlib_queue
import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from functools import partial
from typing import Any

from flask import Flask, Response, current_app, g, has_request_context
from redis import Redis, RedisError
from rq import Queue
from rq.job import Job
from rq.results import Result
from werkzeug.utils import import_string

from app.db import database

log = logging.getLogger(__name__)

# How RQ keeps each queue's jobs. A function call's (or test's) job is dropped when no worker
# took it within `ttl` (its caller gave up long before) and its result is read once, at once;
# a delivery's job is kept only briefly (the delivery row is the record: RQ deleting a
# finished job at once costs it more than letting it expire). A delivery's job timeout comes
# from its lease (webhook_job_timeout).
JOB_OPTIONS: dict[str, dict[str, Any]] = {
    "functions": {"timeout": 30, "ttl": 30, "result_ttl": 60, "failure_ttl": 600},
    "function_tests": {"timeout": 30, "ttl": 30, "result_ttl": 60, "failure_ttl": 600},
    "webhooks": {"result_ttl": 10, "failure_ttl": 24 * 3600},
    "webhooks_slow": {"result_ttl": 10, "failure_ttl": 24 * 3600},
    # Call permission checks and requests of campaign contacts (Graph requests, each within
    # WHATSAPP_GRAPH_TIMEOUT).
    "whatsapp": {"timeout": 60, "result_ttl": 10, "failure_ttl": 24 * 3600},
    # Post-call analyses (a Gemini request each, within ANALYSIS_TIMEOUT).
    "analysis": {"timeout": 90, "result_ttl": 10, "failure_ttl": 24 * 3600},
}
WEBHOOK_QUEUES = ("webhooks", "webhooks_slow")  # the fast lane and the slow one
# The queues whose jobs inline mode runs in its background thread, not in the request.
BACKGROUND_QUEUES = (*WEBHOOK_QUEUES, "analysis")
RESULT_POLL_S = 0.005
ENQUEUE_BATCH = 1000  # jobs per Redis pipeline in enqueue_many
SWEEP = "app.jobs.sweep"


def webhook_job_timeout(config: Mapping[str, Any]) -> int:
    """Whole seconds RQ lets a delivery's job run: less than the lease the job holds its
    delivery by, so a job stopped by RQ has let go before another may take the delivery over,
    and a delivery is never sent twice at once."""
    return int(config["WEBHOOK_LEASE_SECONDS"]) - 1


def job_options(queue_name: str) -> dict[str, Any]:
    """The RQ options of a queue's jobs."""
    options = JOB_OPTIONS[queue_name]
    if "timeout" not in options:
        options = {**options, "timeout": webhook_job_timeout(current_app.config)}
    return options


# Takes one of ARGV[1] places under KEYS[1] for the member ARGV[3], held for ARGV[2] seconds
# at most: places whose time is up are dropped first (a holder that died frees its place by
# itself), and the clock is Redis's own, the same for every host. 1 when taken, 0 when all
# are held: one round trip.
TAKE_PLACE_SCRIPT = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], t + tonumber(ARGV[2]), ARGV[3])
redis.call('EXPIRE', KEYS[1], 60)
return 1
"""
PLACE_KEY = "voiceagent:places:"


def take_place(group: str, member: str, *, places: int, seconds: float) -> bool:
    """Take one of `places` in group for member, for `seconds` at most; False when all are
    held. Every process shares them through Redis (inline mode: this process's own). When
    Redis does not answer, True: the job's enqueue then fails, and says so, as before."""
    if inline():
        return _local_places.take(group, member, places=places, seconds=seconds)
    client = redis_connection()
    script = current_app.extensions.get("take_place_script")
    if script is None:
        script = current_app.extensions["take_place_script"] = client.register_script(
            TAKE_PLACE_SCRIPT
        )
    try:
        return bool(script(keys=[PLACE_KEY + group], args=[places, seconds, member]))
    except RedisError as exc:
        log.warning("could not count the places of %s (%s)", group, exc)
        return True


def give_back_place(group: str, member: str) -> None:
    """Free member's place in group (its time running out frees it too)."""
    if inline():
        _local_places.give_back(group, member)
        return
    try:
        redis_connection().zrem(PLACE_KEY + group, member)
    except RedisError as exc:
        log.warning("could not free a place of %s (%s); it frees itself", group, exc)


class LocalPlaces:
    """take_place's places in one process (inline mode), with the same rules."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: dict[str, dict[str, float]] = {}

    def take(self, group: str, member: str, *, places: int, seconds: float) -> bool:
        now = time.monotonic()
        with self.lock:
            held = {m: until for m, until in self.held.get(group, {}).items() if until > now}
            if len(held) >= places:
                self.held[group] = held
                return False
            held[member] = now + seconds
            self.held[group] = held
            return True

    def give_back(self, group: str, member: str) -> None:
        with self.lock:
            self.held.get(group, {}).pop(member, None)


_local_places = LocalPlaces()


def redis_connection(*, blocking: bool = False) -> Redis:
    """The app's Redis client (one per process, created on first use).

    blocking=True gives a second client whose socket timeout outlasts the longest blocking
    read (waiting for a function call's result), so such a wait is not cut short.
    """
    name = "redis_blocking" if blocking else "redis"
    client = current_app.extensions.get(name)
    if client is None:
        client = Redis.from_url(
            current_app.config["REDIS_URL"],
            socket_connect_timeout=2,
            socket_timeout=10 if blocking else 5,
        )
        current_app.extensions[name] = client
    return client


def inline() -> bool:
    return current_app.config["QUEUE_MODE"] == "inline"


def defer(queue_name: str, func: str, *args: Any, **options: Any) -> None:
    """Enqueue func(*args) once the current transaction commits (at once outside one)."""
    database.after_commit(partial(enqueue, queue_name, func, *args, **options))


def enqueue(queue_name: str, func: str, *args: Any, job_id: str | None = None) -> bool:
    """Send a job to its RQ queue, or run it in inline mode; False when Redis is unreachable
    (the sweeper enqueues a delivery again from its row)."""
    if inline():
        # The web process's background thread, started by the request (init_app).
        background = current_app.extensions.get("inline_worker") if has_request_context() else None
        if queue_name in BACKGROUND_QUEUES and background is not None:
            background.submit(func, args)
        else:
            run_inline(func, *args)
        return True
    try:
        rq_queue(queue_name).enqueue_call(func, args, job_id=job_id, **job_options(queue_name))
    except RedisError as exc:
        log.warning("could not enqueue %s on %s (%s)", func, queue_name, exc)
        return False
    return True


def enqueue_in(queue_name: str, func: str, *args: Any, delay: float) -> bool:
    """Send a job to its RQ queue in delay seconds (RQ's schedule, moved to the queue by the
    workers' scheduler), or, in inline mode, hand it to the background thread then; False
    when Redis is unreachable."""
    if inline():
        worker = inline_worker(current_app._get_current_object())  # type: ignore[attr-defined]
        timer = threading.Timer(delay, worker.submit, (func, args))
        timer.daemon = True
        timer.start()
        return True
    try:
        rq_queue(queue_name).enqueue_in(
            timedelta(seconds=delay), func, *args, **_rq_options(queue_name)
        )
    except RedisError as exc:
        log.warning("could not schedule %s on %s (%s)", func, queue_name, exc)
        return False
    return True


def _rq_options(queue_name: str) -> dict[str, Any]:
    """job_options as Queue.enqueue takes them (job_timeout, not timeout)."""
    options = dict(job_options(queue_name))
    if "timeout" in options:
        options["job_timeout"] = options.pop("timeout")
    return options


def after_response(queue_name: str, func: str, *args: Any) -> None:
    """Run the job func(*args) in this process once the response to the current request has
    been sent, so the client never waits for it: no job to enqueue and for a worker to take.
    Inline mode, or outside a request: enqueue it as enqueue() does. Lost with the process
    only if it dies in that moment: what the job does must be found again by a sweep."""
    if inline() or not has_request_context():
        enqueue(queue_name, func, *args)
        return
    g.setdefault("after_response", []).append((func, args))


def _run_after_response(app: Flask, response: Response) -> Response:
    """after_request: hand the jobs the request left for after its response to the response's
    close, which the WSGI server calls once the response is sent."""
    left = g.pop("after_response", None)
    if left:

        def run_left() -> None:
            with app.app_context():
                for func, args in left:
                    run_inline(func, *args)

        response.call_on_close(run_left)
    return response


def defer_many(queue_name: str, func: str, calls: list[tuple[Any, str]]) -> None:
    """Enqueue func(*args) for each (args, job_id) of calls once the current transaction
    commits: many jobs at once (a replay), with few round trips to Redis."""
    database.after_commit(partial(enqueue_many, queue_name, func, calls))


def enqueue_many(queue_name: str, func: str, calls: list[tuple[Any, str]]) -> bool:
    """Send jobs to their RQ queue, ENQUEUE_BATCH per pipeline (RQ's enqueue_many), or run them
    in inline mode as enqueue() does; False when Redis is unreachable (the sweeper enqueues
    the deliveries again from their rows)."""
    if inline():
        for args, job_id in calls:
            enqueue(queue_name, func, *args, job_id=job_id)
        return True
    rq = rq_queue(queue_name)
    options = job_options(queue_name)
    try:
        for start in range(0, len(calls), ENQUEUE_BATCH):
            rq.enqueue_many(
                [
                    Queue.prepare_data(func, args, job_id=job_id, **options)
                    for args, job_id in calls[start : start + ENQUEUE_BATCH]
                ]
            )
    except RedisError as exc:
        log.warning("could not enqueue %s on %s (%s)", func, queue_name, exc)
        return False
    return True


def waiting(queue_name: str) -> set[str] | None:
    """The ids of the jobs that wait in the queue to be run (inline mode: none ever waits),
    read in one round trip; None when Redis does not answer.

    A job a worker has taken off the queue is not waiting, even if it has not started: that
    worker may have died with it (RQ would fail it only at its next maintenance, minutes
    later).
    """
    if inline():
        return set()
    try:
        return set(rq_queue(queue_name).get_job_ids())
    except RedisError as exc:
        log.warning("could not read the jobs of %s (%s); trying again later", queue_name, exc)
        return None


def idle(queue_name: str) -> bool:
    """Whether no job waits in the queue (one round trip); False in inline mode, and when
    Redis does not answer."""
    if inline():
        return False
    try:
        return rq_queue(queue_name).count == 0
    except RedisError:
        return False


def lost(job_ids: list[str]) -> set[str] | None:
    """Those of job_ids that RQ does not hold at all (Redis restarted empty, say), read in
    one round trip; none in inline mode, None when Redis does not answer."""
    if inline() or not job_ids:
        return set()
    try:
        pipeline = redis_connection().pipeline(transaction=False)
        for job_id in job_ids:
            pipeline.exists(Job.key_for(job_id))
        found = pipeline.execute()
    except RedisError as exc:
        log.warning("could not look for jobs (%s); trying again later", exc)
        return None
    return {job_id for job_id, exists in zip(job_ids, found, strict=True) if not exists}


def known(job_id: str) -> bool:
    """Whether RQ holds the job (waiting, running, or finished a moment ago); False when Redis
    does not answer."""
    try:
        return Job.exists(job_id, connection=redis_connection())
    except RedisError:
        return False


def call(queue_name: str, func: str, *args: Any, timeout: float) -> Any:
    """Run func(*args) as a job and wait for what it returns, at most timeout seconds; None
    when no answer came in time or Redis is unreachable."""
    if inline():
        return run_inline(func, *args)
    deadline = time.monotonic() + timeout
    try:
        job = rq_queue(queue_name, blocking=True).enqueue_call(
            func, args, **job_options(queue_name)
        )
        # RQ's blocking wait takes whole seconds; what is left after it is polled.
        result = job.latest_result(timeout=int(timeout)) if timeout >= 1 else None
        while result is None and time.monotonic() < deadline:
            time.sleep(RESULT_POLL_S)
            result = job.latest_result()
    except RedisError as exc:
        log.warning("could not run %s on %s (%s)", func, queue_name, exc)
        return None
    if result is None or result.type != Result.Type.SUCCESSFUL:
        return None
    return result.return_value


def run_inline(func: str, *args: Any) -> Any:
    """Run a job in this process; an error is logged (a job's caller never sees it)."""
    try:
        return import_string(func)(*args)
    except Exception:
        log.exception("job %s%s failed", func, args)
        return None


def rq_queue(name: str, *, blocking: bool = False) -> Queue:
    return Queue(name, connection=redis_connection(blocking=blocking))


def depth(client: Redis, queue_name: str) -> int:
    """Jobs waiting in a queue."""
    return Queue(queue_name, connection=client).count


InlineJob = tuple[str, tuple[Any, ...]]


class InlineWorker:
    """Inline mode's background thread: runs submitted jobs in order, and sweeps when due."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self.jobs: stdlib_queue.Queue[InlineJob | None] = stdlib_queue.Queue()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, name="inline-jobs", daemon=True)
        self.thread.start()

    def submit(self, func: str, args: tuple[Any, ...]) -> None:
        self.jobs.put((func, args))

    def run(self) -> None:
        interval = self.app.config["SWEEP_INTERVAL"]
        next_sweep = time.monotonic() + interval
        with self.app.app_context():
            while not self.stopping.is_set():
                try:
                    job = self.jobs.get(timeout=max(0.0, next_sweep - time.monotonic()))
                except stdlib_queue.Empty:
                    job = None
                else:
                    if job is not None:
                        func, args = job
                        run_inline(func, *args)
                    self.jobs.task_done()
                if time.monotonic() >= next_sweep and not self.stopping.is_set():
                    run_inline(SWEEP)
                    next_sweep = time.monotonic() + interval

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every submitted job has run; False on timeout."""
        deadline = time.monotonic() + timeout
        while self.jobs.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def stop(self, timeout: float = 15.0) -> None:
        """Finish the job in hand, drop the rest (the sweeper finds them again), and stop."""
        self.stopping.set()
        self.jobs.put(None)  # wakes the thread if it is waiting for work
        self.thread.join(timeout)


_start_lock = threading.Lock()


def inline_worker(app: Flask) -> InlineWorker:
    """The app's inline background thread, started on first use."""
    with _start_lock:
        worker = app.extensions.get("inline_worker")
        if worker is None:
            worker = app.extensions["inline_worker"] = InlineWorker(app)
    return worker


def shutdown(app: Flask) -> None:
    """Stop the inline background thread, if it was started."""
    worker = app.extensions.pop("inline_worker", None)
    if worker is not None:
        worker.stop()


def init_app(app: Flask) -> None:
    app.after_request(partial(_run_after_response, app))
    if app.config["QUEUE_MODE"] == "inline":
        # Started with the first request, so retries left from before a restart are sent
        # without waiting for a new event.
        @app.before_request
        def start_inline_worker() -> None:
            inline_worker(app)
