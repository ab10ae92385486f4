"""Overview: the tenant's balance, its calls of the last 30 days, and webhooks that fail."""

from flask import g, render_template

from app.dashboard import bp
from app.dashboard.charts import daily_chart
from app.services import billing
from app.services import webhooks as webhook_service
from app.services.calls import history as call_history

DAYS = 30


@bp.route("/")
def overview():
    tenant = billing.get_balance(tenant=g.tenant)
    totals = call_history.daily_totals(tenant=g.tenant, days=DAYS)
    calls = sum(total.calls for total in totals)
    answered = sum(total.answered for total in totals)
    failing = webhook_service.failing_webhooks(tenant=g.tenant)
    return render_template(
        "dashboard/overview.html",
        tenant=tenant,
        days=DAYS,
        chart=daily_chart(totals),
        answered_share=answered / calls if calls else None,
        answered=answered,
        failing=failing,
        healths=webhook_service.health(webhooks=failing),
    )
