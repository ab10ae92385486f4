"""Caps per tenant: how many webhooks, agents, functions per agent, active API keys,
dashboard users, running or paused campaigns and WhatsApp Business accounts one tenant may
have (settings; DESIGN.md section 15). One tenant's bulk never becomes every tenant's cost:
1,000 webhooks would make every event 1,000 deliveries.

check() is called by the service that creates the thing, inside its transaction: it takes the
tenant row's lock first (PostgreSQL: SELECT ... FOR UPDATE; SQLite's IMMEDIATE transaction
holds the database's write lock already), so two creates at once cannot both pass at the cap
less one. The counts use the tenant's indexes.
"""

from collections.abc import Callable

from flask import current_app

from app.db import is_sqlite
from app.errors import AppError
from app.models import Agent, ApiKey, Campaign, Function, Tenant, User, Webhook, WhatsAppAccount
from app.util import utcnow


class LimitReached(AppError):
    status, code = 409, "limit_reached"


def _webhooks(tenant_id: str, scope: str | None) -> int:
    return Webhook.select().where(Webhook.tenant == tenant_id).count()


def _agents(tenant_id: str, scope: str | None) -> int:
    return Agent.select().where((Agent.tenant == tenant_id) & Agent.deleted_at.is_null()).count()


def _functions(tenant_id: str, scope: str | None) -> int:
    # Live ones: a deleted function keeps its row for the versions that have it.
    return (
        Function.select().where((Function.agent == scope) & Function.deleted_at.is_null()).count()
    )


def _api_keys(tenant_id: str, scope: str | None) -> int:
    now = utcnow()
    return (
        ApiKey.select()
        .where(
            (ApiKey.tenant == tenant_id)
            & ApiKey.revoked_at.is_null()
            & (ApiKey.expires_at.is_null() | (ApiKey.expires_at > now))
        )
        .count()
    )


def _users(tenant_id: str, scope: str | None) -> int:
    return User.select().where(User.tenant == tenant_id).count()


def _campaigns(tenant_id: str, scope: str | None) -> int:
    # Those the sweep may still serve: finished ones are kept for their history.
    return (
        Campaign.select()
        .where((Campaign.tenant == tenant_id) & Campaign.status.in_(("running", "paused")))
        .count()
    )


def _whatsapp_accounts(tenant_id: str, scope: str | None) -> int:
    return WhatsAppAccount.select().where(WhatsAppAccount.tenant == tenant_id).count()


# Name: (setting, what is counted, how a person reads it).
CAPS: dict[str, tuple[str, Callable[[str, str | None], int], str]] = {
    "webhooks": ("MAX_WEBHOOKS_PER_TENANT", _webhooks, "webhooks"),
    "agents": ("MAX_AGENTS_PER_TENANT", _agents, "agents"),
    "functions": ("MAX_FUNCTIONS_PER_AGENT", _functions, "functions on one agent"),
    "apiKeys": ("MAX_ACTIVE_KEYS_PER_TENANT", _api_keys, "active API keys"),
    "users": ("MAX_USERS_PER_TENANT", _users, "dashboard users"),
    "campaigns": ("MAX_CAMPAIGNS_PER_TENANT", _campaigns, "running or paused campaigns"),
    "whatsappAccounts": (
        "MAX_WHATSAPP_ACCOUNTS_PER_TENANT",
        _whatsapp_accounts,
        "WhatsApp Business accounts",
    ),
}
# Campaigns come with their contacts in one request; the campaign service checks that count.
MAX_CONTACTS_SETTING = "MAX_CONTACTS_PER_CAMPAIGN"


def cap(name: str) -> int:
    return int(current_app.config[CAPS[name][0]])


def check(tenant_id: str, name: str, *, scope: str | None = None, adding: int = 1) -> None:
    """LimitReached unless the tenant may have adding more of name (scope: the agent, for
    functions); call inside the creating transaction, before the insert."""
    setting, counted, label = CAPS[name]
    if not is_sqlite():
        Tenant.select(Tenant.id).where(Tenant.id == tenant_id).for_update().execute()
    limit = cap(name)
    count = counted(tenant_id, scope)
    if count + adding > limit:
        raise LimitReached(
            f"The tenant has {count} {label}, the most it may have is {limit:,}.",
            details={"limit": name, "max": limit, "current": count},
        )


def check_contacts(count: int) -> None:
    """LimitReached when one campaign would hold more contacts than the setting allows."""
    limit = int(current_app.config[MAX_CONTACTS_SETTING])
    if count > limit:
        raise LimitReached(
            f"A campaign holds at most {limit:,} contacts, not {count:,}.",
            details={"limit": "contactsPerCampaign", "max": limit, "current": count},
        )
