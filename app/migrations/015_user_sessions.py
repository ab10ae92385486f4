"""Dashboard sessions kept on the server: one row per signed-in session, deleted at sign-out,
so a session cookie copied before "Sign out" no longer works after it."""

import peewee as pw
from peewee_migrate import Migrator


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    @migrator.create_model
    class UserSession(pw.Model):
        id = pw.CharField(max_length=64, primary_key=True)
        user = pw.ForeignKeyField(
            column_name="user_id", field="id", model=migrator.orm["user"], on_delete="CASCADE"
        )
        created_at = pw.DateTimeField(index=True)

        class Meta:
            table_name = "user_session"


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.remove_model("user_session")
