"""flask dev: the development settings file and the port check that make run uses."""

import errno
import os
from pathlib import Path

import click
from flask import current_app
from flask.cli import AppGroup

from app import development

dev_cli = AppGroup("dev", help="Development setup (make run uses these).")


@dev_cli.command("config")
def dev_config() -> None:
    """Write the development settings to instance/config.py, unless that file exists."""
    path = Path(current_app.instance_path) / "config.py"
    shown = os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path)
    if development.write_config(path):
        click.echo(
            f"Wrote the development settings to {shown} (ALLOW_PRIVATE_URLS, RUNTIME_TOKEN, "
            "LOG_FORMAT, SECRET_KEY, SECRETS_KEY, SESSION_COOKIE_SECURE): the server and every "
            "flask command read them."
        )
        return
    missing = development.missing_settings(path)
    if missing:
        click.echo(
            f"{shown} exists and is kept as it is, but does not set {' and '.join(missing)}: "
            "webhooks and functions on 127.0.0.1, the runtime API or linking WhatsApp accounts "
            "will not work until it does.",
            err=True,
        )


@dev_cli.command("check-port")
@click.argument("port", type=click.IntRange(1, 65535))
@click.option("--host", default="127.0.0.1", show_default=True)
def dev_check_port(port: int, host: str) -> None:
    """Fail with one line when a server could not listen on HOST:PORT now."""
    reason = development.cannot_listen(host, port)
    if reason is None:
        return
    other = development.free_port_after(host, port)
    hint = f"make run PORT={other}" if other else "make run PORT=<another port>"
    if reason.errno == errno.EADDRINUSE:
        raise click.ClickException(
            f"Port {port} on {host} is in use (is make run already serving there?): stop that "
            f"server, or serve on another port: {hint}"
        )
    raise click.ClickException(
        f"Cannot serve on {host}:{port} ({reason.strerror or reason}): choose another port: {hint}"
    )
