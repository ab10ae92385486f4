"""Phone numbers: /api/v1/phone-numbers."""

from flask.views import MethodView

from app.auth import current_actor, current_tenant
from app.resources.common import TenantBlueprint
from app.resources.phone_numbers.schemas import (
    AssignAgentSchema,
    PhoneNumberListSchema,
    PhoneNumberQueryArgsSchema,
    PhoneNumberSchema,
)
from app.services import phone_numbers as number_service

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
