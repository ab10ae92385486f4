"""An agent's Versions tab: its versions with what changed, one version with the diff of its
prompt against the version before, and Restore (after a confirmation)."""

import difflib
from dataclasses import dataclass

from flask import flash, g, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from marshmallow import ValidationError

from app.dashboard import bp, current_actor
from app.dashboard.confirm import Confirmation, ConfirmView
from app.dashboard.listing import PAGE_SIZE
from app.models import Agent, AgentVersion
from app.resources.common import PageArgsSchema
from app.services import agents as agent_service
from app.services import versions as version_service

PAGE_ARGS = PageArgsSchema()
# The fields a version page lists, with their labels (the prompt has its own section).
FIELD_LABELS = (
    ("name", "Name"),
    ("voice_id", "Voice"),
    ("greeting_text", "Greeting"),
    ("language", "Language"),
    ("max_call_duration_minutes", "Max call minutes"),
    ("tools_enabled", "Tools enabled"),
    ("escalation_number", "Escalation number"),
)
# The API's names of what a version changed, as the list says them.
CHANGE_LABELS = {
    "name": "name",
    "systemPrompt": "prompt",
    "voiceId": "voice",
    "greetingText": "greeting",
    "language": "language",
    "maxCallDurationMinutes": "max call minutes",
    "toolsEnabled": "tools",
    "escalationNumber": "escalation number",
    "functions": "functions",
    "analysisPlan": "analysis plan",
}


@dataclass(frozen=True)
class DiffLine:
    """One line of a prompt's diff: kind is added, removed, context or hunk (an @@ line)."""

    kind: str
    text: str


def prompt_diff(before: str, after: str) -> list[DiffLine]:
    """The unified diff of two prompts, line by line (empty when they are equal)."""
    lines = difflib.unified_diff(
        before.splitlines(), after.splitlines(), "before", "after", lineterm="", n=2
    )
    shown = []
    for line in list(lines)[2:]:  # the ---/+++ header names nothing a person needs
        kind = {"+": "added", "-": "removed", "@": "hunk"}.get(line[:1], "context")
        shown.append(DiffLine(kind, line))
    return shown


def changes_in_words(changes: list[str]) -> str:
    return ", ".join(CHANGE_LABELS.get(name, name) for name in changes)


@bp.app_template_filter("changes")
def changes_filter(changes: list[str]) -> str:
    """A version's changes as the Versions tab says them; version 1's: created."""
    return changes_in_words(changes) if changes else "created"


@bp.route("/agents/<agent_id>/versions")
def agent_versions(agent_id: str):
    agent = agent_service.get_agent(tenant=g.tenant, agent_id=agent_id)
    try:
        offset = PAGE_ARGS.load({"offset": request.args.get("offset", "0")})["offset"]
    except ValidationError:  # a page that is not one: the first
        offset = 0
    page = version_service.list_versions(
        tenant=g.tenant, agent_id=agent.id, limit=PAGE_SIZE, offset=offset
    )
    here = "dashboard.agent_versions"
    previous = following = None
    if page.offset > 0:
        previous = url_for(here, agent_id=agent.id, offset=max(0, page.offset - page.limit))
    if page.has_more:
        following = url_for(here, agent_id=agent.id, offset=page.offset + page.limit)
    return render_template(
        "dashboard/agents/versions.html",
        agent=agent,
        page=page,
        previous=previous,
        following=following,
    )


def _version_page(agent: Agent, version: AgentVersion) -> str:
    previous = version_service.previous_of(version)
    return render_template(
        "dashboard/agents/version.html",
        agent=agent,
        version=version,
        previous=previous,
        diff=prompt_diff(previous.system_prompt, version.system_prompt) if previous else [],
        field_labels=FIELD_LABELS,
    )


# A version number as the path gives it: an int the database can compare (else 404).
VERSION = "/agents/<agent_id>/versions/<int(max=2147483647):version>"


@bp.route(VERSION)
def agent_version(agent_id: str, version: int):
    agent = agent_service.get_agent(tenant=g.tenant, agent_id=agent_id)
    found = version_service.get_version(tenant=g.tenant, agent_id=agent.id, version=version)
    return _version_page(agent, found)


class RestoreVersion(ConfirmView):
    """GET asks for confirmation; POST makes the agent's next version equal to this one."""

    def find(self, agent_id: str, version: int) -> tuple[Agent, int]:
        agent = agent_service.get_agent(tenant=g.tenant, agent_id=agent_id)
        number = version_service.get_version(
            tenant=g.tenant, agent_id=agent.id, version=version
        ).version
        return agent, number

    def confirmation(self, found: tuple[Agent, int]) -> Confirmation:
        agent, number = found
        return Confirmation(
            title=f"Restore version {number} of {agent.name}",
            question=f"Make version {number} the agent's version again? Its prompt, settings "
            "and functions become the agent's next version, which numbers that follow the "
            "latest version answer with from their next call (pinned numbers stay pinned). "
            "Nothing is lost: the versions after it stay in the list.",
            button=f"Restore version {number}",
            cancel=url_for("dashboard.agent_version", agent_id=agent.id, version=number),
        )

    def act(self, found: tuple[Agent, int]) -> ResponseReturnValue:
        agent, number = found
        restored = version_service.restore(
            tenant=g.tenant, actor=current_actor(), agent_id=agent.id, version=number
        )
        if restored.version == agent.version:
            flash(f"Version {number} is what the agent holds already: nothing changed.", "info")
        else:
            flash(f"Version {number} restored as version {restored.version}.", "success")
        return redirect(url_for("dashboard.agent_versions", agent_id=agent.id))


bp.add_url_rule(VERSION + "/restore", view_func=RestoreVersion.as_view("restore_version"))
