"""Calls: /api/v1/calls (read-only; the voice runtime writes them)."""

from flask.views import MethodView

from app.auth import current_tenant
from app.resources.calls.schemas import (
    CallDetailSchema,
    CallListSchema,
    CallQueryArgsSchema,
    CallTranscriptSchema,
)
from app.resources.common import TenantBlueprint
from app.services import calls as call_service

blp = TenantBlueprint("calls", __name__, url_prefix="/api/v1/calls", description="Call history.")

# One instance for every request: given the class, webargs builds a schema (deep copies of
# its fields) per request.
QUERY_ARGS = CallQueryArgsSchema()


@blp.route("")
class Calls(MethodView):
    @blp.arguments(QUERY_ARGS, location="query")
    @blp.response(200, CallListSchema)
    @blp.doc(operationId="listCalls")
    def get(self, args):
        """List calls

        Newest startedAt first (ties by id). `pagination.total` is exact for the unfiltered
        list; with any filter it counts matches up to 10,000, so 10,000 means at least that.
        `pagination.hasMore` is always exact.
        """
        page = call_service.list_calls(tenant=current_tenant(), **args)
        return {"calls": page.items, "pagination": page}


@blp.route("/<call_id>")
class CallsById(MethodView):
    @blp.response(200, CallDetailSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="getCall")
    def get(self, call_id):
        """Get a call"""
        return call_service.get_call(tenant=current_tenant(), call_id=call_id)


@blp.route("/<call_id>/transcript")
class CallTranscript(MethodView):
    @blp.response(200, CallTranscriptSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="getCallTranscript")
    def get(self, call_id):
        """Get a call's transcript

        The summary and the turns of the conversation in order, as the runtime reported them.
        """
        return call_service.get_transcript(tenant=current_tenant(), call_id=call_id)
