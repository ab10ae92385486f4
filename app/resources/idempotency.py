"""Idempotency-Key on every POST of the tenant API (DESIGN sections 9 and 10): the request
hooks that every TenantBlueprint registers, and the apispec plugin that documents them on
every POST.

A POST with the header takes its key (app.services.idempotency) before its view runs, and
holds the unit of work open (app.db.hold_unit_of_work): the service's own transaction, which
it opens after its network work (a URL's DNS check), stays open until the answer is stored in
it, so the change and the stored answer commit together, and the jobs the change defers are
enqueued once they have. A request that changes nothing (a function test, whose endpoint
answers while no transaction is open) stores its answer in a short transaction of its own.
An answer of 500 or more, or an exception, rolls the change back and frees the key. A repeat
gets the stored answer with Idempotent-Replayed: true. GET, PATCH and DELETE ignore the
header.
"""

import re
from typing import Any

from apispec import BasePlugin
from flask import Response, current_app, g, request

from app import db
from app.auth import current_tenant
from app.errors import ErrorSchema, ValidationFailed, error_response
from app.models import IdempotencyKey
from app.services import idempotency as idempotency_service

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_KEY_LENGTH = 255
KEY_RULE = f"1 to {MAX_KEY_LENGTH} printable ASCII characters (space to ~)"
VALID_KEY = re.compile(rf"[ -~]{{1,{MAX_KEY_LENGTH}}}")
# The headers of an answer that are stored with it and sent again on a replay; the others
# (X-Request-Id, the rate-limit headers) are the repeat's own. Cache-Control: a replay shows
# a secret shown once as the first answer did, kept by no cache either.
KEPT_HEADERS = ("Content-Type", "Location", "Cache-Control")
TENANT_API_PREFIX = "/api/v1/"
IN_PROGRESS = (
    "A request with the same Idempotency-Key is still running; error code idempotency_in_progress."
)
REJECTED = (
    "The Idempotency-Key header breaks its rule (validation_error) or was used for another "
    "request (idempotency_key_reused)."
)


def check_key(key: str) -> None:
    """ValidationFailed naming the header unless key is 1-255 printable ASCII characters."""
    if VALID_KEY.fullmatch(key):
        return
    if not key:
        problem = "it is empty"
    elif len(key) > MAX_KEY_LENGTH:
        problem = f"it has {len(key):,} characters"
    else:
        problem = "it has a character outside that range"
    raise ValidationFailed(
        f"Invalid value for the {HEADER} header.",
        details={HEADER: [f"Must be {KEY_RULE}; {problem}."]},
    )


def _replay(stored: idempotency_service.Stored) -> Response:
    response = current_app.response_class(stored.body, status=stored.status_code)
    response.headers.remove("Content-Type")  # the stored one, if it had one
    response.headers.extend(stored.headers)
    response.headers[REPLAYED_HEADER] = "true"
    return response


def begin_request() -> Response | None:
    """before_request: a POST with an Idempotency-Key takes the key and opens the request's
    transaction, or answers the stored answer (or 409 or 422, app.services.idempotency)."""
    if request.method != "POST" or HEADER not in request.headers:
        return None
    key = request.headers[HEADER]
    check_key(key)
    fingerprint = idempotency_service.fingerprint(
        method=request.method, target=request.full_path, body=request.get_data(cache=True)
    )
    taken = idempotency_service.begin(tenant=current_tenant(), key=key, fingerprint=fingerprint)
    if isinstance(taken, idempotency_service.Stored):
        return _replay(taken)
    g.idempotency_key = taken
    g.idempotency_hold = db.hold_unit_of_work()
    return None


def _release_hold() -> bool:
    """Stop holding the request's unit of work; whether its change's transaction is open."""
    token = g.pop("idempotency_hold", None)
    return token is not None and db.release_unit_of_work(token)


def _abandon(record: IdempotencyKey, *, open_change: bool) -> None:
    """Roll the request's change back, if it has one open, and free the key."""
    try:
        if open_change:
            db.end_held_unit(commit=False)
    finally:
        idempotency_service.release(record=record)


def _store(record: IdempotencyKey, response: Response) -> bool:
    return idempotency_service.finish(
        record=record,
        status_code=response.status_code,
        body=response.get_data(as_text=True),
        headers={name: value for name in KEPT_HEADERS if (value := response.headers.get(name))},
    )


def finish_request(response: Response) -> Response:
    """after_request: store an answer below 500, in the change's own transaction if the
    request made one (then commit both), else in a short one of its own; otherwise roll the
    change back and free the key."""
    record: IdempotencyKey | None = g.pop("idempotency_key", None)
    if record is None:
        return response
    open_change = _release_hold()
    if response.status_code >= 500:
        _abandon(record, open_change=open_change)
        return response
    try:
        if not open_change:
            with db.transaction():
                _store(record, response)  # not stored: a repeat took the key over
            return response
        if not _store(record, response):
            # The request ran past its lease and a repeat took the key over: that repeat
            # makes the change, so this one is undone.
            open_change = False
            db.end_held_unit(commit=False)
            return error_response(
                409,
                "idempotency_in_progress",
                "This request ran longer than its Idempotency-Key is held and a repeat took "
                "the key over; nothing was changed by this one.",
            )
        open_change = False  # committed, or rolled back by end_held_unit when COMMIT fails
        db.end_held_unit(commit=True)  # with its stored answer; then the deferred jobs
    except BaseException:
        _abandon(record, open_change=open_change)
        raise
    return response


def abandon_request(exc: BaseException | None = None) -> None:
    """teardown_request: a request that ended without finish_request rolls its change back
    and frees its key."""
    record: IdempotencyKey | None = g.pop("idempotency_key", None)
    open_change = _release_hold()
    if record is not None:
        _abandon(record, open_change=open_change)


class IdempotencyPlugin(BasePlugin):
    """Documents the Idempotency-Key header on every POST of the tenant API, with the
    Idempotent-Replayed header of its answers and the 409 and 422 it may answer
    (apispec's plugin hooks, given to flask-smorest as an extra plugin)."""

    def init_spec(self, spec: Any) -> None:
        spec.components.parameter(
            HEADER,
            "header",
            {
                "description": (
                    f"Makes a retried POST safe: {KEY_RULE}, chosen by you (a UUID, say), "
                    "one per request, shared by all of the tenant's API keys. A repeat of the "
                    "same request (method, path and body) with the same key within 24 hours "
                    "changes nothing and answers the first answer again, with "
                    f"`{REPLAYED_HEADER}: true`; only answers below 500 are stored. The same "
                    "key with another request is 422 `idempotency_key_reused`; a repeat while "
                    "the first is still running is 409 `idempotency_in_progress`; a key that "
                    "breaks the rule is 422 `validation_error`."
                ),
                "required": False,
                "schema": {"type": "string", "minLength": 1, "maxLength": MAX_KEY_LENGTH,
                           "pattern": "^[ -~]+$"},
            },
        )  # fmt: skip
        spec.components.header(
            REPLAYED_HEADER,
            {
                "description": "`true` on an answer replayed for a repeated Idempotency-Key "
                "(absent on a first answer).",
                "schema": {"type": "string", "enum": ["true"]},
            },
        )
        spec.components.response(
            "IDEMPOTENCY_IN_PROGRESS",
            {
                "description": IN_PROGRESS,
                "content": {"application/json": {"schema": ErrorSchema}},
            },
        )
        spec.components.response(
            "IDEMPOTENCY_KEY_REJECTED",
            {
                "description": REJECTED,
                "content": {"application/json": {"schema": ErrorSchema}},
            },
        )

    def operation_helper(
        self, path: str | None = None, operations: dict | None = None, **kwargs: Any
    ) -> None:
        operation = (operations or {}).get("post")
        if operation is None or not (path or "").startswith(TENANT_API_PREFIX):
            return
        operation.setdefault("parameters", []).append(HEADER)
        responses = operation.setdefault("responses", {})
        statuses = {str(status): status for status in responses}
        for status, name, also in (
            ("409", "IDEMPOTENCY_IN_PROGRESS", IN_PROGRESS),
            ("422", "IDEMPOTENCY_KEY_REJECTED", REJECTED),
        ):
            if status not in statuses:
                responses[int(status)] = name
                continue
            documented = responses[statuses[status]]
            if isinstance(documented, dict):  # a view's own: say what else it may mean
                documented["description"] += " Or: " + also[0].lower() + also[1:]
        for status, response in responses.items():
            if str(status).startswith("2") and isinstance(response, dict):
                response.setdefault("headers", {})[REPLAYED_HEADER] = {
                    "$ref": f"#/components/headers/{REPLAYED_HEADER}"
                }
