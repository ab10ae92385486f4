"""Overview: the tenant's balance and how its calls went."""

from flask import g, render_template

from app.dashboard import bp
from app.services import billing


@bp.route("/")
def overview():
    tenant = billing.get_balance(tenant=g.tenant)
    return render_template("dashboard/overview.html", tenant=tenant)
