"""The timeline picture (``tether._timeline``): lanes, bars, colours, escaping, determinism."""

from __future__ import annotations

import random
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from tether._ui._timeline import COLOURS, lanes, own_duration, timeline_svg
from tether.stores import Entry, EntryKind, EntryStatus, ErrorInfo

SVG = "{http://www.w3.org/2000/svg}"
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def entry(
    key: str,
    start_ms: float,
    end_ms: float,
    *,
    status: EntryStatus = EntryStatus.COMPLETED,
    kind: EntryKind = EntryKind.STEP,
    attempt: int = 1,
    seq: int | None = None,
    error: ErrorInfo | None = None,
) -> Entry:
    return Entry(
        run_id="r",
        key=key,
        kind=kind,
        status=status,
        value=None if status is not EntryStatus.COMPLETED else "1",
        error=error,
        started_at=T0 + timedelta(milliseconds=start_ms),
        finished_at=T0 + timedelta(milliseconds=end_ms),
        attempt=attempt,
        seq=seq,
    )


def bars(svg: str) -> list[ET.Element]:
    """The bars of a picture (which must be well-formed XML), in document order."""
    root = ET.fromstring(svg)
    return [e for e in root.iter() if e.get("data-key") is not None]


def by_key(svg: str) -> dict[str, list[ET.Element]]:
    out: dict[str, list[ET.Element]] = {}
    for bar in bars(svg):
        out.setdefault(bar.get("data-key", ""), []).append(bar)
    return out


def test_parallel_branches_get_lanes_of_their_own_and_sequential_steps_share_one() -> None:
    journal = [
        entry("load#0", 0, 10, seq=1),
        entry("charge#0", 10, 30, seq=3),
        entry("reserve#0", 10, 20, seq=2),
        entry("ship#0", 30, 40, seq=4),
    ]
    found = lanes(journal)
    # In start order (then journal order), each into the first lane free by then.
    assert [[e.key for e in lane.entries] for lane in found] == [
        ["load#0", "reserve#0", "ship#0"],
        ["charge#0"],
    ]
    assert [lane.label for lane in found] == ["run", "run · 2"]
    shown = {
        key: int(b[0].get("data-lane", "-1")) for key, b in by_key(timeline_svg(journal)).items()
    }
    assert shown == {"load#0": 0, "reserve#0": 0, "ship#0": 0, "charge#0": 1}


def test_sub_steps_come_right_below_their_step_and_a_missing_parent_still_has_a_place() -> None:
    journal = [
        entry("a#0", 0, 5),
        entry("inner#0/x#0", 5, 15),
        entry("inner#0/x#1", 6, 25),
        entry("inner#0", 5, 26),
        entry("other#0", 5, 8),
        entry("gone#0/deep#0/leaf#0", 30, 31),  # neither gone#0 nor gone#0/deep#0 journaled
    ]
    found = lanes(journal)
    assert [(lane.path, [e.key for e in lane.entries]) for lane in found] == [
        ("", ["a#0", "inner#0"]),
        ("", ["other#0"]),
        ("inner#0", ["inner#0/x#0"]),
        ("inner#0", ["inner#0/x#1"]),
        ("gone#0/deep#0", ["gone#0/deep#0/leaf#0"]),
    ]


def test_bars_are_coloured_by_outcome() -> None:
    journal = [
        entry("ok#0", 0, 10),
        entry("bad#0", 0, 10, status=EntryStatus.FAILED, error=ErrorInfo(type="E", message="m")),
        entry("cut#0", 0, 10, status=EntryStatus.INTERRUPTED, kind=EntryKind.STREAM),
        entry("ask#0", 12, 12, kind=EntryKind.RESPONSE),
    ]
    shown = {k: b[0] for k, b in by_key(timeline_svg(journal)).items()}
    assert shown["ok#0"].get("fill") == COLOURS["completed"]
    assert shown["bad#0"].get("fill") == COLOURS["failed"]
    assert shown["cut#0"].get("fill") == COLOURS["interrupted"]
    assert shown["ask#0"].get("fill") == COLOURS["answer"]
    assert shown["ask#0"].tag == f"{SVG}polygon"  # an answer is a mark, not a bar
    assert len({b.get("fill") for b in shown.values()}) == 4
    tooltip = shown["bad#0"].find(f"{SVG}title")
    assert tooltip is not None and "E: m" in (tooltip.text or "")


def test_failed_attempts_and_retries_are_visible() -> None:
    journal = [
        entry("charge#0", 0, 10, status=EntryStatus.FAILED, seq=1),
        entry("charge#0", 20, 30, attempt=3, seq=2),
        entry("plain#0", 30, 40, seq=3),
    ]
    svg = timeline_svg(journal)
    first, second = by_key(svg)["charge#0"]
    assert (first.get("data-status"), first.get("data-attempt")) == ("failed", "1")
    assert (second.get("data-status"), second.get("data-attempt")) == ("completed", "3")
    assert "retried" in (second.get("class") or "") and second.get("stroke-dasharray")
    plain = by_key(svg)["plain#0"][0]
    assert "retried" not in (plain.get("class") or "") and plain.get("stroke-dasharray") is None
    texts = [t.text for t in ET.fromstring(svg).iter(f"{SVG}text")]
    assert "charge#0 (attempt 3)" in texts


def test_text_is_escaped() -> None:
    evil = "</title><script>alert(1)</script>"
    journal = [
        entry(
            f"step{evil}#0",
            0,
            10,
            status=EntryStatus.FAILED,
            error=ErrorInfo(type="E", message=evil, key=f"step{evil}#0"),
        ),
    ]
    svg = timeline_svg(journal)
    assert "<script" not in svg
    root = ET.fromstring(svg)  # well-formed, so nothing escaped its element
    assert not [e for e in root.iter() if e.tag.endswith("script")]
    (bar,) = bars(svg)
    assert bar.get("data-key") == f"step{evil}#0"
    assert evil in (bar.findtext(f"{SVG}title") or "")


def test_the_same_journal_gives_the_same_text_in_any_order() -> None:
    journal = [
        entry("a#0", 0, 10, seq=1),
        entry("b#0", 5, 25, seq=2),
        entry("b#0/c#0", 6, 7, seq=3),
        entry("d#0", 25, 40, seq=4, attempt=2),
    ]
    svg = timeline_svg(journal)
    shuffled = journal[:]
    random.Random(7).shuffle(shuffled)
    assert timeline_svg(shuffled) == svg
    assert timeline_svg(tuple(journal)) == svg


def test_a_long_idle_stretch_is_drawn_as_a_labelled_break() -> None:
    journal = [
        entry("before#0", 0, 20),
        entry("ask#0", 600_020, 600_020, kind=EntryKind.RESPONSE),
        entry("after#0", 600_020, 600_050),
    ]
    root = ET.fromstring(timeline_svg(journal, width=800))
    breaks = [g for g in root.iter(f"{SVG}g") if g.get("class") == "break"]
    assert len(breaks) == 1
    assert "10.0 min" in "".join(breaks[0].itertext())
    shown = by_key(timeline_svg(journal, width=800))
    before = float(shown["before#0"][0].get("width", "0"))
    after = float(shown["after#0"][0].get("width", "0"))
    # Drawn to one scale on both sides of the break, and readable: not squashed.
    assert before > 100 and abs(after / before - 1.5) < 0.05
    busy = [entry("a#0", 0, 20), entry("b#0", 25, 40)]  # a short gap is drawn to scale
    assert not [
        g for g in ET.fromstring(timeline_svg(busy)).iter(f"{SVG}g") if g.get("class") == "break"
    ]


def test_an_empty_journal_says_so() -> None:
    svg = timeline_svg([])
    assert "no journal entries yet" in svg
    assert bars(svg) == []


_moments = st.integers(min_value=0, max_value=5_000)
_keys = st.sampled_from(["a#0", "a#1", "b#0", "b#0/c#0", "b#0/c#1", "x#0/y#0/z#0", "<&>#0"])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(_keys, _moments, _moments, st.sampled_from(list(EntryStatus)), st.integers(1, 3)),
        max_size=25,
    )
)
def test_every_entry_is_one_bar_inside_the_picture_and_lanes_never_overlap(
    specs: list[tuple[str, int, int, EntryStatus, int]],
) -> None:
    journal = [
        entry(k, min(a, b), max(a, b), status=s, attempt=n, seq=i)
        for i, (k, a, b, s, n) in enumerate(specs, 1)
    ]
    width = 900
    svg = timeline_svg(journal, width=width)
    drawn = bars(svg)
    assert len(drawn) == len(journal)
    for bar in drawn:
        if bar.tag == f"{SVG}rect":
            x, w = float(bar.get("x", "nan")), float(bar.get("width", "nan"))
            assert x >= 170 and x + w <= width + 0.5
    for lane in lanes(journal):
        for before, later in zip(lane.entries, lane.entries[1:], strict=False):
            assert before.finished_at <= later.started_at


def test_a_timer_due_in_the_past_took_no_time() -> None:
    started = datetime(2030, 1, 1, 12, tzinfo=UTC)
    timer = Entry(
        run_id="r",
        key="sleep#0",
        kind=EntryKind.TIMER,
        value='{"due":"2030-01-01T11:00:00+00:00"}',  # sleep_until an hour ago
        started_at=started,
        finished_at=started,
    )
    assert own_duration(timer) == timedelta(0)
    later = attrs.evolve(timer, value='{"due":"2030-01-01T12:00:05+00:00"}')
    assert own_duration(later) == timedelta(seconds=5)
