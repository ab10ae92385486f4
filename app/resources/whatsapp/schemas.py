"""WhatsApp Business account schemas: DESIGN.md section 16 (Accounts, Secrets)."""

from typing import Any

from marshmallow import fields, validate

from app.resources.common import Schema
from app.resources.fields import Text, Timestamp
from app.resources.phone_numbers.schemas import PhoneNumberSchema
from app.services.whatsapp import accounts as account_service

WABA_ID = r"^[0-9]{1,64}$"
TOKEN_LENGTH = (8, 4096)
APP_SECRET_LENGTH = (8, 256)
# Visible ASCII: the token is sent in an HTTP header (Authorization: Bearer), and Meta's
# tokens and app secrets are made of such characters.
VISIBLE_ASCII = r"^[\x21-\x7e]+$"
ASCII_ERROR = "Must be printable ASCII characters without spaces, as Meta gives it."


def secret_rules(length: tuple[int, int]) -> list:
    return [validate.Length(*length), validate.Regexp(VISIBLE_ASCII, error=ASCII_ERROR)]


class WhatsAppAccountCreateSchema(Schema):
    """Body of POST /whatsapp/accounts: wabaId, accessToken, appSecret, label."""

    waba_id = fields.String(
        required=True,
        validate=validate.Regexp(WABA_ID, error="Must be the account's numeric id from Meta."),
        metadata={
            "description": "The WhatsApp Business account id (WABA id), digits, as WhatsApp "
            "Manager or the app's API Setup page shows it."
        },
    )
    access_token = fields.String(
        required=True,
        load_only=True,
        validate=secret_rules(TOKEN_LENGTH),
        metadata={
            "description": "A system user's permanent access token with the "
            "whatsapp_business_management and whatsapp_business_messaging permissions "
            f"({TOKEN_LENGTH[0]}–{TOKEN_LENGTH[1]:,} characters). Write-only: stored "
            "encrypted, never returned (tokenHint shows its last 4 characters)."
        },
    )
    app_secret = fields.String(
        required=True,
        load_only=True,
        validate=secret_rules(APP_SECRET_LENGTH),
        metadata={
            "description": "The Meta app's secret, with which the voice runtime checks "
            f"Meta's webhook signatures ({APP_SECRET_LENGTH[0]}–{APP_SECRET_LENGTH[1]} "
            "characters). Write-only: stored encrypted, never returned."
        },
    )
    label = Text(
        validate=validate.Length(max=100),
        metadata={"description": "Free-text label, at most 100 characters; empty when absent."},
    )


class WhatsAppAccountUpdateSchema(Schema):
    """Body of PATCH /whatsapp/accounts/:id: any of label, accessToken, appSecret."""

    label = Text(
        validate=validate.Length(max=100),
        metadata={"description": "Free-text label, at most 100 characters."},
    )
    access_token = fields.String(
        load_only=True,
        validate=secret_rules(TOKEN_LENGTH),
        metadata={
            "description": "A new access token (a rotation): tried first by listing the "
            "account's numbers with it, and stored only when Meta accepts it. Write-only."
        },
    )
    app_secret = fields.String(
        load_only=True,
        validate=secret_rules(APP_SECRET_LENGTH),
        metadata={"description": "A new app secret (after a reset in Meta's app). Write-only."},
    )


class SkippedNumberSchema(Schema):
    display_number = fields.String(
        required=True, metadata={"description": "The number as it would have been imported."}
    )
    reason = fields.String(required=True, metadata={"description": "Why it was not imported."})


class WhatsAppAccountSchema(Schema):
    """A linked account in a response: never its access token or app secret."""

    id = fields.String(required=True, metadata={"description": "waa_…"})
    waba_id = fields.String(
        required=True, metadata={"description": "Meta's WhatsApp Business account id."}
    )
    label = fields.String(required=True, metadata={"description": "Free-text label."})
    token_hint = fields.String(
        required=True,
        metadata={"description": "The last 4 characters of the access token (never returned)."},
    )
    status = fields.String(
        required=True,
        metadata={
            "enum": ["connected"],
            "description": "connected: the token was accepted by Meta at the last link, "
            "update or sync.",
        },
    )
    numbers = fields.List(
        fields.Nested(PhoneNumberSchema),
        required=True,
        metadata={
            "description": "The account's numbers, as /phone-numbers gives them; a number no "
            "longer listed by Meta stays here inactive (isActive false)."
        },
    )
    last_synced_at = Timestamp(
        required=True,
        allow_none=True,
        metadata={"description": "When the numbers were last imported from Meta."},
    )
    created_at = Timestamp(required=True)

    def get_attribute(self, obj: Any, attr: str, default: Any) -> Any:
        """The numbers are read from the database, in the order they were imported."""
        if attr == "numbers":
            return account_service.numbers_of(obj)
        return super().get_attribute(obj, attr, default)


class WhatsAppAccountListSchema(Schema):
    accounts = fields.List(fields.Nested(WhatsAppAccountSchema), required=True)


class WhatsAppImportSchema(WhatsAppAccountSchema):
    """A linked account after an import (app.services.whatsapp.accounts.Imported)."""

    skipped = fields.List(
        fields.Nested(SkippedNumberSchema),
        required=True,
        metadata={
            "description": "Listed numbers that were not imported, each with its reason (a "
            "number another tenant holds, one that is not an international number, …)."
        },
    )

    def get_attribute(self, obj: Any, attr: str, default: Any) -> Any:
        """The account's fields from the account, the import's from the import."""
        if attr in ("skipped", "added", "updated", "deactivated"):
            return getattr(obj, attr)
        return super().get_attribute(obj.account, attr, default)


class WhatsAppSyncSchema(WhatsAppImportSchema):
    added = fields.Integer(required=True, metadata={"description": "Numbers newly imported."})
    updated = fields.Integer(
        required=True,
        metadata={
            "description": "Numbers whose quality rating, display number, label or activity "
            "changed."
        },
    )
    deactivated = fields.Integer(
        required=True,
        metadata={"description": "Numbers Meta no longer lists, made inactive (kept)."},
    )
