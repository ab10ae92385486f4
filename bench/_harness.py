"""Shared bench machinery: a seeded database, gunicorn servers and a keep-alive load generator.

Benchmarks are not tests: each one compares the service with a baseline in the same run on
the same machine and prints a table of ratios.
"""

import atexit
import http.client
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GUNICORN_ARGS = ["-w", "2", "-k", "gthread", "--threads", "4", "--backlog", "2048"]
GUNICORN = " ".join(GUNICORN_ARGS)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
POSTGRES_URL = os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
RUNTIME_TOKEN = "bench-runtime-token"
RUNTIME_HEADERS = {"Authorization": f"Bearer {RUNTIME_TOKEN}", "Content-Type": "application/json"}


def temp_sqlite_url() -> str:
    """A SQLite file in a fresh folder, removed when the benchmark exits."""
    folder = tempfile.mkdtemp(prefix="va-bench-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return f"sqlite:///{folder}/bench.db"


def fresh_redis() -> str:
    """The bench Redis database, flushed; exits with a message when Redis does not answer."""
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).flushdb()
    except redis.RedisError as exc:
        sys.exit(f"This benchmark needs Redis at {REDIS_URL} (BENCH_REDIS_URL): {exc}")
    return REDIS_URL


@contextmanager
def postgres_database() -> Iterator[str | None]:
    """A fresh PostgreSQL database for the run, dropped after; None when none answers at
    POSTGRES_URL (BENCH_POSTGRES_URL)."""
    import psycopg2

    try:
        admin = psycopg2.connect(POSTGRES_URL, connect_timeout=3)
    except psycopg2.Error:
        yield None
        return
    admin.autocommit = True
    name = f"va_bench_{uuid.uuid4().hex[:10]}"
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {name}")
    try:
        yield POSTGRES_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        from app import db

        db.close_all()
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


def service_env(database_url: str, **extra: str) -> dict[str, str]:
    """Environment of a service process (gunicorn or worker.py) on the bench database."""
    return {
        "DATABASE_URL": database_url,
        "REDIS_URL": REDIS_URL,
        "QUEUE_MODE": "rq",
        "RUNTIME_TOKEN": RUNTIME_TOKEN,
        "ALLOW_PRIVATE_URLS": "1",
        **extra,
    }


def _wait_for_port(port: int, process: subprocess.Popen, what: str) -> None:
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if time.time() > deadline or process.poll() is not None:
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.1)


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def receiver(delay_ms: int = 0) -> Iterator[str]:
    """bench/_receiver.py in its own process (not competing with the bench for the GIL),
    answering each request after delay_ms; yield its base URL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "_receiver.py"), str(port), str(delay_ms)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, process, "the receiver")
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop(process)


def receiver_stats(url: str) -> dict:
    """What the receiver has seen: {"count": N, "received": {key: unix_seconds}}."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.request("GET", "/_stats")
    stats = json.loads(connection.getresponse().read())
    connection.close()
    return stats


@contextmanager
def worker(env: dict[str, str], *queues: str) -> Iterator[subprocess.Popen]:
    """A real `python worker.py QUEUES…` process; stopped at the end."""
    process = subprocess.Popen(
        [sys.executable, "worker.py", *queues],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        _stop(process)


@contextmanager
def gunicorn(
    app_path: str, env: dict[str, str] | None = None, log: Path | None = None
) -> Iterator[int]:
    """Run gunicorn with the bench settings on a free port; yield the port. Its output is
    appended to log when given, else written to a pipe that another process reads and
    drops, as systemd's journal reads a service's output (a write to /dev/null costs the
    writer less than one a reader has to be woken for)."""
    port = free_port()
    sink = None
    output: Any
    if log:
        output = open(log, "a")  # closed below
    else:
        sink = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        output = sink.stdin
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", *GUNICORN_ARGS, "-b", f"127.0.0.1:{port}", app_path],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=output,
        stderr=output,
    )
    try:
        _wait_for_port(port, process, f"gunicorn {app_path}")
        _MASTERS[port] = process.pid
        yield port
    finally:
        _MASTERS.pop(port, None)
        _stop(process)
        output.close()
        if sink:
            sink.wait()


_MASTERS: dict[int, int] = {}  # port -> gunicorn master pid

# Which gunicorn worker accepts a connection is a race, and on this kind of VM it is seldom a
# fair one: of 20 runs of 8 keep-alive connections against 2 workers, 2 split them 4/4, 8 split
# 3/5, 9 split 1/7 or 2/6 and 1 gave all 8 to one worker. A run's figures then depend on the
# split more than on the code (the same code measured 0.1 x and 0.6 x bare). Every load
# therefore runs on connections split evenly over the workers: the split is read from /proc
# and a client whose connection landed on a worker holding more than its share reconnects.
EVEN_SPLIT_TRIES = 60


def _children(master: int) -> list[int]:
    """The gunicorn workers of a master (its child processes), from /proc."""
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == master:  # fields[1] is the parent pid
                children.append(int(entry.name))
    return children


def connection_owners(port: int) -> dict[int, int]:
    """For each established connection to the gunicorn on port, the client's port -> the pid
    of the worker that accepted it (connections still waiting to be accepted are left out)."""
    sockets = {}
    for pid in _children(_MASTERS[port]):
        try:
            descriptors = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for descriptor in descriptors:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{descriptor}")
            except OSError:
                continue
            if target.startswith("socket:["):
                sockets[target[8:-1]] = pid
    owners = {}
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
            if state == "01" and int(local.rsplit(":", 1)[1], 16) == port and inode in sockets:
                owners[int(remote.rsplit(":", 1)[1], 16)] = sockets[inode]
    return owners


def _workers_holding(port: int, client_ports: set[int] | None, expected: int) -> dict[int, int]:
    """connection_owners(port), restricted to client_ports when given, once `expected` of them
    have been accepted (or after 2 s)."""
    deadline = time.monotonic() + 2
    while True:
        owners = connection_owners(port)
        if client_ports is not None:
            owners = {client: pid for client, pid in owners.items() if client in client_ports}
        if len(owners) >= expected or time.monotonic() > deadline:
            return owners
        time.sleep(0.01)


def _share(port: int, concurrency: int) -> int:
    workers = len(_children(_MASTERS[port]))
    if concurrency % workers:
        raise ValueError(f"{concurrency} connections do not split evenly over {workers} workers")
    return concurrency // workers


def even_connections(port: int, concurrency: int) -> list[http.client.HTTPConnection]:
    """`concurrency` keep-alive connections to the gunicorn on port, as many on each worker."""
    share = _share(port, concurrency)
    connections: list[http.client.HTTPConnection] = []
    for _ in range(EVEN_SPLIT_TRIES):
        while len(connections) < concurrency:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.connect()
            connections.append(connection)
        mine = {connection.sock.getsockname()[1]: connection for connection in connections}
        owners = _workers_holding(port, set(mine), concurrency)
        held: dict[int, int] = {}
        kept = []
        for client, connection in mine.items():
            pid = owners.get(client)
            if pid is not None and held.get(pid, 0) < share:
                held[pid] = held.get(pid, 0) + 1
                kept.append(connection)
            else:
                connection.close()
        connections = kept
        if len(connections) == concurrency:
            return connections
    raise RuntimeError(f"could not split {concurrency} connections evenly over the workers")


# GET load: wrk when installed (Debian's package; it takes the server little CPU), else a
# Python generator, which on a small machine takes a good share of the CPU from the server.
LOAD_GENERATOR = "wrk" if shutil.which("wrk") else "Python"


def load(
    port: int, path: str, headers: dict[str, str], *, seconds: float = 5.0, concurrency: int = 8
) -> dict[str, float]:
    """GET path at fixed concurrency over keep-alive connections split evenly over the
    gunicorn workers (see LOAD_GENERATOR and EVEN_SPLIT_TRIES)."""
    generator = load_wrk if LOAD_GENERATOR == "wrk" else load_python
    return generator(port, path, headers, seconds=seconds, concurrency=concurrency)


def _ms(text: str) -> float:
    value, unit = re.match(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def load_wrk(
    port: int, path: str, headers: dict[str, str], *, seconds: float, concurrency: int
) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}{path}"
    header_args = [arg for name, value in headers.items() for arg in ("-H", f"{name}: {value}")]
    subprocess.run(["wrk", "-t1", "-c2", "-d1s", *header_args, url], capture_output=True)
    share = _share(port, concurrency)
    command = ["wrk", "-t2", f"-c{concurrency}", f"-d{int(seconds)}s", "--latency", *header_args]
    errors = 0
    for _ in range(EVEN_SPLIT_TRIES):
        # wrk opens its connections at once and keeps them: a run whose split is uneven is
        # stopped at once (wrk prints what it did on SIGINT: its errors still count) and
        # started again.
        process = subprocess.Popen([*command, url], stdout=subprocess.PIPE, text=True)
        held = Counter(_workers_holding(port, None, concurrency).values())
        if sorted(held.values()) == [share] * len(held) and sum(held.values()) == concurrency:
            out, _ = process.communicate()
            break
        process.send_signal(signal.SIGINT)
        errors += _wrk_errors(process.communicate()[0])
    else:
        raise RuntimeError(f"wrk's {concurrency} connections never split evenly over the workers")
    if process.returncode:
        raise RuntimeError(f"wrk failed on {path}:\n{out}")
    latency = dict(re.findall(r"^\s+(50|99)%\s+(\S+)\s*$", out, re.M))
    if "99" not in latency:
        raise RuntimeError(f"wrk measured nothing on {path}:\n{out}")
    requests_done = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
        "p50_ms": _ms(latency["50"]),
        "p99_ms": _ms(latency["99"]),
        "errors": errors + _wrk_errors(out),
        "requests": requests_done,
    }


def _wrk_errors(out: str) -> int:
    """Non-2xx answers and socket errors in wrk's report."""
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    failed = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return (int(bad.group(1)) if bad else 0) + (sum(map(int, failed.groups())) if failed else 0)


def run_clients(
    client: Callable[[http.client.HTTPConnection, float], None],
    port: int,
    concurrency: int,
    seconds: float,
) -> float:
    """Run client(connection, stop_at) in `concurrency` threads at once, each on a connection
    of its own split evenly over the gunicorn workers (even_connections), until stop_at
    (perf_counter), `seconds` from the start; the seconds until the last one ended."""
    connections = even_connections(port, concurrency)
    started = time.perf_counter()
    stop_at = started + seconds
    threads = [threading.Thread(target=client, args=(c, stop_at)) for c in connections]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def load_python(
    port: int, path: str, headers: dict[str, str], *, seconds: float, concurrency: int
) -> dict[str, float]:
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()

    def run(connection: http.client.HTTPConnection, stop_at: float) -> None:
        mine: list[float] = []
        bad = 0
        while time.perf_counter() < stop_at:
            started = time.perf_counter()
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            response.read()
            mine.append(time.perf_counter() - started)
            if response.status != 200:
                bad += 1
        connection.close()
        with lock:
            latencies.extend(mine)
            errors[0] += bad

    warm = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for _ in range(50):
        warm.request("GET", path, headers=headers)
        warm.getresponse().read()
    warm.close()
    elapsed = run_clients(run, port, concurrency, seconds)
    latencies.sort()
    return {
        "rps": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
        "errors": errors[0],
        "requests": len(latencies),
    }


def post_json(connection: http.client.HTTPConnection, path: str, body: object) -> dict:
    """POST a JSON body on a keep-alive connection with the runtime token; the JSON answer."""
    connection.request("POST", path, body=json.dumps(body), headers=RUNTIME_HEADERS)
    response = connection.getresponse()
    payload = response.read()
    if response.status >= 300:
        raise RuntimeError(f"POST {path}: {response.status} {payload[:300]!r}")
    return json.loads(payload)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def median_ratio(
    runs: list[dict[str, float]], base_runs: list[dict[str, float]], key: str = "rps"
) -> float:
    """The median over rounds of a run's figure over its own round's baseline. Rounds
    alternate the cases, so a slower minute on the machine (seen here: the bare endpoint at
    4,500 and 6,400 req/s ten minutes apart) cancels within a round; the median keeps one
    round's stray spike (a p99 of 30 ms among rounds of 11) out of the result."""
    return statistics.median(
        run[key] / base[key] for run, base in zip(runs, base_runs, strict=True)
    )


def median_run(runs: list[dict[str, float]]) -> dict[str, float]:
    """The run with the median throughput (its latencies come with it)."""
    return sorted(runs, key=lambda run: run["rps"])[len(runs) // 2]


def print_table(title: str, header: list[str], rows: list[list[object]]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    print(f"\n{title}")
    print("  ".join(str(cell).ljust(width) for cell, width in zip(header, widths, strict=True)))
    print("  ".join("-" * width for width in widths))
    for row in rows:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)))
