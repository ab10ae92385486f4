"""The audit log: /api/v1/audit-log (who changed what, from the API, the dashboard or the
CLI)."""

from flask.views import MethodView

from app.auth import current_tenant
from app.errors import ErrorSchema
from app.resources.audit.schemas import AuditLogSchema, AuditQueryArgsSchema
from app.resources.common import TenantBlueprint
from app.services import audit

blp = TenantBlueprint(
    "audit-log",
    __name__,
    url_prefix="/api/v1/audit-log",
    description="Every change made to the tenant from the API (by key), the dashboard (by "
    "user) or the CLI: who, what, which id, when, from where.",
)

# One instance for every request (see app.resources.calls.routes).
QUERY_ARGS = AuditQueryArgsSchema()


@blp.route("")
class AuditLog(MethodView):
    @blp.arguments(QUERY_ARGS, location="query")
    @blp.response(200, AuditLogSchema)
    @blp.alt_response(
        404,
        schema=ErrorSchema,
        description="after names no audit entry of yours; error code not_found.",
    )
    @blp.doc(operationId="listAuditLog")
    def get(self, args):
        """List the audit log, newest first

        Page with `after=nextAfter` until `hasMore` is false. Any key may read it, read keys
        too.
        """
        return audit.list_log(tenant=current_tenant(), **args)
