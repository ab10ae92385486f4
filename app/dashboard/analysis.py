"""Post-call analysis in the dashboard: an agent's Analysis tab (its plan: the summary, the
success criteria and the fields, with a preview of the analysis a call would get) and the
call page's "Run again"."""

import re
from dataclasses import dataclass, field
from typing import Any

from flask import current_app, flash, g, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from werkzeug.datastructures import MultiDict

from app.dashboard import bp, current_actor
from app.dashboard.calls import call as call_page
from app.dashboard.formdata import TRUE, Errors
from app.errors import Conflict, ValidationFailed
from app.models import Agent
from app.services import agents as agent_service
from app.services import analysis as analysis_service
from app.services.calls import analysis as call_analysis
from app.services.calls import history as call_history

# The types a field may have, in the order the form offers them, with their labels.
FIELD_TYPES = ("string", "number", "boolean", "enum")
TYPE_LABELS = {
    "string": "Text (string)",
    "number": "Number",
    "boolean": "Yes or no (boolean)",
    "enum": "One of a list (enum)",
}
# A field row's inputs: fields-<n>-<part>.
ROW_INPUT = re.compile(r"^fields-(\d{1,4})-(name|type|description|choices|required|remove)$")
# The parts of a field that have an input of their own (their messages show beside it).
ROW_PARTS = ("name", "type", "description", "choices", "required")
# The example values the preview shows, per type (an enum shows its first choice).
EXAMPLES: dict[str, Any] = {"string": "…", "number": 0, "boolean": True}
EXAMPLE_SUMMARY = "A few sentences on what the call was about and how it ended."
EXAMPLE_REASON = "Why the call is judged successful or not, in one sentence."
EXAMPLE_TIME = "2026-01-01T00:00:00.000Z"
EXAMPLE_COST = 0


@dataclass
class Row:
    """One field of the plan as its row of the form shows it (choices as typed, joined)."""

    name: str = ""
    type: str = "string"
    description: str = ""
    choices: str = ""
    required: bool = False
    errors: Errors = field(default_factory=dict)


def rows_of(plan: dict[str, Any]) -> list[Row]:
    return [
        Row(
            name=str(item.get("name", "")),
            type=str(item.get("type", "string")),
            description=str(item.get("description", "")),
            choices=", ".join(str(choice) for choice in item.get("choices") or []),
            required=bool(item.get("required", False)),
        )
        for item in plan.get("fields", [])
    ]


def plan_from_form(form: MultiDict) -> dict[str, Any]:
    """The plan a submitted form holds: its rows in order, without those ticked Remove and
    those left empty; an enum's choices split at commas (other types have none)."""
    parts: dict[int, dict[str, str]] = {}
    for key in form:
        match = ROW_INPUT.match(key)
        if match:
            parts.setdefault(int(match.group(1)), {})[match.group(2)] = form.get(key, "")
    fields = []
    for index in sorted(parts):
        row = parts[index]
        if _ticked(row.get("remove")):
            continue
        name, description = row.get("name", "").strip(), _text(row.get("description", ""))
        choices = [choice.strip() for choice in row.get("choices", "").split(",")]
        choices = [choice for choice in choices if choice]
        if not (name or description or choices):
            continue  # a row left empty
        item: dict[str, Any] = {
            "name": name,
            "type": row.get("type", "string"),
            "description": description,
            "required": _ticked(row.get("required")),
        }
        if item["type"] == "enum":
            item["choices"] = choices
        fields.append(item)
    plan: dict[str, Any] = {"summary": _ticked(form.get("summary")), "fields": fields}
    criteria = _text(form.get("successCriteria", "")).strip()
    if criteria:
        plan["successCriteria"] = criteria
    return plan


def _ticked(value: str | None) -> bool:
    return (value or "").strip().lower() in TRUE


def _text(value: str) -> str:
    return value.replace("\r\n", "\n")


def examples(model: str) -> dict[str, Any]:
    """What the preview shows in place of a call's values (static/analysis.js reads them from
    the page, so that both render the same)."""
    return {
        "values": EXAMPLES,
        "summary": EXAMPLE_SUMMARY,
        "successReason": EXAMPLE_REASON,
        "model": model,
        "analyzedAt": EXAMPLE_TIME,
        "costIdr": EXAMPLE_COST,
    }


def example_analysis(plan: dict[str, Any], model: str) -> dict[str, Any]:
    """The analysis a call would get with this plan, example values in place of a call's
    (static/analysis.js renders the same as the form changes)."""
    fields = {}
    for item in plan.get("fields", []):
        if item.get("type") == "enum":
            choices = item.get("choices") or []
            fields[item.get("name", "")] = choices[0] if choices else None
        else:
            fields[item.get("name", "")] = EXAMPLES.get(item.get("type", ""))
    return {
        "status": "done",
        "summary": EXAMPLE_SUMMARY if plan.get("summary") else None,
        "successful": True,
        "successReason": EXAMPLE_REASON,
        "fields": fields,
        "model": model,
        "analyzedAt": EXAMPLE_TIME,
        "costIdr": EXAMPLE_COST,
    }


def plan_errors(details: dict[str, Any], rows: list[Row]) -> Errors:
    """validate_plan's messages (details.analysisPlan): a field's beside its input in its row
    (rows in the plan's order), the summary's and criteria's beside theirs, the others for
    the form as a whole."""
    errors: Errors = {}
    found = details.get("analysisPlan", details)
    for key, messages in found.items() if isinstance(found, dict) else [("_schema", found)]:
        if key == "fields" and isinstance(messages, dict):
            for index, problems in messages.items():
                row = rows[int(index)]
                for part, listed in problems.items():
                    row.errors.setdefault(part if part in ROW_PARTS else "_schema", []).extend(
                        _listed(listed)
                    )
            continue
        where = key if key in ("summary", "successCriteria") else "_schema"
        errors.setdefault(where, []).extend(_listed(messages))
    return errors


def _listed(messages: Any) -> list[str]:
    return [messages] if isinstance(messages, str) else [str(message) for message in messages]


@bp.route("/agents/<agent_id>/analysis", methods=["GET", "POST"])
def agent_analysis(agent_id: str):
    """The Analysis tab: the agent's analysis plan, and its preview. POST saves the plan (a
    new version), or with "add" shows the form again with one more field (nothing saved)."""
    agent = agent_service.get_agent(tenant=g.tenant, agent_id=agent_id)
    if request.method == "GET":
        return _analysis_page(agent, agent.analysis_plan)
    plan = plan_from_form(request.form)
    rows = rows_of(plan)
    if "add" in request.form:
        return _analysis_page(agent, plan, rows=[*rows, Row()])
    try:
        plan = analysis_service.validate_plan(plan)
    except ValidationFailed as exc:
        errors = plan_errors(dict(exc.details), rows)
        return _analysis_page(agent, plan, rows=rows, errors=errors), 422
    if plan == agent.analysis_plan:
        flash("Nothing to save: the plan was not changed.", "info")
    else:
        agent_service.update_agent(
            tenant=g.tenant, actor=current_actor(), agent_id=agent.id, analysis_plan=plan
        )
        flash("Analysis plan saved.", "success")
    return redirect(url_for("dashboard.agent_analysis", agent_id=agent.id))


def _analysis_page(
    agent: Agent,
    plan: dict[str, Any],
    *,
    rows: list[Row] | None = None,
    errors: Errors | None = None,
) -> str:
    model = current_app.config.get("ANALYSIS_MODEL", "")
    return render_template(
        "dashboard/agents/analysis.html",
        agent=agent,
        plan=plan,
        rows=rows if rows is not None else rows_of(plan),
        errors=errors or {},
        types=FIELD_TYPES,
        type_labels=TYPE_LABELS,
        preview=example_analysis(plan, model),
        examples=examples(model),
        model=model,
        max_fields=analysis_service.MAX_FIELDS,
        configured=bool(current_app.config.get("GEMINI_API_KEY")),
    )


@bp.route("/calls/<call_id>/analyze", methods=["POST"])
def analyze_call(call_id: str) -> ResponseReturnValue:
    """Run again: the call analysed anew with its agent's latest plan, as
    POST /calls/:id/analyze does; back to the call's page."""
    found = call_history.get_call(tenant=g.tenant, call_id=call_id)  # another tenant's: 404
    try:
        call_analysis.reanalyze(tenant=g.tenant, actor=current_actor(), call_id=found.id)
    except Conflict as exc:  # not ended, or nothing to analyse
        flash(exc.message, "error")
        return call_page(found.id), 409
    flash("The call is being analysed again (reload the page to see the outcome).", "success")
    return redirect(url_for("dashboard.call", call_id=found.id, _anchor="analysis"))
