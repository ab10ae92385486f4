"""WhatsApp bot: N WhatsApp users calling one bot process at once, and what each call costs it.

The bot (bridge/bots/whatsapp/server.py, its own process) answers each user's call as it
answers Meta's: the webhook, the call started with the service (gunicorn, Redis), the WebRTC
answer, Graph's pre_accept and accept (the tests' fake Graph API on 127.0.0.1, the service's
WHATSAPP_GRAPH_URL), and the call's Pipecat
pipeline with Gemini Live, whose client is the tests' scripted stand-in (tests/bridge/gemini.py:
it answers 200 ms after the caller stops, at once, with a tone). The users are aiortc peers in
this process sending Opus over 127.0.0.1. Each user speaks TURNS times; the added audio latency
is the time from the end of their speech to the first loud audio they hear, less the stand-in's
own 200 ms: WebRTC in, the pipeline, Gemini's session, the pipeline out, WebRTC out. The bot's
CPU (from /proc, user and system time) and resident memory are read while the calls are on,
against the bot idle before them.

N rises (CALLS, a comma-separated list; a fresh bot process for each N) until the latency
passes what one call sees plus ADDED_BUDGET_MS at p99, or a turn goes unanswered: the
baseline is the single call of the same run, so the table shows what load adds on this
machine, and the N carried is the last one within the budget. The users' own aiortc peers
run in this process on the same cores, so the figure understates what a bot on its own host
carries. With py-spy installed (`pip install py-spy`), PROFILE=1 samples the bot during the
largest N and prints where its CPU goes, by package.
"""

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _harness import (
    ROOT,
    RUNTIME_TOKEN,
    free_port,
    fresh_redis,
    gunicorn,
    percentile,
    print_table,
    service_env,
    temp_sqlite_url,
)
from cryptography.fernet import Fernet
from seed import seed_tenant

from tests.fake_graph import FakeGraph

sys.path.insert(0, str(ROOT / "bridge"))  # this checkout's bridge, as the bot process runs it

CALLS = [int(n) for n in os.environ.get("CALLS", "1,4,8,12,16,20,24").split(",")]
TURNS = int(os.environ.get("TURNS", 5))
ADDED_BUDGET_MS = float(os.environ.get("ADDED_BUDGET_MS", 60))
PROFILE = os.environ.get("PROFILE") == "1"
DID = "+6221000001"  # the WhatsApp number the users call
META_ID = "1062100001"  # Meta's id of it
MODEL_PAUSE_S = 0.2  # the scripted Gemini answers this long after the caller stops
SECRETS_KEY = Fernet.generate_key().decode()  # the bench database's stored secrets
TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def seed(database_url: str) -> None:
    from app import create_app, db
    from app.services import billing
    from app.services import tenants as tenant_service
    from app.services.audit import Actor
    from tests.whatsapp import whatsapp_number

    app = create_app(
        {
            "DATABASE_URL": database_url,
            "REDIS_URL": None,
            "QUEUE_MODE": "inline",
            "SECRETS_KEY": SECRETS_KEY,
        }
    )
    with app.app_context():
        db.upgrade()
        seeded = seed_tenant(name="bench", calls=0, agents=1, number="+6221000009")
        tenant = tenant_service.find_tenant(seeded.tenant_id)
        # The WhatsApp number, on an account whose secrets are stored encrypted.
        whatsapp_number(tenant, display=DID, meta_id=META_ID, agent_id=seeded.agent_ids[0])
        billing.grant(actor=Actor.system(), tenant=tenant, minutes=10**6)
        db.close_all()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def rss_mb(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20


def user_digits(i: int) -> str:
    return f"62812{i:08d}"


async def measure(
    service_url: str, graph: "FakeGraph", calls: int, profile: Path | None = None
) -> dict:
    import aioice.ice

    from tests.bridge.meta import FakeMeta, WhatsAppUser, graph_calls
    from tests.whatsapp import APP_SECRET

    aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"]
    meta = FakeMeta(META_ID, DID.lstrip("+"), app_secret=APP_SECRET)
    graph.on_calls = graph_calls(asyncio.get_running_loop(), [meta])
    port = free_port()
    scripts = {f"+{user_digits(i)}": ["Hello."] * TURNS for i in range(calls)}
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-whatsapp-{port}.log", "w")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "bridge")]),
        "SERVICE_URL": service_url,
        "RUNTIME_TOKEN": RUNTIME_TOKEN,
        "WHATSAPP_VERIFY_TOKEN": "bench",
        "BOT_SERVICES": "tests.bridge.gemini:services",
        "BOT_MEDIA_ADDRESSES": "127.0.0.1",
        "SCRIPTED_CALLERS": json.dumps(scripts),
        "LOG_LEVEL": "WARNING",
    }
    bot = subprocess.Popen(
        [sys.executable, str(ROOT / "bridge" / "bots" / "whatsapp" / "server.py"),
         "--port", str(port)],
        cwd=ROOT, env=env, stdout=log, stderr=log,
    )  # fmt: skip
    meta.bot_urls = [f"http://127.0.0.1:{port}"]
    try:
        for _ in range(300):
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                break
            except OSError:
                await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        idle_rss = rss_mb(bot.pid)
        idle_cpu, idle_at = cpu_seconds(bot.pid), time.monotonic()
        await asyncio.sleep(2.0)
        idle_share = (cpu_seconds(bot.pid) - idle_cpu) / (time.monotonic() - idle_at)

        latencies: list[float] = []
        missed: list[float] = []
        users = [WhatsAppUser(user_digits(i)) for i in range(calls)]
        call_ids: list[str] = []

        async def talk(user: WhatsAppUser) -> None:
            call_id, status = await meta.call_in(user)
            if status != 200:
                raise RuntimeError(f"the bot answered {status}")
            call_ids.append(call_id)
            await user.connected(timeout=30)
            await asyncio.sleep(0.5)  # the agent has no greeting: the caller speaks first
            for _ in range(TURNS):
                spoke = await user.say(0.4)
                try:
                    await user.hear(since=spoke, timeout=10)
                except AssertionError:
                    missed.append(spoke)  # a machine too busy to carry the calls
                    continue
                first = min(at for at in user.heard if at >= spoke)
                latencies.append(first - spoke - MODEL_PAUSE_S)

        began_cpu, began = cpu_seconds(bot.pid), time.monotonic()
        rss_peak = idle_rss

        async def sample() -> None:
            nonlocal rss_peak
            while True:
                rss_peak = max(rss_peak, rss_mb(bot.pid))
                await asyncio.sleep(0.2)

        sampler = asyncio.create_task(sample())
        spy = (
            await asyncio.create_subprocess_exec(
                "py-spy", "record", "--pid", str(bot.pid), "--rate", "100", "--format", "raw",
                "--output", str(profile), "--duration", str(TURNS * 2),
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )
            if profile
            else None
        )  # fmt: skip
        await asyncio.gather(*(talk(user) for user in users))
        if spy:
            await spy.wait()
        busy_share = (cpu_seconds(bot.pid) - began_cpu) / (time.monotonic() - began)
        sampler.cancel()
        for call_id, user in zip(call_ids, users, strict=False):
            await meta.terminate(call_id, user, duration=1)
        for user in users:
            await user.hang_up()
        await asyncio.sleep(1.0)  # the calls' last reports
        return {
            "latencies": latencies,
            "missed": len(missed),
            "cpu_per_call": (busy_share - idle_share) / calls,
            "mb_per_call": (rss_peak - idle_rss) / calls,
            "idle_mb": idle_rss,
        }
    finally:
        # Asked to stop, the bot ends once its calls have, their reports made (its Graph
        # requests answered on this loop: waited for off it).
        bot.terminate()
        try:
            await asyncio.to_thread(bot.wait, 30)
        except subprocess.TimeoutExpired:
            bot.kill()
        log.close()
        graph.on_calls = None


# Frames where a sampled thread waits rather than works (py-spy's idle detection misses some).
WAITING = ("select (selectors.py", "wait (threading.py", "_worker (concurrent/futures/thread.py:8")
PACKAGES = (
    "aiortc",
    "av",
    "pylibsrtp",
    "aioice",
    "pipecat",
    "voiceagent_bridge",
    "tests",
    "asyncio",
)


def profile_by_package(path: Path) -> list[list[object]]:
    """Busy samples by the package of the frame running: a stack's innermost frame in one of
    PACKAGES names it (the standard library's concurrent/threading frames count as 'threads')."""
    counts: dict[str, int] = {}
    for line in path.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        frames = stack.split(";")
        if any(name in frames[-1] for name in WAITING):
            continue
        owner = "other"
        for frame in reversed(frames):
            where = frame.rsplit("(", 1)[-1]
            found = next((p for p in PACKAGES if f"/{p}/" in where or where.startswith(p)), None)
            if found:
                owner = found
                break
            if "concurrent/futures" in where or "threading.py" in where or "queue.py" in where:
                owner = "threads (executor hand-offs)"
                break
        counts[owner] = counts.get(owner, 0) + int(samples)
    total = sum(counts.values()) or 1
    ranked = sorted(counts.items(), key=lambda item: -item[1])
    return [[owner, f"{samples / total * 100:.0f} %"] for owner, samples in ranked]


def main() -> None:
    fresh_redis()
    database_url = temp_sqlite_url()
    seed(database_url)
    profile = Path(os.environ.get("TMPDIR", "/tmp")) / "bench-whatsapp-profile.txt"
    rows: list[list[object]] = []
    baseline: float | None = None
    carried = 0
    with FakeGraph() as graph:
        env = service_env(database_url, SECRETS_KEY=SECRETS_KEY, WHATSAPP_GRAPH_URL=graph.url)
        with gunicorn("wsgi:app", env) as port:
            for calls in CALLS:  # each N's profile replaces the one before: the last N's shows
                found = asyncio.run(
                    measure(f"http://127.0.0.1:{port}", graph, calls, profile if PROFILE else None)
                )
                latencies = found["latencies"]
                p99 = percentile(latencies, 0.99) * 1000 if latencies else float("inf")
                baseline = p99 if baseline is None else baseline
                within = found["missed"] == 0 and p99 - baseline <= ADDED_BUDGET_MS
                carried = calls if within else carried
                rows.append([
                    calls,
                    f"{statistics.median(latencies) * 1000:.0f} ms" if latencies else "-",
                    f"{p99:.0f} ms",
                    f"{p99 - baseline:+.0f} ms",
                    f"{found['cpu_per_call'] * 100:.1f} %",
                    f"{found['mb_per_call']:.1f} MiB",
                    f"{found['missed']} of {calls * TURNS}",
                ])  # fmt: skip
                if not within:
                    break
    print_table(
        f"WhatsApp bot: N users calling one bot process at once, {TURNS} turns each (aiortc "
        "users over 127.0.0.1, fake Graph API, Gemini Live with a scripted client, gunicorn + "
        f"Redis behind); bot idle: {found['idle_mb']:.0f} MiB",
        ["N", "latency p50", "p99", "p99 vs N=1", "bot CPU per call", "memory per call",
         "turns unanswered"],
        rows,
    )  # fmt: skip
    print(
        f"\nCarried: {carried} calls at once on {os.cpu_count()} cores (p99 within "
        f"{ADDED_BUDGET_MS:.0f} ms of one call's, every turn answered); "
        f"{carried / (os.cpu_count() or 1):.1f} per core."
    )
    if PROFILE and profile.exists():
        print_table(f"Where the bot's busy CPU goes at N={rows[-1][0]}", ["", "share"],
                    profile_by_package(profile))  # fmt: skip


if __name__ == "__main__":
    main()
