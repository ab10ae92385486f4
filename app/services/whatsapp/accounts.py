"""WhatsApp Business accounts a tenant links (DESIGN.md section 16): link, list, update, sync
and unlink, and the import that makes each listed number the tenant's.

Meta's list of numbers is read before the transaction opens (never a transaction across the
network), so when Meta refuses or cannot be reached nothing is stored. The access token and
the app secret are stored encrypted (app.vault) and leave the service only for the voice
runtime (lookup); audit details name the fields that changed, never their values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from flask import current_app

from app import vault
from app.db import is_sqlite, unit_of_work
from app.errors import Conflict, NotFound
from app.models import PhoneNumber, Tenant, WhatsAppAccount
from app.services import audit, limits
from app.services.audit import Actor
from app.services.phone_numbers import E164
from app.services.whatsapp import graph
from app.util import new_id, utcnow

LABEL_LENGTH = PhoneNumber.label.max_length
RATING_LENGTH = PhoneNumber.quality_rating.max_length
META_ID_LENGTH = PhoneNumber.whatsapp_phone_number_id.max_length


@dataclass
class Imported:
    """An account after a link or a sync: what the import added, updated and deactivated,
    and the listed numbers it skipped, each with its reason."""

    account: WhatsAppAccount
    skipped: list[dict[str, str]] = field(default_factory=list)
    added: int = 0
    updated: int = 0
    deactivated: int = 0


@dataclass(frozen=True)
class RuntimeNumber:
    """What the voice runtime needs to serve a WhatsApp number (secrets in clear)."""

    phone_number_id: str
    whatsapp_phone_number_id: str  # Meta's
    display_number: str
    access_token: str
    app_secret: str
    graph_url: str


def list_accounts(*, tenant: Tenant | None = None) -> list[WhatsAppAccount]:
    """The tenant's accounts (every tenant's without one), oldest first."""
    query = WhatsAppAccount.select().order_by(WhatsAppAccount.created_at, WhatsAppAccount.id)
    if tenant is not None:
        query = query.where(WhatsAppAccount.tenant == tenant)
    return list(query)


def get_account(*, tenant: Tenant, account_id: str, lock: bool = False) -> WhatsAppAccount:
    """The tenant's account, or NotFound (also for another tenant's)."""
    query = WhatsAppAccount.select().where(
        (WhatsAppAccount.id == account_id) & (WhatsAppAccount.tenant == tenant)
    )
    if lock and not is_sqlite():
        query = query.for_update()
    account = query.first()
    if account is None:
        raise NotFound(f"WhatsApp Business account {account_id} not found.")
    return account


def find_account(account_id: str) -> WhatsAppAccount:
    """Any tenant's account by its id (the CLI's lookup), or NotFound."""
    account = WhatsAppAccount.get_or_none(WhatsAppAccount.id == account_id)
    if account is None:
        raise NotFound(f"WhatsApp Business account {account_id} not found.")
    return account


def numbers_of(account: WhatsAppAccount) -> list[PhoneNumber]:
    """The account's numbers, active or not, by number (an import adds many at once)."""
    return list(
        PhoneNumber.select()
        .where(PhoneNumber.whatsapp_account == account)
        .order_by(PhoneNumber.display_number)
    )


def _linked_already(waba_id: str) -> Conflict:
    return Conflict(
        f"WhatsApp Business account {waba_id} is linked already (to this tenant or another): "
        "unlink it there first.",
        details={"wabaId": waba_id},
    )


def link(
    *,
    tenant: Tenant,
    actor: Actor,
    waba_id: str,
    access_token: str,
    app_secret: str,
    label: str = "",
) -> Imported:
    """Link a WhatsApp Business account and import its numbers. The secrets are encrypted
    first (NotConfigured without SECRETS_KEY) and Meta's list is read before the transaction:
    a refused token or an unreachable Meta stores nothing."""
    token_encrypted = vault.encrypt(access_token)
    secret_encrypted = vault.encrypt(app_secret)
    # Cheap refusals first, so that Meta is not asked for nothing; both are checked again
    # in the transaction, where they hold.
    if WhatsAppAccount.select().where(WhatsAppAccount.waba_id == waba_id).exists():
        raise _linked_already(waba_id)
    limits.check(tenant.id, "whatsappAccounts")
    listed = graph.phone_numbers(tenant.id, waba_id, token=access_token)
    now = utcnow()
    with unit_of_work():
        limits.check(tenant.id, "whatsappAccounts")
        if WhatsAppAccount.select().where(WhatsAppAccount.waba_id == waba_id).exists():
            raise _linked_already(waba_id)
        account = WhatsAppAccount.create(
            id=new_id("waa"),
            tenant=tenant,
            waba_id=waba_id,
            label=label,
            access_token_encrypted=token_encrypted,
            app_secret_encrypted=secret_encrypted,
            token_hint=access_token[-4:],
            last_synced_at=now,
            created_at=now,
            updated_at=now,
        )
        result = _import(account, listed)
        audit.write(
            actor,
            tenant_id=tenant.id,
            action="whatsapp.linked",
            target_id=account.id,
            details={"wabaId": waba_id, **_counts(result)},
        )
    return result


def sync(*, tenant: Tenant, actor: Actor, account_id: str) -> Imported:
    """List the account's numbers again and import them: new ones added, known ones updated
    (quality rating, display number, the label until the tenant chose one) and reactivated,
    those no longer listed deactivated (kept with their history)."""
    account = get_account(tenant=tenant, account_id=account_id)
    token = vault.decrypt(account.access_token_encrypted)
    listed = graph.phone_numbers(tenant.id, account.waba_id, token=token)
    with unit_of_work():
        account = get_account(tenant=tenant, account_id=account_id, lock=True)
        result = _import(account, listed)
        account.status = "connected"
        account.last_synced_at = account.updated_at = utcnow()
        account.save()
        audit.write(
            actor,
            tenant_id=tenant.id,
            action="whatsapp.synced",
            target_id=account.id,
            details=_counts(result),
        )
    return result


def update(
    *,
    tenant: Tenant,
    actor: Actor,
    account_id: str,
    label: str | None = None,
    access_token: str | None = None,
    app_secret: str | None = None,
) -> WhatsAppAccount:
    """Change the label, the access token or the app secret. A new token is tried first, by
    listing the account's numbers with it: one Meta refuses is never stored."""
    account = get_account(tenant=tenant, account_id=account_id)
    changes: dict[str, Any] = {}
    if label is not None and label != account.label:
        changes["label"] = label
    if access_token is not None:
        changes["access_token_encrypted"] = vault.encrypt(access_token)
        changes["token_hint"] = access_token[-4:]
    if app_secret is not None:
        changes["app_secret_encrypted"] = vault.encrypt(app_secret)
    if access_token is not None:
        graph.phone_numbers(tenant.id, account.waba_id, token=access_token)
    with unit_of_work():
        account = get_account(tenant=tenant, account_id=account_id, lock=True)
        if not changes:
            return account
        for name, value in changes.items():
            setattr(account, name, value)
        account.updated_at = utcnow()
        account.save()
        names = [
            name
            for name, given in (
                ("label", "label" in changes),
                ("access_token", access_token is not None),
                ("app_secret", app_secret is not None),
            )
            if given
        ]
        audit.write(
            actor,
            tenant_id=tenant.id,
            action="whatsapp.updated",
            target_id=account.id,
            details=audit.fields(names),
        )
    return account


def unlink(*, tenant: Tenant, actor: Actor, account_id: str) -> None:
    """Unlink an account: its numbers become inactive and detached (kept with their calls),
    and the row goes with its encrypted secrets."""
    with unit_of_work():
        account = get_account(tenant=tenant, account_id=account_id, lock=True)
        detached = (
            PhoneNumber.update(is_active=False, whatsapp_account=None, updated_at=utcnow())
            .where(PhoneNumber.whatsapp_account == account)
            .execute()
        )
        account.delete_instance()
        audit.write(
            actor,
            tenant_id=tenant.id,
            action="whatsapp.unlinked",
            target_id=account_id,
            details={"wabaId": account.waba_id, "numbers": detached},
        )


def runtime_number(whatsapp_phone_number_id: str) -> RuntimeNumber:
    """An active imported number by Meta's id, with its account's secrets, for the voice
    runtime; NotFound when unknown, inactive or detached."""
    number = (
        PhoneNumber.select(PhoneNumber, WhatsAppAccount)
        .join(WhatsAppAccount)
        .where(
            (PhoneNumber.whatsapp_phone_number_id == whatsapp_phone_number_id)
            & PhoneNumber.is_active
        )
        .first()
    )
    if number is None:
        raise NotFound(f"No active WhatsApp number {whatsapp_phone_number_id}.")
    account = number.whatsapp_account
    return RuntimeNumber(
        phone_number_id=number.id,
        whatsapp_phone_number_id=whatsapp_phone_number_id,
        display_number=number.display_number,
        access_token=vault.decrypt(account.access_token_encrypted),
        app_secret=vault.decrypt(account.app_secret_encrypted),
        graph_url=str(current_app.config["WHATSAPP_GRAPH_URL"]).rstrip("/"),
    )


# The import.


def display_number(listed: str) -> str:
    """Meta's display_phone_number ("+62 811-000-0001") as the service writes numbers: "+"
    and its digits."""
    return "+" + re.sub(r"\D", "", listed)


def _counts(result: Imported) -> dict[str, int]:
    return {
        "added": result.added,
        "updated": result.updated,
        "deactivated": result.deactivated,
        "skipped": len(result.skipped),
    }


def _text(value: Any, length: int) -> str:
    return value[:length] if isinstance(value, str) else ""


def _import(account: WhatsAppAccount, listed: list[dict[str, Any]]) -> Imported:
    """Make each listed number the account's, inside the caller's transaction."""
    result = Imported(account=account)
    tenant_id = account.tenant_id
    now = utcnow()
    seen: set[str] = set()
    for item in listed:
        meta_id = item.get("id")
        meta_id = str(meta_id) if isinstance(meta_id, (str, int)) else ""
        raw = _text(item.get("display_phone_number"), 64)
        number = display_number(raw)
        if not meta_id or len(meta_id) > META_ID_LENGTH or meta_id in seen:
            result.skipped.append(
                {"display_number": number, "reason": "Meta listed it without a usable id."}
            )
            continue
        seen.add(meta_id)
        if not E164.match(number):
            result.skipped.append(
                {
                    "display_number": number,
                    "reason": f"{raw!r} is not an international number (E.164).",
                }
            )
            continue
        rating = _text(item.get("quality_rating"), RATING_LENGTH).upper() or None
        name = _text(item.get("verified_name"), LABEL_LENGTH)
        known = PhoneNumber.get_or_none(PhoneNumber.whatsapp_phone_number_id == meta_id)
        if known is not None and known.tenant_id != tenant_id:
            result.skipped.append(
                {"display_number": number, "reason": f"{number} is another tenant's number."}
            )
            continue
        holder = PhoneNumber.get_or_none(PhoneNumber.display_number == number)
        if holder is not None and (known is None or holder.id != known.id):
            if holder.tenant_id != tenant_id:
                reason = f"{number} is another tenant's number."
            elif holder.channel == "whatsapp":
                reason = f"{number} is one of your numbers already, from another WhatsApp account."
            else:
                reason = f"{number} is one of your numbers already, on the phone channel."
            result.skipped.append({"display_number": number, "reason": reason})
            continue
        if known is None:
            PhoneNumber.create(
                id=new_id("pn"),
                tenant=tenant_id,
                display_number=number,
                label=name,
                channel="whatsapp",
                whatsapp_account=account,
                whatsapp_phone_number_id=meta_id,
                quality_rating=rating,
                created_at=now,
                updated_at=now,
            )
            result.added += 1
            continue
        wanted: dict[str, Any] = {
            "display_number": number,
            "quality_rating": rating,
            "is_active": True,
            "whatsapp_account_id": account.id,
            "channel": "whatsapp",
        }
        if not known.label_set:
            wanted["label"] = name
        changed = {name: value for name, value in wanted.items() if getattr(known, name) != value}
        if changed:
            for name, value in changed.items():
                setattr(known, name, value)
            known.updated_at = now
            known.save()
            result.updated += 1
    result.deactivated = (
        PhoneNumber.update(is_active=False, updated_at=now)
        .where(
            (PhoneNumber.whatsapp_account == account)
            & PhoneNumber.is_active
            & PhoneNumber.whatsapp_phone_number_id.not_in(seen or {""})
        )
        .execute()
    )
    return result
