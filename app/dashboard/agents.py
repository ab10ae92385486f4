"""Agents: list, create, edit and delete, and each agent's functions (add, edit, test,
delete)."""

import json
from collections import defaultdict
from typing import Any

from flask import flash, g, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from werkzeug.datastructures import MultiDict

from app.dashboard import (
    ALREADY_SENT,
    bp,
    current_actor,
    first_sending,
    require_change,
    rotation_page,
    secret_page,
)
from app.dashboard.confirm import Confirmation, ConfirmView
from app.dashboard.formdata import Errors, as_form, changed, load_form
from app.errors import Conflict, ValidationFailed
from app.models import Agent, Function
from app.resources.agents.schemas import (
    VOICES,
    AgentCreateSchema,
    AgentSchema,
    AgentUpdateSchema,
)
from app.resources.calls.schemas import CallCreateSchema
from app.resources.common import SecretRotationSchema
from app.resources.functions.schemas import (
    METHODS,
    FunctionCreateSchema,
    FunctionSchema,
    FunctionTestSchema,
    FunctionUpdateSchema,
)
from app.services import agents as agent_service
from app.services import function_tests
from app.services import functions as function_service
from app.services import phone_numbers as number_service
from app.services import versions as version_service
from app.services.calls import outbound as outbound_calls

# The agent form: every writable field of the API.
FORM_FIELDS = tuple(AgentCreateSchema().load_fields)
NEW_FUNCTION = MultiDict(
    {
        "method": "POST",
        "parameters": '{\n  "type": "object",\n  "properties": {},\n  "required": []\n}',
        "timeoutMs": str(function_service.DEFAULT_TIMEOUT_MS),
    }
)
ROTATED_ALREADY = (
    "This form was sent already (the page was reloaded): the secret was not rotated again."
)
# The "Call a number" form: the number it is placed from, the callee and the variables.
CALL_FORM_FIELDS = ("phone_number_id", "to", "variables")
# The function form: every field the API lets a PATCH change.
FUNCTION_FORM_FIELDS = tuple(FunctionUpdateSchema().load_fields)


def _form_of(agent: Agent) -> MultiDict:
    return as_form(AgentSchema(only=FORM_FIELDS).dump(agent))


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
        return _new_agent_page(_form_of(Agent()), {})
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
    agent = agent_service.get_agent(tenant=g.tenant, agent_id=agent_id)
    if request.method == "GET":
        return _agent_page(agent)
    fields, errors = load_form(AgentUpdateSchema(partial=True), request.form)
    if errors:
        return _agent_page(agent, values=request.form, errors=errors), 422
    changes = changed(agent, fields)
    if changes:
        agent_service.update_agent(
            tenant=g.tenant, actor=current_actor(), agent_id=agent.id, **changes
        )
        flash("Agent saved.", "success")
    else:
        flash("Nothing to save: no field was changed.", "info")
    return redirect(url_for("dashboard.agent", agent_id=agent.id))


def _agent_page(
    agent: Agent,
    *,
    values: MultiDict | None = None,
    errors: Errors | None = None,
    function_values: MultiDict | None = None,
    function_errors: Errors | None = None,
    created: Any = None,
    call_values: MultiDict | None = None,
    call_errors: Errors | None = None,
) -> str:
    """The agent's page: its form, its numbers, its functions and the form to add one, and
    the form to call a number."""
    every_number = number_service.list_numbers(tenant=g.tenant)
    numbers = [number for number in every_number if number.agent_id == agent.id]
    # Its own numbers first: the one a callee would know it by.
    callers = numbers + [number for number in every_number if number.agent_id != agent.id]
    return render_template(
        "dashboard/agents/agent.html",
        agent=agent,
        values=values if values is not None else _form_of(agent),
        errors=errors or {},
        voices=VOICES,
        numbers=numbers,
        functions=function_service.list_functions(tenant=g.tenant, agent_id=agent.id),
        function_values=function_values if function_values is not None else NEW_FUNCTION,
        function_errors=function_errors or {},
        methods=METHODS,
        created=created,
        stats=version_service.stats(tenant=g.tenant, agent_id=agent.id),
        callers=[number for number in callers if number.is_active],
        call_values=call_values if call_values is not None else MultiDict(),
        call_errors=call_errors or {},
    )


@bp.route("/agents/<agent_id>/call", methods=["POST"])
def call_a_number(agent_id: str):
    """Queue an outbound call in which the agent talks, from one of the tenant's numbers."""
    agent = agent_service.get_agent(tenant=g.tenant, agent_id=agent_id)
    fields, errors = load_form(CallCreateSchema(only=CALL_FORM_FIELDS), request.form)
    if errors:
        return _agent_page(agent, call_values=request.form, call_errors=errors), 422
    try:
        call = outbound_calls.place_call(
            tenant=g.tenant, actor=current_actor(), agent_id=agent.id, **fields
        )
    except Conflict as exc:  # no credit, or the agent is inactive
        errors = {"_schema": [exc.message]}
        return _agent_page(agent, call_values=request.form, call_errors=errors), 409
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


@bp.route("/agents/<agent_id>/functions", methods=["POST"])
def new_function(agent_id: str):
    agent = agent_service.get_agent(tenant=g.tenant, agent_id=agent_id)
    if not first_sending():
        flash(ALREADY_SENT, "info")
        return redirect(url_for("dashboard.agent", agent_id=agent.id))
    # The signing secret is generated, as when the API is sent none.
    schema = FunctionCreateSchema(exclude=("secret",))
    fields, errors = load_form(schema, request.form, urls_at=("endpoint",))
    status = 422
    if not errors:
        try:
            function = function_service.create_function(
                tenant=g.tenant, actor=current_actor(), agent_id=agent.id, **fields
            )
        except ValidationFailed as exc:  # the URL rules
            errors = {key: list(messages) for key, messages in exc.details.items()}
        except Conflict as exc:
            errors, status = {"name": [exc.message]}, 409
        else:
            # Rendered, never flashed: the session cookie is signed, not encrypted.
            return secret_page(_agent_page(agent, created=function), 201)
    return _agent_page(agent, function_values=request.form, function_errors=errors), status


class DeleteFunction(ConfirmView):
    def find(self, agent_id: str, name: str) -> tuple[Agent, Function]:
        return _function_of(agent_id, name)

    def confirmation(self, found: tuple[Agent, Function]) -> Confirmation:
        agent, function = found
        return Confirmation(
            title=f"Delete function {function.name}",
            question=f"Delete the function {function.name} of {agent.name}? The agent can "
            "no longer call it.",
            button="Delete function",
            cancel=url_for("dashboard.agent", agent_id=agent.id),
        )

    def act(self, found: tuple[Agent, Function]) -> ResponseReturnValue:
        agent, function = found
        function_service.delete_function(
            tenant=g.tenant, actor=current_actor(), agent_id=agent.id, name=function.name
        )
        flash(f"Function {function.name} deleted.", "success")
        return redirect(url_for("dashboard.agent", agent_id=agent.id))


bp.add_url_rule(
    "/agents/<agent_id>/functions/<name>/delete",
    view_func=DeleteFunction.as_view("delete_function"),
)


def _function_of(agent_id: str, name: str) -> tuple[Agent, Function]:
    agent = agent_service.get_agent(tenant=g.tenant, agent_id=agent_id)
    return agent, function_service.get_function(agent=agent, name=name)


@bp.route("/agents/<agent_id>/functions/<name>", methods=["GET", "POST"])
def function_settings(agent_id: str, name: str):
    agent, function = _function_of(agent_id, name)
    if request.method == "GET":
        return _function_page(agent, function)
    fields, errors = load_form(FunctionUpdateSchema(), request.form, urls_at=("endpoint",))
    changes = changed(function, fields)
    if not errors and changes:
        try:
            function_service.update_function(
                tenant=g.tenant,
                actor=current_actor(),
                agent_id=agent.id,
                name=function.name,
                **changes,
            )
        except ValidationFailed as exc:  # the URL rules
            errors = {key: list(messages) for key, messages in exc.details.items()}
        else:
            flash(f"Function {function.name} saved.", "success")
            return redirect(
                url_for("dashboard.function_settings", agent_id=agent.id, name=function.name)
            )
    if errors:
        return _function_page(agent, function, values=request.form, errors=errors), 422
    flash("Nothing to save: no field was changed.", "info")
    return redirect(url_for("dashboard.function_settings", agent_id=agent.id, name=function.name))


@bp.route("/agents/<agent_id>/functions/<name>/rotate-secret", methods=["GET", "POST"])
def rotate_function_secret(agent_id: str, name: str):
    """GET asks for confirmation and the overlap; POST rotates and shows the new secret once."""
    require_change()
    agent, function = _function_of(agent_id, name)
    here = url_for("dashboard.function_settings", agent_id=agent.id, name=function.name)
    if request.method == "GET":
        return rotation_page(
            title=f"Rotate the signing secret of {function.name}",
            question=f"Give the function {function.name} a new signing secret? Its requests "
            "are signed with the new one from now on (X-Service-Signature), and with the old "
            "one beside it (X-Service-Signature-Previous) for the time you choose.",
            action=url_for("dashboard.rotate_function_secret", agent_id=agent.id, name=name),
            cancel=here,
            back=f"Function {function.name}",
        )
    if not first_sending():
        flash(ROTATED_ALREADY, "info")
        return redirect(here)
    fields, errors = load_form(SecretRotationSchema(only=("overlap_hours",)), request.form)
    if errors:
        raise ValidationFailed("Choose how long the old secret keeps signing.", details=errors)
    function, secret = function_service.rotate_secret(
        tenant=g.tenant,
        actor=current_actor(),
        agent_id=agent.id,
        name=function.name,
        overlap_hours=fields["overlap_hours"],
    )
    return secret_page(_function_page(agent, function, rotated=secret))


def _function_page(
    agent: Agent,
    function: Function,
    *,
    values: MultiDict | None = None,
    errors: Errors | None = None,
    rotated: str | None = None,
) -> str:
    if values is None:
        values = as_form(FunctionSchema(only=FUNCTION_FORM_FIELDS).dump(function))
    return render_template(
        "dashboard/agents/function.html",
        agent=agent,
        function=function,
        values=values,
        errors=errors or {},
        methods=METHODS,
        rotated=rotated,
    )


@bp.route("/agents/<agent_id>/functions/<name>/test", methods=["GET", "POST"])
def function_test(agent_id: str, name: str):
    """Send the function's endpoint a test request, as a live call would, and show the answer."""
    require_change()
    agent, function = _function_of(agent_id, name)
    if request.method == "GET":
        example = function_service.example_parameters(function.parameters)
        values = MultiDict({"parameters": json.dumps(example, indent=2, ensure_ascii=False)})
        return _function_test_page(agent, function, values=values)
    form = request.form.copy()
    if not form.get("parameters", "").strip():
        form["parameters"] = "{}"  # an emptied box: no parameters
    fields, errors = load_form(FunctionTestSchema(), form)
    if errors:
        return _function_test_page(agent, function, values=request.form, errors=errors), 422
    # A test changes nothing, so it writes no audit entry (DESIGN section 14).
    report = function_tests.run_test(
        tenant=g.tenant, agent_id=agent.id, name=function.name, parameters=fields["parameters"]
    )
    return _function_test_page(agent, function, values=request.form, report=report)


def _function_test_page(
    agent: Agent,
    function: Function,
    *,
    values: MultiDict,
    errors: Errors | None = None,
    report: function_tests.FunctionTestReport | None = None,
) -> str:
    return render_template(
        "dashboard/agents/function_test.html",
        agent=agent,
        function=function,
        values=values,
        errors=errors or {},
        report=report,
    )
