"""Agents: /api/v1/agents."""

from flask.views import MethodView

from app.auth import current_actor, current_tenant
from app.resources.agents.schemas import (
    AgentCreateSchema,
    AgentListSchema,
    AgentSchema,
    AgentUpdateSchema,
)
from app.resources.common import TenantBlueprint
from app.services import agents as agent_service

blp = TenantBlueprint(
    "agents", __name__, url_prefix="/api/v1/agents", description="AI voice agents."
)


@blp.route("")
class Agents(MethodView):
    @blp.response(200, AgentListSchema)
    @blp.doc(operationId="listAgents")
    def get(self):
        """List agents"""
        return {"agents": agent_service.list_agents(tenant=current_tenant())}

    @blp.arguments(AgentCreateSchema)
    @blp.response(201, AgentSchema)
    @blp.doc(operationId="createAgent")
    def post(self, fields):
        """Create an agent"""
        return agent_service.create_agent(tenant=current_tenant(), actor=current_actor(), **fields)


@blp.route("/<agent_id>")
class AgentsById(MethodView):
    @blp.response(200, AgentSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="getAgent")
    def get(self, agent_id):
        """Get an agent"""
        return agent_service.get_agent(tenant=current_tenant(), agent_id=agent_id)

    @blp.arguments(AgentUpdateSchema(partial=True))
    @blp.response(200, AgentSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="updateAgent")
    def patch(self, fields, agent_id):
        """Update an agent"""
        return agent_service.update_agent(
            tenant=current_tenant(), actor=current_actor(), agent_id=agent_id, **fields
        )

    @blp.response(204)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="deleteAgent")
    def delete(self, agent_id):
        """Delete an agent"""
        agent_service.delete_agent(
            tenant=current_tenant(), actor=current_actor(), agent_id=agent_id
        )
