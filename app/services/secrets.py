"""Secret rotation without downtime: a new signing secret takes over at once, and the one it
replaces keeps signing beside it until the overlap ends, so a receiver can move to the new
secret at its own pace (webhooks and functions alike)."""

import secrets
from datetime import datetime, timedelta

from app.errors import Conflict, ValidationFailed
from app.models import RotatedSecret

DEFAULT_OVERLAP_HOURS = 24
# A week: time enough to roll the new secret out through a weekly release, short enough that
# a secret rotated away because it leaked stops signing soon. 0 ends the old one at once.
MAX_OVERLAP_HOURS = 168
MIN_LENGTH, MAX_LENGTH = 16, 256  # a secret chosen by the tenant, as at creation


def generate(prefix: str = "") -> str:
    """A new random secret (43 URL-safe characters after the prefix)."""
    return prefix + secrets.token_urlsafe(32)


def rotate(
    record: RotatedSecret, *, field: str, secret: str, overlap_hours: int, now: datetime
) -> None:
    """Make secret the record's signing secret (its attribute `field`), keeping the current
    one as the previous secret for overlap_hours (none for 0); a rotation during an overlap
    ends the older one. The caller saves the record. The current secret again is Conflict
    (secret_unchanged)."""
    if not 0 <= overlap_hours <= MAX_OVERLAP_HOURS:
        raise ValidationFailed(
            f"overlapHours is 0 to {MAX_OVERLAP_HOURS} (a week).",
            details={"overlapHours": [f"Must be from 0 to {MAX_OVERLAP_HOURS}."]},
        )
    current = getattr(record, field)
    if secret == current:  # a valid body that the record's state refuses: a conflict
        raise Conflict(
            "The new secret is the current one: choose another, or leave it out to have one "
            "generated.",
            code="secret_unchanged",
        )
    if overlap_hours:
        record.previous_secret = current
        record.previous_secret_expires_at = now + timedelta(hours=overlap_hours)
    else:
        record.previous_secret = record.previous_secret_expires_at = None
    setattr(record, field, secret)


def replace(record: RotatedSecret, *, field: str, secret: str) -> None:
    """Set a new signing secret at once, with no overlap (a PATCH of the secret)."""
    record.previous_secret = record.previous_secret_expires_at = None
    setattr(record, field, secret)
