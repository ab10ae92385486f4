"""flask maintenance: prune what is older than the retention."""

import click
from flask import current_app
from flask.cli import AppGroup

from app.cli.common import user_errors
from app.services import maintenance

maintenance_cli = AppGroup("maintenance", help="Housekeeping of old data.")

MAX_RETENTION_DAYS = 36_500  # a century: beyond it the cutoff date would not exist


@maintenance_cli.command("prune")
@click.option(
    "--days",
    type=click.IntRange(1, MAX_RETENTION_DAYS),
    default=None,
    help="Keep this many days, at least 1 (default: RETENTION_DAYS, 30).",
)
@click.option("--batch-size", type=click.IntRange(min=1), default=500, show_default=True)
@user_errors
def maintenance_prune(days: int | None, batch_size: int) -> None:
    """Delete delivery attempts and finished events older than the retention, idempotency
    keys older than 24 hours, dashboard sessions older than a week, and the versions of
    agents deleted more than the retention ago that no call names."""
    if days is None:
        days = current_app.config["RETENTION_DAYS"]
    counts = maintenance.prune(older_than_days=days, batch_size=batch_size)
    click.echo(
        f"Deleted {counts['attempts']} delivery attempts, {counts['deliveries']} deliveries "
        f"and {counts['events']} events older than {days} days."
    )
    click.echo(f"Deleted {counts['keys']} idempotency keys older than 24 hours.")
    click.echo(f"Deleted {counts['sessions']} dashboard sessions older than a week.")
    click.echo(
        f"Deleted {counts['versions']} versions and {counts['definitions']} function "
        f"definitions of agents deleted more than {days} days ago (versions that calls name "
        "are kept)."
    )
