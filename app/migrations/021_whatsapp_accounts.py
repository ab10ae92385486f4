"""WhatsApp Business accounts (DESIGN.md section 16): the accounts tenants link, with their
secrets encrypted; phone numbers get a channel, the account they came from, Meta's id and
quality rating; the call permission Meta or the user last gave for each number and user; and
campaigns on WhatsApp numbers keep contacts awaiting permission.

The NOT NULL columns are added with a DEFAULT, which SQLite adds in place (see 007). A
contact's status grows to 24 characters (awaiting_permission); SQLite keeps any length in a
VARCHAR, so only PostgreSQL's column changes type.
"""

import peewee as pw
from peewee_migrate import Migrator


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    @migrator.create_model
    class WhatsAppAccount(pw.Model):
        id = pw.CharField(max_length=32, primary_key=True)
        tenant = pw.ForeignKeyField(
            column_name="tenant_id", field="id", model=migrator.orm["tenant"], on_delete="CASCADE"
        )
        waba_id = pw.CharField(max_length=64, unique=True)
        label = pw.CharField(max_length=100, default="")
        access_token_encrypted = pw.TextField()
        app_secret_encrypted = pw.TextField()
        token_hint = pw.CharField(max_length=4)
        status = pw.CharField(max_length=16, default="connected")
        last_synced_at = pw.DateTimeField(null=True)
        created_at = pw.DateTimeField()
        updated_at = pw.DateTimeField()

        class Meta:
            table_name = "whatsapp_account"
            indexes = ((("tenant", "created_at"), False),)

    default_false: list[pw.Node] = [pw.SQL("DEFAULT FALSE")]
    migrator.add_fields(
        "phone_number",
        allow_not_null=True,
        channel=pw.CharField(
            max_length=16, default="phone", constraints=[pw.SQL("DEFAULT 'phone'")]
        ),
        whatsapp_account=pw.ForeignKeyField(
            column_name="whatsapp_account_id",
            field="id",
            model=WhatsAppAccount,
            null=True,
            on_delete="SET NULL",
        ),
        whatsapp_phone_number_id=pw.CharField(max_length=64, null=True, unique=True),
        quality_rating=pw.CharField(max_length=16, null=True),
        label_set=pw.BooleanField(default=False, constraints=default_false),
    )

    @migrator.create_model
    class CallPermission(pw.Model):
        phone_number = pw.ForeignKeyField(
            column_name="phone_number_id",
            field="id",
            model=migrator.orm["phone_number"],
            on_delete="CASCADE",
        )
        user_number = pw.CharField(max_length=16)
        status = pw.CharField(max_length=16, default="no_permission")
        expires_at = pw.DateTimeField(null=True)
        can_call = pw.BooleanField(default=False)
        can_request = pw.BooleanField(default=True)
        last_requested_at = pw.DateTimeField(null=True)
        checked_at = pw.DateTimeField()
        updated_at = pw.DateTimeField()

        class Meta:
            table_name = "call_permission"
            primary_key = pw.CompositeKey("phone_number", "user_number")

    default_zero: list[pw.Node] = [pw.SQL("DEFAULT 0")]
    migrator.add_fields(
        "campaign",
        allow_not_null=True,
        awaiting_permission_count=pw.IntegerField(default=0, constraints=default_zero),
        permission_wait_hours=pw.IntegerField(default=24, constraints=[pw.SQL("DEFAULT 24")]),
        whatsapp=pw.TextField(null=True),
    )
    migrator.add_fields(
        "campaign_contact",
        awaiting_since=pw.DateTimeField(null=True),
        permission_requested_at=pw.DateTimeField(null=True),
    )
    if isinstance(database, pw.PostgresqlDatabase):
        migrator.sql("ALTER TABLE campaign_contact ALTER COLUMN status TYPE VARCHAR(24)")


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    if isinstance(database, pw.PostgresqlDatabase):
        migrator.sql("ALTER TABLE campaign_contact ALTER COLUMN status TYPE VARCHAR(16)")
    migrator.remove_fields("campaign_contact", "awaiting_since", "permission_requested_at")
    migrator.remove_fields(
        "campaign", "awaiting_permission_count", "permission_wait_hours", "whatsapp"
    )
    migrator.remove_model("call_permission")
    migrator.drop_index("phone_number", "whatsapp_account")
    migrator.drop_index("phone_number", "whatsapp_phone_number_id")
    migrator.remove_fields(
        "phone_number",
        "channel",
        "whatsapp_account",
        "whatsapp_phone_number_id",
        "quality_rating",
        "label_set",
    )
    migrator.remove_model("whatsapp_account")
