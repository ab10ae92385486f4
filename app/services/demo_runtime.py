"""A stand-in for the voice runtime (flask calls dispatch-demo): it claims queued outbound
calls as a runtime does (dispatch), answers some, talks for a while and ends them, so that a
campaign progresses with no runtime."""

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.services.calls import lifecycle as call_lifecycle
from app.services.calls import outbound as outbound_calls
from app.util import utcnow

# The short conversation a demo call and `calls simulate --turns` report.
EXAMPLE_TURNS = (
    ("agent", "Halo, terima kasih sudah menelepon. Ada yang bisa saya bantu?"),
    ("caller", "Halo, saya mau buat janji dengan dokter gigi untuk besok."),
    ("agent", "Baik. Besok ada jadwal jam 10.00 dan jam 14.30. Mau yang mana?"),
    ("caller", "Jam 10 saja."),
    ("agent", "Sudah saya catat: besok jam 10.00 dengan dokter gigi. Ada lagi?"),
    ("caller", "Tidak, terima kasih."),
)
# An outbound call: the business calls out, by the name the call's variables give.
OUTBOUND_TURNS = (
    ("agent", "Halo {name}, saya menelepon dari klinik untuk mengingatkan janji Anda besok."),
    ("caller", "Oh iya, halo."),
    ("agent", "Apakah {name} tetap bisa datang besok jam 10.00?"),
    ("caller", "Bisa, saya datang."),
    ("agent", "Baik, sudah saya catat. Terima kasih, {name}, sampai jumpa besok."),
    ("caller", "Sama-sama."),
)
# Whom an outbound call addresses when its variables give no name.
NO_NAME = "Bapak/Ibu"
SUMMARY = "A demo call: the callee confirmed the appointment."
# The outcomes of an unanswered call the demo runtime reports (its hangupReason).
UNANSWERED = ("no_answer", "busy")
# How long `calls simulate` has its call ring before it is answered.
RING_SECONDS = 3


def lived(started_at: datetime, talked: int = 0) -> int:
    """A call's duration as the demo runtime reports it: the whole seconds since it started,
    and at least its talk (the service's clock and time.monotonic() may differ a little)."""
    return max(talked, int((utcnow() - started_at).total_seconds()))


def example_turns(
    seconds: int, lines: tuple[tuple[str, str], ...] = EXAMPLE_TURNS
) -> list[dict[str, Any]]:
    """lines (an inbound call's EXAMPLE_TURNS by default) spread evenly over seconds of
    conversation."""
    span = seconds * 1000 // len(lines)
    return [
        {"role": role, "text": text, "start_ms": index * span, "end_ms": (index + 1) * span}
        for index, (role, text) in enumerate(lines)
    ]


def outbound_lines(
    session: dict[str, Any], variables: dict[str, str]
) -> tuple[tuple[str, str], ...]:
    """The conversation of an outbound call: the business calling out, opening with the
    session's greeting when the agent has one (its placeholders filled from the call's
    variables), addressing the callee by the name they give."""
    name = variables.get("name") or NO_NAME
    lines = [(role, text.format(name=name)) for role, text in OUTBOUND_TURNS]
    if session.get("greeting_text"):
        lines[0] = ("agent", session["greeting_text"])
    return tuple(lines)


@dataclass(frozen=True)
class Outcome:
    """What the demo runtime just did to a call: answered it, ended it after its talk
    (ended), or ended it unanswered (one of UNANSWERED)."""

    call_id: str
    callee_number: str
    result: str


class DemoRuntime:
    """Up to max_calls calls in progress, each answered with the chance answer_rate and
    talking for seconds (real ones); seed makes the outcomes repeatable. A call is answered
    or turned down as soon as it is claimed, and its reported duration is the time it has
    really lived."""

    def __init__(
        self, *, max_calls: int, seconds: int, answer_rate: float, seed: int | None
    ) -> None:
        self.max_calls = max_calls
        self.seconds = seconds
        self.answer_rate = answer_rate
        self.outcomes = random.Random(seed)
        # call id: when it hangs up (time.monotonic()), when it started, whom it calls and
        # what is said
        self.talking: dict[str, tuple[float, datetime, str, tuple[tuple[str, str], ...]]] = {}

    def step(self) -> Iterator[Outcome]:
        """Claim as many queued calls as there is room for and answer them or not, then end
        those whose talk is over; each outcome is yielded as it happens."""
        room = self.max_calls - len(self.talking)
        for started in outbound_calls.dispatch(max_calls=room) if room else []:
            call = started.call
            if self.outcomes.random() >= self.answer_rate:
                reason = self.outcomes.choice(UNANSWERED)
                call_lifecycle.end_call(
                    call_id=call.id,
                    status="failed",
                    duration_seconds=lived(call.started_at),
                    talk_time_seconds=0,
                    hangup_reason=reason,
                    hangup_initiator="callee",
                    ai_cost_idr=0,
                )
                yield Outcome(call.id, call.callee_number, reason)
                continue
            call_lifecycle.answer_call(call_id=call.id)
            lines = outbound_lines(started.session, call.variables)
            hangs_up = time.monotonic() + self.seconds
            self.talking[call.id] = (hangs_up, call.started_at, call.callee_number, lines)
            yield Outcome(call.id, call.callee_number, "answered")
        for call_id, (hangs_up, started_at, callee_number, lines) in list(self.talking.items()):
            if hangs_up > time.monotonic():
                continue
            call_lifecycle.add_transcript(
                call_id=call_id,
                turns=example_turns(max(self.seconds, 1), lines),
                transcript_summary=SUMMARY,
            )
            call_lifecycle.end_call(
                call_id=call_id,
                status="ended",
                duration_seconds=lived(started_at, self.seconds),
                talk_time_seconds=self.seconds,
                hangup_reason="normal",
                hangup_initiator="caller",
                ai_cost_idr=0,
            )
            del self.talking[call_id]
            yield Outcome(call_id, callee_number, "ended")

    def idle(self) -> bool:
        """No call of this runtime's in progress, and none queued."""
        return not self.talking and not outbound_calls.has_queued()
