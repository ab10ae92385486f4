"""What the models share: the JSON column, the id column and the rotated-secret mixin."""

import json
from datetime import datetime
from typing import Any

import peewee as pw

from app.util import utcnow


class JSONField(pw.TextField):
    """JSON stored as text, portable between SQLite and PostgreSQL."""

    def db_value(self, value: Any) -> str | None:
        if value is None:
            return None
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)

    def python_value(self, value: str | None) -> Any:
        return None if value is None else json.loads(value)


def id_field() -> pw.CharField:
    return pw.CharField(primary_key=True, max_length=32)


class RotatedSecret:
    """A secret with the one it replaced, which still signs beside it until its expiry (a
    rotation's overlap, app.services.secrets): the models with previous_secret and
    previous_secret_expires_at columns."""

    previous_secret: Any
    previous_secret_expires_at: Any

    def previous_secret_in_use(self, now: datetime | None = None) -> str | None:
        """The previous secret while its overlap lasts, else None."""
        expires = self.previous_secret_expires_at
        if self.previous_secret is None or expires is None or expires <= (now or utcnow()):
            return None
        return self.previous_secret

    @property
    def overlap_ends_at(self) -> datetime | None:
        """When the previous secret stops signing, while it still does; else None."""
        return self.previous_secret_expires_at if self.previous_secret_in_use() else None
