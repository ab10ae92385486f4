"""Runtime API: /internal/v1, how the voice runtime reports each call's lifecycle."""

from flask.views import MethodView

from app.errors import ErrorSchema
from app.resources.calls.schemas import CallDetailSchema
from app.resources.common import NO_STORE, RuntimeBlueprint
from app.runtime.schemas import (
    CallAnsweredSchema,
    CallEndSchema,
    CallStartSchema,
    DispatchedCallsSchema,
    DispatchSchema,
    FunctionCallSchema,
    FunctionOutcomeSchema,
    StartedCallSchema,
    TranscriptSchema,
    WhatsAppEventsAcceptedSchema,
    WhatsAppEventsSchema,
    WhatsAppNumberSchema,
)
from app.services import function_calls
from app.services.calls import lifecycle as call_lifecycle
from app.services.calls import outbound as outbound_calls
from app.services.whatsapp import accounts as whatsapp_accounts
from app.services.whatsapp import permissions

blp = RuntimeBlueprint(
    "runtime",
    __name__,
    url_prefix="/internal/v1",
    description="For the voice runtime (Authorization: Bearer RUNTIME_TOKEN).",
)

# Request schemas are passed as instances: given a class, webargs builds a new schema (and
# deep-copies its fields) on every request, which cost the runtime's hot path real CPU.

ILLEGAL = "illegal_transition: the call's status does not allow this step."


@blp.route("/calls")
class RuntimeCalls(MethodView):
    @blp.arguments(CallStartSchema())
    @blp.response(201, StartedCallSchema)
    @blp.alt_response(
        200,
        schema=StartedCallSchema,
        success=True,
        description="A repeated providerCallId: the call recorded first, unchanged.",
    )
    @blp.alt_response(
        409,
        schema=ErrorSchema,
        description="no_agent (no active number or agent), concurrency_limit (the tenant has "
        "as many calls in progress as its limit) or no_credits (no available minutes): the "
        "call is recorded as failed and details.callId names it.",
    )
    @blp.doc(operationId="startCall")
    def post(self, fields):
        """Report a new call and get its session

        Records the call (ringing) and emits call.started. The call takes one of the tenant's
        concurrent-call slots and holds its allowance of credit until it ends. The session's
        systemPrompt and greetingText have the call's variables filled in; variables that
        would make them more than 256 KiB are refused (422 naming variables) and nothing is
        recorded.
        """
        started = call_lifecycle.start_call(**fields)
        return started, 201 if started.created else 200


@blp.route("/dispatch")
class RuntimeDispatch(MethodView):
    @blp.arguments(DispatchSchema(), required=False)
    @blp.response(200, DispatchedCallsSchema)
    @blp.doc(operationId="dispatchCalls")
    def post(self, fields):
        """Claim queued outbound calls to place

        Hands out up to `max` queued calls, oldest first (only those placed from a number
        of `channel` when it is named: phone or whatsapp), each admitted exactly as an inbound
        start is (credit hold, concurrent-call slot, ringing, call.started) and returned with
        its session; two runtimes claiming at once never get the same call. A call whose
        tenant is at its concurrency limit stays queued until a slot frees; one whose tenant
        has no credit left is recorded failed (no_credits) and not handed out. Each call
        names the channel of the number it is placed from and, for a WhatsApp number, Meta's
        id of it (whatsappPhoneNumberId) to place it through Graph with. One answer
        holds at most 8 MiB of sessions: when they are large it hands out fewer than `max`,
        and the rest stay queued for the next claim. Report each
        call with the endpoints of any call: answered, or ended with status failed and
        hangupReason no_answer, busy or voicemail when nobody answered.
        """
        return {
            "calls": outbound_calls.dispatch(max_calls=fields["max"], channel=fields["channel"])
        }


@blp.route("/calls/<call_id>/answered")
class RuntimeCallAnswered(MethodView):
    @blp.arguments(CallAnsweredSchema())
    @blp.response(200, CallDetailSchema)
    @blp.alt_response(409, schema=ErrorSchema, description=ILLEGAL)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="answerCall")
    def post(self, fields, call_id):
        """Report that the agent answered

        ringing → answered, emits call.answered. Repeating it for an answered call changes
        nothing and answers 200.
        """
        return call_lifecycle.answer_call(call_id=call_id, **fields)


@blp.route("/calls/<call_id>/transcript")
class RuntimeCallTranscript(MethodView):
    @blp.arguments(TranscriptSchema())
    @blp.response(200, CallDetailSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="addCallTranscript")
    def post(self, fields, call_id):
        """Report transcript turns and the summary

        Appends the turns to the call's transcript, in order (post them as the call goes
        on), and stores the summary, emitting call.transcript when it is new; the same
        summary again changes nothing. A post that would take the call past 2,000 turns or
        256 KiB of turn text is 422 and stores nothing, neither turns nor summary.
        """
        return call_lifecycle.add_transcript(call_id=call_id, **fields)


@blp.route("/calls/<call_id>/ended")
class RuntimeCallEnded(MethodView):
    @blp.arguments(CallEndSchema())
    @blp.response(200, CallDetailSchema)
    @blp.alt_response(409, schema=ErrorSchema, description=ILLEGAL)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="endCall")
    def post(self, fields, call_id):
        """Report that the call ended

        Ends it, charges ceil(talkTimeSeconds / 60) minutes, frees its credit hold and its
        concurrent-call slot and emits call.ended (and credits.low when the charge crosses
        the threshold), in one transaction. Repeating it with the same status changes and
        charges nothing and answers 200. A durationSeconds longer than the time since the
        call started (the service's clock) plus 60 s is 422 and changes nothing.
        """
        return call_lifecycle.end_call(call_id=call_id, **fields)


@blp.route("/calls/<call_id>/function-calls")
class RuntimeFunctionCalls(MethodView):
    @blp.arguments(FunctionCallSchema())
    @blp.response(200, FunctionOutcomeSchema)
    @blp.alt_response(
        409, schema=ErrorSchema, description="call_not_active: the call has already ended."
    )
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="invokeFunction")
    def post(self, fields, call_id):
        """Run one of the agent's functions

        Checks the parameters against the function's declaration, calls the tenant's endpoint
        (signed, for at most the function's timeoutMs, 5 s by default, never retried) and
        answers within timeoutMs + 0.5 s with {"result": {...}} or {"error": {"code",
        "message"}}; both are HTTP 200, since either is the answer to hand to the AI. A
        tenant's calls take at most its share of the function workers at once: one beyond it
        is answered function_busy at once, without calling the endpoint. Every invocation is
        recorded and emits function.called.
        """
        return function_calls.invoke(call_id=call_id, **fields).as_dict()


@blp.route("/whatsapp/numbers/<whatsapp_phone_number_id>")
class RuntimeWhatsAppNumber(MethodView):
    @blp.response(200, WhatsAppNumberSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="getWhatsAppNumber")
    def get(self, whatsapp_phone_number_id):
        """Look up a WhatsApp number by Meta's id, with its account's secrets

        One runtime serves every tenant's numbers: it checks the signature of Meta's webhooks
        for the number with appSecret and calls Graph with accessToken (at
        graphUrl/whatsappPhoneNumberId/calls). 404 when the number
        is unknown, inactive or its account unlinked. The answer is never cached
        (Cache-Control: no-store).
        """
        number = whatsapp_accounts.runtime_number(whatsapp_phone_number_id)
        return number, NO_STORE


@blp.route("/whatsapp/events")
class RuntimeWhatsAppEvents(MethodView):
    @blp.arguments(WhatsAppEventsSchema())
    @blp.response(202, WhatsAppEventsAcceptedSchema)
    @blp.doc(operationId="forwardWhatsAppEvents")
    def post(self, fields):
        """Forward Meta's WhatsApp messages

        The `value` objects of the messages webhooks the runtime received and verified. A
        call_permission_reply (accept or reject, permanent or until its expiration) updates
        the number's record of that user, and a grant makes the user's contacts awaiting
        permission in the number's campaigns due at once. Other messages are ignored.
        """
        return {"accepted": permissions.receive_events(fields["values"])}
