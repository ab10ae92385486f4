"""Dashboard users: people of a tenant who sign in to the dashboard, each with a role."""

import peewee as pw
from peewee_migrate import Migrator


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    @migrator.create_model
    class User(pw.Model):
        id = pw.CharField(max_length=32, primary_key=True)
        tenant = pw.ForeignKeyField(
            column_name="tenant_id", field="id", model=migrator.orm["tenant"], on_delete="CASCADE"
        )
        email = pw.CharField(max_length=254, unique=True)
        password_hash = pw.CharField(max_length=255)
        role = pw.CharField(default="viewer", max_length=16)
        created_at = pw.DateTimeField()
        last_sign_in_at = pw.DateTimeField(null=True)
        session_version = pw.IntegerField(default=1)
        disabled_at = pw.DateTimeField(null=True)

        class Meta:
            table_name = "user"


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.remove_model("user")
