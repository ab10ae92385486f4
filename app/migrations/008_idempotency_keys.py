"""Idempotency keys: a tenant API POST's key, held while its request runs, then the answer it
gave, so that a repeat within 24 hours gets that answer again and changes nothing."""

import peewee as pw
from peewee_migrate import Migrator


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    @migrator.create_model
    class IdempotencyKey(pw.Model):
        id = pw.CharField(max_length=32, primary_key=True)
        tenant = pw.ForeignKeyField(
            column_name="tenant_id",
            field="id",
            model=migrator.orm["tenant"],
            on_delete="CASCADE",
        )
        key = pw.CharField(max_length=255)
        fingerprint = pw.CharField(max_length=64)
        state = pw.CharField(max_length=8, default="running")
        lease_until = pw.DateTimeField(null=True)
        status_code = pw.IntegerField(null=True)
        body = pw.TextField(null=True)
        headers = pw.TextField(null=True)
        created_at = pw.DateTimeField()

        class Meta:
            table_name = "idempotency_key"
            indexes = [(("tenant", "key"), True), (("created_at",), False)]


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.remove_model("idempotency_key")
