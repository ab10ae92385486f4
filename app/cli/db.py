"""flask db: apply the schema's migrations, back up the SQLite database."""

import click
from flask.cli import AppGroup

from app import db
from app.cli.common import user_errors
from app.services import maintenance

db_cli = AppGroup("db", help="Database schema and backups.")


@db_cli.command("upgrade")
@user_errors
def db_upgrade() -> None:
    """Apply pending schema migrations."""
    applied = db.upgrade()
    click.echo(f"Applied {', '.join(applied)}." if applied else "The schema is up to date.")


@db_cli.command("backup")
@click.argument("path")
@user_errors
def db_backup(path: str) -> None:
    """Copy the SQLite database to PATH, consistently, while the service runs."""
    result = maintenance.backup_sqlite(target=path)
    click.echo(f"Backed up {result['tables']} tables ({result['bytes']} bytes) to {path}.")
