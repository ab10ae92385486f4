"""All peewee models. Times are naive UTC; ids are prefixed random strings (app.util.new_id)."""

import json
from datetime import datetime
from typing import Any

import peewee as pw

from app.db import BaseModel
from app.util import utcnow


class JSONField(pw.TextField):
    """JSON stored as text, portable between SQLite and PostgreSQL."""

    def db_value(self, value: Any) -> str | None:
        if value is None:
            return None
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)

    def python_value(self, value: str | None) -> Any:
        return None if value is None else json.loads(value)


def id_field() -> pw.CharField:
    return pw.CharField(primary_key=True, max_length=32)


class Tenant(BaseModel):
    id = id_field()
    name = pw.CharField(max_length=100, unique=True)
    plan = pw.CharField(max_length=20, default="starter")
    rate_limit = pw.IntegerField(null=True)  # requests per minute; None = the plan's
    low_balance_threshold = pw.IntegerField(default=10)
    balance_minutes = pw.BigIntegerField(default=0)
    lifetime_purchased_minutes = pw.BigIntegerField(default=0)
    lifetime_used_minutes = pw.BigIntegerField(default=0)
    reserved_minutes = pw.BigIntegerField(default=0)  # held by open calls: the sum of their holds
    calls_count = pw.BigIntegerField(default=0)  # maintained total for call-list pagination
    # Calls at once: None = the plan's (app.services.tenants.concurrent_call_limit_of).
    concurrent_call_limit = pw.IntegerField(null=True)
    # The calls admitted and not yet ended (or whose hold lapsed): taken with each call's hold,
    # freed with it, so admission compares it with the limit instead of counting calls. The
    # database has the default too, for rows written by code from before it (migration 010).
    active_calls = pw.BigIntegerField(default=0, constraints=[pw.SQL("DEFAULT 0")])
    # The seq of the tenant's latest event: each new event takes the next one (events.record).
    event_seq = pw.BigIntegerField(default=0)
    created_at = pw.DateTimeField(default=utcnow)

    @property
    def available_minutes(self) -> int:
        """What new calls may still hold: the balance less the open calls' holds."""
        return self.balance_minutes - self.reserved_minutes


class ApiKey(BaseModel):
    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, backref="api_keys", on_delete="CASCADE")
    name = pw.CharField(max_length=100)
    prefix = pw.CharField(max_length=16)  # first characters of the key, for recognising it
    key_hash = pw.CharField(max_length=64, unique=True)  # SHA-256 hex; the key is never stored
    created_at = pw.DateTimeField(default=utcnow)
    scope = pw.CharField(max_length=8, default="full")  # full | read (GET only)
    last_used_at = pw.DateTimeField(null=True)
    expires_at = pw.DateTimeField(null=True)  # None: never
    revoked_at = pw.DateTimeField(null=True)


class User(BaseModel):
    """A dashboard user of one tenant (the API itself uses keys, not users)."""

    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, backref="users", on_delete="CASCADE")
    email = pw.CharField(max_length=254, unique=True)  # stored lower-case
    password_hash = pw.CharField(max_length=255)  # werkzeug's scrypt hash; never the password
    role = pw.CharField(max_length=16, default="viewer")  # owner | admin | viewer
    created_at = pw.DateTimeField(default=utcnow)
    last_sign_in_at = pw.DateTimeField(null=True)
    # Changed with the password and on disabling: sessions signed with an older one end.
    session_version = pw.IntegerField(default=1)
    disabled_at = pw.DateTimeField(null=True)


class UserSession(BaseModel):
    """A signed-in dashboard session, named by the id in the session cookie: signing out
    deletes it, so a copy of the cookie taken before is refused afterwards."""

    id = pw.CharField(max_length=64, primary_key=True)  # random, in the signed cookie
    user = pw.ForeignKeyField(User, backref="sessions", on_delete="CASCADE")
    created_at = pw.DateTimeField(default=utcnow, index=True)


class Agent(BaseModel):
    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, backref="agents", on_delete="CASCADE")
    name = pw.CharField(max_length=100)
    system_prompt = pw.TextField()
    voice_id = pw.CharField(max_length=16, default="Puck")
    greeting_text = pw.TextField(default="")
    language = pw.CharField(max_length=16, default="id")
    max_call_duration_minutes = pw.IntegerField(default=10)
    tools_enabled = JSONField(default=list)
    is_active = pw.BooleanField(default=True)
    escalation_number = pw.CharField(max_length=16, null=True)
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow)
    deleted_at = pw.DateTimeField(null=True)
    # The latest of its versions (AgentVersion), whose snapshot is what the fields above and
    # its live functions hold now; the database has the default too (migration 017).
    version = pw.IntegerField(default=1, constraints=[pw.SQL("DEFAULT 1")])

    class Meta:
        indexes = ((("tenant", "deleted_at", "created_at"), False),)


class AgentVersion(BaseModel):
    """An immutable snapshot of what a call uses of an agent (app.services.versions): its
    call-facing fields and its functions' definitions, never a secret."""

    agent = pw.ForeignKeyField(Agent, backref="versions", on_delete="CASCADE")
    version = pw.IntegerField()  # 1, 2, 3, … per agent
    name = pw.CharField(max_length=100)
    system_prompt = pw.TextField()
    voice_id = pw.CharField(max_length=16)
    greeting_text = pw.TextField()
    language = pw.CharField(max_length=16)
    max_call_duration_minutes = pw.IntegerField()
    tools_enabled = JSONField()
    escalation_number = pw.CharField(max_length=16, null=True)
    # [{id, name, description, endpoint, method, parameters, timeout_ms}] by name: the id is
    # the Function row whose signing secret signs this version's calls of it.
    functions = JSONField()
    changes = JSONField()  # the API names of what differs from the version before
    actor_type = pw.CharField(max_length=8)  # as an AuditEntry's
    actor_id = pw.CharField(max_length=32, null=True)
    actor_label = pw.CharField(max_length=255)
    created_at = pw.DateTimeField(default=utcnow)

    @property
    def actor(self) -> dict[str, str | None]:
        """Who made it, as the API shows it."""
        return {"type": self.actor_type, "id": self.actor_id, "label": self.actor_label}

    class Meta:
        # The key is the read path: one version, or an agent's newest first.
        primary_key = pw.CompositeKey("agent", "version")


class PhoneNumber(BaseModel):
    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, backref="phone_numbers", on_delete="CASCADE")
    display_number = pw.CharField(max_length=16, unique=True)
    label = pw.CharField(max_length=100, default="")
    is_active = pw.BooleanField(default=True)
    agent = pw.ForeignKeyField(Agent, null=True, backref="phone_numbers", on_delete="SET NULL")
    # The agent's version its calls are answered with; None: the agent's latest.
    agent_version = pw.IntegerField(null=True)
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow)

    class Meta:
        indexes = ((("tenant", "created_at"), False),)


class Campaign(BaseModel):
    """A batch of outbound calls: its contacts are placed by the sweep inside its schedule
    window, at most max_concurrent_calls queued or in progress at once (app.services.campaigns)."""

    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, backref="campaigns", on_delete="CASCADE")
    name = pw.CharField(max_length=100)
    phone_number = pw.ForeignKeyField(PhoneNumber, null=True, on_delete="SET NULL")
    agent = pw.ForeignKeyField(Agent, null=True, on_delete="SET NULL")
    status = pw.CharField(max_length=16, default="running")  # running|paused|canceled|completed
    max_concurrent_calls = pw.IntegerField(default=1)
    # The schedule window, in the campaign's time zone; all None: any time.
    timezone = pw.CharField(max_length=64, null=True)  # IANA name
    days = JSONField(null=True)  # ["mon", …]
    window_start = pw.CharField(max_length=5, null=True)  # "09:00"
    window_end = pw.CharField(max_length=5, null=True)  # "17:00", after the start
    max_attempts = pw.IntegerField(default=1)
    retry_delay_minutes = pw.IntegerField(default=60)
    retry_on = JSONField(default=list)  # outcomes retried: no_answer, busy, voicemail, failed
    # Contacts by status, kept with every change of a contact (no COUNT over the contacts):
    # in_progress_count is what the concurrency cap compares with max_concurrent_calls.
    total_count = pw.IntegerField(default=0)
    pending_count = pw.IntegerField(default=0)
    in_progress_count = pw.IntegerField(default=0)
    completed_count = pw.IntegerField(default=0)
    failed_count = pw.IntegerField(default=0)
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow)
    completed_at = pw.DateTimeField(null=True)

    @property
    def schedule(self) -> dict[str, Any] | None:
        """The window calls are placed in, or None: any time."""
        if self.timezone is None:
            return None
        return {
            "timezone": self.timezone,
            "days": self.days,
            "start": self.window_start,
            "end": self.window_end,
        }

    @property
    def retry(self) -> dict[str, Any]:
        return {
            "max_attempts": self.max_attempts,
            "delay_minutes": self.retry_delay_minutes,
            "on": self.retry_on,
        }

    @property
    def counts(self) -> dict[str, int]:
        """The contacts by status."""
        return {
            "total": self.total_count,
            "pending": self.pending_count,
            "in_progress": self.in_progress_count,
            "completed": self.completed_count,
            "failed": self.failed_count,
        }

    class Meta:
        indexes = (
            (("tenant", "created_at", "id"), False),
            # The sweep's campaigns: the running ones.
            (("status", "created_at"), False),
        )


class CampaignContact(BaseModel):
    """One number of a campaign, its variables and where it stands: pending (due at
    next_attempt_at), in_progress (its call is queued or under way), completed or failed."""

    id = id_field()
    campaign = pw.ForeignKeyField(Campaign, backref="contacts", on_delete="CASCADE")
    seq = pw.IntegerField()  # 1, 2, 3, … in the order the contacts were given
    to_number = pw.CharField(max_length=16)
    variables = JSONField(default=dict)
    status = pw.CharField(max_length=16, default="pending")
    attempts = pw.IntegerField(default=0)  # calls placed for it
    next_attempt_at = pw.DateTimeField(null=True)  # while pending: not placed before then
    last_outcome = pw.CharField(max_length=32, null=True)  # completed, no_answer, busy, …
    updated_at = pw.DateTimeField(default=utcnow)
    call_ids: list[str]  # not a column: filled by campaigns.list_contacts

    class Meta:
        indexes = (
            (("campaign", "seq"), True),
            # The sweep's due contacts of a campaign; a campaign's contacts by status.
            (("campaign", "status", "next_attempt_at", "seq"), False),
            (("campaign", "status", "seq"), False),
        )


class Call(BaseModel):
    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, backref="calls", on_delete="CASCADE")
    phone_number = pw.ForeignKeyField(PhoneNumber, null=True, on_delete="SET NULL")
    agent = pw.ForeignKeyField(Agent, null=True, on_delete="SET NULL")
    provider_call_id = pw.CharField(max_length=128, null=True)
    caller_number = pw.CharField(max_length=32)
    callee_number = pw.CharField(max_length=32)
    direction = pw.CharField(max_length=16, default="inbound")
    status = pw.CharField(max_length=16, default="ringing")
    started_at = pw.DateTimeField(default=utcnow)
    answered_at = pw.DateTimeField(null=True)
    ended_at = pw.DateTimeField(null=True)
    duration_seconds = pw.IntegerField(null=True)
    talk_time_seconds = pw.IntegerField(null=True)
    hangup_reason = pw.CharField(max_length=64, null=True)
    hangup_initiator = pw.CharField(max_length=32, null=True)
    transcript_summary = pw.TextField(null=True)
    ai_cost_idr = pw.BigIntegerField(null=True)
    metadata = JSONField(default=dict)
    billed_minutes = pw.IntegerField(null=True)
    function_calls_count = pw.IntegerField(default=0)
    # Minutes held at admission (the call's allowance; 0 once a hold lapsed), and until when
    # the hold stands if the call never ends; None once the hold is released.
    reserved_minutes = pw.IntegerField(default=0)
    reservation_expires_at = pw.DateTimeField(null=True, index=True)
    updated_at = pw.DateTimeField(default=utcnow)
    # Values for the {{name}} placeholders of the agent's prompt and greeting in this call.
    variables = JSONField(default=dict, constraints=[pw.SQL("DEFAULT '{}'")])
    recording_url = pw.CharField(max_length=2048, null=True)  # kept by the runtime
    # The AI cost's components in IDR, as the runtime reported them at the end: all None when
    # it reported none, all set (0 for a component it left out) when it did.
    cost_llm_idr = pw.BigIntegerField(null=True)
    cost_stt_idr = pw.BigIntegerField(null=True)
    cost_tts_idr = pw.BigIntegerField(null=True)
    cost_telephony_idr = pw.BigIntegerField(null=True)
    cost_other_idr = pw.BigIntegerField(null=True)
    # The transcript turns stored and the UTF-8 bytes of their text: the limit is checked
    # against these in the UPDATE that takes the next turns' seqs.
    turns_count = pw.IntegerField(default=0, constraints=[pw.SQL("DEFAULT 0")])
    turns_bytes = pw.IntegerField(default=0, constraints=[pw.SQL("DEFAULT 0")])
    # The agent's version the call was answered with (None: calls from before versions, and
    # those no agent could take).
    agent_version = pw.IntegerField(null=True)
    # An outbound call placed through the API or a campaign: when it was queued (dispatch
    # hands queued calls out oldest first), and the campaign contact it calls, if any.
    queued_at = pw.DateTimeField(null=True)
    campaign = pw.ForeignKeyField(Campaign, null=True, on_delete="SET NULL")
    contact = pw.ForeignKeyField(CampaignContact, null=True, on_delete="SET NULL")

    @property
    def cost_breakdown(self) -> dict[str, int | None] | None:
        """The AI cost by component (llm, stt, tts, telephony, other), or None unreported."""
        if self.cost_llm_idr is None:
            return None
        return {
            "llm": self.cost_llm_idr,
            "stt": self.cost_stt_idr,
            "tts": self.cost_tts_idr,
            "telephony": self.cost_telephony_idr,
            "other": self.cost_other_idr,
        }

    class Meta:
        indexes = (
            (("tenant", "provider_call_id"), True),
            (("tenant", "started_at", "id"), False),
            (("tenant", "status", "started_at", "id"), False),
            (("tenant", "agent", "started_at", "id"), False),
            (("tenant", "phone_number", "started_at", "id"), False),
            (("tenant", "direction", "started_at", "id"), False),
            (("tenant", "caller_number", "started_at", "id"), False),
            (("tenant", "agent", "agent_version", "started_at", "id"), False),
            # Dispatch: the queued calls, oldest first.
            (("status", "queued_at", "id"), False),
            # A campaign's queued calls (canceled with it); a contact's calls.
            (("campaign", "status"), False),
            (("contact", "queued_at"), False),
        )


class CallTurn(BaseModel):
    """One turn of a call's conversation: who spoke, what was said, when (ms from the start)."""

    call = pw.ForeignKeyField(Call, backref="turns", on_delete="CASCADE")
    seq = pw.IntegerField()  # 1, 2, 3, … in the order the runtime reported them
    role = pw.CharField(max_length=8)  # agent | caller
    text = pw.TextField()
    start_ms = pw.IntegerField(null=True)
    end_ms = pw.IntegerField(null=True)

    class Meta:
        # The key is the read path: a call's turns in order, one index range.
        primary_key = pw.CompositeKey("call", "seq")


class CreditTransaction(BaseModel):
    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, backref="credit_transactions", on_delete="CASCADE")
    type = pw.CharField(max_length=16)  # purchase | usage | adjustment | refund
    minutes = pw.BigIntegerField()  # signed: usage is negative
    balance_after = pw.BigIntegerField()
    call = pw.ForeignKeyField(Call, null=True, on_delete="SET NULL")
    description = pw.CharField(max_length=255, default="")
    # Makes a charge happen once, e.g. "usage:call_…"; None for free-standing entries.
    idempotency_key = pw.CharField(max_length=128, null=True, unique=True)
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        indexes = (
            (("tenant", "created_at", "id"), False),
            (("tenant", "type", "created_at", "id"), False),
        )


class Event(BaseModel):
    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, backref="events", on_delete="CASCADE")
    type = pw.CharField(max_length=32)  # call.started, call.ended, …
    data = JSONField()
    created_at = pw.DateTimeField(default=utcnow)  # when it happened: the body's timestamp
    # data's callId, for the events about a call: a call's page finds them by this index.
    call_id = pw.CharField(max_length=32, null=True)
    # The event's place in its tenant's log: 1, 2, 3, … in the order the events committed.
    seq = pw.BigIntegerField()
    delivery_list: list["Delivery"]  # not a column: filled by events.for_call

    class Meta:
        indexes = (
            (("tenant", "seq"), True),
            (("tenant", "created_at"), False),
            (("created_at",), False),
            (("call_id", "created_at"), False),
        )


class RotatedSecret:
    """A secret with the one it replaced, which still signs beside it until its expiry (a
    rotation's overlap, app.services.secrets): the models with previous_secret and
    previous_secret_expires_at columns."""

    previous_secret: Any
    previous_secret_expires_at: Any

    def previous_secret_in_use(self, now: datetime | None = None) -> str | None:
        """The previous secret while its overlap lasts, else None."""
        expires = self.previous_secret_expires_at
        if self.previous_secret is None or expires is None or expires <= (now or utcnow()):
            return None
        return self.previous_secret

    @property
    def overlap_ends_at(self) -> datetime | None:
        """When the previous secret stops signing, while it still does; else None."""
        return self.previous_secret_expires_at if self.previous_secret_in_use() else None


class Webhook(RotatedSecret, BaseModel):
    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, backref="webhooks", on_delete="CASCADE")
    url = pw.CharField(max_length=2048)
    events = JSONField()
    secret = pw.CharField(max_length=256)
    previous_secret = pw.CharField(max_length=256, null=True)  # see RotatedSecret
    previous_secret_expires_at = pw.DateTimeField(null=True)
    is_active = pw.BooleanField(default=True)
    disabled_reason = pw.CharField(max_length=255, null=True)
    failing_since = pw.DateTimeField(null=True)  # first failure since the last success
    # Failed attempts since the last success; the database has the default too, for rows
    # written by code from before it (migration 012).
    consecutive_failures = pw.IntegerField(default=0, constraints=[pw.SQL("DEFAULT 0")])
    # The queue its deliveries go to: "webhooks", or "webhooks_slow" from an attempt that
    # timed out until one is answered in time (migration 016).
    lane = pw.CharField(
        max_length=16, default="webhooks", constraints=[pw.SQL("DEFAULT 'webhooks'")]
    )
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow)

    class Meta:
        indexes = ((("tenant", "created_at"), False),)


class Delivery(BaseModel):
    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, on_delete="CASCADE")
    webhook = pw.ForeignKeyField(Webhook, backref="deliveries", on_delete="CASCADE")
    event = pw.ForeignKeyField(Event, backref="deliveries", on_delete="CASCADE")
    status = pw.CharField(max_length=16, default="pending")  # pending | succeeded | failed
    attempts = pw.IntegerField(default=0)
    next_attempt_at = pw.DateTimeField(null=True, default=utcnow)
    # In flight (sent to a queue, or being attempted) until then: it counts against its
    # webhook's and tenant's places, and no other job may take it.
    lease_until = pw.DateTimeField(null=True)
    job_id = pw.CharField(max_length=40, null=True)  # the RQ job that is to send it next
    lane = pw.CharField(max_length=16, null=True)  # the queue it was last sent to
    last_status_code = pw.IntegerField(null=True)
    last_error = pw.TextField(null=True)
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow)
    completed_at = pw.DateTimeField(null=True)
    attempt_list: list["DeliveryAttempt"]  # not a column: filled by deliveries.with_attempts

    class Meta:
        indexes = (
            (("status", "next_attempt_at"), False),
            (("webhook", "created_at"), False),
            # A webhook's pending deliveries (counted before a replay); its log by status.
            (("webhook", "status", "created_at"), False),
            # The deliveries in flight (lease_until ahead), and a tenant's next ones to send.
            (("status", "lease_until"), False),
            (("tenant", "status", "next_attempt_at"), False),
        )


class DeliveryAttempt(BaseModel):
    id = pw.AutoField()
    delivery = pw.ForeignKeyField(Delivery, backref="attempt_log", on_delete="CASCADE")
    number = pw.IntegerField()
    attempted_at = pw.DateTimeField(default=utcnow)
    duration_ms = pw.IntegerField(null=True)
    status_code = pw.IntegerField(null=True)
    error = pw.TextField(null=True)
    response_excerpt = pw.TextField(null=True)

    class Meta:
        indexes = ((("delivery", "number"), False), (("attempted_at",), False))


class Function(RotatedSecret, BaseModel):
    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, on_delete="CASCADE")
    agent = pw.ForeignKeyField(Agent, backref="functions", on_delete="CASCADE")
    name = pw.CharField(max_length=64)
    description = pw.TextField(default="")
    endpoint = pw.CharField(max_length=2048)
    method = pw.CharField(max_length=8, default="POST")
    parameters = JSONField()
    signing_secret = pw.CharField(max_length=256)
    previous_secret = pw.CharField(max_length=256, null=True)  # see RotatedSecret
    previous_secret_expires_at = pw.DateTimeField(null=True)
    # The endpoint's budget in live calls and tests (500–5000); the database has the default
    # too, for rows written by code from before it (migration 009).
    timeout_ms = pw.IntegerField(default=5000, constraints=[pw.SQL("DEFAULT 5000")])
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow)
    # A deleted function keeps its row (and its signing secret) while versions of its agent
    # have it: calls answered with such a version still call it, and a restore brings it back.
    deleted_at = pw.DateTimeField(null=True)

    class Meta:
        # Unique among the live functions (deleted_at IS NULL): a partial index of migration
        # 017, which a model's index list cannot state.
        indexes = ((("agent", "name"), False),)


class FunctionInvocation(BaseModel):
    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, on_delete="CASCADE")
    call = pw.ForeignKeyField(Call, backref="function_invocations", on_delete="CASCADE")
    function = pw.ForeignKeyField(Function, null=True, on_delete="SET NULL")
    function_name = pw.CharField(max_length=64)
    parameters = JSONField(default=dict)
    status = pw.CharField(max_length=16, default="pending")  # pending | succeeded | failed
    result = JSONField(null=True)
    error_code = pw.CharField(max_length=64, null=True)
    error_message = pw.TextField(null=True)
    http_status = pw.IntegerField(null=True)
    latency_ms = pw.IntegerField(null=True)
    created_at = pw.DateTimeField(default=utcnow)
    completed_at = pw.DateTimeField(null=True)

    class Meta:
        indexes = ((("call", "created_at"), False),)


class AuditEntry(BaseModel):
    """A change made from the API, the dashboard or the CLI: when, who, what, which id, from
    where."""

    id = id_field()
    # None only for a failed sign-in with an email nobody has: it still counts towards the
    # sign-in throttle, and no tenant sees it.
    tenant = pw.ForeignKeyField(Tenant, backref="audit_entries", on_delete="CASCADE", null=True)
    created_at = pw.DateTimeField(default=utcnow)
    actor_type = pw.CharField(max_length=8)  # api_key | user | cli | runtime | system
    actor_id = pw.CharField(max_length=32, null=True)  # e.g. a user's id; no foreign key
    actor_label = pw.CharField(max_length=255)  # e.g. an email (the one tried, on a failure), "CLI"
    action = pw.CharField(max_length=64)  # key.created, user.sign_in_failed, …
    target_id = pw.CharField(max_length=64, null=True)
    address = pw.CharField(max_length=45, null=True)  # the client's IP address
    details = JSONField(default=dict)  # never a secret

    @property
    def actor(self) -> dict[str, str | None]:
        """Who made the change, as the API shows it: type, id and label."""
        return {"type": self.actor_type, "id": self.actor_id, "label": self.actor_label}

    class Meta:
        indexes = (
            (("tenant", "created_at", "id"), False),
            # GET /audit-log?action=…: one action's entries of a tenant, newest first.
            (("tenant", "action", "created_at", "id"), False),
            # Recent entries of one action for one email or one address (sign-in throttle).
            (("action", "actor_label", "created_at"), False),
            (("action", "address", "created_at"), False),
        )


class IdempotencyKey(BaseModel):
    """A tenant API POST's Idempotency-Key: held while its first request runs, then the answer
    that request gave, replayed to a repeat of it for 24 hours (app.services.idempotency)."""

    id = id_field()  # a new one each time the key is taken: the holder's token
    tenant = pw.ForeignKeyField(Tenant, on_delete="CASCADE")
    key = pw.CharField(max_length=255)
    fingerprint = pw.CharField(max_length=64)  # SHA-256 hex of the method, path and body
    state = pw.CharField(max_length=8, default="running")  # running | done
    # While running: when the key may be taken again (the request's process died).
    lease_until = pw.DateTimeField(null=True)
    status_code = pw.IntegerField(null=True)
    body = pw.TextField(null=True)
    headers = JSONField(null=True)  # the answer's headers worth keeping (Content-Type, Location)
    created_at = pw.DateTimeField(default=utcnow)  # the 24 hours count from here

    class Meta:
        indexes = ((("tenant", "key"), True), (("created_at",), False))


ALL_MODELS = [
    Tenant,
    ApiKey,
    User,
    UserSession,
    Agent,
    AgentVersion,
    PhoneNumber,
    Campaign,
    CampaignContact,
    Call,
    CallTurn,
    CreditTransaction,
    Event,
    Webhook,
    Delivery,
    DeliveryAttempt,
    Function,
    FunctionInvocation,
    AuditEntry,
    IdempotencyKey,
]
