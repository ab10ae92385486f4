"""WhatsApp Business accounts: /api/v1/whatsapp/accounts."""

from flask.views import MethodView

from app.auth import current_actor, current_tenant
from app.errors import ErrorSchema
from app.resources.common import TenantBlueprint
from app.resources.whatsapp.schemas import (
    WhatsAppAccountCreateSchema,
    WhatsAppAccountListSchema,
    WhatsAppAccountSchema,
    WhatsAppAccountUpdateSchema,
    WhatsAppImportSchema,
    WhatsAppSyncSchema,
)
from app.services.whatsapp import accounts as account_service

blp = TenantBlueprint(
    "whatsapp-accounts",
    __name__,
    url_prefix="/api/v1/whatsapp/accounts",
    description="WhatsApp Business accounts, whose numbers become the tenant's phone numbers.",
)

META_REFUSED = (
    "Invalid fields (validation_error); Meta refused the access token (whatsapp_auth_failed: "
    "expired, revoked or without the permissions) or the request (whatsapp_rejected: an "
    "unknown wabaId, for example; details has Meta's code and message). Nothing was stored."
)
SYNC_REFUSED = (
    "Meta refused the stored access token (whatsapp_auth_failed: expired or revoked; rotate "
    "it with PATCH) or the request (whatsapp_rejected; details has Meta's code and message). "
    "Nothing was changed."
)
META_LIMITED = (
    "Your tenant's rate limit (rate_limited); Meta is limiting the account's requests "
    "(whatsapp_rate_limited); or too many of your requests to Meta are running at once "
    "(whatsapp_busy). Retry-After says when to try again. Nothing was stored."
)
META_DOWN = (
    "whatsapp_unavailable: Meta's Graph API could not be reached, answered too slowly or "
    "failed (5xx). Nothing was stored."
)
NOT_CONFIGURED = (
    "not_configured: the service has no SECRETS_KEY to store the secrets with (details names "
    "the setting); the operator must set it."
)
LINK_CONFLICTS = (
    "conflict: the wabaId is linked already (by this tenant or another); limit_reached: the "
    "tenant has as many WhatsApp Business accounts as it may (details names the cap)."
)


@blp.route("")
class WhatsAppAccounts(MethodView):
    @blp.response(200, WhatsAppAccountListSchema)
    @blp.doc(operationId="listWhatsAppAccounts")
    def get(self):
        """List linked WhatsApp Business accounts"""
        return {"accounts": account_service.list_accounts(tenant=current_tenant())}

    @blp.arguments(WhatsAppAccountCreateSchema)
    @blp.response(201, WhatsAppImportSchema)
    @blp.alt_response(409, schema=ErrorSchema, description=LINK_CONFLICTS)
    @blp.alt_response(422, schema=ErrorSchema, description=META_REFUSED)
    @blp.alt_response(429, schema=ErrorSchema, description=META_LIMITED)
    @blp.alt_response(502, schema=ErrorSchema, description=META_DOWN)
    @blp.alt_response(503, schema=ErrorSchema, description=NOT_CONFIGURED)
    @blp.doc(operationId="linkWhatsAppAccount")
    def post(self, fields):
        """Link a WhatsApp Business account and import its numbers

        The account's numbers are listed from Meta's Graph API with the access token first:
        when Meta refuses the token or cannot be reached, nothing is stored. Each listed
        number becomes one of your phone numbers (channel whatsapp, displayNumber "+" and its
        digits, label its verified name); one another tenant holds is skipped, with its
        reason in skipped. The access token and app secret are stored encrypted and never
        returned.
        """
        return account_service.link(tenant=current_tenant(), actor=current_actor(), **fields)


@blp.route("/<account_id>")
class WhatsAppAccountsById(MethodView):
    @blp.response(200, WhatsAppAccountSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="getWhatsAppAccount")
    def get(self, account_id):
        """Get a linked WhatsApp Business account"""
        return account_service.get_account(tenant=current_tenant(), account_id=account_id)

    @blp.arguments(WhatsAppAccountUpdateSchema)
    @blp.response(200, WhatsAppAccountSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.alt_response(422, schema=ErrorSchema, description=META_REFUSED)
    @blp.alt_response(429, schema=ErrorSchema, description=META_LIMITED)
    @blp.alt_response(502, schema=ErrorSchema, description=META_DOWN)
    @blp.alt_response(503, schema=ErrorSchema, description=NOT_CONFIGURED)
    @blp.doc(operationId="updateWhatsAppAccount")
    def patch(self, fields, account_id):
        """Change an account's label, access token or app secret

        A new access token is tried first (the account's numbers are listed with it) and
        stored only when Meta accepts it.
        """
        return account_service.update(
            tenant=current_tenant(), actor=current_actor(), account_id=account_id, **fields
        )

    @blp.response(204)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="unlinkWhatsAppAccount")
    def delete(self, account_id):
        """Unlink an account

        Its numbers become inactive and leave the account (kept, with their calls), and its
        stored secrets are erased.
        """
        account_service.unlink(
            tenant=current_tenant(), actor=current_actor(), account_id=account_id
        )


@blp.route("/<account_id>/sync")
class WhatsAppAccountSync(MethodView):
    @blp.response(200, WhatsAppSyncSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.alt_response(422, schema=ErrorSchema, description=SYNC_REFUSED)
    @blp.alt_response(429, schema=ErrorSchema, description=META_LIMITED)
    @blp.alt_response(502, schema=ErrorSchema, description=META_DOWN)
    @blp.alt_response(503, schema=ErrorSchema, description=NOT_CONFIGURED)
    @blp.doc(operationId="syncWhatsAppAccount")
    def post(self, account_id):
        """Import the account's numbers again

        New numbers are added; known ones get their quality rating, display number and
        (until you change it) label from Meta and are reactivated; numbers Meta no longer
        lists become inactive (kept, with their history). The answer counts each.
        """
        return account_service.sync(
            tenant=current_tenant(), actor=current_actor(), account_id=account_id
        )
