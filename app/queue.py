"""Job queues: RQ on Redis, or inline in the web process when there is no Redis.

Work that a transaction causes (a webhook delivery, say) is deferred with defer() and
enqueued only after that transaction commits, so a job never sees uncommitted rows and a
rolled-back change sends nothing. The database row stays the truth; a lost enqueue is
picked up again by the delivery sweeper, which worker.py runs every SWEEP_INTERVAL seconds.

The functions queue is not an RQ queue: a function call's caller is waiting on the line, and
RQ's bookkeeping (a job hash, registries, heartbeats: a dozen Redis round trips a job) cost
more than the rest of the hop. Its jobs are plain Redis list entries ([func_path, args] in
JSON) that worker.py pops with BLPOP in several threads, so one slow tenant endpoint does not
hold up the next call. Nothing there needs to survive an outage: a function call is never
retried, and its caller records function_timeout when no answer comes.

Inline mode (no Redis): jobs run in the process that enqueues them. A webhooks job enqueued
during an HTTP request goes to one background thread of the web process, so the response
never waits on a slow receiver; that thread also runs the sweeper, which is how retries
happen. Everything else (functions jobs, whose caller waits for the result anyway, and jobs
enqueued by the CLI or by the sweeper itself) runs at once in the calling thread.
"""

import json
import logging
import queue as stdlib_queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from importlib import import_module
from typing import Any

from flask import Flask, current_app, has_request_context
from redis import Redis, RedisError

from app.db import connection, database

log = logging.getLogger(__name__)

# A job deferred to the end of a transaction: queue, function path, arguments, job id.
Deferred = tuple[str, str, tuple[Any, ...], str | None]
_deferred: ContextVar[list[Deferred] | None] = ContextVar("deferred_jobs", default=None)


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


@contextmanager
def transaction() -> Iterator[None]:
    """A write transaction; jobs deferred inside it are enqueued after it commits."""
    outer = _deferred.get()
    if outer is not None:  # nested: the outermost transaction enqueues
        with database.atomic():
            yield
        return
    jobs: list[Deferred] = []
    token = _deferred.set(jobs)
    try:
        with database.atomic():
            yield
    finally:
        _deferred.reset(token)
    for queue_name, func_path, args, job_id in jobs:
        enqueue(queue_name, func_path, *args, job_id=job_id)


def defer(queue_name: str, func_path: str, *args: Any, job_id: str | None = None) -> None:
    """Enqueue func_path(*args) on queue_name once the current transaction() commits."""
    jobs = _deferred.get()
    if jobs is None:
        raise RuntimeError("defer() must be called inside queue.transaction()")
    jobs.append((queue_name, func_path, args, job_id))


def resolve(func_path: str) -> Any:
    module, _, name = func_path.rpartition(".")
    return getattr(import_module(module), name)


BACKGROUND_QUEUES = ("webhooks",)  # inline mode: nobody waits for these jobs' results
DIRECT_QUEUES = ("functions",)  # plain Redis lists served by DirectWorker, not RQ
DIRECT_PREFIX = "voiceagent:queue:"
DIRECT_TTL_S = 60  # a list nobody reads is dropped; its jobs' callers gave up long before
SWEEP_JOB = "app.services.deliveries.sweep"
ONCE_PREFIX = "voiceagent:enqueued:"


def enqueue(
    queue_name: str,
    func_path: str,
    *args: Any,
    once_key: str | None = None,
    once_ttl: int = 60,
    job_id: str | None = None,
) -> bool:
    """Send a job to its RQ queue, or run it in inline mode; False when Redis is unreachable.

    once_key: skip the job when one with the same key was enqueued in the last once_ttl
    seconds (the sweeper uses it so a backlog is not enqueued again on every sweep).
    job_id: the RQ job's id, for drop_waiting() (letters, digits, _ and - only).
    """
    if current_app.config["QUEUE_MODE"] == "inline":
        if queue_name in BACKGROUND_QUEUES and has_request_context():
            inline_worker(current_app).submit(func_path, args)
        else:
            resolve(func_path)(*args)
        return True
    from rq import Queue

    try:
        client = redis_connection()
        if once_key is not None:
            if not client.set(ONCE_PREFIX + once_key, 1, nx=True, ex=once_ttl):
                return True
        if queue_name in DIRECT_QUEUES:
            pipe = client.pipeline(transaction=False)
            _push_direct(pipe, queue_name, func_path, args)
            pipe.execute()
        else:
            Queue(queue_name, connection=client).enqueue(func_path, *args, job_id=job_id)
    except Exception:  # Redis down: the sweeper enqueues it again from the database row
        log.warning(
            "could not enqueue %s%s on %s; the sweeper will retry", func_path, args, queue_name
        )
        return False
    return True


def enqueue_and_wait(
    queue_name: str, func_path: str, *args: Any, result_key: str, timeout: float
) -> bytes | None:
    """Put a job on a direct queue and wait for the answer it pushes to the list result_key.

    The job and the wait (BLPOP) go to Redis in one pipeline: one round trip fewer on the
    caller's wait than enqueue() and a BLPOP. Returns None when no answer came within timeout
    seconds or Redis is unreachable.
    """
    if queue_name not in DIRECT_QUEUES:
        raise ValueError(f"{queue_name} is not a direct queue")
    try:
        pipe = redis_connection(blocking=True).pipeline(transaction=False)
        _push_direct(pipe, queue_name, func_path, args)
        pipe.blpop([result_key], timeout=timeout)
        popped = pipe.execute()[-1]
    except RedisError as exc:
        log.warning(
            "could not run %s on %s: Redis is not answering (%s)", func_path, queue_name, exc
        )
        return None
    return popped[1] if popped else None


def _push_direct(pipe: Any, queue_name: str, func_path: str, args: tuple[Any, ...]) -> None:
    pipe.rpush(direct_key(queue_name), json.dumps([func_path, args]))
    pipe.expire(direct_key(queue_name), DIRECT_TTL_S)


def direct_key(queue_name: str) -> str:
    return DIRECT_PREFIX + queue_name


def depth(client: Redis, queue_name: str) -> int:
    """Jobs waiting in a queue (RQ or direct)."""
    key = direct_key(queue_name) if queue_name in DIRECT_QUEUES else rq_key(queue_name)
    return int(client.llen(key))


def rq_key(queue_name: str) -> str:
    """The Redis list of an RQ queue's waiting job ids."""
    from rq import Queue

    return Queue.redis_queue_namespace_prefix + queue_name


def forget_once(once_key: str) -> None:
    """Drop the mark of enqueue(once_key=...), so the next such enqueue goes through."""
    if current_app.config["QUEUE_MODE"] != "rq":
        return
    try:
        redis_connection().delete(ONCE_PREFIX + once_key)
    except Exception:  # Redis down: the mark expires by itself
        log.warning("could not clear the enqueue mark %s", once_key)


# Removes each given job id from the queue list and, where it was still there, its job hash;
# a job a worker has taken already is left to run. KEYS[1]: the queue list; ARGV: id, hash key
# pairs. LREM looks from the head, where a backlog's oldest jobs wait, and stops at the first
# match.
DROP_WAITING_SCRIPT = """
for i = 1, #ARGV, 2 do
  if redis.call('LREM', KEYS[1], 1, ARGV[i]) > 0 then redis.call('DEL', ARGV[i + 1]) end
end
"""


def drop_waiting(queue_name: str, job_ids: list[str], once_keys: list[str]) -> None:
    """Take jobs that have become pointless out of an RQ queue before a worker runs them, and
    forget the once_keys of their enqueue (as their start would have). Best effort: a job left
    behind (Redis unreachable, say) runs and finds nothing to do."""
    if current_app.config["QUEUE_MODE"] != "rq" or not job_ids:
        return
    from rq.job import Job

    try:
        pairs = [value for job_id in job_ids for value in (job_id, Job.key_for(job_id))]
        pipe = redis_connection().pipeline(transaction=False)
        pipe.eval(DROP_WAITING_SCRIPT, 1, rq_key(queue_name), *pairs)
        pipe.delete(*(ONCE_PREFIX + key for key in once_keys))
        pipe.execute()
    except RedisError:
        log.warning("could not drop %d waiting jobs from %s", len(job_ids), queue_name)


def sweep_once() -> None:
    """Run the sweeper once in its own connection; log, never raise (it runs in loops)."""
    try:
        with connection():
            resolve(SWEEP_JOB)()
    except Exception:
        log.exception("sweep failed; trying again in %ss", current_app.config["SWEEP_INTERVAL"])


def start_sweeper(app: Flask) -> threading.Thread:
    """A daemon thread that sweeps every SWEEP_INTERVAL seconds for the life of the process."""

    def loop() -> None:
        with app.app_context():
            while True:
                sweep_once()
                time.sleep(app.config["SWEEP_INTERVAL"])

    thread = threading.Thread(target=loop, name="delivery-sweeper", daemon=True)
    thread.start()
    return thread


class DirectWorker:
    """Serves a direct queue in `threads` threads, each popping and running one job at a time.

    stop() lets every thread finish the job in hand (a function call is bounded by its
    5-second budget) and returns once they have.
    """

    POP_TIMEOUT_S = 1  # how often an idle thread looks at the stop flag

    def __init__(self, app: Flask, queue_name: str, threads: int) -> None:
        self.app = app
        self.key = direct_key(queue_name)
        self.stopping = threading.Event()
        self.threads = [
            threading.Thread(target=self._serve, name=f"{queue_name}-{n}", daemon=True)
            for n in range(threads)
        ]
        self._last_warning = 0.0

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self, timeout: float = 15.0) -> None:
        self.stopping.set()
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _serve(self) -> None:
        with self.app.app_context():
            client = Redis.from_url(
                self.app.config["REDIS_URL"],
                socket_connect_timeout=2,
                socket_timeout=self.POP_TIMEOUT_S + 5,
                client_name="voiceagent-worker-" + self.key.removeprefix(DIRECT_PREFIX),
            )
            while not self.stopping.is_set():
                try:
                    popped = client.blpop([self.key], timeout=self.POP_TIMEOUT_S)
                except RedisError as exc:
                    self._warn(exc)
                    self.stopping.wait(1.0)
                    continue
                if popped is not None:
                    self._run(popped[1])

    def _run(self, payload: bytes | str) -> None:
        try:
            func_path, args = json.loads(payload)
            with connection():
                resolve(func_path)(*args)
        except Exception:
            log.exception("job %s on %s failed", payload[:200], self.key)

    def _warn(self, exc: Exception) -> None:
        if time.monotonic() - self._last_warning >= 60 or not self._last_warning:
            self._last_warning = time.monotonic()
            log.warning("Redis is not answering (%s); %s waits", type(exc).__name__, self.key)


_start_lock = threading.Lock()


class InlineWorker:
    """Inline mode's background thread: runs submitted jobs in order, and sweeps when due."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self.jobs: stdlib_queue.Queue[tuple[str, tuple[Any, ...]] | None] = stdlib_queue.Queue()
        self.queued: set[tuple[str, tuple[Any, ...]]] = set()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, name="inline-jobs", daemon=True)
        self.thread.start()

    def submit(self, func_path: str, args: tuple[Any, ...]) -> None:
        with self.lock:
            if (func_path, args) in self.queued:
                return
            self.queued.add((func_path, args))
        self.jobs.put((func_path, args))

    def run(self) -> None:
        interval = self.app.config["SWEEP_INTERVAL"]
        next_sweep = time.monotonic() + interval
        with self.app.app_context():
            while not self.stopping.is_set():
                wait = max(0.0, min(interval, next_sweep - time.monotonic()))
                try:
                    job = self.jobs.get(timeout=wait)
                except stdlib_queue.Empty:
                    job = ()  # type: ignore[assignment]
                if job is None:  # stop() woke us
                    self.jobs.task_done()
                    break
                if job:
                    self._run_job(*job)
                if time.monotonic() >= next_sweep and not self.stopping.is_set():
                    sweep_once()
                    next_sweep = time.monotonic() + interval

    def _run_job(self, func_path: str, args: tuple[Any, ...]) -> None:
        with self.lock:
            self.queued.discard((func_path, args))
        try:
            with connection():
                resolve(func_path)(*args)
        except Exception:
            log.exception("inline job %s%s failed", func_path, args)
        finally:
            self.jobs.task_done()

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


def _start_inline_worker() -> None:
    inline_worker(current_app._get_current_object())  # type: ignore[attr-defined]


def init_app(app: Flask) -> None:
    if app.config["QUEUE_MODE"] == "inline":
        # Started with the first request, so retries left from before a restart are sent
        # without waiting for a new event.
        app.before_request(_start_inline_worker)
