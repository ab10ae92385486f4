"""Agents: list, create and delete, and an agent's tabs, each a page of its own: Overview (its
status, numbers and basic settings), Prompt (prompt, greeting and their variables) and Calls
(calls by version, Call a number); Functions and Versions are in functions.py and
versions.py."""

from collections import defaultdict
from collections.abc import Callable

from flask import flash, g, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from werkzeug.datastructures import MultiDict

from app.dashboard import bp, current_actor, require_change
from app.dashboard.confirm import Confirmation, ConfirmView
from app.dashboard.formdata import Errors, as_form, changed, load_form
from app.errors import Conflict
from app.models import Agent
from app.resources.agents.schemas import (
    VOICES,
    AgentCreateSchema,
    AgentSchema,
    AgentUpdateSchema,
)
from app.resources.calls.schemas import CallCreateSchema
from app.services import agents as agent_service
from app.services import functions as function_service
from app.services import phone_numbers as number_service
from app.services import versions as version_service
from app.services.calls import admission
from app.services.calls import outbound as outbound_calls

# The agent form: every writable field of the API.
FORM_FIELDS = tuple(AgentCreateSchema().load_fields)
# The fields each tab's settings form edits (attribute names); together, all of FORM_FIELDS.
OVERVIEW_FIELDS = (
    "name",
    "voice_id",
    "language",
    "max_call_duration_minutes",
    "escalation_number",
    "is_active",
)
PROMPT_FIELDS = ("system_prompt", "greeting_text")
TOOLS_FIELDS = ("tools_enabled",)
# The "Call a number" form: the number it is placed from, the callee and the variables.
CALL_FORM_FIELDS = ("phone_number_id", "to", "variables")

# A tab's page: the agent, and the values and errors of the tab's settings form.
TabPage = Callable[..., str]


def form_of(agent: Agent, fields: tuple[str, ...] = FORM_FIELDS) -> MultiDict:
    """The agent's fields as a form shows them."""
    return as_form(AgentSchema(only=fields).dump(agent))


def save_settings(
    agent: Agent, fields: tuple[str, ...], page: TabPage, tab: str, saved: str
) -> ResponseReturnValue:
    """Save one tab's settings form (the given fields; one left out keeps its value): back to
    the tab, or the tab again with every problem beside its field (422)."""
    loaded, errors = load_form(AgentUpdateSchema(partial=True, only=fields), request.form)
    if errors:
        return page(agent, values=request.form, errors=errors), 422
    changes = changed(agent, loaded)
    if changes:
        agent_service.update_agent(
            tenant=g.tenant, actor=current_actor(), agent_id=agent.id, **changes
        )
        flash(saved, "success")
    else:
        flash("Nothing to save: no field was changed.", "info")
    return redirect(url_for(tab, agent_id=agent.id))


@bp.route("/agents")
def agents():
    numbers = defaultdict(list)
    for number in number_service.list_numbers(tenant=g.tenant):
        if number.agent_id is not None:
            numbers[number.agent_id].append(number)
    return render_template(
        "dashboard/agents/list.html",
        agents=agent_service.list_agents(tenant=g.tenant),
        numbers=numbers,
        functions=function_service.count_by_agent(tenant=g.tenant),
    )


@bp.route("/agents/new", methods=["GET", "POST"])
def new_agent():
    require_change()
    if request.method == "GET":
        # An unsaved agent holds the defaults a new agent takes.
        return _new_agent_page(form_of(Agent()), {})
    fields, errors = load_form(AgentCreateSchema(), request.form)
    if errors:
        return _new_agent_page(request.form, errors), 422
    agent = agent_service.create_agent(tenant=g.tenant, actor=current_actor(), **fields)
    flash(f"Agent {agent.name} created.", "success")
    return redirect(url_for("dashboard.agent", agent_id=agent.id))


def _new_agent_page(values: MultiDict, errors: Errors) -> str:
    return render_template("dashboard/agents/new.html", values=values, errors=errors, voices=VOICES)


@bp.route("/agents/<agent_id>", methods=["GET", "POST"])
def agent(agent_id: str):
    """The Overview tab, the agent's first: its status and numbers, and its basic settings."""
    agent = agent_service.get_agent(tenant=g.tenant, agent_id=agent_id)
    if request.method == "GET":
        return _overview_page(agent)
    return save_settings(agent, OVERVIEW_FIELDS, _overview_page, "dashboard.agent", "Agent saved.")


def _overview_page(
    agent: Agent, *, values: MultiDict | None = None, errors: Errors | None = None
) -> str:
    numbers = [
        number
        for number in number_service.list_numbers(tenant=g.tenant)
        if number.agent_id == agent.id
    ]
    return render_template(
        "dashboard/agents/overview.html",
        agent=agent,
        values=values if values is not None else form_of(agent, OVERVIEW_FIELDS),
        errors=errors or {},
        voices=VOICES,
        numbers=numbers,
        function_count=function_service.count_by_agent(tenant=g.tenant).get(agent.id, 0),
    )


@bp.route("/agents/<agent_id>/prompt", methods=["GET", "POST"])
def agent_prompt(agent_id: str):
    """The Prompt tab: the prompt and greeting, and the variables they take."""
    agent = agent_service.get_agent(tenant=g.tenant, agent_id=agent_id)
    if request.method == "GET":
        return _prompt_page(agent)
    return save_settings(
        agent, PROMPT_FIELDS, _prompt_page, "dashboard.agent_prompt", "Prompt saved."
    )


def _prompt_page(
    agent: Agent, *, values: MultiDict | None = None, errors: Errors | None = None
) -> str:
    return render_template(
        "dashboard/agents/prompt.html",
        agent=agent,
        values=values if values is not None else form_of(agent, PROMPT_FIELDS),
        errors=errors or {},
        # Those of the saved prompt and greeting, which calls use.
        variables=admission.placeholders(agent.system_prompt, agent.greeting_text),
    )


@bp.route("/agents/<agent_id>/calls")
def agent_calls(agent_id: str):
    """The Calls tab: the agent's calls by version, and the form to call a number."""
    agent = agent_service.get_agent(tenant=g.tenant, agent_id=agent_id)
    return _calls_page(agent)


def _calls_page(
    agent: Agent, *, call_values: MultiDict | None = None, call_errors: Errors | None = None
) -> str:
    every_number = number_service.list_numbers(tenant=g.tenant)
    # Its own numbers first: the one a callee would know it by.
    callers = [number for number in every_number if number.agent_id == agent.id] + [
        number for number in every_number if number.agent_id != agent.id
    ]
    return render_template(
        "dashboard/agents/calls.html",
        agent=agent,
        stats=version_service.stats(tenant=g.tenant, agent_id=agent.id),
        callers=[number for number in callers if number.is_active],
        call_values=call_values if call_values is not None else MultiDict(),
        call_errors=call_errors or {},
    )


@bp.route("/agents/<agent_id>/call", methods=["POST"])
def call_a_number(agent_id: str):
    """Queue an outbound call in which the agent talks, from one of the tenant's numbers, and
    open the call's page; a problem shows on the Calls tab."""
    agent = agent_service.get_agent(tenant=g.tenant, agent_id=agent_id)
    fields, errors = load_form(CallCreateSchema(only=CALL_FORM_FIELDS), request.form)
    if errors:
        return _calls_page(agent, call_values=request.form, call_errors=errors), 422
    try:
        call = outbound_calls.place_call(
            tenant=g.tenant, actor=current_actor(), agent_id=agent.id, **fields
        )
    except Conflict as exc:  # no credit, or the agent is inactive
        errors = {"_schema": [exc.message]}
        return _calls_page(agent, call_values=request.form, call_errors=errors), 409
    flash(
        f"Call to {call.callee_number} queued: a voice runtime places it from "
        f"{call.caller_number}.",
        "success",
    )
    return redirect(url_for("dashboard.call", call_id=call.id))


class DeleteAgent(ConfirmView):
    def find(self, agent_id: str) -> Agent:
        return agent_service.get_agent(tenant=g.tenant, agent_id=agent_id)

    def confirmation(self, agent: Agent) -> Confirmation:
        return Confirmation(
            title=f"Delete agent {agent.name}",
            question=f"Delete the agent {agent.name}? Its phone numbers will answer no calls "
            "until another agent is assigned, and its functions are deleted with it. Past "
            "calls keep their record.",
            button="Delete agent",
            cancel=url_for("dashboard.agent", agent_id=agent.id),
        )

    def act(self, agent: Agent) -> ResponseReturnValue:
        agent_service.delete_agent(tenant=g.tenant, actor=current_actor(), agent_id=agent.id)
        flash(f"Agent {agent.name} deleted.", "success")
        return redirect(url_for("dashboard.agents"))


bp.add_url_rule("/agents/<agent_id>/delete", view_func=DeleteAgent.as_view("delete_agent"))
