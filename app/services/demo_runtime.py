"""A stand-in for the voice runtime (flask calls dispatch-demo): it claims queued outbound
calls as a runtime does (dispatch), answers some, talks for a while and ends them, so that a
campaign progresses with no runtime."""

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from app.services.calls import lifecycle as call_lifecycle
from app.services.calls import outbound as outbound_calls

# The short conversation a demo call and `calls simulate --turns` report.
EXAMPLE_TURNS = (
    ("agent", "Halo, terima kasih sudah menelepon. Ada yang bisa saya bantu?"),
    ("caller", "Halo, saya mau buat janji dengan dokter gigi untuk besok."),
    ("agent", "Baik. Besok ada jadwal jam 10.00 dan jam 14.30. Mau yang mana?"),
    ("caller", "Jam 10 saja."),
    ("agent", "Sudah saya catat: besok jam 10.00 dengan dokter gigi. Ada lagi?"),
    ("caller", "Tidak, terima kasih."),
)
SUMMARY = "A demo call: the callee confirmed the appointment."
# The outcomes of an unanswered call the demo runtime reports (its hangupReason).
UNANSWERED = ("no_answer", "busy")
RING_SECONDS = 3


def example_turns(seconds: int) -> list[dict[str, Any]]:
    """EXAMPLE_TURNS spread evenly over seconds of conversation."""
    span = seconds * 1000 // len(EXAMPLE_TURNS)
    return [
        {"role": role, "text": text, "start_ms": index * span, "end_ms": (index + 1) * span}
        for index, (role, text) in enumerate(EXAMPLE_TURNS)
    ]


@dataclass(frozen=True)
class Outcome:
    """What the demo runtime just did to a call: answered it, ended it after its talk
    (ended), or ended it unanswered (one of UNANSWERED)."""

    call_id: str
    callee_number: str
    result: str


class DemoRuntime:
    """Up to max_calls calls in progress, each answered with the chance answer_rate and
    talking for seconds (real ones); seed makes the outcomes repeatable."""

    def __init__(
        self, *, max_calls: int, seconds: int, answer_rate: float, seed: int | None
    ) -> None:
        self.max_calls = max_calls
        self.seconds = seconds
        self.answer_rate = answer_rate
        self.outcomes = random.Random(seed)
        # call id: when it hangs up (time.monotonic()) and whom it calls
        self.talking: dict[str, tuple[float, str]] = {}

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
                    duration_seconds=RING_SECONDS,
                    talk_time_seconds=0,
                    hangup_reason=reason,
                    hangup_initiator="callee",
                    ai_cost_idr=0,
                )
                yield Outcome(call.id, call.callee_number, reason)
                continue
            call_lifecycle.answer_call(call_id=call.id)
            self.talking[call.id] = (time.monotonic() + self.seconds, call.callee_number)
            yield Outcome(call.id, call.callee_number, "answered")
        for call_id, (hangs_up, callee_number) in list(self.talking.items()):
            if hangs_up > time.monotonic():
                continue
            call_lifecycle.add_transcript(
                call_id=call_id,
                turns=example_turns(max(self.seconds, 1)),
                transcript_summary=SUMMARY,
            )
            call_lifecycle.end_call(
                call_id=call_id,
                status="ended",
                duration_seconds=self.seconds + RING_SECONDS,
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
