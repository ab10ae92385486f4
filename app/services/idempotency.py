"""Idempotency keys of the tenant API: a POST sent again with the same Idempotency-Key gets the
first answer again and changes nothing (DESIGN section 9).

A request takes its key by inserting the key's row (unique per tenant and key) in a short
transaction of its own, so every process and host sees at once that the key is held. The
answer is then stored on that row (finish), in the transaction of the change the request made
(the HTTP layer holds it open for that, app.resources.idempotency), so a change and the
answer that reports it commit together or not at all; a request that changed nothing stores
it in a short transaction of its own. An answer of 500 or more is not stored: the row is deleted
(release) and a repeat runs the request again. A row no longer holds its key once it is done
for more than 24 hours, or still running after its lease (the process that ran it died): the
next request with that key takes it over.
"""

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from flask import current_app
from peewee import Expression

from app.db import transaction
from app.errors import IdempotencyInProgress, IdempotencyKeyReused
from app.models import IdempotencyKey, Tenant
from app.util import new_id, utcnow

KEEP_FOR = timedelta(hours=24)
RUNNING, DONE = "running", "done"
# Taking a key over can race with another request taking it: try again, a few times.
TAKE_ATTEMPTS = 3


@dataclass(frozen=True)
class Stored:
    """The answer that a key's first request gave."""

    status_code: int
    body: str
    headers: dict[str, str]


def fingerprint(*, method: str, target: str, body: bytes) -> str:
    """What makes two requests the same one: SHA-256 hex of the method, the path with its
    query, and the body byte for byte."""
    digest = hashlib.sha256(f"{method} {target}\n".encode("utf-8", "surrogatepass"))
    digest.update(body)
    return digest.hexdigest()


def _lapsed(now: datetime) -> Expression:
    """The rows that no longer hold their key."""
    return ((IdempotencyKey.state == DONE) & (IdempotencyKey.created_at <= now - KEEP_FOR)) | (
        (IdempotencyKey.state == RUNNING) & (IdempotencyKey.lease_until <= now)
    )


def begin(*, tenant: Tenant, key: str, fingerprint: str) -> IdempotencyKey | Stored:
    """Take the key for a request: its row, to finish or release once the request has its
    answer. Or, for a repeat of the request that took it, the answer stored. A repeat while
    that request still runs is IdempotencyInProgress; another request with the key is
    IdempotencyKeyReused."""
    lease = timedelta(seconds=current_app.config["IDEMPOTENCY_LEASE_SECONDS"])
    same_key = (IdempotencyKey.tenant == tenant) & (IdempotencyKey.key == key)
    for _ in range(TAKE_ATTEMPTS):
        now = utcnow()
        fields = {
            "id": new_id("idem"),
            "tenant": tenant,
            "key": key,
            "fingerprint": fingerprint,
            "state": RUNNING,
            "lease_until": now + lease,
            "created_at": now,
        }
        with transaction():
            # Of requests inserting the same key at once, one inserts; the others insert
            # nothing (PostgreSQL makes them wait for the first to commit) and read its row.
            taken = IdempotencyKey.insert(**fields).on_conflict_ignore().execute()
        if taken:
            return IdempotencyKey(**fields)
        held = IdempotencyKey.get_or_none(same_key)
        if held is None:
            continue  # released in the meantime
        if IdempotencyKey.delete().where((IdempotencyKey.id == held.id) & _lapsed(now)).execute():
            continue  # lapsed: taken over, unless another request inserts first
        if held.fingerprint != fingerprint:
            raise IdempotencyKeyReused(
                "This Idempotency-Key was already used for another request (a different "
                "method, path or body): use a new key for a new request."
            )
        if held.state == RUNNING:
            raise IdempotencyInProgress(
                "A request with this Idempotency-Key is still running: retry once it has answered."
            )
        assert held.status_code is not None and held.body is not None  # done: it has its answer
        return Stored(status_code=held.status_code, body=held.body, headers=held.headers or {})
    raise IdempotencyInProgress(
        "This Idempotency-Key changed hands while it was being taken: retry in a moment."
    )


def finish(*, record: IdempotencyKey, status_code: int, body: str, headers: dict[str, str]) -> bool:
    """Store the answer of the request that took the key; False when the key is no longer
    this request's (it ran past its lease and a repeat took the key over)."""
    stored = (
        IdempotencyKey.update(
            state=DONE, lease_until=None, status_code=status_code, body=body, headers=headers
        )
        .where((IdempotencyKey.id == record.id) & (IdempotencyKey.state == RUNNING))
        .execute()
    )
    return bool(stored)


def release(*, record: IdempotencyKey) -> None:
    """Free the key of a request that stores no answer: a repeat runs the request again."""
    IdempotencyKey.delete().where(
        (IdempotencyKey.id == record.id) & (IdempotencyKey.state == RUNNING)
    ).execute()
