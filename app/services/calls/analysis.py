"""A call's post-call analysis (DESIGN.md section 17): the job that asks Gemini for it after a
call with turns ends, with the plan of the agent's version that answered; the result stored
with its call.analyzed event; and the analysis run again on request.

The request goes to GEMINI_API_URL's documented REST endpoint through the outgoing-request
sender (its wall-clock deadline), never inside a database transaction. One tenant's analyses
take at most a share of the analysis workers at once (take_place): a job beyond it goes back
to RQ's schedule for ANALYSIS_BUSY_DELAY seconds, freeing its worker for other tenants.
A timeout, a 429, a 5xx or an answer that is not JSON is tried again after each of
ANALYSIS_RETRY_DELAYS; an answer that does not fit the plan fails at once. The analysis never
touches the call's billing: its cost is a figure of its own (analysisCostIdr in usage).

Each request of an analysis (the call's end, POST /calls/:id/analyze, the sweep) stamps the
call with its time, analysis_requested_at, and its job carries that time: a job stores its
result only while the call still holds it (one conditional UPDATE), so a run overtaken by a
later request drops its answer and emits nothing, and of two jobs of one request only one
stores. A job lost with Redis, or with a worker that died mid-job, leaves the call pending:
the sweep (requeue_stale) asks again for the analyses pending longer than
ANALYSIS_STALE_SECONDS, far beyond the retries' backoff, the tenants' in turn.
"""

import json
import logging
import math
from datetime import datetime, timedelta
from typing import Any, cast

import peewee as pw
from flask import current_app

from app import queue
from app.db import unit_of_work
from app.errors import Conflict, NotFound
from app.models import Agent, AgentVersion, Call, CallTurn, Tenant
from app.outbound import client
from app.outbound.errors import OutboundError
from app.services import analysis, audit, events
from app.services.audit import Actor
from app.util import isoformat, new_id, utcnow

log = logging.getLogger(__name__)

QUEUE = "analysis"
JOB = "app.jobs.analyze_call"
STATUSES = ("pending", "done", "failed", "not_configured")
REASON_LENGTH = 500

INSTRUCTION = (
    "You analyse the transcript of a phone call between an AI voice agent and a caller. "
    "Answer only with the JSON the response schema describes. Judge `successful` by the "
    "success criteria given, or, when none are given, by whether the call reached the goal "
    "the agent's instructions set. Extract each field from what was said; leave a field out "
    "(null) when the call did not say it. Write the summary in the call's language."
)


def result(status: str, **values: Any) -> dict[str, Any]:
    """An analysis as the API shows it: every key, those not given None (fields {})."""
    shown: dict[str, Any] = {
        "status": status,
        "summary": None,
        "successful": None,
        "successReason": None,
        "fields": {},
        "planVersion": None,
        "model": None,
        "analyzedAt": None,
        "costIdr": 0,
        "reason": None,
    }
    shown.update(values)
    return shown


def shown(call: Call) -> dict[str, Any] | None:
    """The call's analysis: what was stored, pending for an ended call with turns that the
    job has not reached yet, None for a call that is not analysed."""
    if call.analysis is not None:
        return call.analysis
    if call.analysis_status == "pending":
        return result("pending")
    return None


def token(requested_at: datetime) -> str:
    """A request's time as its jobs carry it."""
    return requested_at.isoformat()


def _next_request(now: datetime, before: datetime | None) -> datetime:
    """The time of a new request: now, or just after the one it replaces (never equal)."""
    if before is not None and now <= before:
        return before + timedelta(microseconds=1)
    return now


def end_values(now: datetime) -> dict[str, Any]:
    """What a call's end sets for its analysis, in the end's own UPDATE (no statement of its
    own): a call with turns is pending, requested at now."""
    has_turns = Call.turns_count > 0
    stamp = pw.Value(now, converter=Call.analysis_requested_at.db_value)
    return {
        "analysis_status": pw.Case(None, [(has_turns, "pending")], None),
        "analysis_requested_at": pw.Case(None, [(has_turns, stamp)], None),
    }


def plan_of(call: Call, version: int | None) -> dict[str, Any]:
    """The plan of that version of the call's agent (a call from before versions: the
    agent's plan now; no agent: the default)."""
    row = (
        AgentVersion.select(AgentVersion.analysis_plan)
        .where((AgentVersion.agent == call.agent_id) & (AgentVersion.version == version))
        .first()
    )
    if row is None:
        row = Agent.select(Agent.analysis_plan).where(Agent.id == call.agent_id).first()
    return row.analysis_plan if row is not None else dict(analysis.DEFAULT_PLAN)


def _prompt_of(call: Call) -> str:
    row = (
        AgentVersion.select(AgentVersion.system_prompt)
        .where((AgentVersion.agent == call.agent_id) & (AgentVersion.version == call.agent_version))
        .first()
    )
    return row.system_prompt if row is not None else ""


def request_body(call: Call, plan: dict[str, Any]) -> dict[str, Any]:
    """The generateContent body: the instruction, the agent's goal, the plan's criteria and
    fields, the transcript, and the response schema built from the plan."""
    turns = CallTurn.select(CallTurn.role, CallTurn.text).where(CallTurn.call == call.id)
    transcript = "\n".join(f"{turn.role}: {turn.text}" for turn in turns.order_by(CallTurn.seq))
    parts = [f"The agent's instructions:\n{_prompt_of(call)}"]
    if plan.get("successCriteria"):
        parts.append(f"Success criteria:\n{plan['successCriteria']}")
    if plan["fields"]:
        listed = "\n".join(
            f"- {field['name']} ({field['type']}): {field['description']}".rstrip(": ")
            for field in plan["fields"]
        )
        parts.append(f"Fields to extract:\n{listed}")
    parts.append(f"Transcript:\n{transcript}")
    return {
        "systemInstruction": {"parts": [{"text": INSTRUCTION}]},
        "contents": [{"role": "user", "parts": [{"text": "\n\n".join(parts)}]}],
        "generationConfig": {
            "responseMimeType": "application/json",
            "responseSchema": analysis.response_schema(plan),
            "temperature": 0,
        },
    }


class Attempt:
    """What one request came to: the answer's JSON (or None), the reason it failed, whether
    it may be tried again, and what it cost."""

    def __init__(
        self,
        answer: Any = None,
        *,
        reason: str | None = None,
        retry: bool = False,
        cost_idr: float = 0.0,
    ) -> None:
        self.answer, self.reason, self.retry, self.cost_idr = answer, reason, retry, cost_idr


def _cost(config: Any, usage: Any) -> float:
    """IDR of an answer's usageMetadata at the configured prices per million tokens."""
    if not isinstance(usage, dict):
        return 0.0
    prompt = usage.get("promptTokenCount") or 0
    output = usage.get("candidatesTokenCount") or 0
    if not isinstance(prompt, int) or not isinstance(output, int):
        return 0.0
    return (
        prompt * float(config["ANALYSIS_INPUT_IDR_PER_MILLION_TOKENS"])
        + output * float(config["ANALYSIS_OUTPUT_IDR_PER_MILLION_TOKENS"])
    ) / 1_000_000


def _gemini_message(body: bytes) -> str:
    try:
        error = json.loads(body).get("error") or {}
        return str(error.get("message") or "")[:200]
    except (ValueError, AttributeError):
        return ""


def ask(body: dict[str, Any]) -> Attempt:
    """One generateContent request (outside any transaction)."""
    config = current_app.config
    url = (
        f"{str(config['GEMINI_API_URL']).rstrip('/')}/v1beta/models/"
        f"{config['ANALYSIS_MODEL']}:generateContent"
    )
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "x-goog-api-key": str(config["GEMINI_API_KEY"]),
    }
    timeout = (float(config["ANALYSIS_CONNECT_TIMEOUT"]), float(config["ANALYSIS_TIMEOUT"]))
    # The URL is the operator's own setting (a stand-in on 127.0.0.1 in tests): private
    # hosts are allowed, as for Meta's Graph API.
    try:
        response = client.sender(True).send(
            "POST", url, timeout=timeout, body=json.dumps(body).encode(), headers=headers
        )
    except OutboundError as exc:
        return Attempt(reason=f"Gemini could not be reached: {exc}", retry=True)
    status = response.status_code
    if status == 429 or status >= 500:
        return Attempt(reason=f"Gemini answered HTTP {status}.", retry=True)
    if not 200 <= status < 300:
        message = _gemini_message(response.body)
        return Attempt(reason=f"Gemini refused the request (HTTP {status}): {message}".strip())
    try:
        answer = json.loads(response.body)
    except ValueError:
        return Attempt(reason="Gemini's answer is not JSON.", retry=True)
    cost = _cost(config, answer.get("usageMetadata") if isinstance(answer, dict) else None)
    try:
        text = answer["candidates"][0]["content"]["parts"][0]["text"]
        return Attempt(json.loads(text), cost_idr=cost)
    except (KeyError, IndexError, TypeError):
        return Attempt(reason="Gemini's answer has no candidate text.", retry=True, cost_idr=cost)
    except ValueError:
        return Attempt(reason="Gemini's answer is malformed JSON.", retry=True, cost_idr=cost)


def retry_delays(config: Any) -> list[float]:
    """ANALYSIS_RETRY_DELAYS as seconds (a sequence, or text such as "10,60,300")."""
    delays = config["ANALYSIS_RETRY_DELAYS"]
    if isinstance(delays, str):
        delays = [part for part in delays.split(",") if part.strip()]
    return [float(delay) for delay in delays]


def tenant_places(config: Any) -> int:
    """How many of the analysis workers one tenant's analyses may take at once."""
    return max(1, int(config["ANALYSIS_WORKERS"] * config["ANALYSIS_TENANT_SHARE"]))


def _is_latest(call: Call, requested: str | None) -> bool:
    """Whether the request a job carries is still the call's latest, pending (a job enqueued
    without one is taken as latest)."""
    if requested is None:
        return True
    return call.analysis_status == "pending" and (
        call.analysis_requested_at == datetime.fromisoformat(requested)
    )


def run(
    *,
    call_id: str,
    attempt: int = 1,
    spent_idr: float = 0.0,
    plan_version: int | None = None,
    requested: str | None = None,
) -> str:
    """Analyse an ended call with turns (the job) with the plan of plan_version of its agent
    (None: the version that answered it), for the request made at `requested`; what
    happened: skipped, superseded (a later request was made, or this one is stored already),
    not_configured, busy (scheduled again), retrying, done or failed."""
    call = Call.get_or_none(Call.id == call_id)
    if call is None or call.ended_at is None or not call.turns_count:
        return "skipped"
    if not _is_latest(call, requested):
        return "superseded"
    config = current_app.config
    if not config.get("GEMINI_API_KEY"):
        stored = store(call, result("not_configured"), requested)
        return "not_configured" if stored else "superseded"
    group, member = f"analysis:{call.tenant_id}", new_id("an")
    seconds = float(config["ANALYSIS_TIMEOUT"]) + 5
    again = (call_id, attempt, spent_idr, plan_version, requested)
    if not queue.take_place(group, member, places=tenant_places(config), seconds=seconds):
        delay = float(config["ANALYSIS_BUSY_DELAY"])
        queue.enqueue_in(QUEUE, JOB, *again, delay=delay)
        return "busy"
    version = plan_version or call.agent_version
    plan = plan_of(call, version)
    try:
        outcome = ask(request_body(call, plan))
    finally:
        queue.give_back_place(group, member)
    spent_idr += outcome.cost_idr
    delays = retry_delays(config)
    if outcome.reason and outcome.retry and attempt <= len(delays):
        log.info("analysis of %s: attempt %d failed (%s)", call_id, attempt, outcome.reason)
        queue.enqueue_in(
            QUEUE,
            JOB,
            call_id,
            attempt + 1,
            spent_idr,
            plan_version,
            requested,
            delay=delays[attempt - 1],
        )
        return "retrying"
    common = {
        "planVersion": version,
        "model": config["ANALYSIS_MODEL"],
        "analyzedAt": isoformat(utcnow()),
        "costIdr": math.ceil(spent_idr),
    }
    if outcome.reason is None:
        try:
            found = analysis.check_answer(plan, outcome.answer)
        except analysis.AnswerInvalid as exc:
            outcome.reason = str(exc)
        else:
            stored = store(call, result("done", **found, **common), requested)
            return "done" if stored else "superseded"
    if attempt > 1 and outcome.retry:
        outcome.reason = f"{outcome.reason} ({attempt} attempts)"
    failed = result("failed", reason=(outcome.reason or "")[:REASON_LENGTH], **common)
    return "failed" if store(call, failed, requested) else "superseded"


def analyzed_data(call: Call, shown: dict[str, Any]) -> dict[str, Any]:
    """The data of call.analyzed."""
    return {
        "callId": call.id,
        "agentId": call.agent_id,
        "agentVersion": call.agent_version,
        **shown,
    }


def store(call: Call, shown: dict[str, Any], requested: str | None = None) -> bool:
    """Keep the analysis on the call, with call.analyzed when it was done or failed, in one
    transaction, if the request made at `requested` is still the call's latest and pending
    (one conditional UPDATE); a summary fills transcriptSummary when the runtime gave none.
    Whether it was kept: a stale run's answer is dropped and emits nothing."""
    values: dict[Any, Any] = {
        Call.analysis: shown,
        Call.analysis_status: shown["status"],
        Call.successful: shown["successful"],
        Call.analysis_cost_idr: shown["costIdr"],
    }
    if shown["summary"]:
        values[Call.transcript_summary] = pw.fn.COALESCE(Call.transcript_summary, shown["summary"])
    latest = Call.id == call.id
    if requested is not None:
        latest &= (Call.analysis_status == "pending") & (
            Call.analysis_requested_at == datetime.fromisoformat(requested)
        )
    with unit_of_work():
        if not Call.update(values).where(latest).execute():
            return False
        if shown["status"] in ("done", "failed"):
            events.emit(
                tenant_id=call.tenant_id, type="call.analyzed", data=analyzed_data(call, shown)
            )
    return True


def after_end(call: Call) -> None:
    """Analyse a call that just ended, if it has turns (its end made it pending, end_values):
    its job, enqueued after commit."""
    if call.analysis_status == "pending" and call.analysis_requested_at is not None:
        queue.defer(QUEUE, JOB, call.id, 1, 0.0, None, token(call.analysis_requested_at))


def reanalyze(*, tenant: Tenant, actor: Actor, call_id: str) -> Call:
    """Run the call's analysis again with its agent's latest plan (after the plan changed,
    say): pending until the job is done. Conflict for a call not ended or without turns."""
    with unit_of_work():
        call = Call.get_or_none((Call.id == call_id) & (Call.tenant == tenant))
        if call is None:
            raise NotFound(f"Call {call_id} not found.")
        if call.ended_at is None:
            raise Conflict(
                "The call has not ended; it is analysed once it ends.",
                code="call_not_ended",
                details={"status": call.status},
            )
        if not call.turns_count:
            raise Conflict(
                "The call has no transcript turns to analyse.",
                code="no_transcript",
                details={"turns": 0},
            )
        latest = Agent.select(Agent.version).where(Agent.id == call.agent_id).scalar()
        call.analysis = result("pending", planVersion=latest)
        call.analysis_status = "pending"
        call.analysis_requested_at = _next_request(utcnow(), call.analysis_requested_at)
        # The previous request's jobs, still running or retrying, no longer store (store).
        Call.update(
            analysis=call.analysis,
            analysis_status="pending",
            analysis_requested_at=call.analysis_requested_at,
        ).where(Call.id == call.id).execute()
        audit.write(
            actor,
            tenant_id=tenant.id,
            action="call.analysis_requested",
            target_id=call.id,
            details={"planVersion": latest},
        )
        queue.defer(QUEUE, JOB, call.id, 1, 0.0, latest, token(call.analysis_requested_at))
    return call


def _stale(cutoff: datetime, limit: int) -> list[tuple[str, datetime, Any]]:
    """Up to limit analyses pending since before cutoff (the index on analysis_status,
    analysis_requested_at finds them): each tenant's oldest before any tenant's second, and
    so on; their call id, request time and stored analysis."""
    stale = (Call.analysis_status == "pending") & (Call.analysis_requested_at < cutoff)
    order = [Call.analysis_requested_at, Call.id]
    turn = pw.fn.ROW_NUMBER().over(partition_by=[Call.tenant], order_by=order)
    ranked = Call.select(
        Call.id, Call.analysis_requested_at, Call.analysis, turn.alias("turn")
    ).where(stale)
    rows = (
        pw.Select(
            from_list=[ranked.alias("stale")],
            columns=[pw.SQL("id"), pw.SQL("analysis_requested_at"), pw.SQL("analysis")],
        )
        .order_by(*(pw.SQL(name) for name in ("turn", "analysis_requested_at", "id")))
        .limit(limit)
        .bind(Call._meta.database)
        .tuples()
    )
    return [
        (
            call_id,
            Call.analysis_requested_at.python_value(requested_at),
            Call.analysis.python_value(stored),
        )
        for call_id, requested_at, stored in cast(list[tuple[str, Any, Any]], list(rows))
    ]


def requeue_stale(*, now: datetime | None = None) -> int:
    """The sweep: ask again for the analyses pending longer than ANALYSIS_STALE_SECONDS (a
    job lost with Redis or with its worker), at most ANALYSIS_SWEEP_BATCH a run, the
    tenants' in turn; how many were enqueued. Each is requested anew (so the lost job, if it
    ever runs, stores nothing), and put back as it was when Redis takes no job."""
    now = now or utcnow()
    config = current_app.config
    cutoff = now - timedelta(seconds=float(config["ANALYSIS_STALE_SECONDS"]))
    enqueued = 0
    for call_id, before, stored in _stale(cutoff, int(config["ANALYSIS_SWEEP_BATCH"])):
        requested_at = _next_request(now, before)
        mine = (
            (Call.id == call_id)
            & (Call.analysis_status == "pending")
            & (Call.analysis_requested_at == before)
        )
        # Conditional: of a sweep and a request made meanwhile, the later request wins.
        if not Call.update(analysis_requested_at=requested_at).where(mine).execute():
            continue
        plan_version = (stored or {}).get("planVersion")
        args = (call_id, 1, 0.0, plan_version, token(requested_at))
        if queue.enqueue(QUEUE, JOB, *args):
            enqueued += 1
            continue
        Call.update(analysis_requested_at=before).where(
            (Call.id == call_id) & (Call.analysis_requested_at == requested_at)
        ).execute()
    if enqueued:
        log.info("analysis sweep: %d lost analyses asked for again", enqueued)
    return enqueued
