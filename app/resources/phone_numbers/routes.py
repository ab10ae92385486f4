"""Phone numbers: /api/v1/phone-numbers."""

from flask.views import MethodView

from app.auth import current_actor, current_tenant
from app.errors import ErrorSchema
from app.resources.common import TenantBlueprint
from app.resources.phone_numbers.schemas import (
    AssignAgentSchema,
    CallPermissionArgsSchema,
    CallPermissionRequestedSchema,
    CallPermissionRequestSchema,
    CallPermissionSchema,
    PhoneNumberListSchema,
    PhoneNumberQueryArgsSchema,
    PhoneNumberSchema,
)
from app.services import phone_numbers as number_service
from app.services.whatsapp import permissions

blp = TenantBlueprint(
    "phone-numbers",
    __name__,
    url_prefix="/api/v1/phone-numbers",
    description="Business phone numbers and the agents that answer them.",
)


@blp.route("")
class PhoneNumbers(MethodView):
    @blp.arguments(PhoneNumberQueryArgsSchema, location="query")
    @blp.response(200, PhoneNumberListSchema)
    @blp.doc(operationId="listPhoneNumbers")
    def get(self, args):
        """List phone numbers"""
        return {"phone_numbers": number_service.list_numbers(tenant=current_tenant(), **args)}


@blp.route("/<number_id>/assign-agent")
class AssignAgent(MethodView):
    @blp.arguments(AssignAgentSchema)
    @blp.response(200, PhoneNumberSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="assignAgent")
    def post(self, fields, number_id):
        """Assign an agent to a phone number

        The number's calls are answered by the agent at its latest version, or, with
        agentVersion, at that version (pinned): test a new version on one number, then move
        the main one.
        """
        return number_service.assign_agent(
            tenant=current_tenant(), actor=current_actor(), number_id=number_id, **fields
        )


NOT_WHATSAPP = "not_whatsapp: the number is not a WhatsApp number."
META_FAILED = (
    "whatsapp_unavailable: Meta's Graph API failed or could not be reached; nothing was sent."
)


@blp.route("/<number_id>/call-permissions")
class CallPermissions(MethodView):
    @blp.arguments(CallPermissionArgsSchema(), location="query")
    @blp.response(200, CallPermissionSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.alt_response(409, schema=ErrorSchema, description=NOT_WHATSAPP)
    @blp.alt_response(
        429,
        schema=ErrorSchema,
        description="whatsapp_rate_limited or whatsapp_busy: Meta (or the service's share of "
        "requests to it) is limiting the account; try again later.",
    )
    @blp.alt_response(502, schema=ErrorSchema, description=META_FAILED)
    @blp.doc(operationId="getCallPermission")
    def get(self, args, number_id):
        """Check a WhatsApp user's call permission

        Asks Meta whether the WhatsApp number may call the user now, and keeps the answer
        (outbound calls and campaigns trust a stored grant while it is valid). A grant found
        makes the user's contacts awaiting permission in the number's campaigns due.
        """
        return permissions.check(tenant=current_tenant(), number_id=number_id, **args)


@blp.route("/<number_id>/call-permission-requests")
class CallPermissionRequests(MethodView):
    @blp.arguments(CallPermissionRequestSchema())
    @blp.response(202, CallPermissionRequestedSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.alt_response(
        409,
        schema=ErrorSchema,
        description=f"{NOT_WHATSAPP} Or whatsapp_window_closed: free-form text outside the "
        "user's 24-hour window (send a template instead).",
    )
    @blp.alt_response(
        429,
        schema=ErrorSchema,
        description="permission_request_limited: Meta's limit of 1 request a day and 2 a "
        "week to the user from the number is reached (or whatsapp_rate_limited, "
        "whatsapp_busy).",
    )
    @blp.alt_response(502, schema=ErrorSchema, description=META_FAILED)
    @blp.doc(operationId="requestCallPermission")
    def post(self, fields, number_id):
        """Ask a WhatsApp user for call permission

        Sends the user an interactive call permission request (its body `text`, or a default
        in Bahasa Indonesia), or the named `template`, from the WhatsApp number. The user's
        answer reaches the service through the runtime.
        """
        return permissions.request_permission(
            tenant=current_tenant(), actor=current_actor(), number_id=number_id, **fields
        )
