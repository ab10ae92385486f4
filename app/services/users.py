"""Dashboard users: accounts of a tenant's people, their roles and their passwords.

Passwords are stored as werkzeug's scrypt hashes and never logged. Signing in compares a
hash even for an unknown email, so the answer takes as long either way.
"""

import secrets
from datetime import timedelta

from werkzeug.security import check_password_hash, generate_password_hash

from app.db import unit_of_work
from app.errors import Conflict, NotFound, ValidationFailed
from app.models import Tenant, User, UserSession
from app.services import audit, limits
from app.services.audit import Actor
from app.util import new_id, utcnow

ROLES = ("owner", "admin", "viewer")
# What each role may do: owners everything, admins all but users, viewers read only.
CAN_CHANGE = {"owner", "admin"}
MIN_PASSWORD_LENGTH = 10
# A dashboard session ends a week after sign-in at the latest, however active (the cookie
# itself ends after 12 idle hours); older rows are pruned.
SESSION_MAX_AGE = timedelta(days=7)
MAX_PASSWORD_LENGTH = 1024
# Compared against when the email is unknown, so both answers cost one hash check.
_NOBODY = generate_password_hash("no such user")


def normalise_email(email: str) -> str:
    return email.strip().lower()


def _check_email(email: str) -> str:
    email = normalise_email(email)
    local, at, domain = email.partition("@")
    if not at or not local or "." not in domain or len(email) > 254 or " " in email:
        raise ValidationFailed(f"{email!r} is not an email address.", details={"email": email})
    return email


def _check_password(password: str) -> None:
    if not MIN_PASSWORD_LENGTH <= len(password) <= MAX_PASSWORD_LENGTH:
        raise ValidationFailed(
            f"A password has {MIN_PASSWORD_LENGTH} to {MAX_PASSWORD_LENGTH} characters."
        )


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ValidationFailed(f"A role is one of {', '.join(ROLES)}.")


def create_user(*, tenant: Tenant, actor: Actor, email: str, password: str, role: str) -> User:
    """A new user of tenant; Conflict when the email is taken (by any tenant)."""
    email = _check_email(email)
    _check_password(password)
    _check_role(role)
    password_hash = generate_password_hash(password)  # slow on purpose: before the transaction
    with unit_of_work():
        if User.select().where(User.email == email).exists():
            raise Conflict(f"A user with the email {email} exists already.")
        limits.check(tenant.id, "users")
        user = User.create(
            id=new_id("usr"), tenant=tenant, email=email, password_hash=password_hash, role=role
        )
        audit.write(
            actor,
            tenant_id=tenant.id,
            action="user.created",
            target_id=user.id,
            details={"email": email, "role": role},
        )
    return user


def user_with_email(email: str) -> User | None:
    return User.get_or_none(User.email == normalise_email(email))


def find_user(email: str) -> User:
    user = user_with_email(email)
    if user is None:
        raise NotFound(f"No user with the email {email!r}.")
    return user


def get_user(*, tenant: Tenant, user_id: str) -> User:
    """The tenant's user, or NotFound (also for another tenant's user)."""
    user = User.get_or_none((User.id == user_id) & (User.tenant == tenant))
    if user is None:
        raise NotFound(f"User {user_id} not found.")
    return user


def list_users(*, tenant: Tenant | None = None) -> list[User]:
    query = User.select()
    if tenant is not None:
        query = query.where(User.tenant == tenant)
    return list(query.order_by(User.created_at, User.id))


def authenticate(*, email: str, password: str) -> User | None:
    """The active user with that email and password, or None (same cost either way)."""
    user = User.get_or_none(User.email == normalise_email(email))
    if user is None:
        check_password_hash(_NOBODY, password)
        return None
    if not check_password_hash(user.password_hash, password) or user.disabled_at is not None:
        return None
    return user


def sign_in(*, email: str, password: str, address: str | None) -> tuple[User, str] | None:
    """The user these credentials sign in and their new server-side session's id (for the
    cookie), or None; either way an audit entry (failures count towards the sign-in throttle,
    by email and by address)."""
    user = authenticate(email=email, password=password)  # the hash check, before the transaction
    with unit_of_work():
        if user is None:
            owner = user_with_email(email)
            audit.write(
                Actor(type="user", label=email, address=address),
                tenant_id=owner.tenant_id if owner else None,
                action="user.sign_in_failed",
                target_id=owner.id if owner else None,
            )
            return None
        User.update(last_sign_in_at=utcnow()).where(User.id == user.id).execute()
        session_id = secrets.token_urlsafe(32)
        UserSession.create(id=session_id, user=user.id)
        audit.write(
            Actor.user(user, address),
            tenant_id=user.tenant_id,
            action="user.signed_in",
            target_id=user.id,
        )
    return user, session_id


def sign_out(*, user: User, session_id: str, actor: Actor) -> None:
    """The user's session ends on the server, whoever holds a copy of its cookie."""
    with unit_of_work():
        ended = (
            UserSession.delete()
            .where((UserSession.id == session_id) & (UserSession.user == user.id))
            .execute()
        )
        if ended:
            audit.write(
                actor, tenant_id=user.tenant_id, action="user.signed_out", target_id=user.id
            )


def session_user(*, session_id: str, user_id: str, version: int) -> User | None:
    """The user a dashboard session names, while that session is still valid for them: not
    signed out, younger than SESSION_MAX_AGE, and the user neither disabled nor given a new
    password since."""
    return (
        User.select(User, Tenant)
        .join(Tenant)
        .switch(User)
        .join(UserSession)
        .where(
            (UserSession.id == session_id)
            & (UserSession.created_at > utcnow() - SESSION_MAX_AGE)
            & (User.id == user_id)
            & (User.session_version == version)
            & User.disabled_at.is_null()
        )
        .first()
    )


def _end_sessions(user_id: str) -> None:
    UserSession.delete().where(UserSession.user == user_id).execute()


def set_password(*, user: User, actor: Actor, password: str) -> User:
    """A new password; the user's other sessions end."""
    _check_password(password)
    password_hash = generate_password_hash(password)  # slow on purpose: before the transaction
    with unit_of_work():
        User.update(password_hash=password_hash, session_version=User.session_version + 1).where(
            User.id == user.id
        ).execute()
        _end_sessions(user.id)
        audit.write(actor, tenant_id=user.tenant_id, action="user.password_set", target_id=user.id)
    return User.get_by_id(user.id)


def set_role(*, user: User, actor: Actor, role: str) -> User:
    """Give the user another role (the same one again changes nothing)."""
    _check_role(role)
    with unit_of_work():
        changed = User.update(role=role).where((User.id == user.id) & (User.role != role)).execute()
        if changed:
            audit.write(
                actor,
                tenant_id=user.tenant_id,
                action="user.role_changed",
                target_id=user.id,
                details=audit.fields(("role",)),
            )
    return User.get_by_id(user.id)


def enable(*, user: User, actor: Actor) -> tuple[User, bool]:
    """Let a disabled user sign in again, with the password they had; whether this call
    enabled them. Sessions ended by the disabling stay ended."""
    with unit_of_work():
        changed = (
            User.update(disabled_at=None)
            .where((User.id == user.id) & User.disabled_at.is_null(False))
            .execute()
        )
        if changed:
            audit.write(actor, tenant_id=user.tenant_id, action="user.enabled", target_id=user.id)
    return User.get_by_id(user.id), bool(changed)


def disable(*, user: User, actor: Actor) -> tuple[User, bool]:
    """Disable the user and end their sessions; whether this call disabled them."""
    with unit_of_work():
        changed = (
            User.update(disabled_at=utcnow(), session_version=User.session_version + 1)
            .where((User.id == user.id) & User.disabled_at.is_null())
            .execute()
        )
        _end_sessions(user.id)
        if changed:
            audit.write(actor, tenant_id=user.tenant_id, action="user.disabled", target_id=user.id)
    return User.get_by_id(user.id), bool(changed)
