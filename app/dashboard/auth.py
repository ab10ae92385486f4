"""Signing in and out of the dashboard."""

import re
from datetime import timedelta

from flask import flash, g, redirect, render_template, request, session, url_for

from app.dashboard import bp, current_actor
from app.dashboard.forms import SignInForm
from app.services import audit
from app.services import users as user_service
from app.util import utcnow

FAILED = "Wrong email or password."
THROTTLED = "Too many failed sign-ins. Wait 15 minutes, then try again."
# Where sign-in may lead: a plain path of the dashboard, with an optional plain query (no
# scheme, no host, no "//", no backslash, no control character).
NEXT_PAGE = re.compile(r"/dashboard(?!.*//)(/[A-Za-z0-9._~%/-]*)?(\?[A-Za-z0-9._~%&=+-]*)?")
# Failed sign-ins allowed per email and per address in the window, before a wait.
MAX_FAILURES = 5
FAILURE_WINDOW = timedelta(minutes=15)


def _throttled(email: str, address: str | None) -> bool:
    """Whether this email or this address has failed MAX_FAILURES times in the window; the
    same for emails nobody has, so the answer reveals no account."""
    since = utcnow() - FAILURE_WINDOW
    failed = "user.sign_in_failed"
    if audit.count_recent(action=failed, since=since, email=email) >= MAX_FAILURES:
        return True
    return (
        address is not None
        and audit.count_recent(action=failed, since=since, address=address) >= MAX_FAILURES
    )


def _next_page() -> str:
    """Where to go after signing in: a dashboard page of this site, else the overview."""
    target = request.args.get("next", "")
    if NEXT_PAGE.fullmatch(target):
        return target
    return url_for("dashboard.overview")


@bp.route("/sign-in", methods=["GET", "POST"])
def sign_in():
    form = SignInForm()
    status = 200
    if form.validate_on_submit():
        email = user_service.normalise_email(form.email.data)
        if _throttled(email, request.remote_addr):
            flash(THROTTLED, "error")
            return render_template("dashboard/sign_in.html", form=form), 429
        signed_in = user_service.sign_in(
            email=email, password=form.password.data, address=request.remote_addr
        )
        if signed_in is not None:
            user, session_id = signed_in
            # A new session at every sign-in: nothing of an earlier one carries over.
            session.clear()
            session.permanent = True
            session["session_id"] = session_id
            session["user_id"] = user.id
            session["session_version"] = user.session_version
            return redirect(_next_page())
        flash(FAILED, "error")
        status = 401
    elif request.method == "POST":
        status = 400
    return render_template("dashboard/sign_in.html", form=form), status


@bp.route("/sign-out", methods=["POST"])
def sign_out():
    # A copy of the cookie is refused from now on.
    user_service.sign_out(user=g.user, session_id=session["session_id"], actor=current_actor())
    session.clear()
    flash("You have signed out.", "info")
    return redirect(url_for("dashboard.sign_in"))
