"""What make run prepares: the development settings in instance/config.py, and a free port."""

import os
import secrets
import socket
from pathlib import Path

from cryptography.fernet import Fernet
from flask import Config

RUNTIME_TOKEN = "dev-runtime-token"

SETTINGS = """\
# Development settings, written once by `make run` (flask dev config). Flask reads this file
# after app/config.py and before environment variables, in the server and in every flask
# command alike. make run never overwrites it; git ignores it. Not for production.

# Webhook and function URLs over http and on 127.0.0.1 (receivers on this machine).
ALLOW_PRIVATE_URLS = True

# The voice runtime's bearer token for /internal/v1.
RUNTIME_TOKEN = "{runtime_token}"

# Log lines as plain text, for reading in a terminal.
LOG_FORMAT = "text"

# Flask's secret key, generated for this checkout: it signs dashboard sessions.
SECRET_KEY = "{secret_key}"

# The key that encrypts stored provider secrets (WhatsApp Business tokens), generated for
# this checkout. Losing it loses those secrets: accounts must then be linked again.
SECRETS_KEY = "{secrets_key}"

# The dashboard's session cookie also over http://127.0.0.1 (production keeps it https-only).
SESSION_COOKIE_SECURE = False
"""


def write_config(path: Path) -> bool:
    """Write the development settings to path unless the file exists; whether it wrote them.

    The file holds a secret key: only its owner may read it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    text = SETTINGS.format(
        runtime_token=RUNTIME_TOKEN,
        secret_key=secrets.token_hex(32),
        secrets_key=Fernet.generate_key().decode(),
    )
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as file:
        file.write(text)
    return True


def missing_settings(path: Path) -> list[str]:
    """The settings the demo needs that the config file at path does not set: receivers and
    functions on 127.0.0.1 over http, the runtime API, and the key of stored secrets."""
    config = Config(str(path.parent))
    config.from_pyfile(str(path))
    missing = []
    if not config.get("ALLOW_PRIVATE_URLS"):
        missing.append("ALLOW_PRIVATE_URLS = True")
    if not config.get("RUNTIME_TOKEN"):
        missing.append("RUNTIME_TOKEN")
    if not config.get("SECRETS_KEY"):
        missing.append("SECRETS_KEY")
    return missing


def cannot_listen(host: str, port: int) -> OSError | None:
    """Why a server could not listen on host:port now (in use, say), or None when it could.

    create_server sets SO_REUSEADDR as werkzeug's server does, so a port that a server just
    left (in TIME_WAIT) counts as free, as it is for that server.
    """
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        socket.create_server((host, port), family=family).close()
    except OSError as exc:
        return exc
    return None


def free_port_after(host: str, port: int, tries: int = 20) -> int | None:
    """The first port above port that a server could listen on, or None."""
    for candidate in range(port + 1, min(port + 1 + tries, 65536)):
        if cannot_listen(host, candidate) is None:
            return candidate
    return None
