"""The overview's chart: calls (bars) and billed minutes (a line) per day, drawn as SVG here."""

import math
from dataclasses import dataclass

from app.services.calls.history import DayTotal

WIDTH, HEIGHT = 760, 260
LEFT, RIGHT, TOP, BOTTOM = 48, 56, 16, 40  # room for the axes' numbers and the days
MAX_TICKS = 4


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    total: DayTotal


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    total: DayTotal


@dataclass(frozen=True)
class Tick:
    y: float
    value: int


@dataclass(frozen=True)
class DayLabel:
    x: float
    text: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    left: float
    right: float
    top: float
    bottom: float
    bars: list[Bar]
    points: list[Point]
    call_ticks: list[Tick]
    minute_ticks: list[Tick]
    day_labels: list[DayLabel]
    totals: list[DayTotal]

    @property
    def line(self) -> str:
        """The minutes line as an SVG polyline's points."""
        return " ".join(f"{point.x:.1f},{point.y:.1f}" for point in self.points)

    @property
    def calls(self) -> int:
        return sum(total.calls for total in self.totals)

    @property
    def minutes(self) -> int:
        return sum(total.minutes for total in self.totals)

    @property
    def busiest(self) -> DayTotal | None:
        """The day with the most calls (the latest of equals), or None without calls."""
        busiest = max(reversed(self.totals), key=lambda total: total.calls, default=None)
        return busiest if busiest is not None and busiest.calls else None


def next_step(step: int) -> int:
    """The tick steps in turn: 1, 2, 5, 10, 20, 50, 100, …"""
    power = 10 ** (len(str(step)) - 1)
    return power * {1: 2, 2: 5, 5: 10}[step // power]


def axis(largest: int, *, top: float, bottom: float) -> tuple[int, list[Tick]]:
    """A round top for an axis that shows largest (at most MAX_TICKS steps of 1, 2 or 5 times
    a power of ten), and its ticks from 0 up, placed between bottom and top."""
    step = 1
    while math.ceil(largest / step) > MAX_TICKS:
        step = next_step(step)
    highest = max(1, math.ceil(largest / step)) * step
    ticks = [
        Tick(y=bottom - (bottom - top) * value / highest, value=value)
        for value in range(0, highest + 1, step)
    ]
    return highest, ticks


def daily_chart(totals: list[DayTotal]) -> Chart:
    """Lay out the days side by side: a bar per day on the calls axis (left), a point per
    day on the minutes axis (right), and a label under every fifth day and the last."""
    left, right, top, bottom = LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM
    slot = (right - left) / max(1, len(totals))
    most_calls, call_ticks = axis(max((t.calls for t in totals), default=0), top=top, bottom=bottom)
    most_minutes, minute_ticks = axis(
        max((t.minutes for t in totals), default=0), top=top, bottom=bottom
    )
    bars, points, labels = [], [], []
    for index, total in enumerate(totals):
        x = left + slot * index
        height = (bottom - top) * total.calls / most_calls
        bars.append(Bar(x + slot * 0.15, bottom - height, slot * 0.7, height, total))
        middle = x + slot / 2
        points.append(Point(middle, bottom - (bottom - top) * total.minutes / most_minutes, total))
        if index % 5 == 0 or index == len(totals) - 1:
            labels.append(DayLabel(middle, total.day.strftime("%b %d").replace(" 0", " ")))
    return Chart(
        width=WIDTH,
        height=HEIGHT,
        left=left,
        right=right,
        top=top,
        bottom=bottom,
        bars=bars,
        points=points,
        call_ticks=call_ticks,
        minute_ticks=minute_ticks,
        day_labels=labels,
        totals=totals,
    )
