"""Webhooks: create, edit, disable, send a test event, the delivery log with retries, replays
of the event log, delete."""

from datetime import timedelta
from typing import Any

from flask import flash, g, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from marshmallow import ValidationError
from werkzeug.datastructures import MultiDict

from app.dashboard import (
    ALREADY_SENT,
    bp,
    current_actor,
    first_sending,
    require_change,
    rotation_page,
    secret_page,
)
from app.dashboard.confirm import Confirmation, ConfirmView
from app.dashboard.formdata import Errors, as_form, changed, flatten, load_form
from app.errors import Conflict, ValidationFailed
from app.models import Webhook
from app.resources.common import SecretRotationSchema
from app.resources.webhooks.schemas import (
    DeliveryQueryArgsSchema,
    ReplayRequestSchema,
    WebhookCreateSchema,
    WebhookSchema,
    WebhookUpdateSchema,
)
from app.services import webhooks as webhook_service
from app.services.deliveries import log as delivery_log
from app.services.deliveries.log import STATUSES
from app.services.events import EVENT_TYPES
from app.services.pages import COUNT_LIMIT
from app.util import utcnow

ROTATED_ALREADY = (
    "This form was sent already (the page was reloaded): the secret was not rotated again."
)
LOG_PAGE_SIZE = 20
LOG_ARGS = ("limit", "offset", "status")
# What the edit form changes; the secret is set once, at creation (or through the API).
EDIT_FIELDS = ("url", "events", "is_active")
# The replay form's fields: UTC times typed as text (a browser's date picker would show them in
# the browser's own format and zone, beside a label saying UTC), until optional.
REPLAY_FIELDS = ("since", "until")
REPLAY_SINCE = timedelta(days=1)  # the since the form offers: a day ago
MINUTES = "%Y-%m-%d %H:%M"


@bp.route("/webhooks")
def webhooks():
    webhooks = webhook_service.list_webhooks(tenant=g.tenant)
    return render_template(
        "dashboard/webhooks/list.html",
        webhooks=webhooks,
        healths=webhook_service.health(webhooks=webhooks),
    )


@bp.route("/webhooks/new", methods=["GET", "POST"])
def new_webhook():
    require_change()
    if request.method == "GET":
        return _new_webhook_page(MultiDict({"secret": webhook_service.new_secret()}), {})
    if not first_sending():
        flash(ALREADY_SENT, "info")
        return redirect(url_for("dashboard.webhooks"))
    fields, errors = load_form(WebhookCreateSchema(), request.form, urls_at=("url",))
    if not errors:
        try:
            webhook = webhook_service.create_webhook(
                tenant=g.tenant, actor=current_actor(), **fields
            )
        except ValidationFailed as exc:  # the URL rules
            errors = _field_errors(exc)
        else:
            # Rendered, never flashed: the session cookie is signed, not encrypted.
            return secret_page(_webhook_page(webhook, secret=fields["secret"]), 201)
    return _new_webhook_page(request.form, errors), 422


def _new_webhook_page(values: MultiDict, errors: Errors) -> str:
    return render_template(
        "dashboard/webhooks/new.html", values=values, errors=errors, event_types=EVENT_TYPES
    )


def _field_errors(exc: ValidationFailed) -> Errors:
    return {key: list(messages) for key, messages in exc.details.items()}


@bp.route("/webhooks/<webhook_id>", methods=["GET", "POST"])
def webhook(webhook_id: str):
    webhook = webhook_service.get_webhook(tenant=g.tenant, webhook_id=webhook_id)
    if request.method == "GET":
        return _webhook_page(webhook)
    schema = WebhookUpdateSchema(partial=True, only=EDIT_FIELDS)
    fields, errors = load_form(schema, request.form, urls_at=("url",))
    if not errors:
        changes = changed(webhook, fields)
        try:
            if changes:
                webhook_service.update_webhook(
                    tenant=g.tenant, actor=current_actor(), webhook_id=webhook.id, **changes
                )
        except ValidationFailed as exc:
            errors = _field_errors(exc)
        else:
            if changes:
                flash("Webhook saved.", "success")
            else:
                flash("Nothing to save: no field was changed.", "info")
            return redirect(url_for("dashboard.webhook", webhook_id=webhook.id))
    return _webhook_page(webhook, values=request.form, errors=errors), 422


def _webhook_page(
    webhook: Webhook,
    *,
    values: MultiDict | None = None,
    errors: Errors | None = None,
    secret: str | None = None,
    rotated: str | None = None,
    replay_values: MultiDict | None = None,
    replay_errors: Errors | None = None,
) -> str:
    """The webhook's page: its form and actions, and one page of its delivery log."""
    log_args = _log_args()
    if replay_values is None:
        replay_values = MultiDict({"since": (utcnow() - REPLAY_SINCE).strftime(MINUTES)})
    return render_template(
        "dashboard/webhooks/webhook.html",
        webhook=webhook,
        health=webhook_service.health(webhooks=[webhook])[webhook.id],
        values=values if values is not None else as_form(WebhookSchema().dump(webhook)),
        errors=errors or {},
        replay_values=replay_values,
        replay_errors=replay_errors or {},
        replay_limit=webhook_service.REPLAY_LIMIT,
        event_types=EVENT_TYPES,
        secret=secret,
        rotated=rotated,
        log=delivery_log.list_deliveries(webhook=webhook, **log_args),
        log_status=log_args.get("status", ""),
        statuses=STATUSES,
        count_limit=COUNT_LIMIT,
    )


def _log_args() -> dict[str, Any]:
    """The delivery log's page and filter from the query string, as the API reads them."""
    given = {key: request.args[key] for key in LOG_ARGS if request.args.get(key)}
    try:
        return DeliveryQueryArgsSchema().load({"limit": LOG_PAGE_SIZE, **given})
    except ValidationError as exc:
        details = flatten(exc.messages)
        raise ValidationFailed(
            "Invalid delivery log parameters: "
            + " ".join(f"{key}: {' '.join(messages)}" for key, messages in details.items()),
            details=details,
        ) from None


@bp.route("/webhooks/<webhook_id>/rotate-secret", methods=["GET", "POST"])
def rotate_webhook_secret(webhook_id: str):
    """GET asks for confirmation and the overlap; POST rotates and shows the new secret once."""
    require_change()
    webhook = webhook_service.get_webhook(tenant=g.tenant, webhook_id=webhook_id)
    here = url_for("dashboard.webhook", webhook_id=webhook.id)
    if request.method == "GET":
        return rotation_page(
            title="Rotate the webhook's secret",
            question=f"Give the webhook to {webhook.url} a new secret? Its deliveries are "
            "signed with the new one from now on, and with the old one beside it for the "
            "time you choose.",
            action=url_for("dashboard.rotate_webhook_secret", webhook_id=webhook.id),
            cancel=here,
            back="Webhook",
        )
    if not first_sending():
        flash(ROTATED_ALREADY, "info")
        return redirect(here)
    fields, errors = load_form(SecretRotationSchema(only=("overlap_hours",)), request.form)
    if errors:
        raise ValidationFailed("Choose how long the old secret keeps signing.", details=errors)
    webhook, secret = webhook_service.rotate_secret(
        tenant=g.tenant,
        actor=current_actor(),
        webhook_id=webhook.id,
        overlap_hours=fields["overlap_hours"],
    )
    return secret_page(_webhook_page(webhook, rotated=secret))


@bp.route("/webhooks/<webhook_id>/disable", methods=["POST"])
def disable_webhook(webhook_id: str):
    webhook = webhook_service.get_webhook(tenant=g.tenant, webhook_id=webhook_id)
    if webhook.is_active:
        webhook_service.update_webhook(
            tenant=g.tenant, actor=current_actor(), webhook_id=webhook.id, is_active=False
        )
        flash(
            "Webhook disabled: it receives nothing, and its pending deliveries failed. "
            "Tick Active and save to enable it again.",
            "success",
        )
    return redirect(url_for("dashboard.webhook", webhook_id=webhook.id))


@bp.route("/webhooks/<webhook_id>/test", methods=["POST"])
def test_webhook(webhook_id: str):
    webhook = webhook_service.get_webhook(tenant=g.tenant, webhook_id=webhook_id)
    try:
        webhook_service.send_test(tenant=g.tenant, actor=current_actor(), webhook_id=webhook.id)
    except Conflict as exc:  # disabled
        flash(exc.message, "error")
        return _webhook_page(webhook), 409
    flash(
        "A webhook.test event is on its way: its delivery is at the top of the log "
        "(reload the page to see how it went).",
        "success",
    )
    return redirect(url_for("dashboard.webhook", webhook_id=webhook.id))


@bp.route("/webhooks/<webhook_id>/replay", methods=["POST"])
def replay_webhook(webhook_id: str):
    webhook = webhook_service.get_webhook(tenant=g.tenant, webhook_id=webhook_id)
    # An empty Until is left out, as in the API: until now.
    given = MultiDict([(key, request.form[key]) for key in REPLAY_FIELDS if request.form.get(key)])
    fields, errors = load_form(ReplayRequestSchema(only=REPLAY_FIELDS), given)
    if not errors:
        try:
            replayed = webhook_service.replay(
                tenant=g.tenant, actor=current_actor(), webhook_id=webhook.id, **fields
            )
        except ValidationFailed as exc:  # since not before until, or too many events
            errors = _field_errors(exc) if exc.code == "validation_error" else {}
            errors = errors or {"_schema": [exc.message]}
        except Conflict as exc:  # disabled, or too many deliveries pending
            flash(exc.message, "error")
            return _webhook_page(webhook, replay_values=request.form), 409
        else:
            noun = "event" if replayed == 1 else "events"
            flash(f"{replayed} {noun} queued for delivery.", "success")
            return redirect(url_for("dashboard.webhook", webhook_id=webhook.id))
    return _webhook_page(webhook, replay_values=request.form, replay_errors=errors), 422


@bp.route("/webhooks/deliveries/<delivery_id>/retry", methods=["POST"])
def retry_delivery(delivery_id: str):
    delivery = delivery_log.get_delivery(tenant=g.tenant, delivery_id=delivery_id)
    webhook = webhook_service.get_webhook(tenant=g.tenant, webhook_id=delivery.webhook_id)
    try:
        delivery_log.retry(tenant=g.tenant, actor=current_actor(), delivery_id=delivery.id)
    except Conflict as exc:  # the webhook is disabled
        flash(exc.message, "error")
        return _webhook_page(webhook), 409
    flash(
        f"Delivery {delivery.id} is being sent again (reload the page to see how it went).",
        "success",
    )
    return redirect(url_for("dashboard.webhook", webhook_id=webhook.id))


class DeleteWebhook(ConfirmView):
    def find(self, webhook_id: str) -> Webhook:
        return webhook_service.get_webhook(tenant=g.tenant, webhook_id=webhook_id)

    def confirmation(self, webhook: Webhook) -> Confirmation:
        return Confirmation(
            title="Delete webhook",
            question=f"Delete the webhook to {webhook.url}? It receives nothing more, and its "
            "delivery log is deleted with it.",
            button="Delete webhook",
            cancel=url_for("dashboard.webhook", webhook_id=webhook.id),
        )

    def act(self, webhook: Webhook) -> ResponseReturnValue:
        webhook_service.delete_webhook(
            tenant=g.tenant, actor=current_actor(), webhook_id=webhook.id
        )
        flash("Webhook deleted.", "success")
        return redirect(url_for("dashboard.webhooks"))


bp.add_url_rule("/webhooks/<webhook_id>/delete", view_func=DeleteWebhook.as_view("delete_webhook"))
