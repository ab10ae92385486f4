"""Outbound calls and campaigns: a call may be queued (when it was, and the campaign contact it
calls), and campaigns with their contacts.

The call table's new columns are nullable: calls recorded before are inbound, never queued.
"""

import peewee as pw
from peewee_migrate import Migrator


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    @migrator.create_model
    class Campaign(pw.Model):
        id = pw.CharField(max_length=32, primary_key=True)
        tenant = pw.ForeignKeyField(
            column_name="tenant_id", field="id", model=migrator.orm["tenant"], on_delete="CASCADE"
        )
        name = pw.CharField(max_length=100)
        phone_number = pw.ForeignKeyField(
            column_name="phone_number_id",
            field="id",
            model=migrator.orm["phone_number"],
            null=True,
            on_delete="SET NULL",
        )
        agent = pw.ForeignKeyField(
            column_name="agent_id",
            field="id",
            model=migrator.orm["agent"],
            null=True,
            on_delete="SET NULL",
        )
        status = pw.CharField(max_length=16, default="running")
        max_concurrent_calls = pw.IntegerField(default=1)
        timezone = pw.CharField(max_length=64, null=True)
        days = pw.TextField(null=True)
        window_start = pw.CharField(max_length=5, null=True)
        window_end = pw.CharField(max_length=5, null=True)
        max_attempts = pw.IntegerField(default=1)
        retry_delay_minutes = pw.IntegerField(default=60)
        retry_on = pw.TextField()
        total_count = pw.IntegerField(default=0)
        pending_count = pw.IntegerField(default=0)
        in_progress_count = pw.IntegerField(default=0)
        completed_count = pw.IntegerField(default=0)
        failed_count = pw.IntegerField(default=0)
        created_at = pw.DateTimeField()
        updated_at = pw.DateTimeField()
        completed_at = pw.DateTimeField(null=True)

        class Meta:
            table_name = "campaign"
            indexes = (
                (("tenant", "created_at", "id"), False),
                (("status", "created_at"), False),
            )

    @migrator.create_model
    class CampaignContact(pw.Model):
        id = pw.CharField(max_length=32, primary_key=True)
        campaign = pw.ForeignKeyField(
            column_name="campaign_id", field="id", model=Campaign, on_delete="CASCADE"
        )
        seq = pw.IntegerField()
        to_number = pw.CharField(max_length=16)
        variables = pw.TextField()
        status = pw.CharField(max_length=16, default="pending")
        attempts = pw.IntegerField(default=0)
        next_attempt_at = pw.DateTimeField(null=True)
        last_outcome = pw.CharField(max_length=32, null=True)
        updated_at = pw.DateTimeField()

        class Meta:
            table_name = "campaign_contact"
            indexes = (
                (("campaign", "seq"), True),
                (("campaign", "status", "next_attempt_at", "seq"), False),
                (("campaign", "status", "seq"), False),
            )

    migrator.add_fields(
        "call",
        queued_at=pw.DateTimeField(null=True),
        campaign=pw.ForeignKeyField(
            column_name="campaign_id",
            field="id",
            model=Campaign,
            null=True,
            on_delete="SET NULL",
        ),
        contact=pw.ForeignKeyField(
            column_name="contact_id",
            field="id",
            model=CampaignContact,
            null=True,
            on_delete="SET NULL",
        ),
    )
    migrator.add_index("call", "status", "queued_at", "id")
    migrator.add_index("call", "campaign", "status")
    migrator.add_index("call", "contact", "queued_at")


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.drop_index("call", "contact", "queued_at")
    migrator.drop_index("call", "campaign", "status")
    migrator.drop_index("call", "status", "queued_at", "id")
    migrator.remove_fields("call", "queued_at", "campaign", "contact")
    migrator.remove_model("campaign_contact")
    migrator.remove_model("campaign")
