"""Capacity: how many concurrent calls one VM carries, against bare Flask endpoints.

The service runs as a deployment runs it: gunicorn with deploy/gunicorn.conf.py (two processes
per core, 4 threads each), `worker.py functions` and `worker.py webhooks` with their default
pools, each started in a session of its own and stopped as a group, on Redis
(BENCH_REDIS_URL) and a SQLite file, then on a fresh PostgreSQL database (BENCH_POSTGRES_URL)
when one answers.

TENANTS tenants each have a number, an agent with a function whose endpoint (a local process)
answers in 50 ms, and two webhooks to a local receiver (another process): one for call.ended
and call.transcript (a CRM), one for every event of a call (analytics): 8 deliveries a call.
One tenant lists its calls (GET /api/v1/calls?limit=50) once a second throughout.

Calls arrive at random (Poisson, the same sequence in every ramp) at a rate rising in steps of
STEP_S seconds (1, 2, 4, 6, 8 … calls/s), each step straight after the previous one. Each call
makes the runtime's requests over a compressed length of CALL_S seconds, on a keep-alive
connection of its own: start, answered, a function call at 30 % and at 60 % of the call, the
transcript at 90 %, ended at the end. For the calls that arrived in a step, the step meets the
target when
- the function hop (the function call's duration, as the runtime sees it, minus the
  endpoint's 50 ms) has p99 <= 40 ms,
- the event-to-receiver latency (the receipt time minus the event's `timestamp`) has
  p99 <= 1 s, and
- there was no error: no answer other than 2xx, no function call answering an error, no
  delivery missing DRAIN_S seconds after the call's last request, no failed calls list
  during the step.
The ramp stops after a step that is overloaded (hop p50 over 40 ms, event p50 over 1 s, or
an error), after the third step that misses the target (a miss of the p99 alone may be one
stall of a busy machine), or once RAMP_BUDGET_S seconds have passed; a step's result is known
a step later, once its deliveries had time to arrive. The capacity is the highest rate of a
step that met the target. The requests of a call do not depend on its length, so a
deployment whose calls last 3 minutes on average and arrive at r calls/s carries r x 180
calls at once (Little's law).

The baseline: the same ramp over the same rates against bench/bare_app.py, under the same
gunicorn settings: trivial JSON, no database, queue or events; its function call posts to
the 50 ms endpoint inline. Both ramps are driven by this process, on the same machine: its
threads take CPU from the server too, and a deployment's voice runtime would not.

Columns: "machine CPU (others)" is the whole machine's busy share during the step (both
cores = 100 %) and, in brackets, the share of processes not of this benchmark (neither the
service, its PostgreSQL backends, nor the load generator: this process and its receivers);
"CPU ms/call" the CPU time of the service's processes (gunicorn, both workers with their
pools and the PostgreSQL backends of its database) or of the bare gunicorn during the step
over the calls that arrived in it; "queued max" the most jobs seen waiting in the functions
and webhooks queues (sampled once a second). The next tables time each request at the
highest rate met and at the first rate missed: as the runtime saw it and as the app measured
it (its request log's durationMs), and for function calls the share until the endpoint's
answer reached the worker (the function call record's latencyMs; the record is written and
the answer handed back after).

Usage: python bench/capacity.py [--quick] [--database sqlite|postgresql|both]
  --quick: 1 and 2 calls/s, 6 s steps, 4 s calls; to check that it works, not a figure.
"""

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from _harness import (
    POSTGRES_URL,
    REDIS_URL,
    ROOT,
    RUNTIME_HEADERS,
    RUNTIME_TOKEN,
    free_port,
    fresh_redis,
    percentile,
    postgres_database,
    print_table,
    receiver,
    temp_sqlite_url,
)
from seed import seed_tenant

RATES = (1, 2, 4, 6, 8, 10, 12, 16, 20, 25, 30, 40)  # calls arriving per second, step by step
STEP_S = 20.0
CALL_S = 10.0
QUICK_RATES = (1, 2)
QUICK_STEP_S = 6.0
QUICK_CALL_S = 4.0
RAMP_BUDGET_S = 240.0  # no step starts later than this into a ramp
MISSES_TO_STOP = 3  # a miss of p99 alone may be a stray stall of a busy machine
DRAIN_S = 5.0  # a delivery not received this long after its call's last request is missing
ENDPOINT_S = 0.050
AVERAGE_CALL_S = 180  # 3 minutes
HOP_P99_MS = 40.0
EVENT_P99_S = 1.0
TENANTS = 4
REQUEST_TIMEOUT_S = 15.0
SECRET = "whsec-capacity-" + "s" * 20

# The requests of a call: (share of the call's length elapsed, request).
SCRIPT = (
    (0.0, "start"),
    (0.05, "answered"),
    (0.3, "function"),
    (0.6, "function"),
    (0.9, "transcript"),
    (1.0, "ended"),
)
EVENT_OF = {
    "start": "call.started",
    "answered": "call.answered",
    "function": "function.called",
    "transcript": "call.transcript",
    "ended": "call.ended",
}
WEBHOOKS = {
    "crm": ("call.ended", "call.transcript"),
    "analytics": tuple(dict.fromkeys(EVENT_OF.values())),
}
ROUTES = {  # the app's route (its request log) -> the request of SCRIPT, and the list
    "/internal/v1/calls": "start",
    "/internal/v1/calls/<call_id>/answered": "answered",
    "/internal/v1/calls/<call_id>/function-calls": "function",
    "/internal/v1/calls/<call_id>/transcript": "transcript",
    "/internal/v1/calls/<call_id>/ended": "ended",
    "/api/v1/calls": "list",
}
ENDED = {
    "status": "ended",
    "hangupReason": "normal",
    "hangupInitiator": "caller",
    "aiCostIdr": 1500,
}


def request_of(name: str, call_id: str | None, did: str, call_s: float) -> tuple[str, dict]:
    """The path and body of one request of a call that lasts call_s seconds: its end reports
    that length, as the call lived it (a call may not report much more than its age)."""
    if name == "start":
        return "/internal/v1/calls", {"did": did, "callerNumber": "+628123456789"}
    path = f"/internal/v1/calls/{call_id}"
    return {
        "answered": (f"{path}/answered", {}),
        "function": (
            f"{path}/function-calls",
            {"functionName": "lookup", "parameters": {"order": "A-1"}},
        ),
        "transcript": (f"{path}/transcript", {"transcriptSummary": "The caller asked about A-1."}),
        "ended": (
            f"{path}/ended",
            {
                **ENDED,
                "durationSeconds": round(call_s),
                "talkTimeSeconds": round(call_s * (1 - SCRIPT[1][0])),  # from the answer
            },
        ),
    }[name]


@dataclass
class Call:
    tenant: int
    id: str | None = None
    hops: list[float] = field(default_factory=list)  # seconds over the endpoint's 50 ms
    timings: list[tuple[str, float]] = field(default_factory=list)  # (request, seconds)
    sent: list[str] = field(default_factory=list)  # requests answered 2xx
    errors: list[str] = field(default_factory=list)
    done: float = 0.0  # unix seconds after its last request


def run_call(port: int, call: Call, did: str, began: float, call_s: float) -> None:
    """The requests of one call at their times from began (unix seconds)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
    try:
        for share, name in SCRIPT:
            if name != "start" and call.id is None:
                break  # the call never started: its other requests have no call to name
            time.sleep(max(0.0, began + share * call_s - time.time()))
            path, body = request_of(name, call.id, did, call_s)
            started = time.perf_counter()
            try:
                connection.request("POST", path, body=json.dumps(body), headers=RUNTIME_HEADERS)
                response = connection.getresponse()
                payload = response.read()
            except (OSError, http.client.HTTPException) as exc:
                call.errors.append(f"{name}: {exc!r}")
                connection.close()
                continue
            elapsed = time.perf_counter() - started
            call.timings.append((name, elapsed))
            if response.status >= 300:
                call.errors.append(f"{name}: {response.status} {payload[:200]!r}")
                continue
            answer = json.loads(payload)
            if name == "start":
                call.id = answer["id"]
            elif name == "function":
                call.hops.append(elapsed - ENDPOINT_S)
                if "result" not in answer:
                    call.errors.append(f"function: {payload[:200]!r}")
                    continue
            call.sent.append(name)
    finally:
        connection.close()
        call.done = time.time()


@dataclass
class Poll:
    at: float
    seconds: float
    error: str | None
    queued: tuple[int, int]  # jobs waiting in the functions and webhooks queues


def poll_calls(port: int, key: str, stop: threading.Event, polls: list[Poll], queues: bool) -> None:
    """GET /api/v1/calls?limit=50 as one tenant, once a second until stop; and, when queues,
    how many jobs wait in the functions and webhooks queues."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
    due = time.time()
    while not stop.is_set():
        queued = (
            (client.llen("rq:queue:functions"), client.llen("rq:queue:webhooks"))
            if queues
            else (0, 0)
        )
        at, started = time.time(), time.perf_counter()
        error = None
        try:
            connection.request("GET", "/api/v1/calls?limit=50", headers={"x-api-key": key})
            response = connection.getresponse()
            payload = response.read()
            if response.status != 200:
                error = f"list: {response.status} {payload[:200]!r}"
        except (OSError, http.client.HTTPException) as exc:
            error = f"list: {exc!r}"
            connection.close()
        polls.append(Poll(at, time.perf_counter() - started, error, queued))
        due += 1.0
        stop.wait(max(0.0, due - time.time()))
    connection.close()


class Deliveries:
    """What the webhook receiver has received, by call id (fetched incrementally)."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.address = (host, int(port))
        self.by_call: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
        self.count = 0

    def fetch(self) -> None:
        connection = http.client.HTTPConnection(*self.address, timeout=30)
        connection.request("GET", f"/_deliveries?from={self.count}")
        received = json.loads(connection.getresponse().read())
        connection.close()
        self.count += len(received)
        for path, event, call_id, timestamp, arrived in received:
            happened = datetime.fromisoformat(timestamp).timestamp()
            self.by_call[call_id].append((path.rsplit("/", 1)[1], event, arrived - happened))


def machine_times() -> tuple[int, int]:
    """(busy, total) CPU jiffies of the whole machine since boot."""
    with open("/proc/stat") as stat:
        values = [int(value) for value in stat.readline().split()[1:]]
    idle = values[3] + values[4]  # idle and iowait
    return sum(values) - idle, sum(values)


class Stack:
    """Processes each started in a session of its own, as systemd starts a unit, and stopped
    as a group, so no gunicorn worker or pool worker outlives the benchmark."""

    def __init__(self, folder: Path, env: dict[str, str], port: int) -> None:
        self.folder = folder
        self.env = {**os.environ, **env}
        self.port = port
        self.processes: dict[str, subprocess.Popen] = {}
        self.sessions: dict[int, str] = {}
        # The PostgreSQL database's name: its backends' CPU is the service's too.
        database_url = env.get("DATABASE_URL", "")
        self.database = (
            database_url.rsplit("/", 1)[1] if database_url.startswith("postgres") else None
        )

    def run(self, name: str, *command: str) -> None:
        with open(self.folder / f"{name}.log", "a") as log:
            self.processes[name] = subprocess.Popen(
                command, cwd=ROOT, env=self.env, stdout=log, stderr=log, start_new_session=True
            )
        self.sessions[self.processes[name].pid] = name

    def check(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                tail = (self.folder / f"{name}.log").read_text()[-3000:]
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{tail}")

    def cpu_seconds(self) -> Counter[str]:
        """CPU seconds so far, by where they were spent: each of the stack's sessions by the
        name it was started with (with the children its processes reaped), "postgres" for the
        PostgreSQL backends serving its database, "load" for this process and its receivers
        (the load generator)."""
        me = os.getpid()
        ticks: Counter[str] = Counter()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                head, tail = (entry / "stat").read_text().rsplit(")", 1)
                fields = tail.split()
                name = self.sessions.get(int(fields[3]))  # fields[3] is the session id
                if name is None:
                    command = ""
                    if int(entry.name) != me and (int(fields[1]) == me or "(postgres" in head):
                        command = (entry / "cmdline").read_text()  # fields[1] is the parent
                    if int(entry.name) == me or "_receiver.py" in command:
                        name = "load"
                    elif self.database and self.database in command:
                        name = "postgres"
            except OSError:
                continue
            if name:
                ticks[name] += sum(int(value) for value in fields[11:15])  # utime … cstime
        return Counter({name: count / os.sysconf("SC_CLK_TCK") for name, count in ticks.items()})

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(25)
            except subprocess.TimeoutExpired:
                pass
            try:  # whatever is left of its group
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(10)


def wait_until(condition, seconds: float, what: str, stack: Stack) -> None:
    deadline = time.monotonic() + seconds
    while True:
        stack.check()
        try:
            if condition():
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.1)


def answers(port: int, path: str) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request("GET", path)
        return connection.getresponse().status == 200
    finally:
        connection.close()


def workers_serving() -> bool:
    """Every pool worker of both worker.py processes waits on its queue (RQ's registry)."""
    import redis
    from rq import Worker

    from app import config as defaults

    wanted = {
        "functions": int(os.environ.get("FUNCTION_WORKERS", defaults.FUNCTION_WORKERS)),
        "webhooks": int(os.environ.get("WEBHOOK_WORKERS", defaults.WEBHOOK_WORKERS)),
    }
    served = Counter(
        name
        for worker in Worker.all(redis.Redis.from_url(REDIS_URL))
        for name in worker.queue_names()
    )
    return all(served[name] >= count for name, count in wanted.items())


@contextmanager
def stack_of(app_path: str, folder: Path, env: dict[str, str], workers: bool) -> Iterator[Stack]:
    """gunicorn with deploy/gunicorn.conf.py on a free port (and the two workers); stopped
    at the end, whatever happens."""
    port = free_port()
    stack = Stack(
        folder,
        {**env, "BIND": f"127.0.0.1:{port}", "PROMETHEUS_MULTIPROC_DIR": str(folder / "prom")},
        port,
    )
    try:
        gunicorn = [sys.executable, "-m", "gunicorn", "-c", "deploy/gunicorn.conf.py", app_path]
        stack.run("web", *gunicorn)
        if workers:
            stack.run("functions", sys.executable, "worker.py", "functions")
            stack.run("webhooks", sys.executable, "worker.py", "webhooks")
            wait_until(lambda: answers(port, "/readyz"), 60, "gunicorn", stack)
            wait_until(workers_serving, 60, "worker.py", stack)
        else:
            wait_until(lambda: answers(port, "/api/v1/calls"), 60, "gunicorn", stack)
        yield stack
    finally:
        stack.stop()


def seed(database_url: str, endpoint: str, hooks: str) -> tuple[list[str], str]:
    """TENANTS tenants with a number, an agent with the function `lookup` and two webhooks;
    their numbers and the first one's API key."""
    from app import create_app, db
    from app.services import billing, functions, webhooks
    from app.services import tenants as tenant_service
    from app.services.audit import Actor

    app = create_app({"DATABASE_URL": database_url, "REDIS_URL": None, "QUEUE_MODE": "inline"})
    app.config["ALLOW_PRIVATE_URLS"] = True
    numbers, key = [], ""
    with app.app_context():
        db.upgrade()
        for i in range(TENANTS):
            number = f"+62210000{i + 1:02d}"
            seeded = seed_tenant(name=f"tenant-{i}", calls=0, agents=1, number=number)
            tenant = tenant_service.find_tenant(seeded.tenant_id)
            billing.grant(actor=Actor.system(), tenant=tenant, minutes=10**9)
            functions.create_function(
                actor=Actor.system(),
                tenant=tenant,
                agent_id=seeded.agent_ids[0],
                name="lookup",
                description="Look an order up.",
                endpoint=f"{endpoint}/lookup",
                method="POST",
                parameters={
                    "type": "object",
                    "properties": {"order": {"type": "string", "description": "Order number."}},
                    "required": ["order"],
                },
            )
            for kind, events in WEBHOOKS.items():
                webhooks.create_webhook(
                    actor=Actor.system(),
                    tenant=tenant,
                    url=f"{hooks}/hooks/{i}/{kind}",
                    events=list(events),
                    secret=SECRET,
                )
            numbers.append(number)
            key = key or seeded.key
        db.close_all()
    return numbers, key


@dataclass
class Step:
    rate: float
    started: float
    load: float  # the machine's 1-minute load average when the step started
    calls: list[Call] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    ended: float = 0.0
    cpu_s: Counter[str] = field(default_factory=Counter)  # each process's CPU seconds in it
    machine_busy: float = 0.0  # share of the machine's CPU busy during the step
    others_busy: float = 0.0  # of it, the share of processes not of this benchmark
    polls: list[Poll] = field(default_factory=list)  # the lists made during the step
    result: dict | None = None

    def finished(self) -> bool:
        return not any(thread.is_alive() for thread in self.threads)

    def last_done(self) -> float:
        return max((call.done for call in self.calls), default=self.ended)


def evaluate(step: Step, deliveries: Deliveries | None, polls: list[Poll]) -> dict:
    """The step's figures and whether it met the target (deliveries None: no events)."""
    hops = [hop * 1000 for call in step.calls for hop in call.hops]
    errors = [error for call in step.calls for error in call.errors]
    step.polls = [poll for poll in polls if step.started <= poll.at < step.ended]
    errors += [poll.error for poll in step.polls if poll.error]
    latencies: list[float] = []
    missing = 0
    if deliveries is not None:
        for call in step.calls:
            if call.id is None:
                continue
            got = deliveries.by_call.get(call.id, [])
            latencies += [latency for _, _, latency in got]
            expected = Counter(
                (kind, EVENT_OF[name])
                for name in call.sent
                for kind, events in WEBHOOKS.items()
                if EVENT_OF[name] in events
            )
            missing += sum((expected - Counter((kind, event) for kind, event, _ in got)).values())
        if missing:
            errors.append(f"{missing} deliveries missing {DRAIN_S:.0f} s after their calls")
    hop_p99 = percentile(hops, 0.99) if hops else float("inf")
    event_p99 = percentile(latencies, 0.99) if latencies else None
    met = (
        hop_p99 <= HOP_P99_MS
        and (deliveries is None or (event_p99 is not None and event_p99 <= EVENT_P99_S))
        and not errors
    )
    hop_p50 = statistics.median(hops) if hops else float("inf")
    event_p50 = statistics.median(latencies) if latencies else None
    overloaded = (
        hop_p50 > HOP_P99_MS or (event_p50 is not None and event_p50 > EVENT_P99_S) or errors
    )
    return {
        "calls": len(step.calls),
        "hop_p50": hop_p50,
        "hop_p99": hop_p99,
        "event_p50": event_p50,
        "event_p99": event_p99,
        "deliveries": len(latencies),
        "errors": len(errors),
        "first_error": errors[0] if errors else "",
        "cpu_ms_per_call": sum(seconds for name, seconds in step.cpu_s.items() if name != "load")
        * 1000
        / max(1, len(step.calls)),
        "cpu_ms_by_process": {
            name: seconds * 1000 / max(1, len(step.calls)) for name, seconds in step.cpu_s.items()
        },
        "queued": tuple(max((poll.queued[i] for poll in step.polls), default=0) for i in (0, 1)),
        "met": met,
        "overloaded": bool(overloaded),
    }


def ramp(
    label: str,
    stack: Stack,
    rates: tuple[float, ...],
    step_s: float,
    call_s: float,
    numbers: list[str],
    key: str,
    deliveries: Deliveries | None,
) -> list[Step]:
    """Calls arriving at each rate in turn, until a step misses the target (or the budget
    is spent); every step evaluated once its calls are over and their deliveries had time."""
    port = stack.port
    warm_up(port, numbers, deliveries)
    rng = random.Random(20)  # the same arrivals for the service and the baseline
    polls: list[Poll] = []
    stop_polling = threading.Event()
    poller = threading.Thread(
        target=poll_calls, args=(port, key, stop_polling, polls, deliveries is not None)
    )
    poller.start()
    steps: list[Step] = []
    pending: list[Step] = []
    misses = 0
    overloaded = False
    began = time.time()
    arrivals = 0

    def settle(wait: bool) -> None:
        nonlocal misses, overloaded
        for step in list(pending):
            if wait:
                for thread in step.threads:
                    thread.join(REQUEST_TIMEOUT_S * len(SCRIPT))
                time.sleep(max(0.0, step.last_done() + DRAIN_S - time.time()))
            if not step.finished() or time.time() < step.last_done() + DRAIN_S:
                continue
            if deliveries is not None:
                deliveries.fetch()
            step.result = evaluate(step, deliveries, polls)
            pending.remove(step)
            misses += not step.result["met"]
            overloaded = overloaded or step.result["overloaded"]
            show(label, step)

    try:
        for rate in rates:
            if overloaded or misses >= MISSES_TO_STOP or time.time() - began > RAMP_BUDGET_S:
                break
            step = Step(rate=rate, started=time.time(), load=os.getloadavg()[0])
            cpu, machine = stack.cpu_seconds(), machine_times()
            offset = 0.0
            while True:
                offset += rng.expovariate(rate)
                if offset >= step_s:
                    break
                at = step.started + offset
                time.sleep(max(0.0, at - time.time()))
                call = Call(tenant=arrivals % TENANTS)
                arrivals += 1
                thread = threading.Thread(
                    target=run_call,
                    args=(port, call, numbers[call.tenant], at, call_s),
                    daemon=True,
                )
                thread.start()
                step.calls.append(call)
                step.threads.append(thread)
            time.sleep(max(0.0, step.started + step_s - time.time()))
            step.ended = time.time()
            step.cpu_s = stack.cpu_seconds()
            step.cpu_s.subtract(cpu)
            busy, total = machine_times()
            step.machine_busy = (busy - machine[0]) / max(1, total - machine[1])
            ours = sum(step.cpu_s.values()) / ((step.ended - step.started) * (os.cpu_count() or 1))
            step.others_busy = max(0.0, step.machine_busy - ours)
            steps.append(step)
            pending.append(step)
            stack.check()
            settle(wait=False)
        settle(wait=True)
    finally:
        stop_polling.set()
        poller.join()
    return steps


def warm_up(port: int, numbers: list[str], deliveries: Deliveries | None) -> None:
    """A few whole calls, not measured: the first requests of a process pay for imports and
    connections."""
    calls = [Call(tenant=i % TENANTS) for i in range(2 * TENANTS)]
    threads = [
        threading.Thread(target=run_call, args=(port, call, numbers[call.tenant], time.time(), 1))
        for call in calls
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    errors = [error for call in calls for error in call.errors]
    if errors:
        raise RuntimeError(f"the warm-up calls failed: {errors[:3]}")
    time.sleep(2)
    if deliveries is not None:
        deliveries.fetch()


def show(label: str, step: Step) -> None:
    result = step.result or {}
    event = result["event_p99"]
    print(
        f"  {label}: {step.rate:g} calls/s, {result['calls']} calls: hop p50 / p99 "
        f"{result['hop_p50']:.1f} / {result['hop_p99']:.1f} ms, event p99 "
        f"{'-' if event is None else f'{event * 1000:.0f} ms'}, errors {result['errors']}"
        f"{' (' + result['first_error'][:160] + ')' if result['errors'] else ''}; machine CPU "
        f"{step.machine_busy * 100:.0f} % (others {step.others_busy * 100:.0f} %), load "
        f"{step.load:.1f}; "
        f"{'met' if result['met'] else 'MISSED'}{' (overloaded)' if result['overloaded'] else ''}",
        flush=True,
    )


def capacity(steps: list[Step]) -> float | None:
    """The highest rate of the steps that met the target."""
    return max((step.rate for step in steps if step.result and step.result["met"]), default=None)


def invocation_latencies(database_url: str) -> list[tuple[float, float]]:
    """Each function call's start (unix seconds) and its latency_ms: from the web process
    taking the request to the worker holding the endpoint's answer (the record is written
    after)."""
    from app import create_app, db
    from app.models import FunctionInvocation

    app = create_app({"DATABASE_URL": database_url, "REDIS_URL": None, "QUEUE_MODE": "inline"})
    with app.app_context():
        rows = [
            (started.replace(tzinfo=UTC).timestamp(), latency)
            for started, latency in FunctionInvocation.select(
                FunctionInvocation.created_at, FunctionInvocation.latency_ms
            ).tuples()
        ]
        db.close_all()
    return rows


REQUESTS = ("start", "answered", "function", "transcript", "ended", "list")


def request_timings(
    steps: list[Step], log: Path, invocations: list[tuple[float, float]]
) -> dict[float, list[list[str]]]:
    """For each step, rows of each request's p50/p99 (ms) as the runtime saw it (the calls
    that arrived in the step, the lists made during it) and as the app measured it (the
    requests it logged during the step)."""
    server: dict[tuple[float, str], list[float]] = defaultdict(list)

    def step_at(at: float) -> Step | None:
        return next((step for step in steps if step.started <= at < step.ended), None)

    for line in log.read_text().splitlines():
        if not line.startswith("{") or '"app.requests"' not in line:
            continue
        entry = json.loads(line)
        name = ROUTES.get(entry.get("route"))
        step = step_at(datetime.fromisoformat(entry["time"]).timestamp())
        if name and step:
            server[step.rate, name].append(entry["durationMs"])
    for started, latency in invocations:
        step = step_at(started)
        if step:
            server[step.rate, "worker"].append(latency)
    timings: dict[float, list[list[str]]] = {}
    for step in steps:
        client: dict[str, list[float]] = defaultdict(list)
        for call in step.calls:
            for name, seconds in call.timings:
                client[name].append(seconds * 1000)
        client["list"] = [poll.seconds * 1000 for poll in step.polls]
        rows = []
        for name, label in [*((name, name) for name in REQUESTS), ("worker", WORKER_ROW)]:
            rows.append(
                [
                    label,
                    *(
                        ms(statistic(values, 0.5), 1) + " / " + ms(statistic(values, 0.99), 1)
                        for values in (client[name], server[step.rate, name])
                    ),
                ]
            )
        timings[step.rate] = rows
    return timings


WORKER_ROW = "function: request taken -> endpoint answered in the worker"


def statistic(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    return statistics.median(values) if fraction == 0.5 else percentile(values, fraction)


def ms(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or value == float("inf") else f"{value:.{digits}f}"


def measure(label: str, database_url: str, quick: bool) -> None:
    rates, step_s, call_s = (
        (QUICK_RATES, QUICK_STEP_S, QUICK_CALL_S) if quick else (RATES, STEP_S, CALL_S)
    )
    fresh_redis()
    folder = Path(tempfile.mkdtemp(prefix="va-capacity-"))
    try:
        with receiver(int(ENDPOINT_S * 1000)) as endpoint, receiver() as hooks:
            numbers, key = seed(database_url, endpoint, hooks)
            deliveries = Deliveries(hooks)
            env = {
                "DATABASE_URL": database_url,
                "REDIS_URL": REDIS_URL,
                "RUNTIME_TOKEN": RUNTIME_TOKEN,
                "ALLOW_PRIVATE_URLS": "1",
                "LOG_FORMAT": "json",
            }
            service_folder = folder / "service"
            service_folder.mkdir()
            with stack_of("wsgi:app", service_folder, env, workers=True) as stack:
                ours = ramp(label, stack, rates, step_s, call_s, numbers, key, deliveries)
            timings = request_timings(
                ours, service_folder / "web.log", invocation_latencies(database_url)
            )
            bare_folder = folder / "bare"
            bare_folder.mkdir()
            bare_env = {"BARE_FUNCTION_URL": f"{endpoint}/lookup"}
            with stack_of("bench.bare_app:app", bare_folder, bare_env, workers=False) as stack:
                rates_run = tuple(step.rate for step in ours)
                bare = ramp("bare Flask", stack, rates_run, step_s, call_s, numbers, key, None)
        report(label, ours, bare, timings, step_s, call_s)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def report(
    label: str,
    ours: list[Step],
    bare: list[Step],
    timings: dict[float, list[list[str]]],
    step_s: float,
    call_s: float,
) -> None:
    bare_by_rate = {step.rate: step.result for step in bare if step.result}
    rows = []
    for step in ours:
        result = step.result or {}
        base = bare_by_rate.get(step.rate) or {}
        rows.append(
            [
                f"{step.rate:g}",
                f"{step.rate * AVERAGE_CALL_S:,.0f}",
                result.get("calls", "-"),
                f"{step.load:.1f}",
                f"{step.machine_busy * 100:.0f} % ({step.others_busy * 100:.0f} %)",
                ms(result.get("hop_p50")),
                ms(result.get("hop_p99")),
                ms(base.get("hop_p99")),
                ms(None if result.get("event_p99") is None else result["event_p99"] * 1000, 0),
                result.get("deliveries", "-"),
                result.get("errors", "-"),
                "/".join(str(n) for n in result.get("queued", ())),
                ms(result.get("cpu_ms_per_call"), 0),
                ms(base.get("cpu_ms_per_call"), 0),
                "yes" if result.get("met") else "NO",
            ]
        )
    print_table(
        f"{label}: calls arriving at a rising rate, {step_s:g} s a step, each call {call_s:g} s "
        f"(start, answered, 2 function calls to a {ENDPOINT_S * 1000:.0f} ms endpoint, "
        f"transcript, ended), {TENANTS} tenants with 2 webhooks each, one listing calls every "
        f"second; {os.cpu_count()} cores; target: function hop p99 <= {HOP_P99_MS:.0f} ms, "
        f"event -> receiver p99 <= {EVENT_P99_S:g} s, no errors",
        [
            "calls/s",
            "at once (3 min)",
            "calls",
            "load avg",
            "machine CPU (others)",
            "hop p50 ms",
            "hop p99 ms",
            "bare hop p99",
            "event p99 ms",
            "deliveries",
            "errors",
            "queued max",
            "CPU ms/call",
            "bare CPU ms/call",
            "met",
        ],
        rows,
    )
    best, bare_best = capacity(ours), capacity(bare)
    first_miss = next((step for step in ours if step.result and not step.result["met"]), None)
    if best is None:
        print(f"{label}: the target is missed at every rate run, from {ours[0].rate:g} call/s.")
    else:
        missed = (
            f" (missed at {first_miss.rate:g} calls/s)"
            if first_miss and first_miss.rate < best
            else ""
        )
        print(
            f"{label}: carries {best:g} calls/s{missed}, i.e. {best * AVERAGE_CALL_S:,.0f} "
            f"concurrent calls at a {AVERAGE_CALL_S // 60}-minute average call."
        )
    top = bare[-1].rate if bare else None
    if bare_best is not None and bare_best == top:
        print(
            f"bare Flask: met the target at every rate run, up to {top:g} calls/s (the ramp "
            "stops where the service does)"
            + (f"; x bare <= {best / top:.2f}." if best is not None else ".")
        )
    elif bare_best is not None and best is not None:
        print(f"bare Flask: carries {bare_best:g} calls/s; x bare: {best / bare_best:.2f}.")
    else:
        print(f"bare Flask: highest rate met: {bare_best if bare_best is not None else 'none'}.")
    compared = [
        (step.result["cpu_ms_per_call"], bare_by_rate[step.rate]["cpu_ms_per_call"])
        for step in ours
        if step.result and bare_by_rate.get(step.rate, {}).get("cpu_ms_per_call")
    ]
    if compared:
        ours_cpu = statistics.median(cpu for cpu, _ in compared)
        measured = [step.result["cpu_ms_by_process"] for step in ours if step.result]
        names = ["web", "functions", "webhooks"]
        if any("postgres" in cpu for cpu in measured):
            names.append("postgres")
        by_process = ", ".join(
            f"{name} {statistics.median(cpu.get(name, 0.0) for cpu in measured):.0f}"
            for name in names
        )
        load = statistics.median(cpu.get("load", 0.0) for cpu in measured)
        print(
            f"CPU per call: {ours_cpu:.0f} ms ({by_process}), "
            f"{statistics.median(cpu / base for cpu, base in compared):.1f} x bare Flask's "
            f"(medians over the steps); {os.cpu_count()} cores fully given to the service would "
            f"run out of CPU near {(os.cpu_count() or 1) * 1000 / ours_cpu:.0f} calls/s. "
            f"The load generator (this process and its receivers) took {load:.0f} ms a call."
        )
    picks = dict.fromkeys(rate for rate in (best, first_miss and first_miss.rate) if rate)
    for rate in picks or [ours[0].rate]:
        print_table(
            f"{label}, {rate:g} calls/s: p50 / p99 of each request in ms, as the runtime saw it "
            "and as the app measured it (its request log's durationMs, for the requests logged "
            "during the step); function calls include the endpoint's 50 ms",
            ["request", "runtime p50 / p99", "app p50 / p99"],
            timings[rate],
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run that checks it works")
    parser.add_argument("--database", choices=("sqlite", "postgresql", "both"), default="both")
    options = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the stacks on the way out
    print(f"load average at the start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if options.database in ("sqlite", "both"):
        measure("SQLite", temp_sqlite_url(), options.quick)
    if options.database in ("postgresql", "both"):
        with postgres_database() as url:
            if url is None:
                print(f"PostgreSQL skipped: nothing answers at {POSTGRES_URL}")
            else:
                measure("PostgreSQL", url, options.quick)
    print(f"load average at the end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
