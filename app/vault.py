"""Provider secrets at rest: a tenant's WhatsApp Business access token and app secret are
stored encrypted with Fernet (AES-128-CBC with an HMAC-SHA256, from the cryptography package)
under the SECRETS_KEY setting, so a copy of the database alone reveals none of them.

SECRETS_KEY may list several keys separated by commas: the first encrypts, each of them
decrypts (MultiFernet), so a key is rotated by putting the new one first; the old one can go
once every secret has been written again (a token rotation or a relink writes it anew).
"""

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from flask import current_app

from app.errors import ServiceUnavailable


class NotConfigured(ServiceUnavailable):
    """SECRETS_KEY is unset or not a Fernet key: nothing can be stored encrypted."""

    code = "not_configured"


def _fernet() -> MultiFernet:
    setting = current_app.config.get("SECRETS_KEY") or ""
    keys = [key.strip() for key in str(setting).split(",") if key.strip()]
    if not keys:
        raise NotConfigured(
            "SECRETS_KEY is not set: the service cannot store provider secrets. Set it to a "
            "Fernet key (see the configuration docs).",
            details={"setting": "SECRETS_KEY"},
        )
    try:
        return MultiFernet([Fernet(key) for key in keys])
    except ValueError as exc:
        raise NotConfigured(
            "SECRETS_KEY is not a valid Fernet key (32 url-safe base64-encoded bytes).",
            details={"setting": "SECRETS_KEY"},
        ) from exc


def configured() -> bool:
    try:
        _fernet()
    except NotConfigured:
        return False
    return True


def encrypt(text: str) -> str:
    """The Fernet token of text (ASCII, safe in a text column)."""
    return _fernet().encrypt(text.encode()).decode()


def decrypt(token: str) -> str:
    """The text encrypted by encrypt under any of SECRETS_KEY's keys."""
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken as exc:
        raise NotConfigured(
            "A stored secret cannot be decrypted with SECRETS_KEY: was the key changed "
            "without keeping the old one after it?",
            details={"setting": "SECRETS_KEY"},
        ) from exc
