"""What the command groups share: user errors as one line, the CLI's actor, --tenant."""

import re
from collections.abc import Callable
from functools import wraps
from typing import Any

import click
import peewee
from redis import RedisError

from app.errors import AppError
from app.services.audit import Actor

# SQLite's and PostgreSQL's words for a table that is not there.
MISSING_TABLE = re.compile(r"no such table|relation \S+ does not exist")


def first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


def user_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn what a user can cause or meet into a one-line message with exit code 1: domain
    errors, a database that does not answer or has no tables yet, an unreachable Redis."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except AppError as exc:
            raise click.ClickException(exc.message) from None
        except (peewee.OperationalError, peewee.ProgrammingError, peewee.InterfaceError) as exc:
            reason = first_line(exc)
            if MISSING_TABLE.search(reason):
                message = f"The database has no tables yet: run flask db upgrade ({reason})."
            else:
                message = f"The database does not answer: {reason}"
            raise click.ClickException(message) from None
        except RedisError as exc:
            raise click.ClickException(f"Redis does not answer: {first_line(exc)}") from None

    return wrapper


tenant_option = click.option("--tenant", "tenant_ref", required=True, help="Tenant id or name.")
# Who the changes made from the command line are by, in the audit log.
CLI = Actor.cli()
