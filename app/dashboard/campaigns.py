"""Campaigns: the list, a new campaign from a CSV of numbers and variables (uploaded or pasted),
a campaign's progress and per-contact results, pause, resume and cancel."""

import csv
import io
from typing import Any

from flask import flash, g, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from marshmallow import ValidationError
from werkzeug.datastructures import MultiDict

from app.dashboard import ALREADY_SENT, bp, current_actor, first_sending, require_change
from app.dashboard.confirm import Confirmation, ConfirmView
from app.dashboard.formdata import Errors, flatten, plain
from app.dashboard.listing import PAGE_SIZE, page_links, read_query
from app.errors import Conflict, ValidationFailed
from app.models import Campaign
from app.resources.campaigns.schemas import CampaignCreateSchema, ContactQueryArgsSchema
from app.services import agents as agent_service
from app.services import campaigns as campaign_service
from app.services import phone_numbers as number_service
from app.services.campaign_progress import CONTACT_STATUSES, DEFAULT_RETRY_ON, RETRY_OUTCOMES

# The form's first values: one call at a time, at any time (no hours shown that a missing
# time zone would leave unused), no retry.
NEW_CAMPAIGN = MultiDict(
    [
        ("maxConcurrentCalls", "1"),
        ("maxAttempts", "1"),
        ("delayMinutes", "60"),
        *[("days", day) for day in campaign_service.DAYS],
        *[("retryOn", outcome) for outcome in DEFAULT_RETRY_ON],
    ]
)
DAY_LABELS = dict(
    zip(campaign_service.DAYS, ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"), strict=True)
)
OUTCOME_LABELS = {
    "no_answer": "No answer",
    "busy": "Busy",
    "voicemail": "Voicemail",
    "failed": "Failed (any other reason)",
}
# Row problems shown at most; the rest are counted.
SHOWN_ROW_PROBLEMS = 10
CONTACT_FILTERS = ("status",)


def read_contacts(text: str) -> tuple[list[dict[str, Any]], list[str], int]:
    """The contacts of CSV text (or pasted lines): a number per row, first; with a header row
    (its first cell not a number: to, number, phone, …) the other columns are variables named
    by it. The contacts as the API takes them, the rows that could not be read, and the row
    number of the first contact."""
    rows = [row for row in csv.reader(io.StringIO(text)) if any(cell.strip() for cell in row)]
    if not rows:
        return [], [], 1
    names: list[str] = []
    first = rows[0][0].strip()
    header = 1 if not first.startswith("+") and not first[:1].isdigit() else 0
    if header:
        names = [cell.strip() for cell in rows[0][1:]]
    contacts, problems = [], []
    for number, row in enumerate(rows[header:], start=1 + header):
        cells = [cell.strip() for cell in row]
        if len(cells) - 1 > len(names):
            problems.append(
                f"Row {number}: {len(cells) - 1} values after the number, but the header row "
                f"names {len(names)} variables."
                if header
                else f"Row {number}: values after the number need a header row naming them "
                "(to, then one name per variable)."
            )
            continue
        variables = {name: value for name, value in zip(names, cells[1:], strict=False) if value}
        contacts.append({"to": cells[0], "variables": variables})
    return contacts, problems, 1 + header


def _row_problems(messages: Any, first_row: int) -> list[str]:
    """The schema's messages about contacts as row numbers of the CSV."""
    if not isinstance(messages, dict):
        return [plain(str(message)) for message in messages]
    problems = []
    for index, fields in sorted(messages.items()):
        for field, lines in flatten(fields).items():
            for line in lines:
                problems.append(f"Row {index + first_row}: {field}: {line}")
    return problems


def _body(form: MultiDict, contacts: list[dict[str, Any]]) -> dict[str, Any]:
    """The campaign as the API's JSON body, from the form."""
    body: dict[str, Any] = {
        "name": form.get("name", "").strip(),
        "phoneNumberId": form.get("phoneNumberId", ""),
        "contacts": contacts,
        "maxConcurrentCalls": _number(form.get("maxConcurrentCalls", "")),
        "retry": {
            "maxAttempts": _number(form.get("maxAttempts", "")),
            "delayMinutes": _number(form.get("delayMinutes", "")),
            "on": _ticked(form, "retryOn"),
        },
    }
    if form.get("agentId"):
        body["agentId"] = form["agentId"]
    if form.get("timezone", "").strip():
        body["schedule"] = {
            "timezone": form["timezone"].strip(),
            "days": _ticked(form, "days"),
            "start": form.get("start", "").strip(),
            "end": form.get("end", "").strip(),
        }
    return body


# Hours or days without a time zone would be dropped (no time zone: any time): refused instead.
NO_TIME_ZONE = (
    "Give a time zone for the calling days and hours, or leave From and Until empty and tick "
    "every day to call at any time."
)


def _has_window(form: MultiDict) -> bool:
    """Whether the form limits the calling days or hours (no day ticked, as a form posted
    without the boxes sends, limits nothing)."""
    days = set(_ticked(form, "days"))
    hours = form.get("start", "").strip() or form.get("end", "").strip()
    return bool(hours) or bool(days) and days != set(campaign_service.DAYS)


def _ticked(form: MultiDict, key: str) -> list[str]:
    """A checkbox group's ticked values, without the hidden empty one that every group sends."""
    return [value for value in form.getlist(key) if value]


def _number(text: str) -> Any:
    text = text.strip()
    return int(text) if text.isdigit() and len(text) < 12 else text


# Where each of the schema's messages shows in the form.
FORM_KEYS = {
    "schedule": {"timezone": "timezone", "days": "days", "start": "start", "end": "end"},
    "retry": {"maxAttempts": "maxAttempts", "delayMinutes": "delayMinutes", "on": "retryOn"},
}


def _form_errors(messages: dict[str, Any], first_row: int) -> Errors:
    errors: Errors = {}
    for key, value in messages.items():
        if key == "contacts":
            errors["contacts"] = _row_problems(value, first_row)
        elif key in FORM_KEYS and isinstance(value, dict):
            for inner, lines in flatten(value).items():
                errors.setdefault(FORM_KEYS[key].get(inner, "_schema"), []).extend(lines)
        else:
            errors.setdefault(key, []).extend(flatten({key: value})[key])
    return errors


@bp.route("/campaigns")
def campaigns():
    offset = request.args.get("offset", "0")
    # Anything but a plain offset (junk, or more digits than any list has rows) is the start.
    start = int(offset) if offset.isdigit() and len(offset) <= 9 else 0
    page = campaign_service.list_campaigns(tenant=g.tenant, limit=PAGE_SIZE, offset=start)
    return render_template(
        "dashboard/campaigns/list.html",
        page=page,
        numbers={number.id: number for number in number_service.list_numbers(tenant=g.tenant)},
    )


def _new_campaign_page(values: MultiDict, errors: Errors) -> str:
    return render_template(
        "dashboard/campaigns/new.html",
        values=values,
        errors=errors,
        numbers=number_service.list_numbers(tenant=g.tenant),
        agents=agent_service.list_agents(tenant=g.tenant),
        days=DAY_LABELS,
        outcomes=RETRY_OUTCOMES,
        outcome_labels=OUTCOME_LABELS,
    )


@bp.route("/campaigns/new", methods=["GET", "POST"])
def new_campaign():
    require_change()
    if request.method == "GET":
        return _new_campaign_page(NEW_CAMPAIGN, {})
    upload = request.files.get("contactsFile")
    text = upload.read().decode("utf-8-sig", errors="replace") if upload else ""
    text = text if text.strip() else request.form.get("contacts", "")
    contacts, problems, first_row = read_contacts(text)
    errors: Errors = {}
    try:
        fields = CampaignCreateSchema().load(_body(request.form, contacts))
    except ValidationError as exc:
        errors = _form_errors(exc.messages, first_row)
    if problems:
        errors["contacts"] = problems + errors.get("contacts", [])
    if not request.form.get("timezone", "").strip() and _has_window(request.form):
        errors.setdefault("timezone", []).append(NO_TIME_ZONE)
    if "contacts" in errors and len(errors["contacts"]) > SHOWN_ROW_PROBLEMS:
        rest = len(errors["contacts"]) - SHOWN_ROW_PROBLEMS
        errors["contacts"] = [*errors["contacts"][:SHOWN_ROW_PROBLEMS], f"… and {rest} more."]
    if errors:
        return _new_campaign_page(request.form, errors), 422
    if not first_sending():
        flash(ALREADY_SENT, "info")
        return redirect(url_for("dashboard.campaigns"))
    fields["contacts"] = [campaign_service.Contact(**contact) for contact in fields["contacts"]]
    try:
        campaign = campaign_service.create_campaign(
            tenant=g.tenant, actor=current_actor(), **fields
        )
    except (ValidationFailed, Conflict) as exc:
        # The tenant's own limits (calls at once, contacts, credit) and the agent: on the form.
        errors = {key: list(lines) for key, lines in exc.details.items() if isinstance(lines, list)}
        return _new_campaign_page(request.form, errors or {"_schema": [exc.message]}), exc.status
    flash(
        f"Campaign {campaign.name} created with {campaign.total_count:,} contacts: its calls "
        "are placed in a few seconds.",
        "success",
    )
    return redirect(url_for("dashboard.campaign", campaign_id=campaign.id))


@bp.route("/campaigns/<campaign_id>")
def campaign(campaign_id: str):
    found = campaign_service.get_campaign(tenant=g.tenant, campaign_id=campaign_id)
    query = read_query(ContactQueryArgsSchema(), CONTACT_FILTERS)
    page = previous = following = None
    if not query.errors:
        page = campaign_service.list_contacts(tenant=g.tenant, campaign_id=found.id, **query.args)
        previous, following = page_links("dashboard.campaign", query, page, campaign_id=found.id)
    numbers = {number.id: number for number in number_service.list_numbers(tenant=g.tenant)}
    agent = (
        agent_service.get_agent(tenant=g.tenant, agent_id=found.agent_id)
        if found.agent_id
        else None
    )
    return render_template(
        "dashboard/campaigns/campaign.html",
        campaign=found,
        number=numbers.get(found.phone_number_id),
        agent=agent,
        query=query,
        page=page,
        previous=previous,
        following=following,
        statuses=CONTACT_STATUSES,
        days=DAY_LABELS,
        outcome_labels=OUTCOME_LABELS,
    ), (422 if query.errors else 200)


@bp.route("/campaigns/<campaign_id>/pause", methods=["POST"])
def pause_campaign(campaign_id: str):
    found = campaign_service.pause_campaign(
        tenant=g.tenant, actor=current_actor(), campaign_id=campaign_id
    )
    flash(f"Campaign {found.name} paused: no new calls are placed until it is resumed.", "success")
    return redirect(url_for("dashboard.campaign", campaign_id=found.id))


@bp.route("/campaigns/<campaign_id>/resume", methods=["POST"])
def resume_campaign(campaign_id: str):
    found = campaign_service.resume_campaign(
        tenant=g.tenant, actor=current_actor(), campaign_id=campaign_id
    )
    flash(f"Campaign {found.name} resumed.", "success")
    return redirect(url_for("dashboard.campaign", campaign_id=found.id))


class CancelCampaign(ConfirmView):
    def find(self, campaign_id: str) -> Campaign:
        return campaign_service.get_campaign(tenant=g.tenant, campaign_id=campaign_id)

    def confirmation(self, found: Campaign) -> Confirmation:
        return Confirmation(
            title=f"Cancel campaign {found.name}",
            question=f"Cancel the campaign {found.name} for good? Its queued calls are "
            "withdrawn and its pending contacts are never called; calls already ringing or "
            "answered go on to their end. A campaign cannot be started again.",
            button="Cancel campaign",
            cancel=url_for("dashboard.campaign", campaign_id=found.id),
        )

    def act(self, found: Campaign) -> ResponseReturnValue:
        found = campaign_service.cancel_campaign(
            tenant=g.tenant, actor=current_actor(), campaign_id=found.id
        )
        flash(f"Campaign {found.name} canceled.", "success")
        return redirect(url_for("dashboard.campaign", campaign_id=found.id))


bp.add_url_rule(
    "/campaigns/<campaign_id>/cancel", view_func=CancelCampaign.as_view("cancel_campaign")
)
