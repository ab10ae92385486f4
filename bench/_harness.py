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
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GUNICORN_ARGS = ["-w", "2", "-k", "gthread", "--threads", "4", "--backlog", "2048"]
GUNICORN = " ".join(GUNICORN_ARGS)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
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
def receiver() -> Iterator[str]:
    """bench/_receiver.py in its own process (not competing with the bench for the GIL);
    yield its base URL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "_receiver.py"), str(port)],
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
    appended to log when given, else dropped."""
    port = free_port()
    output = open(log, "a") if log else subprocess.DEVNULL  # closed below
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
        if log:
            output.close()  # type: ignore[union-attr]


_MASTERS: dict[int, int] = {}  # port -> gunicorn master pid
# A run in which one gunicorn worker did less than this share of the work is repeated: the
# workers' kept-alive connections landed (almost) all on one of them, so half the machine
# idled. Which worker accepts a connection is a race that on this kind of VM one worker often
# wins every time; left in, such runs made the same code measure 0.1 x or 0.6 x bare.
LOPSIDED_SHARE = 0.25
LOPSIDED_TRIES = 4


def _workers_cpu(master: int) -> dict[int, float]:
    """CPU seconds used so far by each child (worker) of a gunicorn master, from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    used = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == master:  # fields[1] is the parent pid
            used[int(entry.name)] = (int(fields[11]) + int(fields[12])) / ticks
    return used


def balanced(port: int, run: Callable[[], dict]) -> dict:
    """run() against the gunicorn on port, repeated while one of its workers did less than
    LOPSIDED_SHARE of the work (LOPSIDED_TRIES runs at most, each repeat announced); the
    result counts the repeats under "lopsided", and its errors are those of every run."""
    master = _MASTERS.get(port)
    lopsided = 0
    errors = {"errors": 0, "locked": 0}
    while True:
        before = _workers_cpu(master) if master else {}
        result = run()
        for key in errors:
            errors[key] += result.get(key, 0)
        after = _workers_cpu(master) if master else {}
        spent = [after[pid] - before.get(pid, 0.0) for pid in after]
        total = sum(spent)
        if len(spent) < 2 or not total or min(spent) / total >= LOPSIDED_SHARE:
            break
        if lopsided + 1 >= LOPSIDED_TRIES:
            print(f"  kept a lopsided run: one worker did {min(spent) / total:.0%} of the work")
            break
        lopsided += 1
        print(f"  repeating a run: one worker did {min(spent) / total:.0%} of the work")
    counted = {key: count for key, count in errors.items() if key in result}
    return {**result, **counted, "lopsided": lopsided}


# GET load: wrk when installed (Debian's package; it takes the server little CPU), else a
# Python generator, which on a small machine takes a good share of the CPU from the server.
LOAD_GENERATOR = "wrk" if shutil.which("wrk") else "Python"


def load(
    port: int, path: str, headers: dict[str, str], *, seconds: float = 5.0, concurrency: int = 8
) -> dict[str, float]:
    """GET path at fixed concurrency over keep-alive connections (see LOAD_GENERATOR), in a
    run in which both gunicorn workers took part (see balanced)."""
    generator = load_wrk if LOAD_GENERATOR == "wrk" else load_python
    return balanced(
        port, lambda: generator(port, path, headers, seconds=seconds, concurrency=concurrency)
    )


def _ms(text: str) -> float:
    value, unit = re.match(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def load_wrk(
    port: int, path: str, headers: dict[str, str], *, seconds: float, concurrency: int
) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}{path}"
    header_args = [arg for name, value in headers.items() for arg in ("-H", f"{name}: {value}")]
    subprocess.run(["wrk", "-t1", "-c2", "-d1s", *header_args, url], capture_output=True)
    out = subprocess.run(
        ["wrk", "-t2", f"-c{concurrency}", f"-d{int(seconds)}s", "--latency", *header_args, url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    latency = dict(re.findall(r"^\s+(50|99)%\s+(\S+)\s*$", out, re.M))
    if "99" not in latency:
        raise RuntimeError(f"wrk measured nothing on {path}:\n{out}")
    requests_done = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = int(bad.group(1)) if bad else 0
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
        "p50_ms": _ms(latency["50"]),
        "p99_ms": _ms(latency["99"]),
        "errors": errors,
        "requests": requests_done,
    }


def run_clients(client: Callable[[], None], concurrency: int) -> float:
    """Run client in `concurrency` threads at once; the seconds until the last one ends."""
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    started = time.perf_counter()
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
    stop_at = time.perf_counter() + seconds

    def run() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
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
    elapsed = run_clients(run, concurrency)
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
