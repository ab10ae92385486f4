"""Webhooks and their delivery log: /api/v1/webhooks."""

from flask.views import MethodView

from app.auth import current_actor, current_tenant
from app.errors import ErrorSchema
from app.resources.common import NO_STORE, SAME_SECRET, SecretRotationSchema, TenantBlueprint
from app.resources.events.deliveries import DeliverySchema
from app.resources.events.payloads import CALLBACKS
from app.resources.webhooks.schemas import (
    DeliveryListSchema,
    DeliveryQueryArgsSchema,
    ReplayRequestSchema,
    ReplaySchema,
    WebhookCreateSchema,
    WebhookListSchema,
    WebhookSchema,
    WebhookSecretSchema,
    WebhookUpdateSchema,
)
from app.services import webhooks as webhook_service
from app.services.deliveries import log as delivery_log

blp = TenantBlueprint(
    "webhooks",
    __name__,
    url_prefix="/api/v1/webhooks",
    description="Signed event deliveries to the tenant's URLs, with their delivery log.",
)

DISABLED = "The webhook is disabled: enable it (PATCH isActive true) first."
REPLAY_CONFLICTS = (
    "The webhook is disabled (error code webhook_disabled): enable it first; or it would be "
    f"left with more than {webhook_service.REPLAY_LIMIT:,} pending deliveries (replay_backlog): "
    "replay again once they are sent."
)
REPLAY_INVALID = (
    "Invalid fields (validation_error): since must be before until, event names known; or the "
    f"range holds more than {webhook_service.REPLAY_LIMIT:,} events to replay "
    "(replay_too_large): replay shorter ranges."
)


@blp.route("")
class Webhooks(MethodView):
    @blp.response(200, WebhookListSchema)
    @blp.doc(operationId="listWebhooks")
    def get(self):
        """List webhooks"""
        return {"webhooks": webhook_service.list_webhooks(tenant=current_tenant())}

    @blp.arguments(WebhookCreateSchema)
    @blp.response(201, WebhookSchema)
    @blp.doc(operationId="createWebhook", callbacks=CALLBACKS)
    def post(self, fields):
        """Register a webhook

        Its url then receives a signed POST of every event it subscribes to: the callbacks
        below, one per event, with the body each one carries.
        """
        return webhook_service.create_webhook(
            tenant=current_tenant(), actor=current_actor(), **fields
        )


@blp.route("/<webhook_id>")
class WebhooksById(MethodView):
    @blp.response(200, WebhookSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="getWebhook")
    def get(self, webhook_id):
        """Get a webhook"""
        return webhook_service.get_webhook(tenant=current_tenant(), webhook_id=webhook_id)

    @blp.arguments(WebhookUpdateSchema(partial=True))
    @blp.response(200, WebhookSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="updateWebhook")
    def patch(self, fields, webhook_id):
        """Update a webhook"""
        return webhook_service.update_webhook(
            tenant=current_tenant(), actor=current_actor(), webhook_id=webhook_id, **fields
        )

    @blp.response(204)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="deleteWebhook")
    def delete(self, webhook_id):
        """Delete a webhook and its delivery log"""
        webhook_service.delete_webhook(
            tenant=current_tenant(), actor=current_actor(), webhook_id=webhook_id
        )


@blp.route("/<webhook_id>/deliveries")
class WebhookDeliveries(MethodView):
    @blp.arguments(DeliveryQueryArgsSchema, location="query")
    @blp.response(200, DeliveryListSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="listDeliveries")
    def get(self, args, webhook_id):
        """List a webhook's deliveries, newest first, with every attempt"""
        webhook = webhook_service.get_webhook(tenant=current_tenant(), webhook_id=webhook_id)
        page = delivery_log.list_deliveries(webhook=webhook, **args)
        return {"deliveries": page.items, "pagination": page}


@blp.route("/<webhook_id>/rotate-secret")
class WebhookSecretRotation(MethodView):
    @blp.arguments(SecretRotationSchema)
    @blp.response(200, WebhookSecretSchema)
    @blp.alt_response(409, schema=ErrorSchema, description=SAME_SECRET)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="rotateWebhookSecret")
    def post(self, fields, webhook_id):
        """Rotate a webhook's secret without downtime

        The new secret (the one given, or a generated one) signs every delivery from now on;
        for overlapHours (default 24) the current one signs them too: `webhook-signature`
        then carries two `v1,` signatures separated by a space (the new secret's first),
        `X-Service-Signature` the new secret's and `X-Service-Signature-Previous` the old
        one's, so a receiver verifies with either secret until it has moved to the new one.
        The answer (`Cache-Control: no-store`) is the only time the new secret is shown.
        """
        webhook, _ = webhook_service.rotate_secret(
            tenant=current_tenant(), actor=current_actor(), webhook_id=webhook_id, **fields
        )
        return webhook, NO_STORE


@blp.route("/<webhook_id>/test")
class WebhookTest(MethodView):
    @blp.response(202, DeliverySchema)
    @blp.alt_response(409, schema=ErrorSchema, description=DISABLED)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="testWebhook")
    def post(self, webhook_id):
        """Send a signed webhook.test event to this webhook only"""
        return webhook_service.send_test(
            tenant=current_tenant(), actor=current_actor(), webhook_id=webhook_id
        )


@blp.route("/<webhook_id>/replay")
class WebhookReplay(MethodView):
    @blp.arguments(ReplayRequestSchema)
    @blp.response(202, ReplaySchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.alt_response(409, schema=ErrorSchema, description=REPLAY_CONFLICTS)
    @blp.alt_response(422, schema=ErrorSchema, description=REPLAY_INVALID)
    @blp.doc(operationId="replayWebhook")
    def post(self, fields, webhook_id):
        """Deliver the kept events of a time range to this webhook again

        A new delivery for every event in [since, until) that the webhook subscribes to (and
        that `events` names), with the event's own id and body: receivers that dedupe on
        the event id see each once. At most 10,000 events per replay.
        """
        replayed = webhook_service.replay(
            tenant=current_tenant(), actor=current_actor(), webhook_id=webhook_id, **fields
        )
        return {"replayed": replayed}


@blp.route("/deliveries/<delivery_id>/retry")
class DeliveryRetry(MethodView):
    @blp.response(202, DeliverySchema)
    @blp.alt_response(409, schema=ErrorSchema, description=DISABLED)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="retryDelivery")
    def post(self, delivery_id):
        """Send a delivery again now"""
        delivery = delivery_log.retry(
            tenant=current_tenant(), actor=current_actor(), delivery_id=delivery_id
        )
        return delivery_log.with_attempts([delivery])[0]
