"""A campaign of 10,000 contacts dispatched at the tenant's limit: the sweep's cost per contact
placed and the runtime's dispatch latency, against plain outbound calls in the same run.

In process, one database (SQLite, then PostgreSQL when one answers at BENCH_POSTGRES_URL). A
tenant with a limit of 20 calls at once runs a campaign of N contacts with maxConcurrentCalls
20, round after round as a runtime at full load would: the 20 calls in progress end, the sweep
places the next 20 contacts (campaigns.place_due), the runtime claims them (POST
/internal/v1/dispatch, max 20) and answers each. The baseline does the same with N plain
outbound calls queued by the service directly, 20 at a time (outbound_calls.queue_calls: the bare
inserts, no contact claimed, no counts): what a campaign adds is the difference.

Rows: placing a call (the sweep per contact, against queue_calls per call), claiming one
(dispatch per call claimed, against dispatch of plain queued calls), ending one (the runtime's
end per call, which for a campaign's call also moves its contact and the counts), a claim
while the tenant is at its limit with 20 calls waiting (nothing handed out, they stay
queued; measured in the baseline, which keeps 20 more queued than the limit admits), and
POST /campaigns with N contacts in one request.

Usage: python bench/campaign.py [N]   (default 10,000)
"""

import logging
import statistics
import sys
import time

from _harness import (
    RUNTIME_HEADERS,
    RUNTIME_TOKEN,
    percentile,
    postgres_database,
    print_table,
    temp_sqlite_url,
)

LIMIT = 20


def ms(values: list[float]) -> tuple[float, float]:
    return statistics.median(values) * 1000, percentile(values, 0.99) * 1000


def run(database_url: str, contacts: int) -> dict[str, list[float]]:
    from app import create_app, db
    from app.models import Call, Campaign
    from app.services import agents as agent_service
    from app.services import billing, campaigns
    from app.services import keys as key_service
    from app.services import phone_numbers as number_service
    from app.services import tenants as tenant_service
    from app.services.audit import Actor
    from app.services.calls import lifecycle as call_lifecycle
    from app.services.calls import outbound as outbound_calls
    from app.util import utcnow

    app = create_app(
        {
            "DATABASE_URL": database_url,
            "REDIS_URL": None,
            "QUEUE_MODE": "inline",
            "RUNTIME_TOKEN": RUNTIME_TOKEN,
            "RATELIMIT_ENABLED": False,
            # The rounds below place the contacts themselves: the inline background thread's
            # sweep would place some of them too, outside the timings.
            "SWEEP_INTERVAL": 10**6,
        }
    )
    logging.getLogger("app.requests").setLevel(logging.WARNING)
    app.logger.disabled = True
    timings: dict[str, list[float]] = {}

    def timed(name: str, seconds: float) -> None:
        timings.setdefault(name, []).append(seconds)

    with app.app_context():
        db.upgrade()
        client = app.test_client()
        tenant = tenant_service.create_tenant(
            actor=Actor.system(),
            name="bench",
            plan="enterprise",
            rate_limit=10**6,
            concurrent_calls=LIMIT,
        )
        key = key_service.create_key(actor=Actor.system(), tenant=tenant, name="bench")[1]
        billing.grant(actor=Actor.system(), tenant=tenant, minutes=10**9)
        agent = agent_service.create_agent(
            actor=Actor.system(),
            tenant=tenant,
            name="Reminders",
            system_prompt="Remind {{name}}.",
            greeting_text="Hi",
        )
        number = number_service.add_number(
            actor=Actor.system(), tenant=tenant, display_number="+6221000777"
        )
        number_service.assign_agent(
            actor=Actor.system(), tenant=tenant, number_id=number.id, agent_id=agent.id
        )

        def claim(kind: str) -> list[str]:
            started = time.perf_counter()
            response = client.post(
                "/internal/v1/dispatch", json={"max": LIMIT}, headers=RUNTIME_HEADERS
            )
            elapsed = time.perf_counter() - started
            assert response.status_code == 200, response.get_data(as_text=True)
            claimed = [each["call"]["id"] for each in response.get_json()["calls"]]
            if claimed:
                timings.setdefault(f"dispatch {kind}", []).extend(
                    [elapsed / len(claimed)] * len(claimed)
                )
            return claimed

        def finish(kind: str, call_ids: list[str]) -> None:
            for call_id in call_ids:
                call_lifecycle.answer_call(call_id=call_id)
                started = time.perf_counter()
                call_lifecycle.end_call(
                    call_id=call_id,
                    status="ended",
                    duration_seconds=40,
                    talk_time_seconds=30,
                    hangup_reason="normal",
                    hangup_initiator="caller",
                    ai_cost_idr=0,
                )
                timed(f"end {kind}", time.perf_counter() - started)

        # The campaign, created in one request.
        body = {
            "name": "Bench",
            "phoneNumberId": number.id,
            "contacts": [
                {"to": f"+62813{index:08d}", "variables": {"name": f"n{index}"}}
                for index in range(contacts)
            ],
            "maxConcurrentCalls": LIMIT,
        }
        started = time.perf_counter()
        response = client.post("/api/v1/campaigns", json=body, headers={"x-api-key": key})
        timed("create", time.perf_counter() - started)
        assert response.status_code == 201, response.get_data(as_text=True)
        campaign_id = response.get_json()["id"]
        live: list[str] = []
        while True:
            finish("campaign", live)
            started = time.perf_counter()
            placed = campaigns.place_due()
            if placed:
                timings.setdefault("place campaign", []).extend(
                    [(time.perf_counter() - started) / placed] * placed
                )
            live = claim("campaign")
            if not live:
                break
        campaign = Campaign.get_by_id(campaign_id)
        counts = {
            "status": campaign.status,
            "pending": campaign.pending_count,
            "in progress": campaign.in_progress_count,
            "completed": campaign.completed_count,
            "failed": campaign.failed_count,
        }
        assert (campaign.status, campaign.completed_count) == ("completed", contacts), counts
        # The baseline: as many plain outbound calls, queued 20 at a time.
        outbound = outbound_calls.Outbound(
            phone_number_id=number.id,
            caller_number=number.display_number,
            agent_id=agent.id,
            to="+6281300000000",
            variables={"name": "n"},
        )

        def queue(count: int) -> None:
            started = time.perf_counter()
            with db.database.atomic():
                outbound_calls.queue_calls(
                    tenant_id=tenant.id, outbounds=[outbound] * count, now=utcnow()
                )
            timings.setdefault("place plain", []).extend(
                [(time.perf_counter() - started) / count] * count
            )

        # 20 more queued than the limit admits, all along: every claim after the first of a
        # round finds the tenant at its limit with calls waiting.
        queue(min(LIMIT, contacts))
        remaining, live = contacts - min(LIMIT, contacts), []
        while True:
            finish("plain", live)
            if remaining:
                batch = min(LIMIT, remaining)
                queue(batch)
                remaining -= batch
            live = claim("plain")
            if not live:
                break
            if outbound_calls.has_queued():
                started = time.perf_counter()
                assert claim("at limit") == []
                timed("claim at limit", time.perf_counter() - started)
        assert Call.select().where(Call.status == "ended").count() == 2 * contacts
        db.close_all()
    return timings


def rows_of(timings: dict[str, list[float]], contacts: int) -> list[list[object]]:
    rows = []
    for label, campaign_key, plain_key in (
        ("place a call (sweep per contact / queue_calls)", "place campaign", "place plain"),
        ("claim a call (dispatch, per call claimed)", "dispatch campaign", "dispatch plain"),
        ("end a call (runtime's end)", "end campaign", "end plain"),
    ):
        campaign, plain = ms(timings[campaign_key]), ms(timings[plain_key])
        rows.append(
            [
                label,
                f"{campaign[0]:.2f}",
                f"{campaign[1]:.2f}",
                f"{plain[0]:.2f}",
                f"{plain[1]:.2f}",
                f"{campaign[0] / plain[0]:.2f}",
            ]
        )
    at_limit = ms(timings["claim at limit"])
    rows.append(["claim at the limit, 20 waiting (none handed out)", f"{at_limit[0]:.2f}",
                 f"{at_limit[1]:.2f}", "", "", ""])  # fmt: skip
    create = timings["create"][0] * 1000
    rows.append([f"POST /campaigns, {contacts:,} contacts (one request)", f"{create:.0f}",
                 "", "", "", ""])  # fmt: skip
    return rows


def main() -> None:
    contacts = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    header = ["per call", "campaign p50 ms", "p99 ms", "plain p50 ms", "p99 ms", "ratio"]
    databases = [("SQLite", temp_sqlite_url)]
    for name, url_of in databases:
        began = time.perf_counter()
        timings = run(url_of(), contacts)
        took = time.perf_counter() - began
        print_table(
            f"{name}: a campaign of {contacts:,} contacts at the tenant's limit ({LIMIT} at "
            f"once) against {contacts:,} plain outbound calls ({took:.0f} s)",
            header,
            rows_of(timings, contacts),
        )
    with postgres_database() as url:
        if url is None:
            print("\nPostgreSQL: none answers at BENCH_POSTGRES_URL; skipped")
            return
        began = time.perf_counter()
        timings = run(url, contacts)
        print_table(
            f"PostgreSQL: the same ({time.perf_counter() - began:.0f} s)",
            header,
            rows_of(timings, contacts),
        )


if __name__ == "__main__":
    main()
