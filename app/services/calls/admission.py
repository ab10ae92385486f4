"""Admission and the agent session: the number a call reaches, whether the call is admitted
(a credit hold and a concurrent-call slot, read under the tenant row's lock), and the session
the runtime runs it with, its variables filled into the agent's prompt and greeting."""

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import peewee as pw

from app.errors import Conflict, ValidationFailed
from app.models import Agent, AgentVersion, Call, PhoneNumber, Tenant
from app.services import billing, events, snapshots
from app.services import tenants as tenant_service
from app.services.calls.constants import MAX_SESSION_BYTES, VARIABLE_NAME
from app.util import new_id, utcnow

REJECTIONS = ("no_agent", "concurrency_limit", "no_credits")
REJECTION_MESSAGES = {
    "no_agent": "No active agent answers this number; the call was recorded as failed.",
    "concurrency_limit": "The tenant has as many calls in progress as its plan allows; "
    "the call was recorded as failed.",
    "no_credits": "The tenant has no credit minutes left; the call was recorded as failed.",
}

# {{name}} in an agent's systemPrompt and greetingText, filled from the call's variables.
PLACEHOLDER = re.compile(r"\{\{(" + VARIABLE_NAME + r")\}\}")

# What a session is made of: an agent's version (app.models.AgentVersion).
SESSION_FIELDS = (
    "version",
    "system_prompt",
    "voice_id",
    "greeting_text",
    "language",
    "escalation_number",
    "tools_enabled",
    "max_call_duration_minutes",
    "function_digests",
)


@dataclass(frozen=True)
class StartedCall:
    """A call handed to the runtime (started, or claimed by dispatch) with its session."""

    call: Call
    session: dict[str, Any]
    created: bool  # False when a repeated providerCallId returned the existing call


@dataclass(frozen=True)
class Line:
    """A provisioned number as a new call needs it."""

    id: str
    tenant_id: str
    display_number: str
    agent_id: str | None  # the assigned agent, also when it cannot answer
    # The version of the agent that answers: its call-facing fields and functions. None when
    # the number or its agent is inactive (or the agent has no such version).
    answering: AgentVersion | None
    active_agent_id: str | None  # the assigned agent when it may answer


def find_line(did: str, agent_version: int | None = None) -> Line | None:
    """The number did with the version of its agent that answers, or None when nobody has it.

    One query: the number, the agent that answers it (an active number's active, undeleted
    agent) and that agent's version for the call: agent_version when given (a simulation),
    else the number's pinned one, else the agent's latest.
    """
    answers = (
        (Agent.id == PhoneNumber.agent)
        & PhoneNumber.is_active
        & Agent.is_active
        & Agent.deleted_at.is_null()
    )
    wanted = (
        pw.Value(agent_version)
        if agent_version is not None
        else pw.fn.COALESCE(PhoneNumber.agent_version, Agent.version)
    )
    query = (
        PhoneNumber.select(
            PhoneNumber.id,
            PhoneNumber.tenant,
            PhoneNumber.agent,
            Agent.id.alias("active_agent_id"),
            AgentVersion.version,
            AgentVersion.system_prompt,
            AgentVersion.voice_id,
            AgentVersion.greeting_text,
            AgentVersion.language,
            AgentVersion.escalation_number,
            AgentVersion.tools_enabled,
            AgentVersion.max_call_duration_minutes,
            AgentVersion.function_digests,
        )
        .join(Agent, pw.JOIN.LEFT_OUTER, on=answers)
        .join(
            AgentVersion,
            pw.JOIN.LEFT_OUTER,
            on=(AgentVersion.agent == Agent.id) & (AgentVersion.version == wanted),
        )
        .where(PhoneNumber.display_number == did)
    )
    row = cast(dict[str, Any] | None, query.dicts().first())
    if row is None:
        return None
    answering = None
    if row["version"] is not None:
        answering = AgentVersion(
            agent=row["active_agent_id"],
            **{name: row[name] for name in SESSION_FIELDS},
        )
    return Line(row["id"], row["tenant"], did, row["agent"], answering, row["active_agent_id"])


def ended_data(call: Call) -> dict[str, Any]:
    """The data of the call's call.ended event, however it ended (also turned away here)."""
    return {
        "callId": call.id,
        "durationSeconds": call.duration_seconds,
        "hangupReason": call.hangup_reason,
        "phoneNumberId": call.phone_number_id,
        "callerNumber": call.caller_number,
        "calleeNumber": call.callee_number,
        "talkTimeSeconds": call.talk_time_seconds,
        "hangupInitiator": call.hangup_initiator,
        "aiCostIdr": call.ai_cost_idr,
        "recordingUrl": call.recording_url,
        "costBreakdown": call.cost_breakdown,
        "agentVersion": call.agent_version,
        # What receivers would otherwise fetch the call for.
        "agentId": call.agent_id,
        "direction": call.direction,
        "campaignId": call.campaign_id,
    }


def is_rejected(call: Call) -> bool:
    """Whether the call was turned away at its start (no agent, no credits)."""
    return (
        call.status == "failed"
        and call.answered_at is None
        and call.hangup_reason in REJECTIONS
        and call.hangup_initiator == "system"
    )


def rejection_error(call: Call) -> Conflict:
    """The 409 a start answers for a call turned away, with its rejection as the code."""
    return Conflict(
        REJECTION_MESSAGES[str(call.hangup_reason)],
        code=call.hangup_reason,
        details={"callId": call.id},
    )


def decide(
    *, agent: AgentVersion | None, balance: int, reserved: int, active: int, limit: int
) -> tuple[int, str | None]:
    """Whether a new call is admitted, from its tenant's balance, holds and calls in progress
    read under the tenant row's lock: the minutes it holds and None, or 0 and the rejection
    (no_agent, concurrency_limit, no_credits)."""
    if agent is None:
        return 0, "no_agent"
    if active >= limit:
        return 0, "concurrency_limit"
    held = billing.hold(balance=balance, reserved=reserved, wanted=agent.max_call_duration_minutes)
    if held <= 0:
        return 0, "no_credits"
    return held, None


def rejected_values(rejection: str, now: datetime) -> dict[str, Any]:
    """The columns of a call turned away at its start (besides its status, failed)."""
    return dict(
        ended_at=now,
        duration_seconds=0,
        talk_time_seconds=0,
        hangup_reason=rejection,
        hangup_initiator="system",
        ai_cost_idr=0,
        billed_minutes=0,
    )


def record_call(
    *,
    line: Line,
    caller_number: str,
    direction: str,
    provider_call_id: str | None,
    variables: dict[str, str],
    started_at: datetime | None = None,
) -> Call:
    """Insert the call (ringing, or failed when nobody can take it); inside a transaction.

    An admitted call takes one of the tenant's concurrent-call slots and holds min(its
    agent's limit, available) minutes of its credit (app.services.billing); its
    reserved_minutes are its allowance. started_at (default now) is when it started; its
    hold runs from now either way.
    """
    now = utcnow()
    started_at = started_at or now
    call_id = new_id("call")
    # Counts the call and takes call.started's seq. The UPDATE locks the tenant row until
    # commit, so the balance, holds and calls in progress it returns stay current until then,
    # and the slot and hold taken below are the only ones taken from them.
    counted = (
        Tenant.update({Tenant.calls_count: Tenant.calls_count + 1, **events.take_seq()})
        .where(Tenant.id == line.tenant_id)
        .returning(
            Tenant.balance_minutes,
            Tenant.reserved_minutes,
            Tenant.active_calls,
            Tenant.plan,
            Tenant.concurrent_call_limit,
            Tenant.event_seq,
        )
        .tuples()
        .execute()
    )
    ((balance, reserved, active, plan, custom_limit, seq),) = counted
    events.emit(
        tenant_id=line.tenant_id,
        type="call.started",
        data={
            "callId": call_id,
            "phoneNumberId": line.id,
            "callerNumber": caller_number,
            "did": line.display_number,
        },
        occurred_at=started_at,
        seq=seq,
    )
    agent = line.answering
    held, rejection = decide(
        agent=agent,
        balance=balance,
        reserved=reserved,
        active=active,
        limit=tenant_service.concurrent_call_limit(plan=plan, custom=custom_limit),
    )
    if rejection is None:
        billing.admit(tenant_id=line.tenant_id, minutes=held)
    # For an outbound call the business number is the caller and callerNumber the callee.
    caller, callee = (
        (caller_number, line.display_number)
        if direction == "inbound"
        else (line.display_number, caller_number)
    )
    call = Call.create(
        id=call_id,
        tenant=line.tenant_id,
        phone_number=line.id,
        agent=agent.agent_id if agent else line.agent_id,
        agent_version=agent.version if agent else None,
        provider_call_id=provider_call_id,
        caller_number=caller,
        callee_number=callee,
        direction=direction,
        status="failed" if rejection else "ringing",
        started_at=started_at,
        updated_at=now,
        variables=variables,
        reserved_minutes=held,
        reservation_expires_at=hold_expiry(now, held),
        **(rejected_values(rejection, started_at) if rejection else {}),
    )
    if rejection:
        events.emit(
            tenant_id=line.tenant_id,
            type="call.ended",
            data=ended_data(call),
            occurred_at=started_at,
        )
    return call


def hold_expiry(now: datetime, held: int) -> datetime | None:
    """When a hold of held minutes taken now lapses if its call never ends."""
    return now + timedelta(minutes=held) + billing.HOLD_GRACE if held > 0 else None


def fill_placeholders(text: str, variables: dict[str, str], missing: list[str]) -> str:
    """text with each {{name}} replaced by its variable's value; a placeholder without a
    value stays as written and its name is added to missing (once). A value is put in as it
    is: a placeholder inside a value is not filled again."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in variables:
            return variables[name]
        if name not in missing:
            missing.append(name)
        return match.group(0)

    return PLACEHOLDER.sub(value, text)


def placeholders(system_prompt: str, greeting_text: str) -> dict[str, list[str]]:
    """The placeholders a call's variables fill, each name once in the order first written,
    with where it is written: "prompt", "greeting" or both."""
    found: dict[str, list[str]] = {}
    for place, text in (("prompt", system_prompt), ("greeting", greeting_text)):
        for name in PLACEHOLDER.findall(text):
            places = found.setdefault(name, [])
            if place not in places:
                places.append(place)
    return found


def filled_bytes(text: str, variables: dict[str, str]) -> int:
    """The UTF-8 size of text once fill_placeholders has filled it, without filling it: each
    placeholder with a value adds that value's size less its own."""
    sizes = {name: len(value.encode()) for name, value in variables.items()}
    size = len(text.encode())
    for match in PLACEHOLDER.finditer(text):
        if match.group(1) in sizes:
            size += sizes[match.group(1)] - len(match.group(0))
    return size


def session_bytes(system_prompt: str, greeting_text: str, variables: dict[str, str]) -> int:
    """The size of a call's session as MAX_SESSION_BYTES counts it: its prompt and greeting
    after variables."""
    return filled_bytes(system_prompt, variables) + filled_bytes(greeting_text, variables)


def check_session_size(
    system_prompt: str, greeting_text: str, variables: dict[str, str], *, index: int | None = None
) -> None:
    """ValidationFailed naming variables (a campaign's contact at index) when they would fill
    the prompt and greeting past MAX_SESSION_BYTES."""
    size = session_bytes(system_prompt, greeting_text, variables)
    if size <= MAX_SESSION_BYTES:
        return
    message = (
        f"Filled into the agent's systemPrompt and greetingText these variables make a session "
        f"of {size:,} bytes; a call's session is at most {MAX_SESSION_BYTES:,} bytes. "
        "Nothing was recorded."
    )
    details: dict[str, Any] = {"variables": [message]}
    if index is not None:
        details = {"contacts": {str(index): details}}
    raise ValidationFailed("Invalid value for variables.", details=details)


def build_session(agent: AgentVersion, call: Call) -> dict[str, Any]:
    """The session of call, answered by that version of its agent: the prompt and greeting
    with the call's variables filled in, the functions the AI may call, and its allowance."""
    missing: list[str] = []
    return {
        "agent_id": agent.agent_id,
        "agent_version": agent.version,
        "system_prompt": fill_placeholders(agent.system_prompt, call.variables, missing),
        "voice_id": agent.voice_id,
        "greeting_text": fill_placeholders(agent.greeting_text, call.variables, missing),
        "language": agent.language,
        "escalation_number": agent.escalation_number,
        "tools_enabled": agent.tools_enabled,
        "functions": [
            {
                "name": entry["name"],
                "description": entry["description"],
                "parameters": entry["parameters"],
                "timeout_ms": entry["timeout_ms"],
            }
            for entry in agent.functions
        ],
        "max_call_duration_seconds": call.reserved_minutes * 60,
        "missing_variables": missing,
    }


def session_for(call: Call) -> dict[str, Any]:
    """What the runtime needs to run the call: the version of the agent it was answered with
    and its time limit. A call from before versions gets the agent as it is, at no version."""
    answering = AgentVersion.get_or_none(
        (AgentVersion.agent == call.agent_id) & (AgentVersion.version == call.agent_version)
    )
    if answering is None:
        agent = Agent.get_or_none(Agent.id == call.agent_id)
        if agent is None:
            raise Conflict("The call has no agent.", code="no_agent", details={"callId": call.id})
        answering = AgentVersion(
            agent=agent.id,
            version=None,
            **{name: getattr(agent, name) for name in snapshots.CALL_FIELDS},
            functions=[snapshots.function_entry(row) for row in snapshots.live_functions(agent.id)],
        )
    return build_session(answering, call)
