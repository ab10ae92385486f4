"""Webhooks: a tenant's receiver URLs, the events each subscribes to, and test events."""

import secrets
from typing import Any

from app import outbound
from app.db import database
from app.errors import Conflict, NotFound
from app.models import Delivery, Tenant, Webhook
from app.services import deliveries
from app.services import events as event_service
from app.util import new_id, utcnow

TEST_EVENT = event_service.TEST_EVENT


def new_secret() -> str:
    """A signing secret to offer for a new webhook (43 URL-safe characters)."""
    return secrets.token_urlsafe(32)


def list_webhooks(*, tenant: Tenant) -> list[Webhook]:
    return list(
        Webhook.select().where(Webhook.tenant == tenant).order_by(Webhook.created_at, Webhook.id)
    )


def failing_webhooks(*, tenant: Tenant) -> list[Webhook]:
    """The tenant's active webhooks whose latest deliveries fail: failing the longest first."""
    failing = Webhook.is_active & Webhook.failing_since.is_null(False)
    query = Webhook.select().where((Webhook.tenant == tenant) & failing)
    return list(query.order_by(Webhook.failing_since, Webhook.id))


def get_webhook(*, tenant: Tenant, webhook_id: str) -> Webhook:
    """The tenant's webhook, or NotFound (also for another tenant's)."""
    webhook = Webhook.get_or_none((Webhook.id == webhook_id) & (Webhook.tenant == tenant))
    if webhook is None:
        raise NotFound(f"Webhook {webhook_id} not found.")
    return webhook


def create_webhook(*, tenant: Tenant, url: str, events: list[str], secret: str) -> Webhook:
    outbound.require_safe_url(url, field="url")
    with database.atomic():
        return Webhook.create(id=new_id("wh"), tenant=tenant, url=url, events=events, secret=secret)


def update_webhook(*, tenant: Tenant, webhook_id: str, **fields: Any) -> Webhook:
    """Change url, events, secret or isActive; re-enabling clears the reason and failure clock."""
    if "url" in fields:
        outbound.require_safe_url(fields["url"], field="url")
    with database.atomic():
        webhook = get_webhook(tenant=tenant, webhook_id=webhook_id)
        enable = fields.pop("is_active", None)
        for name, value in fields.items():
            setattr(webhook, name, value)
        if enable is True and not webhook.is_active:
            webhook.is_active = True
            webhook.disabled_reason = None
            webhook.failing_since = None
        webhook.updated_at = utcnow()
        webhook.save()
        if enable is False and webhook.is_active:
            deliveries.disable(webhook, reason=None)
    return webhook


def delete_webhook(*, tenant: Tenant, webhook_id: str) -> None:
    """Delete a webhook with its deliveries and their log."""
    with database.atomic():
        webhook = get_webhook(tenant=tenant, webhook_id=webhook_id)
        webhook.delete_instance(recursive=True)


def send_test(*, tenant: Tenant, webhook_id: str) -> Delivery:
    """A signed webhook.test event for this webhook only, delivered like any other."""
    with database.atomic():
        webhook = get_webhook(tenant=tenant, webhook_id=webhook_id)
        if not webhook.is_active:
            raise Conflict("The webhook is disabled: enable it before sending a test event.")
        event = event_service.record(
            tenant_id=tenant.id,
            type=TEST_EVENT,
            data={"webhookId": webhook.id, "message": "A test event from the Voice Agent API."},
        )
        job_id = deliveries.new_job_id()
        delivery = Delivery.create(
            id=new_id("dlv"), tenant=tenant, webhook=webhook, event=event, job_id=job_id
        )
        deliveries.defer_job(delivery.id, job_id)
    delivery.event = event
    return deliveries.with_attempts([delivery])[0]
