"""Usage: /api/v1/usage, the tenant's calls, minutes and costs over a range of days."""

from flask.views import MethodView

from app.auth import current_tenant
from app.resources.common import TenantBlueprint
from app.resources.usage.schemas import UsageQueryArgsSchema, UsageSchema
from app.services import usage as usage_service

blp = TenantBlueprint(
    "usage", __name__, url_prefix="/api/v1/usage", description="Usage and limits."
)

QUERY_ARGS = UsageQueryArgsSchema()


@blp.route("")
class Usage(MethodView):
    @blp.arguments(QUERY_ARGS, location="query")
    @blp.response(200, UsageSchema)
    @blp.doc(operationId="getUsage")
    def get(self, args):
        """Get usage

        Calls, answered calls, billed minutes and AI cost (with its breakdown) of the calls
        that started in the range of days, in all and per day, with the calls in progress
        now and the tenant's limits. Default range: this calendar month (UTC).
        """
        return usage_service.usage(tenant=current_tenant(), **args)
