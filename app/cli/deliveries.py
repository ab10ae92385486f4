"""flask deliveries: list webhook deliveries, sweep the due ones, retry one."""

import click
from flask.cli import AppGroup

from app import jobs
from app.cli.common import CLI, user_errors
from app.services import tenants as tenant_service
from app.services.deliveries import log as delivery_log
from app.util import isoformat

deliveries_cli = AppGroup("deliveries", help="Inspect, sweep and retry webhook deliveries.")


@deliveries_cli.command("sweep")
@user_errors
def deliveries_sweep() -> None:
    """Enqueue every due delivery that no job holds, release the credit holds of calls that
    never ended, place the campaigns' due calls and ask again for the post-call analyses
    whose jobs were lost (the worker does this every few seconds)."""
    count = jobs.sweep()
    click.echo(f"Enqueued {count} due deliveries.")


@deliveries_cli.command("list")
@click.option("--tenant", "tenant_ref", help="Only this tenant's deliveries (id or name).")
@click.option("--status", type=click.Choice(delivery_log.STATUSES), help="Only this status.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@user_errors
def deliveries_list(tenant_ref: str | None, status: str | None, limit: int) -> None:
    """List deliveries, newest first."""
    tenant = tenant_service.find_tenant(tenant_ref) if tenant_ref else None
    page = delivery_log.list_deliveries(tenant=tenant, status=status, limit=limit)
    for delivery in page.items:
        due = (
            f"  next {isoformat(delivery.next_attempt_at)}" if delivery.status == "pending" else ""
        )
        click.echo(
            f"{delivery.id}  {delivery.event.type}  {delivery.status}  "
            f"attempts={delivery.attempts}  last={delivery.last_status_code or '-'}  "
            f"webhook={delivery.webhook_id}  tenant={delivery.tenant_id}  "
            f"created {isoformat(delivery.created_at)}{due}"
            + (f"  error: {delivery.last_error}" if delivery.last_error else "")
        )
    click.echo(f"{len(page.items)} of {page.total} deliveries.")


@deliveries_cli.command("retry")
@click.argument("delivery_id")
@user_errors
def deliveries_retry(delivery_id: str) -> None:
    """Send a delivery again now, whatever its status, and say what the attempt did."""
    outcome = delivery_log.retry_and_report(actor=CLI, delivery_id=delivery_id)
    shown, attempt = outcome.delivery_id, outcome.attempt
    if outcome.kind == "waiting":
        click.echo(
            f"{shown} is due now and waits for a place: its webhook or tenant has "
            "as many deliveries in flight as it may. worker.py webhooks sends it when one "
            "frees, and flask deliveries list shows the outcome."
        )
    elif outcome.kind == "unqueued":
        raise click.ClickException(
            f"Could not queue {shown}: Redis does not answer. It is due now, and the "
            "sweeper of worker.py webhooks sends it once Redis answers."
        )
    elif outcome.kind == "queued":
        click.echo(
            f"Queued {shown} for another attempt (job {outcome.job_id}): worker.py "
            "webhooks sends it, and flask deliveries list shows the outcome."
        )
    elif attempt is None:  # attempting: another process holds it
        click.echo(
            f"Another process is attempting {shown} now; flask deliveries list shows the outcome."
        )
    elif outcome.kind == "delivered":
        click.echo(f"Delivered {shown} (HTTP {attempt.status_code} in {attempt.duration_ms} ms).")
    elif outcome.kind == "retrying":
        click.echo(
            f"Attempt {attempt.number} of {shown} failed: {attempt.error} "
            f"Next attempt at {isoformat(outcome.next_attempt_at)}."
        )
    else:
        click.echo(
            f"Attempt {attempt.number} of {shown} failed: {attempt.error} "
            "No attempts are left: it has failed."
        )
