"""Webhooks: a tenant's receiver URLs, the events each subscribes to, test events and
replays of the event log."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.db import is_sqlite, unit_of_work
from app.errors import Conflict, NotFound, ValidationFailed
from app.models import Delivery, Tenant, Webhook
from app.outbound.policy import require_safe_url
from app.services import audit, limits, secrets
from app.services import events as event_service
from app.services.audit import Actor
from app.services.deliveries import attempt as delivery_attempt
from app.services.deliveries import dispatch as delivery_dispatch
from app.services.deliveries import log as delivery_log
from app.util import isoformat, new_id, utcnow

TEST_EVENT = event_service.TEST_EVENT
# A replay queues at most this many deliveries, and leaves its webhook with at most this many
# pending: one tenant's replays cannot flood the delivery queue that every tenant shares.
REPLAY_LIMIT = 10_000
INSERT_BATCH = 500  # rows per INSERT: within SQLite's limit on bound parameters


def new_secret() -> str:
    """A signing secret to offer for a new webhook (43 URL-safe characters)."""
    return secrets.generate()


def list_webhooks(*, tenant: Tenant) -> list[Webhook]:
    return list(
        Webhook.select().where(Webhook.tenant == tenant).order_by(Webhook.created_at, Webhook.id)
    )


def failing_webhooks(*, tenant: Tenant) -> list[Webhook]:
    """The tenant's active webhooks whose latest deliveries fail: failing the longest first."""
    failing = Webhook.is_active & Webhook.failing_since.is_null(False)
    query = Webhook.select().where((Webhook.tenant == tenant) & failing)
    return list(query.order_by(Webhook.failing_since, Webhook.id))


@dataclass(frozen=True)
class Health:
    """How a webhook's deliveries go, as the dashboard shows it."""

    state: str  # healthy | failing (since its first failure after a success) | disabled
    failing_since: datetime | None
    consecutive_failures: int  # failed attempts since the last success
    last_success_at: datetime | None  # when its latest delivery that succeeded did
    disabled_reason: str | None


def health(*, webhooks: list[Webhook]) -> dict[str, Health]:
    """Each webhook's Health by id: a query per webhook (its latest succeeded delivery, one
    step of the (webhook, status, created_at) index), for the few webhooks a tenant has."""
    found = {}
    for webhook in webhooks:
        last = (
            Delivery.select(Delivery.completed_at)
            .where((Delivery.webhook == webhook.id) & (Delivery.status == "succeeded"))
            .order_by(Delivery.created_at.desc())
            .limit(1)
            .scalar()
        )
        if not webhook.is_active:
            state = "disabled"
        elif webhook.failing_since is not None:
            state = "failing"
        else:
            state = "healthy"
        found[webhook.id] = Health(
            state=state,
            failing_since=webhook.failing_since,
            consecutive_failures=webhook.consecutive_failures,
            last_success_at=last,
            disabled_reason=webhook.disabled_reason,
        )
    return found


def get_webhook(*, tenant: Tenant, webhook_id: str, lock: bool = False) -> Webhook:
    """The tenant's webhook, or NotFound (also for another tenant's); lock: its row locked
    until the transaction ends (PostgreSQL; SQLite's IMMEDIATE transaction holds it all)."""
    query = Webhook.select().where((Webhook.id == webhook_id) & (Webhook.tenant == tenant))
    if lock and not is_sqlite():
        query = query.for_update()
    webhook = query.first()
    if webhook is None:
        raise NotFound(f"Webhook {webhook_id} not found.")
    return webhook


def create_webhook(
    *, tenant: Tenant, actor: Actor, url: str, events: list[str], secret: str
) -> Webhook:
    """Register a webhook; its URL's host is resolved (the URL rules) before the transaction
    opens."""
    require_safe_url(url, field="url")
    with unit_of_work():
        limits.check(tenant.id, "webhooks")
        webhook = Webhook.create(
            id=new_id("wh"), tenant=tenant, url=url, events=events, secret=secret
        )
        audit.write(actor, tenant_id=tenant.id, action="webhook.created", target_id=webhook.id)
    return webhook


def update_webhook(*, tenant: Tenant, actor: Actor, webhook_id: str, **fields: Any) -> Webhook:
    """Change url, events, secret or isActive; re-enabling clears the reason and failure clock.
    A new secret replaces the old one at once (rotate_secret gives an overlap). A new URL's
    host is resolved before the transaction opens. The audit entry names the fields whose
    value changed (none: no entry)."""
    if "url" in fields:
        require_safe_url(fields["url"], field="url")
    with unit_of_work():
        webhook = get_webhook(tenant=tenant, webhook_id=webhook_id)
        changed = [name for name, value in fields.items() if getattr(webhook, name) != value]
        enable = fields.pop("is_active", None)
        if "secret" in fields:
            secrets.replace(webhook, field="secret", secret=fields.pop("secret"))
        for name, value in fields.items():
            setattr(webhook, name, value)
        if enable is True and not webhook.is_active:
            webhook.is_active = True
            webhook.disabled_reason = None
            webhook.failing_since = None
            webhook.consecutive_failures = 0
        webhook.updated_at = utcnow()
        webhook.save()
        if enable is False and webhook.is_active:
            delivery_attempt.disable(webhook, reason=None)
        if changed:
            audit.write(
                actor,
                tenant_id=tenant.id,
                action="webhook.updated",
                target_id=webhook.id,
                details=audit.fields(changed),
            )
    return webhook


def rotate_secret(
    *,
    tenant: Tenant,
    actor: Actor,
    webhook_id: str,
    secret: str | None = None,
    overlap_hours: int = secrets.DEFAULT_OVERLAP_HOURS,
) -> tuple[Webhook, str]:
    """Give the webhook a new secret (the one given, or a generated one): deliveries are signed
    with it at once, and with the current one beside it until the overlap ends. The webhook
    and its new secret."""
    with unit_of_work():
        webhook = get_webhook(tenant=tenant, webhook_id=webhook_id)
        new = secret or secrets.generate()
        now = utcnow()
        secrets.rotate(webhook, field="secret", secret=new, overlap_hours=overlap_hours, now=now)
        webhook.updated_at = now
        webhook.save()
        audit.write(
            actor,
            tenant_id=tenant.id,
            action="webhook.secret_rotated",
            target_id=webhook.id,
            details={
                "overlapHours": overlap_hours,
                "previousSecretExpiresAt": isoformat(webhook.overlap_ends_at),
            },
        )
    return webhook, new


def delete_webhook(*, tenant: Tenant, actor: Actor, webhook_id: str) -> None:
    """Delete a webhook with its deliveries and their log."""
    with unit_of_work():
        # The webhook's row before its deliveries', in the order an attempt's outcome takes
        # them: the other way round, each could wait for the other.
        webhook = get_webhook(tenant=tenant, webhook_id=webhook_id, lock=True)
        webhook.delete_instance(recursive=True)
        audit.write(actor, tenant_id=tenant.id, action="webhook.deleted", target_id=webhook_id)


def send_test(*, tenant: Tenant, actor: Actor, webhook_id: str) -> Delivery:
    """A signed webhook.test event for this webhook only, delivered like any other."""
    with unit_of_work():
        webhook = get_webhook(tenant=tenant, webhook_id=webhook_id)
        if not webhook.is_active:
            raise Conflict("The webhook is disabled: enable it before sending a test event.")
        event = event_service.record(
            tenant_id=tenant.id,
            type=TEST_EVENT,
            data={"webhookId": webhook.id, "message": "A test event from the Voice Agent API."},
        )
        delivery = Delivery.create(id=new_id("dlv"), tenant=tenant, webhook=webhook, event=event)
        audit.write(
            actor,
            tenant_id=tenant.id,
            action="webhook.test_sent",
            target_id=webhook.id,
            details={"deliveryId": delivery.id},
        )
        delivery_dispatch.defer_dispatch(tenant.id)
    delivery.event = event
    return delivery_log.with_attempts([delivery])[0]


def replay(
    *,
    tenant: Tenant,
    actor: Actor,
    webhook_id: str,
    since: datetime,
    until: datetime | None = None,
    events: list[str] | None = None,
) -> int:
    """Queue a new delivery to the webhook of every kept event in [since, until) that it
    subscribes to (and that events names, when given); how many were queued.

    One transaction writes the deliveries; they are dispatched once it commits (a few at a
    time: the rest wait in the database for the tenant's places). More than
    REPLAY_LIMIT events is ValidationFailed (replay_too_large), and a webhook left with more
    than REPLAY_LIMIT pending deliveries is Conflict (replay_backlog).
    """
    if until is None and since >= utcnow():
        raise ValidationFailed(
            "since must be in the past (until is now when it is not given).",
            details={"since": ["Must be in the past."]},
        )
    if until is not None and since >= until:
        raise ValidationFailed(
            "since must be before until.", details={"until": ["Must be after since."]}
        )
    until = until or utcnow()
    with unit_of_work():
        query = Webhook.select().where((Webhook.id == webhook_id) & (Webhook.tenant == tenant))
        if not is_sqlite():
            # Two replays to one webhook count its pending deliveries one after the other.
            # (SQLite: the IMMEDIATE transaction serialises them already.)
            query = query.for_update()
        webhook = query.first()
        if webhook is None:
            raise NotFound(f"Webhook {webhook_id} not found.")
        if not webhook.is_active:
            raise Conflict(
                "The webhook is disabled: enable it (PATCH isActive true) before replaying "
                "events to it.",
                code="webhook_disabled",
            )
        types = [name for name in webhook.events if events is None or name in events]
        ids = event_service.ids_in_range(
            tenant=tenant, since=since, until=until, types=types, limit=REPLAY_LIMIT + 1
        )
        if len(ids) > REPLAY_LIMIT:
            raise ValidationFailed(
                f"The range holds more than {REPLAY_LIMIT:,} events to replay: replay it in "
                "shorter ranges (since and until), one after the other.",
                code="replay_too_large",
                details={"limit": REPLAY_LIMIT},
            )
        pending = (
            Delivery.select(Delivery.id)
            .where((Delivery.webhook == webhook.id) & (Delivery.status == "pending"))
            .limit(REPLAY_LIMIT + 1)
            .count()
        )
        if pending + len(ids) > REPLAY_LIMIT:
            raise Conflict(
                f"The webhook has {pending:,} deliveries pending; with these {len(ids):,} it "
                f"would have more than {REPLAY_LIMIT:,}. Replay again once they are sent, or "
                "a shorter range.",
                code="replay_backlog",
                details={"pending": pending, "limit": REPLAY_LIMIT},
            )
        rows = [(new_id("dlv"), tenant.id, webhook.id, event_id) for event_id in ids]
        columns = [Delivery.id, Delivery.tenant, Delivery.webhook, Delivery.event]
        for start in range(0, len(rows), INSERT_BATCH):
            batch = rows[start : start + INSERT_BATCH]
            Delivery.insert_many(batch, fields=columns).as_rowcount().execute()
        audit.write(
            actor,
            tenant_id=tenant.id,
            action="webhook.replayed",
            target_id=webhook.id,
            details={
                "since": isoformat(since),
                "until": isoformat(until),
                "events": events,
                "replayed": len(rows),
            },
        )
        if rows:
            delivery_dispatch.defer_dispatch(tenant.id)
    return len(rows)
