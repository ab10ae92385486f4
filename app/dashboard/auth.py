"""Signing in and out of the dashboard."""

from flask import flash, redirect, render_template, request, session, url_for

from app.dashboard import bp
from app.dashboard.forms import SignInForm
from app.services import users as user_service

FAILED = "Wrong email or password."


def _next_page() -> str:
    """Where to go after signing in: a dashboard page of this site, else the overview."""
    target = request.args.get("next", "")
    if target.startswith("/dashboard") and not target.startswith("//"):
        return target
    return url_for("dashboard.overview")


@bp.route("/sign-in", methods=["GET", "POST"])
def sign_in():
    form = SignInForm()
    status = 200
    if form.validate_on_submit():
        user = user_service.authenticate(email=form.email.data, password=form.password.data)
        if user is not None:
            # A new session at every sign-in: nothing of an earlier one carries over.
            session.clear()
            session.permanent = True
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
    session.clear()
    flash("You have signed out.", "info")
    return redirect(url_for("dashboard.sign_in"))
