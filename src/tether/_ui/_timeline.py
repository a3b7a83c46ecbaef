"""A run's journal as a timeline picture (SVG): lanes of bars, coloured by outcome.

Layer: the dashboard (``_ui``).

:func:`timeline_svg` is a pure function of the entries (``RunInfo.entries``):
the same journal gives the same text, byte for byte.

**Lanes.** A step's key is ``parent-path/step-name#n``. Entries are grouped by
their parent path (the run's own steps, then each step's sub-steps), and each
group is packed into lanes by time: an entry goes into the group's first lane
that is free when it starts, so entries that overlapped in time (parallel
branches) get lanes of their own, while sequential ones share one. A step's
sub-steps come right below the lanes of the group the step itself is in.

**Bars.** One bar per entry, from ``started_at`` to ``finished_at``, coloured
by status: completed, failed, interrupted; journaled responses (to ``ask``
requests) in their own colour. Every entry is drawn, so a failed attempt of a
key and the later attempt that succeeded are two bars. A step that needed
retries (``attempt`` > 1) has a dashed outline and says which attempt
succeeded. Each bar's ``<title>`` (a tooltip) has its key, status, attempt,
duration (a timer's: from its start to when it was due, :func:`own_duration`)
and error.

**Time.** The axis is linear from the first start to the last finish, except
that idle stretches much longer than the work around them (a run paused for
hours for a human) are drawn as a short break labelled with their length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Final

import attrs

from .._api._timers import due_of
from .._errors import CheckpointCorruptError
from ..stores._records import Entry, EntryKind, EntryStatus
from ._html import Markup, tag

__all__ = (
    "COLOURS",
    "entries_count",
    "format_duration",
    "lanes",
    "own_duration",
    "timeline_svg",
    "timer_due",
)

#: fill colour of a bar, by outcome (``answer``: a journaled ask response)
COLOURS: Final = {
    "completed": "#3b8b5a",
    "failed": "#c62828",
    "interrupted": "#d99a00",
    "answer": "#3a6ea5",
}
#: what the legend and the tooltips call an outcome, where that is not its name
_SHOWN: Final = {"answer": "response"}

_LABEL_W: Final = 170  # the lane-label column
_MARGIN: Final = 12
_AXIS_H: Final = 34
_LANE_H: Final = 26
_BAR_H: Final = 18
_LEGEND_H: Final = 30
_BREAK_W: Final = 46  # an idle stretch drawn as a break
_CHAR_W: Final = 6.3  # average width of a character of the 11 px font
_MIN_BAR_W: Final = 3.0
#: an idle stretch is drawn as a break when longer than this many seconds, and
#: than _BREAK_SHARE of the time the rest of the picture spans
_BREAK_MIN_S: Final = 0.1
_BREAK_SHARE: Final = 0.25


def format_duration(seconds: float) -> str:
    """``850 us``, ``12.5 ms``, ``3.20 s``, ``4.5 min``, ``2.0 h``."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def timer_due(entry: Entry) -> datetime | None:
    """When the timer *entry* journals was due (``None``: not a timer, or no due time)."""
    if entry.kind is not EntryKind.TIMER:
        return None
    try:
        return due_of(entry, entry.run_id)
    except CheckpointCorruptError:
        return None  # shown as stored; reading the run says it is damaged


def own_duration(entry: Entry) -> timedelta:
    """How long the call *entry* records took: from its start to its finish; a timer's,
    to when it was due (its entry is journaled as it starts, so its finish is its start)."""
    due = timer_due(entry)
    # A timer set for a moment already past (sleep_until) was due at once: no time.
    return (entry.finished_at if due is None else max(due, entry.started_at)) - entry.started_at


def entries_count(n: int) -> str:
    """``1 entry``, ``2 entries``."""
    return f"{n} {'entry' if n == 1 else 'entries'}"


@attrs.frozen
class Lane:
    """One row of the picture: the entries of one group that never overlap."""

    path: str  #: the parent path of its entries (``""``: the run's own steps)
    index: int  #: which lane of its group (0 for the first)
    entries: tuple[Entry, ...]

    @property
    def label(self) -> str:
        name = self.path or "run"
        return name if self.index == 0 else f"{name} · {self.index + 1}"


def _order(entry: Entry) -> tuple[datetime, int, str, datetime]:
    """Start order; entries that started together in journal order."""
    return (entry.started_at, entry.seq or 0, entry.key, entry.finished_at)


def _parent(key: str) -> str:
    return key.rpartition("/")[0]


def lanes(entries: Sequence[Entry]) -> list[Lane]:
    """The lanes of *entries*, top to bottom (see the module docs for the rule)."""
    groups: dict[str, list[Entry]] = {}
    for entry in sorted(entries, key=_order):
        groups.setdefault(_parent(entry.key), []).append(entry)
    # Every ancestor of a group is a node of the tree, with entries or not
    # (a step that never finished still has its sub-steps drawn under it).
    children: dict[str, set[str]] = {}
    for path in groups:
        while path:
            children.setdefault(_parent(path), set()).add(path)
            path = _parent(path)
    starts = {e.key: e.started_at for es in groups.values() for e in es}

    def first(path: str) -> datetime:
        """When *path* (a step) started, else its first sub-step."""
        if path in starts:
            return starts[path]
        own = [e.started_at for e in groups.get(path, ())]
        return min([*own, *(first(c) for c in children.get(path, ()))])

    out: list[Lane] = []

    def visit(path: str) -> None:
        out.extend(_pack(path, groups.get(path, [])))
        for child in sorted(children.get(path, ()), key=lambda c: (first(c), c)):
            visit(child)

    visit("")
    return out


def _pack(path: str, entries: list[Entry]) -> list[Lane]:
    """*entries* (in start order) into as few lanes as no overlap allows: first fit."""
    rows: list[list[Entry]] = []
    for entry in entries:
        for row in rows:
            if row[-1].finished_at <= entry.started_at:
                row.append(entry)
                break
        else:
            rows.append([entry])
    return [Lane(path, i, tuple(row)) for i, row in enumerate(rows)]


@attrs.frozen
class _Scale:
    """Seconds since the first start -> x, with long idle stretches cut to breaks."""

    per_s: float  #: pixels per second outside the breaks
    #: (from_s, to_s, from_x, to_x) pieces, in order; a break maps a stretch to _BREAK_W
    pieces: tuple[tuple[float, float, float, float], ...]
    breaks: tuple[tuple[float, float, float], ...]  #: (x, from_s, to_s) of each break

    def x(self, t: float) -> float:
        for a, b, xa, xb in self.pieces:
            if t <= b:
                return xa if b == a else xa + (t - a) / (b - a) * (xb - xa)
        return self.pieces[-1][3]


def _scale(spans: list[tuple[float, float]], end: float, x0: float, width: float) -> _Scale:
    """The scale of *spans* (seconds; the first starts at 0, the last ends at *end*)."""
    busy: list[tuple[float, float]] = []  # the union of the spans
    for a, b in sorted(spans):
        if busy and a <= busy[-1][1]:
            busy[-1] = (busy[-1][0], max(busy[-1][1], b))
        else:
            busy.append((a, b))
    gaps = [(busy[i][1], busy[i + 1][0]) for i in range(len(busy) - 1)]
    worked = end - sum(b - a for a, b in gaps)
    cut = [(a, b) for a, b in gaps if b - a > max(_BREAK_MIN_S, _BREAK_SHARE * worked)]
    linear = end - sum(b - a for a, b in cut)
    per_s = max(width - _BREAK_W * len(cut), width / 2) / linear if linear > 0 else 0.0
    pieces: list[tuple[float, float, float, float]] = []
    breaks: list[tuple[float, float, float]] = []
    t, x = 0.0, x0
    for a, b in [*cut, (end, end)]:
        x_a = x + (a - t) * per_s
        pieces.append((t, a, x, x_a))
        if b > a:
            pieces.append((a, b, x_a, x_a + _BREAK_W))
            breaks.append((x_a, a, b))
            x_a += _BREAK_W
        t, x = b, x_a
    return _Scale(per_s, tuple(pieces), tuple(breaks))


def _ticks(scale: _Scale, end: float) -> list[tuple[float, float]]:
    """(x, seconds) of round times on the axis, at least 70 px apart, none in a break."""
    if scale.per_s <= 0:
        return [(scale.x(0.0), 0.0)]
    raw = 90 / scale.per_s  # seconds in about 90 px
    step = 10.0 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 5, 10) if step * m >= raw)
    out: list[tuple[float, float]] = []
    for n in range(int(end / step * (1 + 1e-9)) + 1):
        t = n * step
        if any(a < t < b for _, a, b in scale.breaks):
            continue
        x = scale.x(t)
        if not out or x - out[-1][0] >= 70:
            out.append((x, t))
    return out


def _outcome(entry: Entry) -> str:
    if entry.kind is EntryKind.RESPONSE and entry.status is EntryStatus.COMPLETED:
        return "answer"
    return entry.status.value


def _fits(text: str, width: float) -> bool:
    return len(text) * _CHAR_W + 8 <= width


def _cut(text: str, width: float) -> str:
    chars = max(1, int((width - 8) / _CHAR_W))
    return text if len(text) <= chars else text[: max(1, chars - 1)] + "…"


def _seconds(moment: datetime, t0: datetime) -> float:
    return (moment - t0) / timedelta(seconds=1)


def _title(entry: Entry) -> str:
    took = format_duration(own_duration(entry).total_seconds())
    outcome = _outcome(entry)
    text = f"{entry.key}: {_SHOWN.get(outcome, outcome)}, attempt {entry.attempt}, {took}"
    if entry.kind is not EntryKind.STEP:
        text += f" ({entry.kind.value})"
    if entry.error is not None:
        text += f"\n{entry.error}"
    return text


def _bar(entry: Entry, lane: int, scale: _Scale, t0: datetime, y: float, room: float) -> Markup:
    """One entry's bar, with its label inside, after it (up to *room*), or only as a tooltip.

    A response (journaled for an ``ask``) takes no time worth drawing: it
    is a diamond where it was journaled.
    """
    x0 = scale.x(_seconds(entry.started_at, t0))
    x1 = max(scale.x(_seconds(entry.finished_at, t0)), x0 + _MIN_BAR_W)
    outcome = _outcome(entry)
    retried = entry.attempt > 1
    data = {
        "class_": f"bar {outcome}" + (" retried" if retried else ""),
        "fill": COLOURS[outcome],
        "data_key": entry.key,
        "data_status": entry.status.value,
        "data_kind": entry.kind.value,
        "data_attempt": entry.attempt,
        "data_lane": lane,
    }
    title = tag("title", _title(entry))
    if outcome == "answer":
        cx, cy, r = x1, y + _BAR_H / 2, _BAR_H / 2
        corners = ((cx, cy - r), (cx + r, cy), (cx, cy + r), (cx - r, cy))
        points = " ".join(f"{px:.1f},{py:.1f}" for px, py in corners)
        return tag("polygon", title, points=points, stroke="#ffffff", **data)
    rect = tag(
        "rect",
        title,
        x=f"{x0:.1f}",
        y=f"{y:.1f}",
        width=f"{x1 - x0:.1f}",
        height=_BAR_H,
        rx=3,
        stroke="#1b1b1b" if retried else None,
        stroke_width="1.5" if retried else None,
        stroke_dasharray="4 2" if retried else None,
        **data,
    )
    name = entry.key.rpartition("/")[2]
    label = name if entry.attempt == 1 else f"{name} (attempt {entry.attempt})"
    text_y = f"{y + _BAR_H / 2 + 4:.1f}"
    if _fits(label, x1 - x0):
        ink = "#1b1b1b" if outcome == "interrupted" else "#ffffff"
        text = tag("text", label, x=f"{x0 + 4:.1f}", y=text_y, fill=ink)
    elif room - x1 > 24:
        text = tag("text", _cut(label, room - x1), x=f"{x1 + 4:.1f}", y=text_y, fill="#1b1b1b")
    else:
        text = Markup("")
    return Markup(rect + text)


def _legend(y: float) -> Markup:
    parts: list[Markup] = []
    x = float(_MARGIN)
    items = [*COLOURS.items(), ("retried", "#ffffff")]
    for name, colour in items:
        dashed = name == "retried"
        parts.append(
            tag(
                "rect",
                x=f"{x:.1f}",
                y=f"{y:.1f}",
                width=14,
                height=12,
                rx=2,
                fill=colour,
                stroke="#1b1b1b" if dashed else None,
                stroke_dasharray="4 2" if dashed else None,
            )
        )
        label = _SHOWN.get(name, name)
        parts.append(tag("text", label, x=f"{x + 19:.1f}", y=f"{y + 10:.1f}", fill="#333333"))
        x += 19 + len(label) * _CHAR_W + 18
    return Markup(tag("g", *parts, class_="legend"))


def _empty(width: int) -> str:
    text = tag("text", "no journal entries yet", x=_MARGIN, y=24, fill="#666666")
    return str(_svg(width, 40, text, "timeline: no journal entries"))


def _svg(width: int, height: int, body: Markup, label: str) -> Markup:
    return tag(
        "svg",
        body,
        xmlns="http://www.w3.org/2000/svg",
        width=width,
        height=height,
        viewBox=f"0 0 {width} {height}",
        role="img",
        aria_label=label,
        font_family="system-ui, -apple-system, 'Segoe UI', sans-serif",
        font_size=11,
        class_="timeline",
    )


def timeline_svg(entries: Sequence[Entry], *, width: int = 960) -> str:
    """The timeline of a journal, as the text of a standalone SVG document.

    Deterministic: the same entries (in any order) give the same text. Every
    text in it is escaped. An empty journal gives a small picture saying so.
    """
    if not entries:
        return _empty(width)
    rows = lanes(entries)
    t0 = min(e.started_at for e in entries)
    spans = [(_seconds(e.started_at, t0), _seconds(e.finished_at, t0)) for e in entries]
    spans = [(a, max(a, b)) for a, b in spans]  # a clock that stepped back: zero length
    end = max(b for _, b in spans)
    left, right = _LABEL_W + _MARGIN, width - _MARGIN
    scale = _scale(spans, end, left, right - left)
    bottom = _AXIS_H + _LANE_H * len(rows)
    back: list[Markup] = []  # lane stripes, then grid and breaks, then bars on top
    grid: list[Markup] = []
    front: list[Markup] = []
    clock = t0.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    grid.append(tag("text", f"{clock} UTC", x=_MARGIN, y=14, fill="#333333"))
    for x, t in _ticks(scale, end):
        grid.append(tag("line", x1=f"{x:.1f}", x2=f"{x:.1f}", y1=22, y2=bottom, stroke="#e4e4e4"))
        anchor = "end" if x > right - 30 else "start" if x < left + 30 else "middle"
        tick = "0" if t == 0 else f"+{format_duration(t)}"
        grid.append(tag("text", tick, x=f"{x:.1f}", y=18, fill="#666666", text_anchor=anchor))
    for x, a, b in scale.breaks:
        idle = format_duration(b - a)
        grid.append(
            tag(
                "g",
                tag("title", f"idle for {idle} (not to scale)"),
                tag("rect", x=f"{x:.1f}", y=22, width=_BREAK_W, height=bottom - 22, fill="#ececec"),
                tag(
                    "text",
                    idle,
                    x=f"{x + _BREAK_W / 2:.1f}",
                    y=30,
                    fill="#555555",
                    text_anchor="middle",
                    font_size=9,
                ),
                class_="break",
            )
        )
    for i, lane in enumerate(rows):
        y = _AXIS_H + _LANE_H * i
        back.append(
            tag("rect", x=0, y=y, width=width, height=_LANE_H, fill="#f6f6f6" if i % 2 else "#fff")
        )
        bars: list[Markup] = []
        answers: list[Markup] = []  # drawn last, over the bar that may follow at once
        for j, entry in enumerate(lane.entries):
            nxt = lane.entries[j + 1] if j + 1 < len(lane.entries) else None
            room = right if nxt is None else scale.x(_seconds(nxt.started_at, t0)) - 4
            drawn = _bar(entry, i, scale, t0, y + (_LANE_H - _BAR_H) / 2, room)
            (answers if _outcome(entry) == "answer" else bars).append(drawn)
        front.append(
            tag(
                "g",
                tag(
                    "text",
                    tag("title", lane.label),
                    _cut(lane.label, _LABEL_W),
                    x=_MARGIN,
                    y=f"{y + _LANE_H / 2 + 4:.1f}",
                    fill="#333333",
                ),
                *bars,
                *answers,
                class_="lane",
                data_lane=i,
                data_path=lane.path,
            )
        )
    body = Markup("".join([*back, *grid, *front, _legend(bottom + 10)]))
    height = bottom + _LEGEND_H
    return str(_svg(width, height, body, f"timeline of the journal: {entries_count(len(entries))}"))
