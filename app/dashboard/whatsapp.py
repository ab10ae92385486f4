"""WhatsApp Business accounts: link one (its numbers imported), import again, rotate the
access token, unlink. The secrets are typed into password fields and never shown again."""

from flask import flash, g, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from app.dashboard import ALREADY_SENT, bp, current_actor, first_sending
from app.dashboard.confirm import Confirmation, ConfirmView
from app.dashboard.forms import LinkWhatsAppForm, WhatsAppTokenForm
from app.errors import AppError
from app.models import WhatsAppAccount
from app.services.whatsapp import accounts as account_service
from app.services.whatsapp.accounts import Imported

PAGE = "dashboard.whatsapp_accounts"


def _imported(imported: Imported, verb: str) -> None:
    """Flash what an import did, and each number it skipped with its reason."""
    flash(
        f"{verb}: {imported.added} numbers added, {imported.updated} updated, "
        f"{imported.deactivated} deactivated.",
        "success",
    )
    for skipped in imported.skipped:
        flash(f"Not imported: {skipped['display_number']}: {skipped['reason']}", "info")


def _page(form: LinkWhatsAppForm, status: int) -> ResponseReturnValue:
    accounts = account_service.list_accounts(tenant=g.tenant)
    numbers = {account.id: account_service.numbers_of(account) for account in accounts}
    token_form = WhatsAppTokenForm(formdata=None)
    return render_template(
        "dashboard/settings/whatsapp.html",
        form=form,
        accounts=accounts,
        numbers=numbers,
        token_form=token_form,
    ), status


@bp.route("/settings/whatsapp", methods=["GET", "POST"])
def whatsapp_accounts():
    """The linked accounts with their numbers, and the form that links another."""
    form = LinkWhatsAppForm()
    if request.method == "GET":
        return _page(form, 200)
    if not form.validate_on_submit():
        return _page(form, 422)
    if not first_sending():
        flash(ALREADY_SENT, "info")
        return redirect(url_for(PAGE))
    try:
        imported = account_service.link(
            tenant=g.tenant,
            actor=current_actor(),
            waba_id=form.waba_id.data,
            access_token=form.access_token.data,
            app_secret=form.app_secret.data,
            label=form.label.data or "",
        )
    except AppError as exc:  # Meta's refusal, a conflict, the cap, no SECRETS_KEY
        flash(exc.message, "error")
        return _page(form, exc.status)
    _imported(imported, f"Linked {imported.account.waba_id}")
    return redirect(url_for(PAGE))


@bp.route("/settings/whatsapp/<account_id>/sync", methods=["POST"])
def sync_whatsapp_account(account_id: str):
    """Import the account's numbers again; Meta's refusal is shown on the page."""
    account = account_service.get_account(tenant=g.tenant, account_id=account_id)
    try:
        imported = account_service.sync(
            tenant=g.tenant, actor=current_actor(), account_id=account.id
        )
    except AppError as exc:
        flash(f"Nothing was changed: {exc.message}", "error")
        return _page(LinkWhatsAppForm(formdata=None), exc.status)
    _imported(imported, f"Synced {account.waba_id}")
    return redirect(url_for(PAGE))


@bp.route("/settings/whatsapp/<account_id>/token", methods=["POST"])
def rotate_whatsapp_token(account_id: str):
    """Replace the access token: tried against Meta first, kept only when Meta accepts it."""
    account = account_service.get_account(tenant=g.tenant, account_id=account_id)
    form = WhatsAppTokenForm()
    if not form.validate_on_submit():
        flash("Enter the new access token (8 to 4,096 characters).", "error")
        return _page(LinkWhatsAppForm(formdata=None), 422)
    try:
        account = account_service.update(
            tenant=g.tenant,
            actor=current_actor(),
            account_id=account.id,
            access_token=form.access_token.data,
        )
    except AppError as exc:
        flash(f"The token was not changed: {exc.message}", "error")
        return _page(LinkWhatsAppForm(formdata=None), exc.status)
    flash(f"The access token of {account.waba_id} is now …{account.token_hint}.", "success")
    return redirect(url_for(PAGE))


class UnlinkWhatsAppAccount(ConfirmView):
    """GET asks for confirmation; POST unlinks (the numbers stay, inactive)."""

    def find(self, account_id: str) -> WhatsAppAccount:
        return account_service.get_account(tenant=g.tenant, account_id=account_id)

    def confirmation(self, account: WhatsAppAccount) -> Confirmation:
        return Confirmation(
            title=f"Unlink WhatsApp Business account {account.waba_id}?",
            question="Its numbers stop taking calls (they stay, inactive, with their calls) "
            "and the stored access token and app secret are erased. Linking it again takes "
            "the numbers back.",
            button="Unlink",
            cancel=url_for(PAGE),
        )

    def act(self, account: WhatsAppAccount) -> ResponseReturnValue:
        account_service.unlink(tenant=g.tenant, actor=current_actor(), account_id=account.id)
        flash(f"WhatsApp Business account {account.waba_id} is unlinked.", "success")
        return redirect(url_for(PAGE))


bp.add_url_rule(
    "/settings/whatsapp/<account_id>/unlink",
    view_func=UnlinkWhatsAppAccount.as_view("unlink_whatsapp_account"),
)
