"""Post-call analysis (DESIGN.md section 17): an agent's analysisPlan, kept by each of its
versions like its prompt; a call's analysis (its result as the API shows it), its status, its
verdict (successful, filtered by GET /calls?successful=), the cost of the request, and when
the latest analysis was asked for (analysis_requested_at: the token a job must still hold to
store its result, and with analysis_status the index by which the sweep finds the analyses
pending too long, whose jobs were lost).

The NOT NULL plan columns are added with a DEFAULT, which SQLite adds in place (see 007):
every agent and version made before has the default plan, a summary only.
"""

import peewee as pw
from peewee_migrate import Migrator

DEFAULT_PLAN = '{"summary":true,"fields":[]}'


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    default_plan: list[pw.Node] = [pw.SQL(f"DEFAULT '{DEFAULT_PLAN}'")]
    for table in ("agent", "agent_version"):
        migrator.add_fields(
            table,
            allow_not_null=True,
            analysis_plan=pw.TextField(default=DEFAULT_PLAN, constraints=default_plan),
        )
    migrator.add_fields(
        "call",
        analysis=pw.TextField(null=True),
        analysis_status=pw.CharField(max_length=16, null=True),
        successful=pw.BooleanField(null=True),
        analysis_cost_idr=pw.BigIntegerField(null=True),
        analysis_requested_at=pw.DateTimeField(null=True),
    )
    migrator.add_index("call", "tenant", "successful", "started_at", "id")
    migrator.add_index("call", "analysis_status", "analysis_requested_at")


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.drop_index("call", "analysis_status", "analysis_requested_at")
    migrator.drop_index("call", "tenant", "successful", "started_at", "id")
    migrator.remove_fields(
        "call",
        "analysis",
        "analysis_status",
        "successful",
        "analysis_cost_idr",
        "analysis_requested_at",
    )
    migrator.remove_fields("agent_version", "analysis_plan")
    migrator.remove_fields("agent", "analysis_plan")
