"""Meta's Graph API, as the control plane uses it: a WhatsApp Business account's phone numbers,
a user's call permission, and messages (permission requests).

Every request goes to WHATSAPP_GRAPH_URL only (an operator's setting; a paging link pointing
elsewhere is never followed: pages are read with the `after` cursor against that URL), through
the outgoing-request sender with its wall-clock deadline, never inside a database transaction.
A tenant has at most WHATSAPP_GRAPH_TENANT_PLACES requests to Meta at once (whatsapp_busy
beyond), so a tenant whose requests Meta answers slowly holds up only its own.

Meta's answers become the documented errors: a refused token (HTTP 401 or error code 190) is
422 whatsapp_auth_failed, Meta unreachable, too slow or failing (5xx) is 502
whatsapp_unavailable, Meta's rate limits are 429 whatsapp_rate_limited, and any other refusal
is 422 whatsapp_rejected with Meta's code and message in details. Callers that give a Meta
code a meaning of its own (the 24-hour window, the permission-request limit) catch GraphError
and read meta_code. The token is never part of an error, a log line or a URL.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import quote

from flask import current_app

from app import queue
from app.errors import AppError
from app.outbound import client
from app.outbound.errors import OutboundError
from app.util import new_id

log = logging.getLogger(__name__)

MAX_PAGES = 50  # 50 pages of 100 numbers: more than any WhatsApp Business account holds
PAGE_SIZE = 100
# Meta's rate-limit error codes (application, account, WABA and business-number throttles).
RATE_LIMIT_CODES = {4, 17, 32, 613, 80007, 130429, 131056}
AUTH_CODES = {190}


class GraphError(AppError):
    """Meta refused a request; meta_code and meta_subcode say how (None: no answer)."""

    status, code = 422, "whatsapp_rejected"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        meta_code: int | None = None,
        meta_subcode: int | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message, code=code, details=details, headers=headers)
        if status is not None:
            self.status = status
        self.meta_code = meta_code
        self.meta_subcode = meta_subcode


def _base() -> str:
    return str(current_app.config["WHATSAPP_GRAPH_URL"]).rstrip("/")


def _meta_error(status: int, body: bytes) -> GraphError:
    """The error for a non-2xx answer of Meta's, from its {"error": {...}} body."""
    try:
        error = json.loads(body).get("error") or {}
    except (ValueError, AttributeError):
        error = {}
    if not isinstance(error, dict):
        error = {}
    meta_code = error.get("code") if isinstance(error.get("code"), int) else None
    subcode = error.get("error_subcode") if isinstance(error.get("error_subcode"), int) else None
    meta_message = str(error.get("message") or "")[:300]
    details: dict[str, Any] = {"metaStatus": status, "metaCode": meta_code}
    if meta_message:
        details["metaMessage"] = meta_message
    if status == 401 or meta_code in AUTH_CODES:
        return GraphError(
            "Meta refused the access token (expired, revoked or without the "
            "whatsapp_business_management and whatsapp_business_messaging permissions).",
            status=422,
            code="whatsapp_auth_failed",
            meta_code=meta_code,
            meta_subcode=subcode,
            details=details,
        )
    if status >= 500:
        return GraphError(
            f"Meta's Graph API failed (HTTP {status}); nothing was changed. Try again later.",
            status=502,
            code="whatsapp_unavailable",
            meta_code=meta_code,
            meta_subcode=subcode,
            details=details,
        )
    if status == 429 or meta_code in RATE_LIMIT_CODES:
        return GraphError(
            "Meta is limiting this account's requests; try again later.",
            status=429,
            code="whatsapp_rate_limited",
            meta_code=meta_code,
            meta_subcode=subcode,
            details=details,
            headers={"Retry-After": "60"},
        )
    return GraphError(
        f"Meta refused the request: {meta_message or f'HTTP {status}'}",
        meta_code=meta_code,
        meta_subcode=subcode,
        details=details,
    )


def request(
    tenant_id: str,
    method: str,
    path: str,
    *,
    token: str,
    params: dict[str, str] | None = None,
    body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One Graph request for a tenant: the JSON object Meta answered, or GraphError."""
    config = current_app.config
    connect = float(config["WHATSAPP_GRAPH_CONNECT_TIMEOUT"])
    total = float(config["WHATSAPP_GRAPH_TIMEOUT"])
    group, member = f"graph:{tenant_id}", new_id("gr")
    places = int(config["WHATSAPP_GRAPH_TENANT_PLACES"])
    if not queue.take_place(group, member, places=places, seconds=total + 1):
        raise GraphError(
            f"Too many of this account's requests to Meta are running at once (at most "
            f"{places}); try again in a moment.",
            status=429,
            code="whatsapp_busy",
            headers={"Retry-After": "1"},
        )
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    payload = None
    if body is not None:
        headers["Content-Type"] = "application/json"
        payload = json.dumps(body, separators=(",", ":")).encode()
    # The sender's SSRF guard keeps tenants' URLs off the internal network; this URL is the
    # operator's own setting (a stand-in on 127.0.0.1 in tests), so private hosts are allowed.
    sender = client.sender(True)
    try:
        response = sender.send(
            method,
            f"{_base()}/{path}",
            timeout=(connect, total),
            body=payload,
            headers=headers,
            params=params,
        )
    except OutboundError as exc:
        log.warning("graph %s %s failed: %s", method, path.split("/")[-1], exc)
        raise GraphError(
            f"Meta's Graph API could not be reached ({exc}); nothing was changed. Try again later.",
            status=502,
            code="whatsapp_unavailable",
        ) from exc
    finally:
        queue.give_back_place(group, member)
    if not 200 <= response.status_code < 300:
        raise _meta_error(response.status_code, response.body)
    try:
        answer = json.loads(response.body) if response.body else {}
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or response.truncated:
        raise GraphError(
            "Meta's Graph API answered something other than a JSON object.",
            status=502,
            code="whatsapp_unavailable",
        )
    return answer


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def phone_numbers(tenant_id: str, waba_id: str, *, token: str) -> list[dict[str, Any]]:
    """Every phone number of a WhatsApp Business account, each page read (id,
    display_phone_number, verified_name, quality_rating)."""
    numbers: list[dict[str, Any]] = []
    params = {
        "fields": "id,display_phone_number,verified_name,quality_rating",
        "limit": str(PAGE_SIZE),
    }
    for _ in range(MAX_PAGES):
        page = request(
            tenant_id, "GET", f"{quote(waba_id, safe='')}/phone_numbers", token=token, params=params
        )
        data = page.get("data")
        if not isinstance(data, list):
            raise GraphError(
                "Meta's list of phone numbers has no data.", status=502, code="whatsapp_unavailable"
            )
        numbers.extend(item for item in data if isinstance(item, dict))
        paging = _object(page.get("paging"))
        after = _object(paging.get("cursors")).get("after")
        if not paging.get("next") or not isinstance(after, str) or not after:
            return numbers
        params = {**params, "after": after}
    raise GraphError(
        f"Meta listed more than {MAX_PAGES} pages of phone numbers; nothing was changed.",
        status=502,
        code="whatsapp_unavailable",
    )
