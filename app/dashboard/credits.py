"""Credits: the balance with its holds and lifetime counters, and the ledger."""

from flask import g, render_template

from app.dashboard import bp
from app.dashboard.listing import page_links, read_query
from app.resources.credits.schemas import CreditTransactionQueryArgsSchema
from app.services import billing

QUERY_ARGS = CreditTransactionQueryArgsSchema()
FILTERS = ("type",)


@bp.route("/credits")
def credits():
    query = read_query(QUERY_ARGS, FILTERS)
    page = previous = following = None
    if not query.errors:
        page = billing.list_transactions(tenant=g.tenant, **query.args)
        previous, following = page_links("dashboard.credits", query, page)
    return render_template(
        "dashboard/credits.html",
        tenant=billing.get_balance(tenant=g.tenant),
        query=query,
        page=page,
        previous=previous,
        following=following,
        types=billing.TRANSACTION_TYPES,
    ), (422 if query.errors else 200)
