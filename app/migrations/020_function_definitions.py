"""Function definitions stored once: a version kept a copy of every function's definition,
so a change of the agent's name copied them all again. Now each agent's definitions are kept
once per content (function_definition, keyed by the agent and the sha256 of the entry) and a
version's functions column holds the digests of its definitions, by name.

Existing versions are rewritten in place: their definitions move to function_definition and
read back the same. The rollback copies them back into the versions.
"""

import hashlib
import json
from datetime import UTC, datetime

import peewee as pw
from peewee_migrate import Migrator


def digest(entry: dict) -> str:
    """As app.services.snapshots.digest."""
    text = json.dumps(entry, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _versions(agent_version):
    """Every version's key and functions column, one row at a time (the keys read first: the
    rows are rewritten while they are read)."""
    keys = list(agent_version.select(agent_version.agent, agent_version.version).tuples())
    for agent_id, version in keys:
        row = (
            agent_version.select(agent_version.functions)
            .where((agent_version.agent == agent_id) & (agent_version.version == version))
            .tuples()
            .first()
        )
        yield agent_id, version, row[0]


def definitions_out_of_versions(agent_version, definition) -> None:
    stored: set[tuple[str, str]] = set()
    now = datetime.now(UTC).replace(tzinfo=None)
    for agent_id, version, text in _versions(agent_version):
        entries = json.loads(text)
        digests = []
        for entry in entries:
            key = digest(entry)
            digests.append(key)
            if (agent_id, key) not in stored:
                definition.insert(
                    agent=agent_id,
                    digest=key,
                    entry=json.dumps(entry, separators=(",", ":"), ensure_ascii=False),
                    created_at=now,
                ).on_conflict_ignore().execute()
                stored.add((agent_id, key))
        agent_version.update(functions=json.dumps(digests, separators=(",", ":"))).where(
            (agent_version.agent == agent_id) & (agent_version.version == version)
        ).execute()


def definitions_into_versions(agent_version, definition) -> None:
    for agent_id, version, text in _versions(agent_version):
        digests = json.loads(text)
        found = {
            key: json.loads(entry)
            for key, entry in definition.select(definition.digest, definition.entry)
            .where((definition.agent == agent_id) & definition.digest.in_(digests or [""]))
            .tuples()
        }
        entries = [found[key] for key in digests]
        agent_version.update(
            functions=json.dumps(entries, separators=(",", ":"), ensure_ascii=False)
        ).where((agent_version.agent == agent_id) & (agent_version.version == version)).execute()


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    @migrator.create_model
    class FunctionDefinition(pw.Model):
        agent = pw.ForeignKeyField(
            column_name="agent_id", field="id", model=migrator.orm["agent"], on_delete="CASCADE"
        )
        digest = pw.CharField(max_length=64)
        entry = pw.TextField()
        created_at = pw.DateTimeField()

        class Meta:
            table_name = "function_definition"
            primary_key = pw.CompositeKey("agent", "digest")

    migrator.run(
        definitions_out_of_versions,
        migrator.orm["agent_version"],
        migrator.orm["function_definition"],
    )


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.run(
        definitions_into_versions,
        migrator.orm["agent_version"],
        migrator.orm["function_definition"],
    )
    migrator.remove_model("function_definition")
