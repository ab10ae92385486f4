"""The rules of a URL the service will call (a webhook's url, a function's endpoint), for a
form that shows every problem of its fields at once."""

from app.errors import ValidationFailed
from app.outbound.policy import require_safe_url


def problems(url: str, *, field: str) -> dict[str, list[str]]:
    """What is wrong with url by field name ({} when it may be called): the check that
    creating or changing the webhook or function makes (its host is resolved)."""
    try:
        require_safe_url(url, field=field)
    except ValidationFailed as exc:
        return {key: list(messages) for key, messages in exc.details.items()}
    return {}
