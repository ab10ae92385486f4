"""Agent functions: /api/v1/agents/:id/functions."""

from flask.views import MethodView

from app.auth import current_tenant
from app.errors import ErrorSchema
from app.resources.common import TenantBlueprint
from app.resources.functions.schemas import (
    FunctionCreatedSchema,
    FunctionCreateSchema,
    FunctionListSchema,
)
from app.services import functions as function_service

blp = TenantBlueprint(
    "functions",
    __name__,
    url_prefix="/api/v1/agents/<agent_id>/functions",
    description="Functions the AI may call during a call; the service calls your endpoint.",
)


@blp.route("")
class Functions(MethodView):
    @blp.response(200, FunctionListSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="listFunctions")
    def get(self, agent_id):
        """List an agent's functions"""
        tenant = current_tenant()
        return {"functions": function_service.list_functions(tenant=tenant, agent_id=agent_id)}

    @blp.arguments(FunctionCreateSchema)
    @blp.response(201, FunctionCreatedSchema)
    @blp.alt_response(409, schema=ErrorSchema, description="The agent has a function of that name.")
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="createFunction")
    def post(self, fields, agent_id):
        """Define a function on an agent"""
        return function_service.create_function(
            tenant=current_tenant(), agent_id=agent_id, **fields
        )


@blp.route("/<name>")
class FunctionsByName(MethodView):
    @blp.response(204)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="deleteFunction")
    def delete(self, agent_id, name):
        """Delete a function"""
        function_service.delete_function(tenant=current_tenant(), agent_id=agent_id, name=name)
