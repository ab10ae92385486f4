"""Settings: API keys (create, shown once; revoke), and for owners Team, the Audit log and the
tenant's Settings (its low-balance threshold)."""

from typing import Any

import marshmallow as ma
from flask import (
    abort,
    flash,
    g,
    make_response,
    redirect,
    render_template,
    request,
    url_for,
)
from flask.typing import ResponseReturnValue

from app.dashboard import ALREADY_SENT, bp, current_actor, first_sending, owner_only
from app.dashboard.confirm import Confirmation, ConfirmView
from app.dashboard.formats import page_url
from app.dashboard.forms import AddUserForm, CreateKeyForm, RoleForm, ThresholdForm
from app.dashboard.listing import page_links, read_query
from app.models import Agent, ApiKey, Call, Campaign, Function, User, Webhook
from app.resources.audit.schemas import ACTION
from app.resources.common import PageArgsSchema
from app.resources.fields import DateOrTimestamp
from app.services import audit, billing
from app.services import keys as key_service
from app.services import tenants as tenant_service
from app.services import users as user_service

PAGE_ARGS = PageArgsSchema()


@bp.route("/settings", methods=["GET", "POST"])
@owner_only
def tenant_settings():
    """The tenant's plan, and the low-balance threshold below which credits.low fires."""
    tenant = billing.get_balance(tenant=g.tenant)
    form = ThresholdForm(minutes=tenant.low_balance_threshold)
    if form.validate_on_submit():
        minutes = form.minutes.data
        if minutes != tenant.low_balance_threshold:
            tenant_service.set_threshold(tenant=tenant, actor=current_actor(), minutes=minutes)
            flash(
                f"credits.low now fires when the balance falls below {minutes} minutes.", "success"
            )
        else:
            flash("Nothing to save: the threshold is unchanged.", "info")
        return redirect(url_for("dashboard.tenant_settings"))
    status = 422 if request.method == "POST" else 200
    return render_template(
        "dashboard/settings/tenant.html",
        tenant=tenant,
        form=form,
        rate_limit=tenant_service.rate_limit_of(tenant),
    ), status


@bp.route("/settings/api-keys", methods=["GET", "POST"])
def api_keys():
    form = CreateKeyForm()
    created = None
    status = 200
    if form.validate_on_submit():
        if not first_sending():
            flash(ALREADY_SENT, "info")
            return redirect(url_for("dashboard.api_keys"))
        days = int(form.expires.data) if form.expires.data else None
        record, key = key_service.create_key(
            tenant=g.tenant,
            actor=current_actor(),
            name=form.name.data,
            scope=form.scope.data,
            expires_in_days=days,
        )
        # Shown in this answer only: the key is never stored, and never shown again.
        created = {"record": record, "key": key}
        form = CreateKeyForm(formdata=None)
        status = 201
    elif request.method == "POST":
        status = 422
    keys = key_service.list_keys(tenant=g.tenant)
    response = make_response(
        render_template("dashboard/settings/api_keys.html", form=form, keys=keys, created=created),
        status,
    )
    response.headers["Cache-Control"] = "no-store"  # the once-shown key stays out of caches
    return response


class RevokeKey(ConfirmView):
    """GET asks for confirmation; POST revokes (effective on the key's next request)."""

    changers_only = False

    def find(self, key_id: str) -> ApiKey:
        return key_service.get_key(tenant=g.tenant, key_id=key_id)

    def confirmation(self, record: ApiKey) -> Confirmation:
        return Confirmation(
            title=f"Revoke key {record.name}?",
            question=f"Requests with the key {record.prefix}… are refused (401) from the next "
            "one on. This cannot be undone.",
            button="Revoke",
            cancel=url_for("dashboard.api_keys"),
        )

    def act(self, record: ApiKey) -> ResponseReturnValue:
        record, _ = key_service.revoke_key(key_id=record.id, actor=current_actor())
        flash(f"The key {record.name} ({record.prefix}…) is revoked.", "success")
        return redirect(url_for("dashboard.api_keys"))


bp.add_url_rule("/settings/api-keys/<key_id>/revoke", view_func=RevokeKey.as_view("revoke_key"))


@bp.route("/settings/team", methods=["GET", "POST"])
@owner_only
def team():
    form = AddUserForm()
    status = 200
    if form.validate_on_submit():
        user = user_service.create_user(
            tenant=g.tenant,
            actor=current_actor(),
            email=form.email.data,
            password=form.password.data,
            role=form.role.data,
        )
        flash(f"{user.email} can now sign in as {user.role}.", "success")
        return redirect(url_for("dashboard.team"))
    if request.method == "POST":
        status = 422
    users = user_service.list_users(tenant=g.tenant)
    role_forms = {user.id: RoleForm(formdata=None, role=user.role) for user in users}
    return render_template(
        "dashboard/settings/team.html", form=form, users=users, role_forms=role_forms
    ), status


@bp.route("/settings/team/<user_id>/role", methods=["POST"])
@owner_only
def change_role(user_id: str):
    user = user_service.get_user(tenant=g.tenant, user_id=user_id)
    form = RoleForm()
    if not form.validate_on_submit():
        abort(422, "Choose one of the roles.")
    if user.id == g.user.id and form.role.data != "owner":
        abort(409, "You cannot take away your own owner role; another owner can.")
    user = user_service.set_role(user=user, actor=current_actor(), role=form.role.data)
    flash(f"{user.email} is now {user.role}.", "success")
    return redirect(url_for("dashboard.team"))


class DisableUser(ConfirmView):
    """GET asks for confirmation; POST disables the user and ends their sessions."""

    decorators = [owner_only]

    def find(self, user_id: str) -> User:
        user = user_service.get_user(tenant=g.tenant, user_id=user_id)
        if user.id == g.user.id:
            abort(409, "You cannot disable yourself; another owner can.")
        return user

    def confirmation(self, user: User) -> Confirmation:
        return Confirmation(
            title=f"Disable {user.email}?",
            question="They can no longer sign in, and their open sessions end at once.",
            button="Disable",
            cancel=url_for("dashboard.team"),
        )

    def act(self, user: User) -> ResponseReturnValue:
        user, _ = user_service.disable(user=user, actor=current_actor())
        flash(f"{user.email} is disabled and signed out.", "success")
        return redirect(url_for("dashboard.team"))


bp.add_url_rule("/settings/team/<user_id>/disable", view_func=DisableUser.as_view("disable_user"))


@bp.route("/settings/team/<user_id>/enable", methods=["POST"])
@owner_only
def enable_user(user_id: str):
    """Let a disabled user sign in again."""
    user = user_service.get_user(tenant=g.tenant, user_id=user_id)
    user, _ = user_service.enable(user=user, actor=current_actor())
    flash(f"{user.email} can sign in again, as {user.role}.", "success")
    return redirect(url_for("dashboard.team"))


class AuditPageArgsSchema(PageArgsSchema):
    """The audit log page's filters, as GET /api/v1/audit-log takes them."""

    action = ma.fields.String(
        validate=ma.validate.Regexp(ACTION, error="Not an action name such as agent.updated.")
    )
    actor_type = ma.fields.String(validate=ma.validate.OneOf(audit.ACTOR_TYPES))
    since = DateOrTimestamp()


AUDIT_ARGS = AuditPageArgsSchema()
AUDIT_FILTERS = ("action", "actorType", "since")
# The page of each kind of target, by the first part of the action (agent.updated: agent).
TARGET_PAGES: dict[str, tuple[Any, str, str]] = {
    "agent": (Agent, "dashboard.agent", "agent_id"),
    "webhook": (Webhook, "dashboard.webhook", "webhook_id"),
    "call": (Call, "dashboard.call", "call_id"),
    "campaign": (Campaign, "dashboard.campaign", "campaign_id"),
}
# Targets listed on one page of their kind rather than a page of their own.
TARGET_LISTS = {
    "key": "dashboard.api_keys",
    "number": "dashboard.phone_numbers",
    "user": "dashboard.team",
    "credits": "dashboard.credits",
    "tenant": "dashboard.tenant_settings",
}


def _target_links(entries: list[Any]) -> dict[str, str]:
    """The page of each entry's target that still exists, by the entry's id: one query per
    kind of target on the page."""
    ids: dict[str, set[str]] = {}
    for entry in entries:
        if entry.target_id:
            ids.setdefault(entry.action.split(".")[0], set()).add(entry.target_id)
    found: dict[tuple[str, str], str | None] = {}
    for kind, (model, endpoint, key) in TARGET_PAGES.items():
        wanted = ids.get(kind)
        if not wanted:
            continue
        query = model.select(model.id).where((model.tenant == g.tenant) & model.id.in_(wanted))
        if model is Agent:
            query = query.where(Agent.deleted_at.is_null())
        for row in query:
            found[(kind, row.id)] = page_url(endpoint, **{key: row.id})
    if ids.get("function"):
        functions = Function.select(Function.id, Function.agent, Function.name).where(
            (Function.tenant == g.tenant) & Function.id.in_(ids["function"])
        )
        for function in functions:
            found[("function", function.id)] = page_url(
                "dashboard.function_settings", agent_id=function.agent_id, name=function.name
            )
    for kind, endpoint in TARGET_LISTS.items():
        for target in ids.get(kind, ()):
            found[(kind, target)] = page_url(endpoint)
    links = {}
    for entry in entries:
        url = found.get((entry.action.split(".")[0], entry.target_id or ""))
        if url:
            links[entry.id] = url
    return links


@bp.route("/settings/audit-log")
@owner_only
def audit_log():
    query = read_query(AUDIT_ARGS, AUDIT_FILTERS)
    page = previous = following = None
    links: dict[str, str] = {}
    if not query.errors:
        page = audit.list_entries(tenant=g.tenant, **query.args)
        previous, following = page_links("dashboard.audit_log", query, page)
        links = _target_links(page.items)
    return render_template(
        "dashboard/settings/audit_log.html",
        query=query,
        page=page,
        previous=previous,
        following=following,
        links=links,
        actor_types=audit.ACTOR_TYPES,
    ), (422 if query.errors else 200)
