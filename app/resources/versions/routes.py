"""Agent versions: /api/v1/agents/:id/versions and the per-version stats."""

from flask.views import MethodView

from app.auth import current_actor, current_tenant
from app.resources.agents.schemas import AgentSchema
from app.resources.common import TenantBlueprint
from app.resources.versions.schemas import (
    AgentStatsSchema,
    StatsQueryArgsSchema,
    VersionListSchema,
    VersionQueryArgsSchema,
    VersionSchema,
)
from app.services import versions as version_service

blp = TenantBlueprint(
    "versions",
    __name__,
    url_prefix="/api/v1/agents/<agent_id>",
    description="An agent's versions: what its calls used at each change, and a way back.",
)

# A version number as the path gives it: an int the database can compare (else 404).
VERSION = "/versions/<int(max=2147483647):version>"


@blp.route("/versions")
class Versions(MethodView):
    @blp.arguments(VersionQueryArgsSchema(), location="query")
    @blp.response(200, VersionListSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="listAgentVersions")
    def get(self, args, agent_id):
        """List an agent's versions

        Newest first. A version is made by every change to what a call uses: systemPrompt,
        voiceId, greetingText, language, maxCallDurationMinutes, toolsEnabled,
        escalationNumber, name, or one of its functions created, changed or deleted.
        """
        page = version_service.list_versions(tenant=current_tenant(), agent_id=agent_id, **args)
        return {"versions": page.items, "pagination": page}


@blp.route(VERSION)
class VersionsByNumber(MethodView):
    @blp.response(200, VersionSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="getAgentVersion")
    def get(self, agent_id, version):
        """Get one version of an agent

        The agent's call-facing fields and its functions (without their secrets) as that
        version holds them.
        """
        return version_service.get_version(
            tenant=current_tenant(), agent_id=agent_id, version=version
        )


@blp.route(VERSION + "/restore")
class VersionRestore(MethodView):
    @blp.response(200, AgentSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="restoreAgentVersion")
    def post(self, agent_id, version):
        """Restore a version of an agent

        Makes the agent's next version equal to this one, functions included: a function
        of the same name takes the version's definition and keeps its signing secret, one
        deleted since comes back with the secret it had, and functions the version did not
        have are deleted. Numbers that follow the latest version answer with it from the
        next call; pinned numbers stay pinned. Restoring a version equal to the agent as it
        is changes nothing.
        """
        return version_service.restore(
            tenant=current_tenant(), actor=current_actor(), agent_id=agent_id, version=version
        )


@blp.route("/stats")
class AgentStats(MethodView):
    @blp.arguments(StatsQueryArgsSchema(), location="query")
    @blp.response(200, AgentStatsSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.doc(operationId="getAgentStats")
    def get(self, args, agent_id):
        """Get an agent's calls by version

        For each version that had calls starting in the range (default: the last 30 days):
        its calls, how many were answered, their average talk time, billed minutes,
        function calls and their error rate, and AI cost. Which prompt change helped, in
        numbers.
        """
        found = version_service.stats(tenant=current_tenant(), agent_id=agent_id, **args)
        return {"versions": found}
