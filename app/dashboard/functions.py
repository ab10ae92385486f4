"""An agent's Functions tab (its functions, the form to add one, and the tools enabled), and
each function's pages: edit, rotate its signing secret, test, delete."""

import json
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
from app.dashboard.agents import TOOLS_FIELDS, form_of, save_settings
from app.dashboard.confirm import Confirmation, ConfirmView
from app.dashboard.formdata import Errors, as_form, changed, load_form
from app.errors import Conflict, ValidationFailed
from app.models import Agent, Function
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
# The function form: every field the API lets a PATCH change.
FUNCTION_FORM_FIELDS = tuple(FunctionUpdateSchema().load_fields)


@bp.route("/agents/<agent_id>/functions", methods=["GET", "POST"])
def agent_functions(agent_id: str):
    """The Functions tab; POST adds a function and shows its signing secret once."""
    agent = agent_service.get_agent(tenant=g.tenant, agent_id=agent_id)
    if request.method == "GET":
        return _functions_page(agent)
    if not first_sending():
        flash(ALREADY_SENT, "info")
        return redirect(url_for("dashboard.agent_functions", agent_id=agent.id))
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
            return secret_page(_functions_page(agent, created=function), 201)
    return _functions_page(agent, function_values=request.form, function_errors=errors), status


@bp.route("/agents/<agent_id>/tools", methods=["POST"])
def agent_tools(agent_id: str):
    """Save the tools enabled, from the Functions tab."""
    agent = agent_service.get_agent(tenant=g.tenant, agent_id=agent_id)
    return save_settings(
        agent, TOOLS_FIELDS, _functions_page, "dashboard.agent_functions", "Tools enabled saved."
    )


def _functions_page(
    agent: Agent,
    *,
    values: MultiDict | None = None,
    errors: Errors | None = None,
    function_values: MultiDict | None = None,
    function_errors: Errors | None = None,
    created: Any = None,
) -> str:
    """The Functions tab: values and errors are the tools form's, function_values and
    function_errors the form's that adds a function; created, a function just added."""
    return render_template(
        "dashboard/agents/functions.html",
        agent=agent,
        values=values if values is not None else form_of(agent, TOOLS_FIELDS),
        errors=errors or {},
        functions=function_service.list_functions(tenant=g.tenant, agent_id=agent.id),
        function_values=function_values if function_values is not None else NEW_FUNCTION,
        function_errors=function_errors or {},
        methods=METHODS,
        created=created,
    )


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
            cancel=url_for("dashboard.agent_functions", agent_id=agent.id),
        )

    def act(self, found: tuple[Agent, Function]) -> ResponseReturnValue:
        agent, function = found
        function_service.delete_function(
            tenant=g.tenant, actor=current_actor(), agent_id=agent.id, name=function.name
        )
        flash(f"Function {function.name} deleted.", "success")
        return redirect(url_for("dashboard.agent_functions", agent_id=agent.id))


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
