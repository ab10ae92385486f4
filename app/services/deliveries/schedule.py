"""The retry schedule: when a failed attempt is tried again, and when a webhook gives up."""

import email.utils
import random
from datetime import UTC, datetime, timedelta

from flask import current_app

# Svix's schedule: the delay after attempt 1, 2, … 7; 8 attempts in all, about 28 hours.
RETRY_DELAYS = (5, 5 * 60, 30 * 60, 2 * 3600, 5 * 3600, 10 * 3600, 10 * 3600)
MAX_ATTEMPTS = len(RETRY_DELAYS) + 1
JITTER = 0.2
THROTTLED_MIN_DELAY = 60  # after a 429 or a timeout
DISABLE_AFTER = timedelta(days=5)  # of failures in a row


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def retry_delay(
    attempt: int, *, status_code: int | None, timed_out: bool, retry_after: float | None
) -> float:
    """Seconds before the attempt after `attempt` (1-based), jittered and scaled."""
    scheduled = RETRY_DELAYS[attempt - 1]
    delay = scheduled * random.uniform(1 - JITTER, 1 + JITTER)
    if status_code == 429 or timed_out:
        delay = max(delay, THROTTLED_MIN_DELAY)
    if retry_after is not None:
        delay = max(delay, min(retry_after, 2 * scheduled))
    return delay * current_app.config["WEBHOOK_RETRY_SCALE"]
