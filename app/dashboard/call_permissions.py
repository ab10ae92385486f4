"""A WhatsApp number's call permissions: check a user's, and ask a user for one."""

from flask import flash, g, redirect, render_template, request, url_for
from werkzeug.datastructures import MultiDict

from app.dashboard import bp, current_actor
from app.dashboard.formdata import Errors, load_form
from app.errors import AppError
from app.models import PhoneNumber
from app.resources.phone_numbers.schemas import CallPermissionRequestSchema
from app.services import phone_numbers as number_service
from app.services.whatsapp import permissions

REQUEST_FORM_FIELDS = ("to", "text")


def _whatsapp_number(number_id: str) -> PhoneNumber:
    number = number_service.get_number(tenant=g.tenant, number_id=number_id)
    permissions.require_whatsapp(number)
    return number


def _page(
    number: PhoneNumber,
    *,
    values: MultiDict,
    errors: Errors | None = None,
    permission: permissions.Permission | None = None,
) -> str:
    return render_template(
        "dashboard/phone_numbers/call_permissions.html",
        number=number,
        values=values,
        errors=errors or {},
        permission=permission,
        default_text=permissions.DEFAULT_TEXT,
    )


@bp.route("/phone-numbers/<number_id>/call-permissions")
def call_permissions(number_id: str):
    """The page; with ?to=, Meta's answer about calling that user (kept, as by the API)."""
    number = _whatsapp_number(number_id)
    if not request.args.get("to"):
        return _page(number, values=MultiDict())
    fields, errors = load_form(CallPermissionRequestSchema(only=("to",)), request.args)
    if errors:
        return _page(number, values=request.args, errors=errors), 422
    try:
        permission = permissions.check(tenant=g.tenant, number_id=number.id, to=fields["to"])
    except AppError as exc:  # Meta failed or refused
        return _page(number, values=request.args, errors={"_schema": [exc.message]}), exc.status
    return _page(number, values=request.args, permission=permission)


@bp.route("/phone-numbers/<number_id>/call-permission-requests", methods=["POST"])
def request_call_permission(number_id: str):
    """Ask a WhatsApp user for call permission: an interactive request with the text given."""
    number = _whatsapp_number(number_id)
    form = request.form.copy()
    if not form.get("text", "").strip():
        form.pop("text", None)
    fields, errors = load_form(CallPermissionRequestSchema(only=REQUEST_FORM_FIELDS), form)
    if errors:
        return _page(number, values=request.form, errors=errors), 422
    try:
        permissions.request_permission(
            tenant=g.tenant, actor=current_actor(), number_id=number.id, **fields
        )
    except AppError as exc:  # Meta's limit, the 24-hour window, Meta failing
        return _page(number, values=request.form, errors={"_schema": [exc.message]}), exc.status
    flash(f"Call permission requested from {fields['to']}.", "success")
    return redirect(url_for("dashboard.call_permissions", number_id=number.id, to=fields["to"]))
