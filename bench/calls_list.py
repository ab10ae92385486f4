"""GET /api/v1/calls at a million calls for one tenant: each query's time against a full COUNT.

Usage: python bench/calls_list.py [CALLS]   (default 1,000,000; a SQLite file in a temp folder)
"""

import random
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app import create_app  # noqa: E402
from app.models import Call, Tenant  # noqa: E402
from app.services import agents as agent_service  # noqa: E402
from app.services import keys as key_service  # noqa: E402
from app.services import phone_numbers as number_service  # noqa: E402
from app.services import tenants as tenant_service  # noqa: E402

STATUSES = ("ended", "ended", "ended", "dropped", "failed")


def seed(tenant, agents, number, count):
    start = datetime(2025, 1, 1)
    rows = []
    for i in range(count):
        rows.append(
            {
                "id": f"call_{i:020d}",  # new_id per row would dominate the seeding
                "tenant": tenant.id,
                "phone_number": number.id,
                "agent": random.choice(agents).id,
                "caller_number": "+628123456789",
                "callee_number": number.display_number,
                "status": random.choice(STATUSES),
                "started_at": start + timedelta(seconds=30 * i),
                "metadata": {},
            }
        )
        if len(rows) == 10_000:
            Call.insert_many(rows).execute()
            rows = []
    if rows:
        Call.insert_many(rows).execute()
    Tenant.update(calls_count=count).where(Tenant.id == tenant.id).execute()


def timed(client, headers, path, repeat=5):
    best = float("inf")
    for _ in range(repeat):
        began = time.perf_counter()
        response = client.get(path, headers=headers)
        best = min(best, time.perf_counter() - began)
        assert response.status_code == 200, response.get_data(as_text=True)
    return best


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    folder = tempfile.mkdtemp()
    app = create_app({"DATABASE_URL": f"sqlite:///{folder}/bench.db", "QUEUE_MODE": "inline"})
    with app.app_context():
        from app import db

        db.upgrade()
        tenant = tenant_service.create_tenant(name="bench", plan="enterprise", rate_limit=10**6)
        agents = [
            agent_service.create_agent(tenant=tenant, name=f"a{i}", system_prompt="x")
            for i in range(4)
        ]
        number = number_service.add_number(tenant=tenant, display_number="+6221000001")
        began = time.perf_counter()
        with db.database.atomic():
            seed(tenant, agents, number, count)
        print(f"seeded {count:,} calls in {time.perf_counter() - began:.1f} s")
        headers = {"x-api-key": key_service.create_key(tenant=tenant, name="b")[1]}
        client = app.test_client()
        began = time.perf_counter()
        Call.select().where(Call.tenant == tenant).count()
        full_count = time.perf_counter() - began
        day = (datetime(2025, 1, 1) + timedelta(seconds=15 * count)).date().isoformat()
        cases = {
            "first page": "/api/v1/calls",
            "status=dropped": "/api/v1/calls?status=dropped",
            f"agentId={agents[0].id[:12]}…": f"/api/v1/calls?agentId={agents[0].id}",
            f"from={day}": f"/api/v1/calls?from={day}",
            "offset=5000": "/api/v1/calls?offset=5000",
        }
        print(f"full COUNT(*) of the tenant's calls: {full_count * 1000:.1f} ms")
        print(f"{'request':<34}{'ms':>8}{'ratio to full count':>22}")
        for name, path in cases.items():
            seconds = timed(client, headers, path)
            print(f"{name:<34}{seconds * 1000:>8.1f}{seconds / full_count:>22.3f}")


if __name__ == "__main__":
    main()
