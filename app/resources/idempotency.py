"""Idempotency-Key on every POST of the tenant API (DESIGN section 9): the request hooks that
every TenantBlueprint registers, and the apispec plugin that documents them on every POST.

A POST with the header takes its key (app.services.idempotency) before its view runs, then
runs in one database transaction of the request's own (peewee's session_start): the view's
atomic() blocks nest in it as savepoints, the jobs they defer are enqueued once it commits,
and the answer is stored in it, so the change and the stored answer commit together. An
answer of 500 or more, or an exception, rolls the transaction back and frees the key. A
repeat gets the stored answer with Idempotent-Replayed: true. GET, PATCH and DELETE ignore
the header.
"""

import re
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from apispec import BasePlugin
from flask import Response, current_app, g, request

from app.auth import current_tenant
from app.db import database
from app.errors import ValidationFailed, error_response
from app.models import IdempotencyKey
from app.services import idempotency as idempotency_service

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_KEY_LENGTH = 255
KEY_RULE = f"1 to {MAX_KEY_LENGTH} printable ASCII characters (space to ~)"
VALID_KEY = re.compile(rf"[ -~]{{1,{MAX_KEY_LENGTH}}}")
# The headers of an answer that are stored with it and sent again on a replay; the others
# (X-Request-Id, the rate-limit headers) are the repeat's own.
KEPT_HEADERS = ("Content-Type", "Location")
TENANT_API_PREFIX = "/api/v1/"
IN_PROGRESS = (
    "A request with the same Idempotency-Key is still running; error code idempotency_in_progress."
)
REJECTED = (
    "The Idempotency-Key header breaks its rule (validation_error) or was used for another "
    "request (idempotency_key_reused)."
)


def outside_transaction(view: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a view that waits on the network, to run without the request's transaction.

    Such a view would otherwise hold the transaction (on SQLite, the write lock) while it
    waits. Its answer is still stored and replayed, but in a transaction of its own after
    the view returns: right for a view that changes nothing in the database.
    """
    view.idempotency_outside_transaction = True  # type: ignore[attr-defined]
    return view


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


def _view_in_transaction() -> bool:
    """False for a view marked outside_transaction."""
    view = current_app.view_functions[request.endpoint or ""]
    view_class = getattr(view, "view_class", None)  # a MethodView's: its method is the view
    if view_class is not None:
        view = getattr(view_class, request.method.lower())
    return not getattr(view, "idempotency_outside_transaction", False)


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
    if _view_in_transaction():
        database.session_start()
        g.idempotency_transaction = True
    return None


def _end_transaction(*, commit: bool) -> None:
    """Commit (which enqueues the jobs deferred until commit) or roll back the request's
    transaction, if it has one."""
    if not g.pop("idempotency_transaction", False):
        return
    if not commit:
        database.session_rollback()
        return
    try:
        database.session_commit()
    except Exception:
        with suppress(Exception):  # as atomic() does: a failed COMMIT may leave it open
            database.rollback()
        raise


def _abandon(record: IdempotencyKey) -> None:
    """Roll the request's transaction back and free the key."""
    try:
        _end_transaction(commit=False)
    finally:
        idempotency_service.release(record=record)


def finish_request(response: Response) -> Response:
    """after_request: store an answer below 500 with the request's change and commit both;
    otherwise roll the change back and free the key."""
    record: IdempotencyKey | None = g.pop("idempotency_key", None)
    if record is None:
        return response
    if response.status_code >= 500:
        _abandon(record)
        return response
    try:
        stored = idempotency_service.finish(
            record=record,
            status_code=response.status_code,
            body=response.get_data(as_text=True),
            headers={name: value for name in KEPT_HEADERS if (value := response.headers.get(name))},
        )
        if not stored and g.get("idempotency_transaction"):
            # The request ran past its lease and a repeat took the key over: that repeat
            # makes the change, so this one is undone.
            _end_transaction(commit=False)
            return error_response(
                409,
                "idempotency_in_progress",
                "This request ran longer than its Idempotency-Key is held and a repeat took "
                "the key over; nothing was changed by this one.",
            )
        _end_transaction(commit=True)
    except BaseException:
        _abandon(record)
        raise
    return response


def abandon_request(exc: BaseException | None = None) -> None:
    """teardown_request: a request that ended without finish_request frees its key."""
    record: IdempotencyKey | None = g.pop("idempotency_key", None)
    if record is not None:
        _abandon(record)


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
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            },
        )
        spec.components.response(
            "IDEMPOTENCY_KEY_REJECTED",
            {
                "description": REJECTED,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
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
