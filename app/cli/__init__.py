"""The admin CLI (flask tenants, keys, users, …): one module per command group, each command
a thin caller of the services."""

from flask import Flask

from app.cli.calls import calls_cli
from app.cli.credits import credits_cli
from app.cli.db import db_cli
from app.cli.deliveries import deliveries_cli
from app.cli.demo import demo
from app.cli.dev import dev_cli
from app.cli.keys import keys_cli
from app.cli.maintenance import maintenance_cli
from app.cli.numbers import numbers_cli
from app.cli.tenants import tenants_cli
from app.cli.users import users_cli
from app.cli.whatsapp import whatsapp_cli


def init_app(app: Flask) -> None:
    for group in (
        tenants_cli,
        keys_cli,
        numbers_cli,
        credits_cli,
        db_cli,
        maintenance_cli,
        calls_cli,
        deliveries_cli,
        dev_cli,
        users_cli,
        whatsapp_cli,
    ):
        app.cli.add_command(group)
    app.cli.add_command(demo)
