"""Agent functions: /api/v1/agents/:id/functions."""

from flask.views import MethodView

from app.auth import current_actor, current_tenant
from app.errors import ErrorSchema
from app.resources.common import NO_STORE, SAME_SECRET, SecretRotationSchema, TenantBlueprint
from app.resources.functions.schemas import (
    FunctionCreatedSchema,
    FunctionCreateSchema,
    FunctionListSchema,
    FunctionSchema,
    FunctionSecretSchema,
    FunctionTestResultSchema,
    FunctionTestSchema,
    FunctionUpdateSchema,
)
from app.services import function_tests
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
        """Define a function on an agent

        The answer (`Cache-Control: no-store`) is the only time its signing secret is shown
        (until a rotation shows the next one).
        """
        function = function_service.create_function(
            tenant=current_tenant(), actor=current_actor(), agent_id=agent_id, **fields
        )
        return function, NO_STORE


@blp.route("/<name>")
class FunctionsByName(MethodView):
    @blp.arguments(FunctionUpdateSchema)
    @blp.response(200, FunctionSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="updateFunction")
    def patch(self, fields, agent_id, name):
        """Update a function

        Any of description, endpoint, method, parameters and timeoutMs; the name and the
        signing secret stay.
        """
        return function_service.update_function(
            tenant=current_tenant(), actor=current_actor(), agent_id=agent_id, name=name, **fields
        )

    @blp.response(204)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="deleteFunction")
    def delete(self, agent_id, name):
        """Delete a function"""
        function_service.delete_function(
            tenant=current_tenant(), actor=current_actor(), agent_id=agent_id, name=name
        )


@blp.route("/<name>/rotate-secret")
class FunctionSecretRotation(MethodView):
    @blp.arguments(SecretRotationSchema)
    @blp.response(200, FunctionSecretSchema)
    @blp.alt_response(409, schema=ErrorSchema, description=SAME_SECRET)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="rotateFunctionSecret")
    def post(self, fields, agent_id, name):
        """Rotate a function's signing secret without downtime

        The new secret (the one given, or a generated fsec_…) signs every request to the
        endpoint from now on, in `X-Service-Signature`; for overlapHours (default 24) the
        current one signs them too, in `X-Service-Signature-Previous`, so the endpoint
        verifies with either secret until it has moved to the new one. The answer
        (`Cache-Control: no-store`) is the only time the new secret is shown.
        """
        function, _ = function_service.rotate_secret(
            tenant=current_tenant(), actor=current_actor(), agent_id=agent_id, name=name, **fields
        )
        return function, NO_STORE


@blp.route("/<name>/test")
class FunctionTest(MethodView):
    @blp.arguments(FunctionTestSchema)
    @blp.response(200, FunctionTestResultSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="testFunction")
    def post(self, fields, agent_id, name):
        """Test a function

        Checks the parameters against the function's declaration, then calls its endpoint
        exactly as a live call would (the same signed request, with callId call_test, the
        same method rules, the same timeoutMs budget) and answers within that budget plus
        0.5 s. Every outcome is a 200: ok with the endpoint's result, or not ok with the
        error a live call would have had (invalid_parameters included). Nothing is recorded
        and no event is sent.
        """
        return function_tests.run_test(
            tenant=current_tenant(), agent_id=agent_id, name=name, **fields
        )
