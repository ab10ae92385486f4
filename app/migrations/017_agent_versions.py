"""Agent versions: an immutable snapshot of what a call uses of an agent at each change, the
version a number is pinned to and a call was answered with, and deleted functions kept (with
their secrets) for the versions that have them.

Every agent gets its version 1, the snapshot of what it holds now, made by the system. Calls
from before keep no version. A function's name stays unique among its agent's live
functions only: a deleted one keeps its row, and a new one may take its name.
"""

import json

import peewee as pw
from peewee_migrate import Migrator

FUNCTION_FIELDS = ("id", "name", "description", "endpoint", "method", "timeout_ms")


def snapshot_every_agent(agent, function, agent_version) -> None:
    """Version 1 of each agent: its call-facing fields and its functions, by name."""
    functions: dict[str, list[dict]] = {}
    for row in function.select().order_by(function.name).dicts():
        entry = {name: row[name] for name in FUNCTION_FIELDS}
        entry["parameters"] = json.loads(row["parameters"])
        functions.setdefault(row["agent"], []).append(entry)
    rows = [
        {
            "agent": row["id"],
            "version": 1,
            "name": row["name"],
            "system_prompt": row["system_prompt"],
            "voice_id": row["voice_id"],
            "greeting_text": row["greeting_text"],
            "language": row["language"],
            "max_call_duration_minutes": row["max_call_duration_minutes"],
            "tools_enabled": row["tools_enabled"],  # JSON text already
            "escalation_number": row["escalation_number"],
            "functions": json.dumps(functions.get(row["id"], []), separators=(",", ":")),
            "changes": "[]",
            "actor_type": "system",
            "actor_id": None,
            "actor_label": "System",
            "created_at": row["created_at"],
        }
        for row in agent.select().dicts()
    ]
    for start in range(0, len(rows), 200):
        agent_version.insert_many(rows[start : start + 200]).execute()


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.add_fields(
        "agent",
        allow_not_null=True,
        version=pw.IntegerField(default=1, constraints=[pw.SQL("DEFAULT 1")]),
    )
    migrator.add_fields("phone_number", agent_version=pw.IntegerField(null=True))
    migrator.add_fields("call", agent_version=pw.IntegerField(null=True))
    migrator.add_index("call", "tenant", "agent", "agent_version", "started_at", "id")
    migrator.add_fields("function", deleted_at=pw.DateTimeField(null=True))
    migrator.drop_index("function", "agent", "name")
    migrator.add_index("function", "agent", "name", unique=True, where=pw.SQL("deleted_at IS NULL"))

    @migrator.create_model
    class AgentVersion(pw.Model):
        agent = pw.ForeignKeyField(
            column_name="agent_id", field="id", model=migrator.orm["agent"], on_delete="CASCADE"
        )
        version = pw.IntegerField()
        name = pw.CharField(max_length=100)
        system_prompt = pw.TextField()
        voice_id = pw.CharField(max_length=16)
        greeting_text = pw.TextField()
        language = pw.CharField(max_length=16)
        max_call_duration_minutes = pw.IntegerField()
        tools_enabled = pw.TextField()
        escalation_number = pw.CharField(max_length=16, null=True)
        functions = pw.TextField()
        changes = pw.TextField()
        actor_type = pw.CharField(max_length=8)
        actor_id = pw.CharField(max_length=32, null=True)
        actor_label = pw.CharField(max_length=255)
        created_at = pw.DateTimeField()

        class Meta:
            table_name = "agent_version"
            primary_key = pw.CompositeKey("agent", "version")

    migrator.run(
        snapshot_every_agent,
        migrator.orm["agent"],
        migrator.orm["function"],
        migrator.orm["agent_version"],
    )


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.remove_model("agent_version")
    migrator.sql('DELETE FROM "function" WHERE deleted_at IS NOT NULL')
    migrator.drop_index("function", "agent", "name")
    migrator.add_index("function", "agent", "name", unique=True)
    migrator.remove_fields("function", "deleted_at")
    migrator.drop_index("call", "tenant", "agent", "agent_version", "started_at", "id")
    migrator.remove_fields("call", "agent_version")
    migrator.remove_fields("phone_number", "agent_version")
    migrator.remove_fields("agent", "version")
