"""The tenant dashboard (/dashboard): server-rendered pages over the same services as the API.

Signed-in users only (a session cookie; the API stays sessionless). Every request that
changes something carries the form's CSRF token, checked here for the whole blueprint, and
only owners and admins may send one. Another tenant's ids are 404, as in the API.
"""

import logging
import secrets
from functools import wraps
from typing import Any

import peewee as pw
from flask import (
    Blueprint,
    Response,
    abort,
    current_app,
    g,
    make_response,
    redirect,
    render_template,
    request,
    send_from_directory,
    session,
    url_for,
)
from flask_wtf.csrf import CSRFError, CSRFProtect
from werkzeug.exceptions import HTTPException

from app import errors
from app.errors import AppError
from app.resources.guards import refuse_nul_characters
from app.services import audit
from app.services import secrets as secret_service
from app.services import users as user_service
from app.util import utcnow

log = logging.getLogger(__name__)

bp = Blueprint(
    "dashboard",
    __name__,
    url_prefix="/dashboard",
    static_folder="static",
    static_url_path="/static",
)
csrf = CSRFProtect()

# Pages anyone may open: signing in, and the stylesheet it uses.
PUBLIC_ENDPOINTS = {"dashboard.sign_in", "dashboard.static"}
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
# Forms every signed-in user may send, viewers too.
OWN_SESSION_ENDPOINTS = {"dashboard.sign_out"}
DEFAULT_SECRET_KEYS = {None, "", "change-me"}


@bp.before_request
def require_user() -> Any:
    """Load the signed-in user (g.user, g.tenant); send everyone else to sign in.

    Changes need a valid CSRF token and a role that may change things (viewers read only).
    """
    if current_app.config.get("SECRET_KEY") in DEFAULT_SECRET_KEYS:
        abort(503, "The dashboard is off until SECRET_KEY is set (see docs/configuration.md).")
    if request.method not in SAFE_METHODS:
        csrf.protect()
    # A NUL names nothing (404); PostgreSQL could not even compare an id holding one.
    refuse_nul_characters()
    g.user = _session_user()
    g.tenant = g.user.tenant if g.user is not None else None
    if request.endpoint in PUBLIC_ENDPOINTS:
        return None
    if g.user is None:
        return redirect(url_for("dashboard.sign_in", next=request.full_path.rstrip("?")))
    if (
        request.method not in SAFE_METHODS
        and request.endpoint not in OWN_SESSION_ENDPOINTS
        and g.user.role not in user_service.CAN_CHANGE
    ):
        abort(403, "Your role can view this tenant but not change it.")
    return None


def _session_user():
    session_id = session.get("session_id")
    user_id, version = session.get("user_id"), session.get("session_version")
    if not (isinstance(session_id, str) and isinstance(user_id, str) and isinstance(version, int)):
        return None
    return user_service.session_user(session_id=session_id, user_id=user_id, version=version)


def owner_only(view):
    """For pages only the tenant's owners may open (Team, Audit log)."""

    @wraps(view)
    def wrapped(*args, **kwargs):
        if g.user.role != "owner":
            abort(403, "Only the tenant's owners may open this page.")
        return view(*args, **kwargs)

    return wrapped


def require_change() -> None:
    """For the pages that only lead to a change (a form to fill, a confirmation): viewers are
    refused them too, as they are every request that changes something."""
    if not can_change():
        abort(403, "Your role can view this tenant but not change it.")


def current_actor() -> audit.Actor:
    """Who makes a change from the dashboard: the signed-in user, from the client's address;
    services write it in their audit entry."""
    return audit.Actor.user(g.user, request.remote_addr)


# A form that creates something and shows a secret once is answered with the page itself
# (the secret never goes into the session cookie, which is signed, not encrypted). Reloading
# that page would send the form again: each such form carries an id of its own, and a second
# sending of the same id creates nothing.
FORM_ID = "form_id"
SENT_FORMS = "sent_forms"
SENT_FORMS_KEPT = 20
ALREADY_SENT = "This form was sent already (the page was reloaded): nothing new was created."


# The choices of a secret rotation's overlap (hours, label), and the one chosen unless changed.
OVERLAPS = (
    (1, "1 hour"),
    (24, "24 hours"),
    (72, "3 days"),
    (168, "a week"),
    (0, "no time: it stops at once"),
)


def rotation_page(*, title: str, question: str, action: str, cancel: str, back: str) -> str:
    """The confirmation of a secret's rotation, with the choice of its overlap."""
    return render_template(
        "dashboard/rotate_secret.html",
        title=title,
        question=question,
        action=action,
        cancel=cancel,
        back=back,
        overlaps=OVERLAPS,
        default_overlap=secret_service.DEFAULT_OVERLAP_HOURS,
    )


def secret_page(body: str, status: int = 200) -> Response:
    """A page that shows a secret once: kept by no cache."""
    response = make_response(body, status)
    response.headers["Cache-Control"] = "no-store"
    return response


def new_form_id() -> str:
    return secrets.token_urlsafe(16)


def first_sending() -> bool:
    """Whether this POST's form id has not been sent before in this session; notes it."""
    sent = request.form.get(FORM_ID, "")
    seen = session.get(SENT_FORMS, [])
    if not sent or sent in seen:
        return False
    session[SENT_FORMS] = [*seen[-(SENT_FORMS_KEPT - 1) :], sent]
    return True


def can_change() -> bool:
    """Whether the signed-in user may change things: templates show buttons only then."""
    user = g.get("user")
    return user is not None and user.role in user_service.CAN_CHANGE


# The main menu: every page that exists, in this order; Team, Audit log and Settings are for
# owners only.
NAVIGATION = (
    ("dashboard.overview", "Overview"),
    ("dashboard.calls", "Calls"),
    ("dashboard.campaigns", "Campaigns"),
    ("dashboard.agents", "Agents"),
    ("dashboard.phone_numbers", "Phone numbers"),
    ("dashboard.credits", "Credits"),
    ("dashboard.usage", "Usage"),
    ("dashboard.webhooks", "Webhooks"),
    ("dashboard.whatsapp_accounts", "WhatsApp"),
    ("dashboard.api_keys", "API keys"),
    ("dashboard.team", "Team"),
    ("dashboard.audit_log", "Audit log"),
    ("dashboard.tenant_settings", "Settings"),
)
OWNER_PAGES = {"dashboard.team", "dashboard.audit_log", "dashboard.tenant_settings"}


def navigation() -> list[tuple[str, str]]:
    user = g.get("user")
    return [
        (endpoint, label)
        for endpoint, label in NAVIGATION
        if endpoint in current_app.view_functions
        and (endpoint not in OWNER_PAGES or (user is not None and user.role == "owner"))
    ]


@bp.app_context_processor
def dashboard_context() -> dict[str, Any]:
    return {
        "can_change": can_change,
        "navigation": navigation,
        "now": utcnow,
        "new_form_id": new_form_id,
    }


@bp.errorhandler(CSRFError)
def csrf_failed(error: CSRFError):
    message = (
        "This form has expired or did not come from this dashboard. Reload the page and try again."
    )
    return render_template("dashboard/error.html", status=400, message=message), 400


@bp.errorhandler(AppError)
def app_error(error: AppError):
    return render_template("dashboard/error.html", status=error.status, message=error.message), (
        error.status
    )


@bp.errorhandler(HTTPException)
def http_error(error: HTTPException):
    status = error.code or 500
    return render_template("dashboard/error.html", status=status, message=error.description), (
        status
    )


def routing_error(error: HTTPException):
    """An error raised before any view was chosen (a URL that matched no page) reaches only the
    app's handlers: under /dashboard/ it is an HTML page like the dashboard's own errors,
    elsewhere the API's error body."""
    if request.path.startswith("/dashboard/"):
        return http_error(error)
    return errors.handle_http_exception(error)


def front_page():
    """What the service's address shows in a browser: the dashboard (its sign-in page)."""
    return redirect(url_for("dashboard.overview"))


def favicon() -> Response:
    """The icon browsers ask every site for (/favicon.ico), the dashboard's pages link it."""
    assert bp.static_folder is not None
    return send_from_directory(
        bp.static_folder, "favicon.ico", mimetype="image/vnd.microsoft.icon", max_age=24 * 3600
    )


# Every dashboard answer: not to be framed (clickjacking), no content sniffing, only the
# service's own scripts, styles and images, forms posted only here, no referrer elsewhere.
SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
}


@bp.after_request
def add_security_headers(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    return response


@bp.errorhandler(Exception)
def unexpected_error(error: Exception):
    log.exception("unhandled error", exc_info=error)
    message = "Something went wrong on our side; it has been logged. Try again in a moment."
    return render_template("dashboard/error.html", status=500, message=message), 500


@bp.errorhandler(pw.IntegrityError)
def integrity_error(error: pw.IntegrityError):
    """A write refused by a unique index or a foreign key (a race): a conflict, as in the API."""
    conflict = errors.integrity_conflict(error)
    return unexpected_error(error) if conflict is None else app_error(conflict)


def init_app(app) -> None:
    """Register the dashboard; CSRF is checked by the blueprint itself (require_user), so the
    JSON API, which authenticates with headers, is untouched."""
    app.config.setdefault("WTF_CSRF_CHECK_DEFAULT", False)
    csrf.init_app(app)
    from app.dashboard import (  # noqa: F401  (views register on bp)
        agents,
        analysis,
        auth,
        call_permissions,
        calls,
        campaigns,
        credits,
        formats,
        functions,
        overview,
        phone_numbers,
        settings,
        usage,
        versions,
        webhooks,
        whatsapp,
    )

    app.register_blueprint(bp)
    app.register_error_handler(HTTPException, routing_error)  # replaces errors.py's own
    app.add_url_rule("/", "front_page", front_page)
    app.add_url_rule("/favicon.ico", "favicon", favicon)
