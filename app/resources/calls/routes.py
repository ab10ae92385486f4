"""Calls: /api/v1/calls (the voice runtime reports them; tenants read them and queue outbound
ones)."""

from flask.views import MethodView

from app.auth import current_actor, current_tenant
from app.errors import ErrorSchema
from app.resources.calls.schemas import (
    CallAnalyzeSchema,
    CallCreateSchema,
    CallDetailSchema,
    CallListSchema,
    CallQueryArgsSchema,
    CallTranscriptSchema,
)
from app.resources.common import TenantBlueprint
from app.services.calls import analysis as call_analysis
from app.services.calls import history as call_history
from app.services.calls import outbound as outbound_calls

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
        page = call_history.list_calls(tenant=current_tenant(), **args)
        return {"calls": page.items, "pagination": page}

    @blp.arguments(CallCreateSchema())
    @blp.response(201, CallDetailSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.alt_response(
        409,
        schema=ErrorSchema,
        description="no_agent (the number has no agent and no agentId was sent, or the agent "
        "is inactive), no_credits (no available minutes) or, from a WhatsApp number, "
        "no_call_permission (the user has not given permission: details.status and "
        "details.canRequest); nothing is queued.",
    )
    @blp.doc(operationId="placeCall")
    def post(self, fields):
        """Place an outbound call

        Queues the call (status queued, direction outbound, callerNumber the number's
        displayNumber, calleeNumber `to`) for the voice runtime, which claims it from
        /internal/v1/dispatch; it is admitted then as an inbound call is (credit hold,
        concurrency slot, call.started) and reported by the runtime as any call. The agent's
        {{name}} placeholders are filled from `variables` in the call's session; variables
        that would make the prompt and greeting more than 256 KiB are refused (422 naming
        variables). From a WhatsApp number the user's call permission is checked first (a
        stored grant still valid, else Meta is asked): without one the answer is 409
        no_call_permission.
        """
        return outbound_calls.place_call(tenant=current_tenant(), actor=current_actor(), **fields)


@blp.route("/<call_id>")
class CallsById(MethodView):
    @blp.response(200, CallDetailSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="getCall")
    def get(self, call_id):
        """Get a call"""
        return call_history.get_call(tenant=current_tenant(), call_id=call_id)


@blp.route("/<call_id>/cancel")
class CallCancel(MethodView):
    @blp.response(200, CallDetailSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.alt_response(
        409,
        schema=ErrorSchema,
        description="illegal_transition: only a queued call can be canceled.",
    )
    @blp.doc(operationId="cancelCall")
    def post(self, call_id):
        """Cancel a queued call

        A queued outbound call is withdrawn (canceled) before a runtime claims it; it is
        never dialled. A campaign's call canceled this way fails its contact.
        """
        return outbound_calls.cancel_call(
            tenant=current_tenant(), actor=current_actor(), call_id=call_id
        )


@blp.route("/<call_id>/analyze")
class CallAnalyze(MethodView):
    @blp.response(202, CallAnalyzeSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.alt_response(
        409,
        schema=ErrorSchema,
        description="call_not_ended: the call has not ended; no_transcript: it has no "
        "transcript turns to analyse.",
    )
    @blp.doc(operationId="analyzeCall")
    def post(self, call_id):
        """Analyse a call again

        Runs the call's post-call analysis again with its agent version's analysisPlan (after
        the plan changed, or a failed analysis): answered at once with the analysis pending;
        GET /calls/:id shows the result, and call.analyzed is emitted when it is done.
        """
        call = call_analysis.reanalyze(
            tenant=current_tenant(), actor=current_actor(), call_id=call_id
        )
        return {"call_id": call.id, "analysis": call.analysis}


@blp.route("/<call_id>/transcript")
class CallTranscript(MethodView):
    @blp.response(200, CallTranscriptSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="getCallTranscript")
    def get(self, call_id):
        """Get a call's transcript

        The summary and the turns of the conversation in order, as the runtime reported them.
        """
        return call_history.get_transcript(tenant=current_tenant(), call_id=call_id)
