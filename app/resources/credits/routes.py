"""Credits: /api/v1/credits and its ledger."""

from flask.views import MethodView

from app.auth import current_tenant
from app.resources.common import TenantBlueprint
from app.resources.credits.schemas import (
    CreditBalanceSchema,
    CreditTransactionListSchema,
    CreditTransactionQueryArgsSchema,
)
from app.services import billing

blp = TenantBlueprint(
    "credits", __name__, url_prefix="/api/v1/credits", description="Credit minutes and ledger."
)


@blp.route("")
class Credits(MethodView):
    @blp.response(200, CreditBalanceSchema)
    @blp.doc(operationId="getCredits")
    def get(self):
        """Get the credit balance"""
        return billing.get_balance(tenant=current_tenant())


@blp.route("/transactions")
class CreditTransactions(MethodView):
    @blp.arguments(CreditTransactionQueryArgsSchema, location="query")
    @blp.response(200, CreditTransactionListSchema)
    @blp.doc(operationId="listCreditTransactions")
    def get(self, args):
        """List credit transactions

        Newest first. `pagination.total` counts up to 10,000 entries, so 10,000 means at
        least that; `pagination.hasMore` is always exact.
        """
        page = billing.list_transactions(tenant=current_tenant(), **args)
        return {"transactions": page.items, "pagination": page}
