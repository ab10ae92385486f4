"""A tenant's concurrent-call limit and the count of its calls in progress; a call's variables,
recording link, cost breakdown and transcript turns.

The NOT NULL columns are added with a DEFAULT, which SQLite adds in place (see 007). The
count of calls in progress starts as the number of each tenant's calls that hold credit
now: those are the calls admitted and not yet ended, whose hold has not lapsed.
"""

import peewee as pw
from peewee_migrate import Migrator


def count_active_calls(call, tenant) -> None:
    """Set each tenant's active_calls to its calls holding credit: one statement."""
    holding = call.select(pw.fn.COUNT(call.id)).where(
        (call.tenant == tenant.id) & call.reservation_expires_at.is_null(False)
    )
    tenant.update(active_calls=holding).execute()


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    default_zero: list[pw.Node] = [pw.SQL("DEFAULT 0")]
    migrator.add_fields(
        "tenant",
        allow_not_null=True,
        concurrent_call_limit=pw.IntegerField(null=True),
        active_calls=pw.BigIntegerField(default=0, constraints=default_zero),
    )
    migrator.add_fields(
        "call",
        allow_not_null=True,
        variables=pw.TextField(default="{}", constraints=[pw.SQL("DEFAULT '{}'")]),
        recording_url=pw.CharField(max_length=2048, null=True),
        cost_llm_idr=pw.BigIntegerField(null=True),
        cost_stt_idr=pw.BigIntegerField(null=True),
        cost_tts_idr=pw.BigIntegerField(null=True),
        cost_telephony_idr=pw.BigIntegerField(null=True),
        cost_other_idr=pw.BigIntegerField(null=True),
        turns_count=pw.IntegerField(default=0, constraints=default_zero),
        turns_bytes=pw.IntegerField(default=0, constraints=default_zero),
    )
    migrator.run(count_active_calls, migrator.orm["call"], migrator.orm["tenant"])

    @migrator.create_model
    class CallTurn(pw.Model):
        call = pw.ForeignKeyField(
            column_name="call_id", field="id", model=migrator.orm["call"], on_delete="CASCADE"
        )
        seq = pw.IntegerField()
        role = pw.CharField(max_length=8)
        text = pw.TextField()
        start_ms = pw.IntegerField(null=True)
        end_ms = pw.IntegerField(null=True)

        class Meta:
            table_name = "call_turn"
            primary_key = pw.CompositeKey("call", "seq")


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.remove_model("call_turn")
    migrator.remove_fields(
        "call",
        "variables",
        "recording_url",
        "cost_llm_idr",
        "cost_stt_idr",
        "cost_tts_idr",
        "cost_telephony_idr",
        "cost_other_idr",
        "turns_count",
        "turns_bytes",
    )
    migrator.remove_fields("tenant", "concurrent_call_limit", "active_calls")
