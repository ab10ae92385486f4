"""Usage: this month's calls, minutes and AI cost by day and by component, and the calls in
progress against the tenant's limit."""

from flask import g, render_template

from app.dashboard import bp
from app.dashboard.calls import COST_LABELS
from app.services import usage as usage_service


@bp.route("/usage")
def usage():
    report = usage_service.usage(tenant=g.tenant)
    return render_template("dashboard/usage.html", usage=report, cost_labels=COST_LABELS)
