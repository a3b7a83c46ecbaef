"""Seeded schedules: the same seed gives the same trio schedule, in and across processes.

These tests call ``trio.run`` themselves (a seeded schedule must be set up
before the run starts), so they are plain sync tests.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import tomllib
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from packaging.specifiers import SpecifierSet

import tether
from tether import UsageError
from tether._errors import UnsupportedTrioError
from tether.testing._deterministic import (
    SUPPORTED_TRIO,
    ScheduleTrace,
    TraceEvent,
    check_trio_support,
    in_supported_range,
    run_deterministic,
    seeded_schedule,
)

from . import _trace_workflow as flow

HERE = Path(__file__).resolve().parent
FLAG = "_ALLOW_DETERMINISTIC_SCHEDULING"
RANGE = f">={SUPPORTED_TRIO[0]},<{SUPPORTED_TRIO[1]}"


@pytest.fixture
def hook() -> Iterator[types.ModuleType]:
    """trio's run module, with the hook's flag and generator state put back afterwards."""
    run_module = check_trio_support()
    flag, state = getattr(run_module, FLAG), run_module._r.getstate()
    yield run_module
    setattr(run_module, FLAG, flag)
    run_module._r.setstate(state)


def hook_state(run_module: types.ModuleType) -> tuple[bool, object]:
    return getattr(run_module, FLAG), run_module._r.getstate()


def diff(a: ScheduleTrace | list[TraceEvent], b: ScheduleTrace | list[TraceEvent]) -> str:
    """The first few differing lines of two traces, for an assertion message."""
    la, lb = (t.lines() if isinstance(t, ScheduleTrace) else as_trace(t).lines() for t in (a, b))
    pairs = [(i, x, y) for i, (x, y) in enumerate(zip(la, lb, strict=False)) if x != y][:5]
    shown = "\n".join(f"{i}: {x}\n{i}: {y}" for i, x, y in pairs)
    return f"{len(la)} vs {len(lb)} events; first differences:\n{shown}"


def as_trace(events: list[TraceEvent]) -> ScheduleTrace:
    trace = ScheduleTrace()
    trace.events = events
    return trace


# -- the acceptance point ------------------------------------------------------


def test_the_same_seed_gives_the_same_trace_five_times_in_one_process() -> None:
    result, first = flow.traced(7)
    assert result == flow.EXPECTED
    # The trace is a real schedule of all twenty steps, with virtual time in it.
    steps = {name for _, _, _, name in first.events if name.startswith("hop#")}
    assert steps == {f"hop#{i}" for i in range(flow.WIDTH)}
    assert max(time for time, *_ in first.events) == pytest.approx(0.003)
    for _ in range(4):
        result, again = flow.traced(7)
        assert result == flow.EXPECTED
        assert again.events == first.events, diff(first, again)
        assert again.digest() == first.digest()


def test_the_same_seed_gives_the_same_trace_in_fresh_processes() -> None:
    _, here = flow.traced(7)
    # Different hash seeds: set and dict-of-str orders differ between the processes.
    workers = [
        subprocess.Popen(
            [sys.executable, str(HERE / "_trace_worker.py"), "7"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
        )
        for hash_seed in ("0", "1", "4242")
    ]
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        there = json.loads(out)
        assert there["result"] == flow.EXPECTED
        events: list[TraceEvent] = [(t, kind, i, name) for t, kind, i, name in there["events"]]
        assert events == here.events, diff(here, events)
        assert there["digest"] == here.digest()


def test_another_seed_gives_another_trace_and_the_same_result() -> None:
    result7, seven = flow.traced(7)
    result8, eight = flow.traced(8)
    assert result7 == result8 == flow.EXPECTED
    assert seven.digest() != eight.digest()
    assert seven.events != eight.events
    # The same tasks, spawned in the same order: only the interleaving differs.
    spawned = [[e for e in t.events if e[1] == "spawn"] for t in (seven, eight)]
    assert spawned[0] == spawned[1]


@pytest.mark.parametrize("flag", [False, True], ids=["hook-off", "hook-on"])
def test_without_a_seed_runs_are_scheduled_differently(hook: types.ModuleType, flag: bool) -> None:
    # Not flaky in practice: trio randomizes every batch of runnable tasks --
    # with the hook off, a coin flip reverses it; with it on (as Hypothesis'
    # trio plugin leaves it in this process), an unseeded generator shuffles
    # it -- and this fan-out has 17 batches of two tasks or more (trio 0.35).
    # Ten equal traces take at least 2**-(9 * 17) bad luck; 300 runs of either
    # kind gave 300 distinct traces.
    setattr(hook, FLAG, flag)
    traces: set[str] = set()
    results: set[int] = set()
    for _ in range(10):
        trace = ScheduleTrace()
        clock = trio.testing.MockClock(autojump_threshold=0)
        results.add(trio.run(flow.run_fanout, clock=clock, instruments=[trace]))
        traces.add(trace.digest())
    assert len(traces) >= 2
    assert results == {flow.EXPECTED}


def test_run_deterministic_passes_arguments_and_a_given_clock() -> None:
    clock = trio.testing.MockClock(autojump_threshold=0)

    async def add(a: int, b: int) -> tuple[int, float]:
        await trio.sleep(5)
        return a + b, trio.current_time()

    assert run_deterministic(add, 2, 3, seed=1, clock=clock) == (5, 5.0)
    assert clock.current_time() == 5.0


def test_run_deterministic_restores_the_hook_when_the_run_raises(
    hook: types.ModuleType,
) -> None:
    before = hook_state(hook)

    async def boom() -> None:
        await trio.sleep(1)
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        run_deterministic(boom, seed=3)
    assert hook_state(hook) == before


# -- ScheduleTrace -------------------------------------------------------------


def test_a_trace_records_spawns_steps_and_exits_by_spawn_order() -> None:
    async def child(delay: float) -> None:
        await trio.sleep(delay)

    async def parent() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child, 2, name="slow")
            nursery.start_soon(child, 1, name="fast")

    trace = ScheduleTrace()
    run_deterministic(parent, instruments=[trace])
    index = {name: i for _, kind, i, name in trace.events if kind == "spawn"}
    assert list(index.values()) == list(range(len(index)))  # numbered in spawn order
    assert index["<init>"] == 0
    assert list(index)[-2:] == ["slow", "fast"]
    exits = [(time, name) for time, kind, _, name in trace.events if kind == "exit"]
    assert exits[:2] == [(1.0, "fast"), (2.0, "slow")]
    assert {kind for _, kind, _, _ in trace.events} == {"spawn", "step", "exit"}
    assert len(trace.lines()) == len(trace.events)
    assert trace.lines()[0] == "         0.0 spawn #0 <init>"
    # A second run with the same trace starts afresh (and gives the same events).
    events, digest = list(trace.events), trace.digest()
    run_deterministic(parent, instruments=[trace])
    assert trace.events == events
    assert trace.digest() == digest
    assert len(digest) == 64 and int(digest, 16) >= 0


def test_the_digest_tells_apart_a_name_that_looks_like_two_events() -> None:
    one = as_trace([(0.0, "step", 0, "x\n0.0\tstep\t0\ty")])
    two = as_trace([(0.0, "step", 0, "x"), (0.0, "step", 0, "y")])
    assert one.digest() != two.digest()
    assert one.digest() == as_trace(list(one.events)).digest()


# -- seeded_schedule -----------------------------------------------------------


@pytest.mark.parametrize("initial_flag", [False, True])
def test_seeded_schedule_sets_the_hook_and_restores_it_on_exit(
    hook: types.ModuleType, initial_flag: bool
) -> None:
    setattr(hook, FLAG, initial_flag)
    before = hook_state(hook)
    with seeded_schedule(11):
        assert getattr(hook, FLAG) is True
        assert hook._r.getstate() == random.Random(11).getstate()
        hook._r.random()  # the block uses the generator
    assert hook_state(hook) == before


def test_seeded_schedule_restores_the_hook_after_an_exception(hook: types.ModuleType) -> None:
    setattr(hook, FLAG, False)
    before = hook_state(hook)
    with pytest.raises(ZeroDivisionError), seeded_schedule(5):
        hook._r.random()
        raise ZeroDivisionError
    assert hook_state(hook) == before


def test_nested_seeded_schedules_restore_the_outer_one(hook: types.ModuleType) -> None:
    setattr(hook, FLAG, False)
    before = hook_state(hook)
    with seeded_schedule(1):
        hook._r.random()
        outer = hook_state(hook)
        with seeded_schedule(2):
            assert hook._r.getstate() == random.Random(2).getstate()
            hook._r.random()
        assert hook_state(hook) == outer
        assert getattr(hook, FLAG) is True
    assert hook_state(hook) == before


def test_seeded_schedule_refuses_to_start_inside_a_run(hook: types.ModuleType) -> None:
    async def main() -> None:
        before = hook_state(hook)
        with pytest.raises(UsageError, match=r"before trio\.run"), seeded_schedule(1):
            pass  # pragma: no cover
        assert hook_state(hook) == before
        with pytest.raises(UsageError, match="sync fixture"):
            run_deterministic(trio.sleep, 0)

    trio.run(main)


@pytest.mark.parametrize("seed", [-1, True, False, 1.0, "3", None])
def test_seeded_schedule_rejects_bad_seeds(hook: types.ModuleType, seed: Any) -> None:
    before = hook_state(hook)
    with pytest.raises(UsageError, match="non-negative int seed"), seeded_schedule(seed):
        pass  # pragma: no cover
    assert hook_state(hook) == before
    with pytest.raises(UsageError, match=re.escape(repr(seed))):
        run_deterministic(trio.sleep, 0, seed=seed)


def test_large_seeds_are_fine() -> None:
    async def noop() -> int:
        return 1

    assert run_deterministic(noop, seed=2**100) == 1


# -- unsupported trio ----------------------------------------------------------


@pytest.mark.parametrize("version", ["0.99.0", "0.29.0", "0.36.0rc1", "1.0.0"])
def test_a_trio_outside_the_range_is_refused_before_anything_changes(
    hook: types.ModuleType, monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    setattr(hook, FLAG, False)
    before = hook_state(hook)
    monkeypatch.setattr(trio, "__version__", version)
    with pytest.raises(UnsupportedTrioError) as caught:
        check_trio_support()
    message = str(caught.value)
    assert f"trio {version} is installed" in message
    assert f"trio{RANGE}" in message
    assert f"pip install 'trio{RANGE}'" in message
    assert "private" in message
    assert isinstance(caught.value, tether.TetherError)
    with pytest.raises(UnsupportedTrioError, match=re.escape(version)):
        run_deterministic(trio.sleep, 0, seed=1)
    with pytest.raises(UnsupportedTrioError), seeded_schedule(1):
        pass  # pragma: no cover
    assert hook_state(hook) == before


def test_a_trio_without_the_flag_is_refused(
    hook: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    before_state = hook._r.getstate()
    monkeypatch.delattr(hook, FLAG)
    with pytest.raises(UnsupportedTrioError, match=FLAG) as caught:
        run_deterministic(trio.sleep, 0, seed=1)
    assert trio.__version__ in str(caught.value)
    assert RANGE in str(caught.value)
    assert not hasattr(hook, FLAG)
    assert hook._r.getstate() == before_state


@pytest.mark.parametrize(
    ("name", "value"), [("_r", random), ("_r", None), (FLAG, 1), ("_counter", None)]
)
def test_a_trio_whose_hook_changed_shape_is_refused(
    hook: types.ModuleType, monkeypatch: pytest.MonkeyPatch, name: str, value: object
) -> None:
    if name == "_counter":
        monkeypatch.delattr(trio.lowlevel.Task, "_counter")
    else:
        monkeypatch.setattr(hook, name, value)
    with pytest.raises(UnsupportedTrioError, match=name), seeded_schedule(1):
        pass  # pragma: no cover


@pytest.mark.parametrize(
    ("version", "supported"),
    [
        ("0.30.0", True),
        ("0.30", True),
        ("0.35.0", True),
        ("0.35.0+dev", True),
        ("0.35.0.dev0", True),
        ("0.32.0rc1", True),
        ("0.35.2.post1", True),
        ("v0.31.0", True),
        ("0.29.9", False),
        ("0.30.0rc1", False),
        ("0.30.0.dev3", False),
        ("0.36.0rc1", False),
        ("0.36.0", False),
        ("0.36.0+dev", False),
        ("1.0", False),
        ("0.99.0", False),
        ("", False),
        ("unknown", False),
        ("0.35.x", False),
    ],
)
def test_versions_are_read_as_pip_reads_them(version: str, supported: bool) -> None:
    assert in_supported_range(version) is supported
    if version not in ("", "unknown", "0.35.x"):  # not PEP 440 versions at all
        assert SpecifierSet(RANGE, prereleases=True).contains(version) is supported


def test_the_installed_trio_is_supported() -> None:
    assert in_supported_range(trio.__version__)
    assert check_trio_support() is sys.modules["trio._core._run"]


def test_pyproject_pins_trio_to_the_supported_range() -> None:
    with open(HERE.parent / "pyproject.toml", "rb") as f:
        dependencies: list[str] = tomllib.load(f)["project"]["dependencies"]
    trio_pins = [d for d in dependencies if d.startswith("trio")]
    assert trio_pins == [f"trio>={SUPPORTED_TRIO[0]},<{SUPPORTED_TRIO[1]}"]
