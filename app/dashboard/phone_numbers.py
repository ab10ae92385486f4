"""Phone numbers: the tenant's numbers and the agent that answers each."""

from flask import flash, g, redirect, render_template, request, url_for

from app.dashboard import bp, current_actor
from app.dashboard.formdata import load_form
from app.errors import ValidationFailed
from app.resources.phone_numbers.schemas import AssignAgentSchema
from app.services import agents as agent_service
from app.services import phone_numbers as number_service


@bp.route("/phone-numbers")
def phone_numbers():
    return _numbers_page()


def _numbers_page(errors: dict[str, list[str]] | None = None) -> str:
    """The numbers, each with its form; errors holds a number's messages by its id."""
    agents = agent_service.list_agents(tenant=g.tenant)
    return render_template(
        "dashboard/phone_numbers/list.html",
        numbers=number_service.list_numbers(tenant=g.tenant),
        agents=agents,
        agent_names={agent.id: agent.name for agent in agents},
        agent_versions={agent.id: agent.version for agent in agents},
        errors=errors or {},
    )


@bp.route("/phone-numbers/<number_id>/assign-agent", methods=["POST"])
def assign_agent(number_id: str):
    number = number_service.get_number(tenant=g.tenant, number_id=number_id)
    # "No agent" sends an empty value: null, which unassigns the number. An empty version
    # follows the agent's latest.
    form = request.form.copy()
    if not form.get("agentVersion", "").strip():
        form.pop("agentVersion", None)
    fields, errors = load_form(AssignAgentSchema(), form)
    if not errors:
        try:
            number = number_service.assign_agent(
                tenant=g.tenant, actor=current_actor(), number_id=number.id, **fields
            )
        except ValidationFailed as exc:  # a version the agent does not have
            errors = {key: list(messages) for key, messages in exc.details.items()}
    if errors:
        messages = [message for of_field in errors.values() for message in of_field]
        return _numbers_page({number.id: messages}), 422
    if number.agent is None:
        flash(f"{number.display_number} has no agent now: it answers no calls.", "success")
    elif number.agent_version is None:
        flash(
            f"{number.display_number} is answered by {number.agent.name}, at its latest version.",
            "success",
        )
    else:
        flash(
            f"{number.display_number} is answered by {number.agent.name}, pinned to version "
            f"{number.agent_version}.",
            "success",
        )
    return redirect(url_for("dashboard.phone_numbers"))
