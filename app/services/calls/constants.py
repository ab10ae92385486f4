"""What a call may be and carry: its statuses and directions, and the limits on its metadata,
costs, transcript and variables that the services and the schemas both check."""

import json
from typing import Any

# queued: an outbound call waiting for a runtime to claim it (dispatch); canceled: a queued
# call withdrawn before it was dialled.
STATUSES = ("queued", "ringing", "answered", "ended", "dropped", "failed", "canceled")
END_STATUSES = ("ended", "dropped", "failed")
OPEN_STATUSES = ("ringing", "answered")
DIRECTIONS = ("inbound", "outbound")
# A runtime claims at most this many queued calls at once.
MAX_DISPATCH = 50
# A call's metadata, as compact JSON: what the runtime sends and what the call keeps merged.
MAX_METADATA_BYTES = 16 * 1024
# A call's reported durationSeconds is at most the time since it started (the service's
# clock) plus this much, which covers a runtime's clock and its network delays.
DURATION_ALLOWANCE_SECONDS = 60

# Why a WhatsApp call ended, beside the usual reasons (hangupReason is free text): the user
# rejected a business-initiated call, or Meta refused it for want of the user's permission.
WHATSAPP_HANGUP_REASONS = ("declined", "no_call_permission")
# Meta's webhook values the runtime forwards in one post (POST /internal/v1/whatsapp/events),
# and their size as compact JSON.
MAX_WHATSAPP_VALUES = 100
MAX_WHATSAPP_EVENT_BYTES = 256 * 1024

# The components of a call's AI cost, in IDR, as the runtime may report them at the end.
COST_COMPONENTS = ("llm", "stt", "tts", "telephony", "other")
# The most aiCostIdr may be (a 32-bit integer), also when it is the components' sum.
MAX_COST_IDR = 2**31 - 1

# A call's transcript: at most this many turns and this many bytes (UTF-8) of their text.
MAX_TURNS = 2000
MAX_TURN_BYTES = 256 * 1024
TURN_ROLES = ("agent", "caller")

# {{name}} in an agent's systemPrompt and greetingText, filled from the call's variables.
VARIABLE_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,63}"
MAX_VARIABLES = 50
MAX_VARIABLE_LENGTH = 2000
# A call's session: its prompt and greeting after variables, in UTF-8 bytes. A few
# placeholders times a long value would otherwise make sessions of megabytes.
MAX_SESSION_BYTES = 256 * 1024
# The hangupReason of a queued call whose agent grew past that since (it fails at its claim).
SESSION_TOO_LARGE = "session_too_large"
# The sessions of one dispatch answer, as compact JSON: fewer calls than asked when large.
MAX_DISPATCH_BYTES = 8 * 1024 * 1024


def metadata_bytes(metadata: dict[str, Any]) -> int:
    """The size of metadata as MAX_METADATA_BYTES counts it: UTF-8 bytes of compact JSON."""
    return len(json.dumps(metadata, separators=(",", ":"), ensure_ascii=False).encode())
