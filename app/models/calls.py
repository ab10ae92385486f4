"""Calls and their transcript turns."""

import peewee as pw

from app.db import BaseModel
from app.models.agents import Agent
from app.models.campaigns import Campaign, CampaignContact
from app.models.fields import JSONField, id_field
from app.models.phone_numbers import PhoneNumber
from app.models.tenants import Tenant
from app.util import utcnow


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
    # Its post-call analysis (app.services.analysis, migration 022): the result as the API
    # shows it, its status (done, failed, not_configured, pending), the verdict (None until
    # an analysis is done) and what the analysis request cost, in IDR (never billed); when the
    # latest analysis was asked for: a job stores its result only while it still holds that
    # time, and the sweep asks again for one pending too long.
    analysis = JSONField(null=True)
    analysis_status = pw.CharField(max_length=16, null=True)
    successful = pw.BooleanField(null=True)
    analysis_cost_idr = pw.BigIntegerField(null=True)
    analysis_requested_at = pw.DateTimeField(null=True)

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
            (("tenant", "successful", "started_at", "id"), False),
            # The sweep: the analyses pending since before a bound (their jobs lost).
            (("analysis_status", "analysis_requested_at"), False),
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
