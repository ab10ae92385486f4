"""WhatsApp numbers for tests: an account with its encrypted token and a number on it, made
directly (the accounts API links them in the service)."""

from app import vault
from app.models import PhoneNumber, Tenant, WhatsAppAccount
from app.services import phone_numbers as number_service
from app.util import new_id
from tests.helpers import ACTOR

TOKEN = "EAAG-test-token-wa-0001"
APP_SECRET = "app-secret"


def whatsapp_number(
    tenant: Tenant,
    *,
    display: str = "+6281100000001",
    meta_id: str = "1100001",
    token: str = TOKEN,
    agent_id: str | None = None,
) -> PhoneNumber:
    """A WhatsApp number of tenant (its account's token encrypted), assigned to agent_id."""
    account = WhatsAppAccount.create(
        id=new_id("waa"),
        tenant=tenant,
        waba_id=f"waba-{meta_id}",
        access_token_encrypted=vault.encrypt(token),
        app_secret_encrypted=vault.encrypt(APP_SECRET),
        token_hint=token[-4:],
    )
    number = PhoneNumber.create(
        id=new_id("pn"),
        tenant=tenant,
        display_number=display,
        label="WhatsApp",
        channel="whatsapp",
        whatsapp_account=account,
        whatsapp_phone_number_id=meta_id,
    )
    if agent_id is not None:
        number_service.assign_agent(
            actor=ACTOR, tenant=tenant, number_id=number.id, agent_id=agent_id
        )
    return PhoneNumber.get_by_id(number.id)


def permission_reply(meta_id: str, user: str, response: str = "accept", **reply) -> dict:
    """The value of a Meta messages webhook change carrying a user's call permission reply."""
    return {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": "6281100000001", "phone_number_id": meta_id},
        "contacts": [{"profile": {"name": "Budi"}, "wa_id": user.lstrip("+")}],
        "messages": [
            {
                "from": user.lstrip("+"),
                "id": "wamid.reply1",
                "timestamp": "1764380000",
                "type": "interactive",
                "interactive": {
                    "type": "call_permission_reply",
                    "call_permission_reply": {"response": response, **reply},
                },
            }
        ],
    }
