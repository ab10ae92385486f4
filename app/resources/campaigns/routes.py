"""Campaigns: /api/v1/campaigns."""

from flask.views import MethodView

from app.auth import current_actor, current_tenant
from app.errors import ErrorSchema
from app.resources.campaigns.schemas import (
    CampaignCreateSchema,
    CampaignListSchema,
    CampaignSchema,
    ContactListSchema,
    ContactQueryArgsSchema,
)
from app.resources.common import PageArgsSchema, TenantBlueprint
from app.services import campaigns as campaign_service

blp = TenantBlueprint(
    "campaigns",
    __name__,
    url_prefix="/api/v1/campaigns",
    description="Batches of outbound calls, with schedules and retries.",
)

ILLEGAL = "illegal_transition: the campaign's status does not allow this step."


@blp.route("")
class Campaigns(MethodView):
    @blp.arguments(PageArgsSchema(), location="query")
    @blp.response(200, CampaignListSchema)
    @blp.doc(operationId="listCampaigns")
    def get(self, args):
        """List campaigns

        Newest first.
        """
        page = campaign_service.list_campaigns(tenant=current_tenant(), **args)
        return {"campaigns": page.items, "pagination": page}

    @blp.arguments(CampaignCreateSchema())
    @blp.response(201, CampaignSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.alt_response(
        409,
        schema=ErrorSchema,
        description="no_agent (no agentId and the number has none, or it is inactive), "
        "no_credits (no available minutes) or limit_reached (more contacts than a campaign "
        "may hold, or the tenant has as many running or paused campaigns as it may).",
    )
    @blp.doc(operationId="createCampaign")
    def post(self, fields):
        """Create a campaign

        The campaign runs at once: the worker's sweep places the calls of its contacts, in
        order, as queued outbound calls (never more than maxConcurrentCalls of them queued or
        in progress, only inside the schedule window), and retries the outcomes listed in
        retry.on after retry.delayMinutes, up to retry.maxAttempts calls per contact. Each
        contact's variables fill the agent's {{name}} placeholders in its call (a contact
        whose variables would make the prompt and greeting more than 256 KiB is refused: 422
        naming contacts.N.variables). When every
        contact is done the campaign is completed and emits campaign.completed.
        """
        fields["contacts"] = [campaign_service.Contact(**contact) for contact in fields["contacts"]]
        return campaign_service.create_campaign(
            tenant=current_tenant(), actor=current_actor(), **fields
        )


@blp.route("/<campaign_id>")
class CampaignsById(MethodView):
    @blp.response(200, CampaignSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="getCampaign")
    def get(self, campaign_id):
        """Get a campaign

        With its counts: contacts total, pending, in progress, completed and failed.
        """
        return campaign_service.get_campaign(tenant=current_tenant(), campaign_id=campaign_id)


@blp.route("/<campaign_id>/contacts")
class CampaignContacts(MethodView):
    @blp.arguments(ContactQueryArgsSchema(), location="query")
    @blp.response(200, ContactListSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="listCampaignContacts")
    def get(self, args, campaign_id):
        """List a campaign's contacts

        In the order given, each with its status, attempts, last outcome and call ids.
        """
        page = campaign_service.list_contacts(
            tenant=current_tenant(), campaign_id=campaign_id, **args
        )
        return {"contacts": page.items, "pagination": page}


@blp.route("/<campaign_id>/pause")
class CampaignPause(MethodView):
    @blp.response(200, CampaignSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.alt_response(409, schema=ErrorSchema, description=ILLEGAL)
    @blp.doc(operationId="pauseCampaign")
    def post(self, campaign_id):
        """Pause a campaign

        running → paused: no new calls are placed; its queued and live calls go on. Pausing a
        paused campaign changes nothing.
        """
        return campaign_service.pause_campaign(
            tenant=current_tenant(), actor=current_actor(), campaign_id=campaign_id
        )


@blp.route("/<campaign_id>/resume")
class CampaignResume(MethodView):
    @blp.response(200, CampaignSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.alt_response(409, schema=ErrorSchema, description=ILLEGAL)
    @blp.doc(operationId="resumeCampaign")
    def post(self, campaign_id):
        """Resume a campaign

        paused → running: the sweep places its due contacts' calls again. Resuming a running
        campaign changes nothing.
        """
        return campaign_service.resume_campaign(
            tenant=current_tenant(), actor=current_actor(), campaign_id=campaign_id
        )


@blp.route("/<campaign_id>/cancel")
class CampaignCancel(MethodView):
    @blp.response(200, CampaignSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.alt_response(409, schema=ErrorSchema, description=ILLEGAL)
    @blp.doc(operationId="cancelCampaign")
    def post(self, campaign_id):
        """Cancel a campaign

        running or paused → canceled, for good: its queued calls are canceled (their contacts
        stay pending, never reached); calls ringing or answered go on to their end.
        """
        return campaign_service.cancel_campaign(
            tenant=current_tenant(), actor=current_actor(), campaign_id=campaign_id
        )
