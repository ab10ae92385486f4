"""flask deliveries: list webhook deliveries, sweep the due ones, retry one."""

import click
from flask.cli import AppGroup

from app import jobs, queue
from app.cli.common import CLI, user_errors
from app.services import tenants as tenant_service
from app.services.deliveries import log as delivery_log
from app.util import isoformat

deliveries_cli = AppGroup("deliveries", help="Inspect, sweep and retry webhook deliveries.")


@deliveries_cli.command("sweep")
@user_errors
def deliveries_sweep() -> None:
    """Enqueue every due delivery that no job holds, release the credit holds of calls that
    never ended and place the campaigns' due calls (the worker does this every few seconds)."""
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
    attempts = delivery_log.get_delivery(tenant=None, delivery_id=delivery_id).attempts
    # The attempt is enqueued (or made, inline) once the retry commits.
    delivery = delivery_log.retry(tenant=None, actor=CLI, delivery_id=delivery_id)
    if not queue.inline():  # a worker makes the attempt
        delivery = delivery_log.get_delivery(tenant=None, delivery_id=delivery.id)
        if delivery.job_id is None:  # the tenant's places are taken: it waits its turn
            click.echo(
                f"{delivery.id} is due now and waits for a place: its webhook or tenant has "
                "as many deliveries in flight as it may. worker.py webhooks sends it when one "
                "frees, and flask deliveries list shows the outcome."
            )
            return
        if not queue.known(delivery.job_id):
            raise click.ClickException(
                f"Could not queue {delivery.id}: Redis does not answer. It is due now, and the "
                "sweeper of worker.py webhooks sends it once Redis answers."
            )
        click.echo(
            f"Queued {delivery.id} for another attempt (job {delivery.job_id}): worker.py "
            "webhooks sends it, and flask deliveries list shows the outcome."
        )
        return
    # Inline mode made the attempt in this process when retry() committed.
    delivery = delivery_log.get_delivery(tenant=None, delivery_id=delivery.id)
    attempt = delivery_log.last_attempt(delivery) if delivery.attempts > attempts else None
    if attempt is None:
        click.echo(
            f"Another process is attempting {delivery.id} now; flask deliveries list shows "
            "the outcome."
        )
    elif delivery.status == "succeeded":
        click.echo(
            f"Delivered {delivery.id} (HTTP {attempt.status_code} in {attempt.duration_ms} ms)."
        )
    elif delivery.status == "pending":
        click.echo(
            f"Attempt {attempt.number} of {delivery.id} failed: {attempt.error} "
            f"Next attempt at {isoformat(delivery.next_attempt_at)}."
        )
    else:
        click.echo(
            f"Attempt {attempt.number} of {delivery.id} failed: {attempt.error} "
            "No attempts are left: it has failed."
        )
