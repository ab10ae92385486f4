"""The event log: /api/v1/events (pull what the webhooks push)."""

from flask.views import MethodView

from app.auth import current_tenant
from app.errors import ErrorSchema
from app.resources.common import TenantBlueprint
from app.resources.events.schemas import EventDetailSchema, EventListSchema, EventQueryArgsSchema
from app.services import events as event_service

blp = TenantBlueprint(
    "events",
    __name__,
    url_prefix="/api/v1/events",
    description="The tenant's events, with the ids and bodies its webhooks receive, kept for "
    "RETENTION_DAYS (30 by default): a consumer pages through what it missed.",
)

# One instance for every request (see app.resources.calls.routes).
QUERY_ARGS = EventQueryArgsSchema()


@blp.route("")
class Events(MethodView):
    @blp.arguments(QUERY_ARGS, location="query")
    @blp.response(200, EventListSchema)
    @blp.alt_response(
        404,
        schema=ErrorSchema,
        description="after names no event of yours that is kept (deleted after the retention, "
        "or another tenant's); error code not_found.",
    )
    @blp.doc(operationId="listEvents")
    def get(self, args):
        """List events, oldest first

        In the order they were recorded, which holds on every server: paging with
        `after=nextAfter` until `hasMore` is false misses none, even one whose transaction
        committed late. Each event is the body its webhook deliveries carry.
        """
        page = event_service.list_events(tenant=current_tenant(), **args)
        return page


@blp.route("/<event_id>")
class EventsById(MethodView):
    @blp.response(200, EventDetailSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="getEvent")
    def get(self, event_id):
        """Get an event with its deliveries"""
        return event_service.event_detail(tenant=current_tenant(), event_id=event_id)
