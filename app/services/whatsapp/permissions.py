"""Call permissions (DESIGN.md section 16): whether a WhatsApp number may call a WhatsApp user,
as Meta says (Graph's call_permissions) or as the user's reply says (forwarded by the runtime),
kept per number and user; and the permission requests a business sends.

Meta lets a business call a user only with the user's permission, temporary (7 days) or
permanent, at most 100 connected calls a day per pair, and at most 1 permission request a day
and 2 a week per pair. Every Graph request here is made outside any transaction: the answer is
stored after it, in a transaction of its own.

Outbound calls trust a stored grant that is still valid (permanent, or temporary and not
expired, with Meta saying the business may call) rather than asking Meta before each call;
anything else is asked of Meta first. A stored grant can be out of date only by the user
withdrawing it in WhatsApp or the day's 100 calls being used: the runtime's call then fails
(hangupReason no_call_permission) as Meta refuses it.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from app import vault
from app.db import unit_of_work
from app.errors import Conflict, RateLimited
from app.models import CallPermission, PhoneNumber, Tenant, WhatsAppAccount
from app.services import audit, campaign_progress
from app.services.audit import Actor
from app.services.phone_numbers import get_number
from app.services.whatsapp import graph
from app.util import utcnow

log = logging.getLogger(__name__)

STATUSES = ("no_permission", "temporary", "permanent")
GRANTED = ("temporary", "permanent")
# Meta's error codes that mean something of their own here (the others are graph's).
META_WINDOW_CLOSED = 131047  # free-form message outside the user's 24-hour window
META_REQUEST_LIMIT = 138009  # the pair's permission requests: 1 a day, 2 a week
# How long a temporary grant lasts when a reply names no expiry (Meta's own period).
TEMPORARY_DAYS = 7
# The body of an interactive request when the tenant gives none (Bahasa Indonesia, the
# service's default language).
DEFAULT_TEXT = (
    "Bolehkah kami menelepon Anda melalui WhatsApp? Ketuk tombol di bawah untuk memberi izin."
)
MAX_TEXT = 1024  # Meta's limit on an interactive message's body
# A user's WhatsApp id: the digits of an international number (ASCII only).
WA_ID = re.compile(r"[1-9][0-9]{6,14}")


@dataclass(frozen=True)
class Permission:
    """What is known about calling `to` from a number."""

    to: str
    status: str
    expires_at: datetime | None
    can_call: bool
    can_request: bool

    @property
    def valid(self) -> bool:
        return is_valid(self.status, self.expires_at, self.can_call, utcnow())


def is_valid(status: str, expires_at: datetime | None, can_call: bool, now: datetime) -> bool:
    """Whether a stored answer lets the number call without asking Meta again."""
    if not can_call or status not in GRANTED:
        return False
    return status == "permanent" or (expires_at is not None and expires_at > now)


def _whatsapp_number(*, tenant: Tenant, number_id: str) -> PhoneNumber:
    """The tenant's WhatsApp number (NotFound for another tenant's; 409 not_whatsapp)."""
    number = get_number(tenant=tenant, number_id=number_id)
    require_whatsapp(number)
    return number


def require_whatsapp(number: PhoneNumber) -> None:
    """409 not_whatsapp unless the number is a WhatsApp number Graph knows."""
    if (
        number.channel != "whatsapp"
        or not number.whatsapp_phone_number_id
        or number.whatsapp_account_id is None
    ):
        raise Conflict(
            f"Phone number {number.id} is not a WhatsApp number: call permissions are WhatsApp's.",
            code="not_whatsapp",
            details={"phoneNumberId": number.id, "channel": number.channel},
        )


def _token(number: PhoneNumber) -> str:
    account = WhatsAppAccount.get_by_id(number.whatsapp_account_id)
    return vault.decrypt(account.access_token_encrypted)


def _epoch(value: Any) -> datetime | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        seconds = float(value)
        return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)
    except (ValueError, OverflowError, OSError):
        return None


def parse(to: str, answer: dict[str, Any]) -> Permission:
    """Graph's call_permissions answer, read tolerantly: permission.status and
    expiration_time (epoch seconds), and the actions' can_perform_action."""
    permission = answer.get("permission")
    permission = permission if isinstance(permission, dict) else {}
    status = permission.get("status")
    status = status if status in STATUSES else "no_permission"
    actions: dict[str, bool] = {}
    listed = answer.get("actions")
    for action in listed if isinstance(listed, list) else []:
        if isinstance(action, dict) and isinstance(action.get("can_perform_action"), bool):
            actions[str(action.get("action_name"))] = action["can_perform_action"]
    return Permission(
        to=to,
        status=status,
        expires_at=_epoch(permission.get("expiration_time")) if status == "temporary" else None,
        can_call=actions.get("start_call", status in GRANTED),
        can_request=actions.get("send_call_permission_request", status not in GRANTED),
    )


def stored(number_id: str, to: str) -> Permission | None:
    row = CallPermission.get_or_none(
        (CallPermission.phone_number == number_id) & (CallPermission.user_number == to)
    )
    if row is None:
        return None
    return Permission(
        to=to,
        status=row.status,
        expires_at=row.expires_at,
        can_call=row.can_call,
        can_request=row.can_request,
    )


def allowed(number_id: str, users: list[str], now: datetime) -> set[str]:
    """Those of users the number has a valid stored grant to call (one query)."""
    rows = CallPermission.select(
        CallPermission.user_number,
        CallPermission.status,
        CallPermission.expires_at,
        CallPermission.can_call,
    ).where((CallPermission.phone_number == number_id) & CallPermission.user_number.in_(users))
    found = cast(list[tuple[str, str, datetime | None, bool]], list(rows.tuples()))
    return {
        user
        for user, status, expires_at, can_call in found
        if is_valid(status, expires_at, can_call, now)
    }


def record(number_id: str, permission: Permission, *, requested: bool = False) -> None:
    """Store what is known about calling permission.to from the number, and, for a valid grant,
    make the user's contacts waiting for it in the number's campaigns due at once. Opens its
    own transaction (or joins the caller's)."""
    now = utcnow()
    values: dict[str, Any] = {
        "status": permission.status,
        "expires_at": permission.expires_at,
        "can_call": permission.can_call,
        "can_request": permission.can_request,
        "checked_at": now,
        "updated_at": now,
    }
    with unit_of_work():
        CallPermission.insert(
            phone_number=number_id, user_number=permission.to, **values
        ).on_conflict(
            conflict_target=[CallPermission.phone_number, CallPermission.user_number],
            update=values,
        ).execute()
        if permission.valid:
            campaign_progress.release_awaiting(
                phone_number_id=number_id, user_number=permission.to, now=now
            )


def mark_requested(number_id: str, to: str) -> None:
    """Note that a permission request was sent to `to` from the number (last_requested_at)."""
    now = utcnow()
    with unit_of_work():
        CallPermission.insert(
            phone_number=number_id, user_number=to, last_requested_at=now, updated_at=now
        ).on_conflict(
            conflict_target=[CallPermission.phone_number, CallPermission.user_number],
            update={"last_requested_at": now, "updated_at": now},
        ).execute()


def ask_meta(number: PhoneNumber, to: str) -> Permission:
    """Meta's answer about calling `to` from the number, stored: a Graph request, then a
    transaction of its own. GraphError when Meta fails or refuses."""
    answer = graph.request(
        number.tenant_id,
        "GET",
        f"{number.whatsapp_phone_number_id}/call_permissions",
        token=_token(number),
        params={"user_wa_id": to.lstrip("+")},
    )
    permission = parse(to, answer)
    record(number.id, permission)
    return permission


def check(*, tenant: Tenant, number_id: str, to: str) -> Permission:
    """GET call-permissions: Meta's answer now, stored."""
    number = _whatsapp_number(tenant=tenant, number_id=number_id)
    return ask_meta(number, to)


def require_call_permission(number: PhoneNumber, to: str) -> None:
    """Before an outbound call from a WhatsApp number: a valid stored grant, or Meta's answer
    now; 409 no_call_permission (details: status, canRequest) without one."""
    known = stored(number.id, to)
    if known is not None and known.valid:
        return
    permission = ask_meta(number, to)
    if not permission.valid:
        raise Conflict(
            f"{to} has not given {number.display_number} permission to call them on "
            "WhatsApp: send a call permission request first.",
            code="no_call_permission",
            details={"status": permission.status, "canRequest": permission.can_request},
        )


def request_body(to: str, text: str | None, template: dict[str, str] | None) -> dict[str, Any]:
    """The Graph message that asks `to` for call permission: the named template (it carries
    its own call permission request button), or an interactive call_permission_request."""
    head: dict[str, Any] = {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": to.lstrip("+"),
    }
    if template:
        return {
            **head,
            "type": "template",
            "template": {"name": template["name"], "language": {"code": template["language"]}},
        }
    return {
        **head,
        "type": "interactive",
        "interactive": {
            "type": "call_permission_request",
            "action": {"name": "call_permission_request"},
            "body": {"text": text or DEFAULT_TEXT},
        },
    }


def send_request(
    number: PhoneNumber, to: str, *, text: str | None = None, template: dict[str, str] | None = None
) -> str:
    """Send a permission request to `to` from the number; Meta's message id. 429
    permission_request_limited at Meta's limit of the pair; 409 whatsapp_window_closed for
    free-form text outside the user's 24-hour window; graph's errors otherwise."""
    try:
        answer = graph.request(
            number.tenant_id,
            "POST",
            f"{number.whatsapp_phone_number_id}/messages",
            token=_token(number),
            body=request_body(to, text, template),
        )
    except graph.GraphError as exc:
        if exc.meta_code == META_REQUEST_LIMIT:
            raise RateLimited(
                f"Meta allows 1 call permission request a day and 2 a week to {to} from "
                f"{number.display_number}: that limit is reached.",
                code="permission_request_limited",
                details={"metaCode": exc.meta_code},
            ) from exc
        if exc.meta_code == META_WINDOW_CLOSED:
            raise Conflict(
                f"{to} has not written to {number.display_number} in the last 24 hours, so a "
                "free-form request cannot be sent: use a template (an approved message "
                "template with a call permission request button).",
                code="whatsapp_window_closed",
                details={"metaCode": exc.meta_code},
            ) from exc
        raise
    messages = answer.get("messages")
    first = messages[0] if isinstance(messages, list) and messages else {}
    message_id = first.get("id") if isinstance(first, dict) else None
    mark_requested(number.id, to)
    return str(message_id or "")


def request_permission(
    *,
    tenant: Tenant,
    actor: Actor,
    number_id: str,
    to: str,
    text: str | None = None,
    template: dict[str, str] | None = None,
) -> dict[str, str]:
    """POST call-permission-requests: the request sent, audited."""
    number = _whatsapp_number(tenant=tenant, number_id=number_id)
    message_id = send_request(number, to, text=text, template=template)
    details: dict[str, Any] = {"to": to}
    if template:
        details["template"] = template["name"]
    with unit_of_work():
        audit.write(
            actor,
            tenant_id=tenant.id,
            action="call_permission.requested",
            target_id=number.id,
            details=details,
        )
    return {"to": to, "status": "requested", "message_id": message_id}


def reply_permission(reply: dict[str, Any], now: datetime) -> Permission | None:
    """A call_permission_reply (its interactive part) as what it grants; None when it is not
    one this service can read."""
    response = reply.get("response")
    if response not in ("accept", "reject"):
        return None
    if response == "reject":
        return Permission(
            to="", status="no_permission", expires_at=None, can_call=False, can_request=True
        )
    if reply.get("is_permanent") is True:
        return Permission(
            to="", status="permanent", expires_at=None, can_call=True, can_request=False
        )
    expires = _epoch(reply.get("expiration_timestamp")) or now + timedelta(days=TEMPORARY_DAYS)
    return Permission(
        to="", status="temporary", expires_at=expires, can_call=True, can_request=False
    )


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def receive_events(values: list[dict[str, Any]]) -> int:
    """The runtime's forwarded `value` objects of Meta's messages webhooks: each
    call_permission_reply updates the number's record of that user (and a grant makes the
    user's waiting campaign contacts due); anything else is ignored. How many replies were
    applied."""
    applied = 0
    now = utcnow()
    for value in values:
        metadata = _object(value.get("metadata"))
        meta_id = metadata.get("phone_number_id")
        messages = value.get("messages")
        if not isinstance(meta_id, str) or not isinstance(messages, list):
            continue
        number = PhoneNumber.get_or_none(
            (PhoneNumber.whatsapp_phone_number_id == meta_id) & (PhoneNumber.channel == "whatsapp")
        )
        if number is None:
            continue
        for message in messages:
            message = _object(message)
            interactive = _object(message.get("interactive"))
            sender = message.get("from")
            if (
                message.get("type") != "interactive"
                or interactive.get("type") != "call_permission_reply"
                or not isinstance(sender, str)
                or not WA_ID.fullmatch(sender.lstrip("+"))
            ):
                continue
            # Meta nests the reply under call_permission_reply; read it beside too.
            reply = _object(interactive.get("call_permission_reply")) or interactive
            granted = reply_permission(reply, now)
            if granted is None:
                continue
            to = "+" + sender.lstrip("+")
            known = stored(number.id, to)
            can_request = known.can_request if known else True
            record(
                number.id,
                Permission(
                    to=to,
                    status=granted.status,
                    expires_at=granted.expires_at,
                    can_call=granted.can_call,
                    can_request=granted.can_request if granted.valid else can_request,
                ),
            )
            applied += 1
    return applied
