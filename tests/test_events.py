"""Live run events: ``engine.open_run`` and the progress renderer."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing

import tether
from tether.stores import RunStatus
from tether.testing import FaultyStore, Hang


@tether.step
async def wait(seconds: float) -> float:
    await trio.sleep(seconds)
    return seconds


@tether.stream_step
async def ticks(n: int, interval: float) -> AsyncIterator[int]:
    for i in range(n):
        await trio.sleep(interval)
        yield i


@tether.step
async def boom(total: int) -> None:
    raise ValueError(f"boom after {total}")


@tether.workflow
async def watched() -> None:
    async with tether.parallel() as p:
        p.start_soon(wait, 1.0)
        p.start_soon(wait, 2.0)
    async with tether.open_stream(ticks, 2, 0.5) as items:
        total = sum([i async for i in items])
    await boom(total)


def brief(event: tether.RunEvent) -> tuple[Any, ...]:
    """An event as a comparable tuple: its type, key and what matters about it."""
    match event:
        case tether.RunStarted():
            return ("run started", event.workflow)
        case tether.StepStarted():
            return ("started", event.key, event.stream)
        case tether.StreamItem():
            return ("item", event.key, event.index, event.item)
        case tether.CheckpointStored():
            return ("stored", event.key, event.entry.seq, event.entry.value)
        case tether.StepFinished():
            exc = event.exception
            return ("finished", event.key, None if exc is None else type(exc).__name__)
        case tether.RunFinished():
            return ("run finished", event.result, repr(event.error))
    raise AssertionError(event)


async def test_events_arrive_in_order(autojump_clock: trio.abc.Clock) -> None:
    async with (
        tether.open_engine(tether.MemoryStore()) as engine,
        engine.open_run(watched, run_id="w") as run,
    ):
        assert run.run_id == "w"
        seen: list[tuple[Any, ...]] = []
        times: list[float] = []
        async for event in run.events():
            assert event.run_id == "w"
            seen.append(brief(event))
            times.append(trio.current_time())
        with pytest.raises(ValueError, match="boom after 1"):
            await run.result()
    # the parallel steps start together, in either order
    assert sorted(seen[1:3]) == [("started", "wait#0", False), ("started", "wait#1", False)]
    assert [seen[0], *seen[3:]] == [
        ("run started", watched.name),
        ("stored", "wait#0", 1, "1.0"),
        ("finished", "wait#0", None),
        ("stored", "wait#1", 2, "2.0"),
        ("finished", "wait#1", None),
        ("started", "ticks#0", True),
        ("item", "ticks#0", 0, 0),
        ("item", "ticks#0", 1, 1),
        ("stored", "ticks#0", 3, "[0,1]"),
        ("finished", "ticks#0", None),
        ("started", "boom#0", False),
        ("finished", "boom#0", "ValueError"),
        ("run finished", None, "ValueError('boom after 1')"),
    ]
    # live: each event was read when it happened
    assert times == [0, 0, 0, 1, 1, 2, 2, 2, 2.5, 3, 3, 3, 3, 3, 3]


@tether.workflow
async def slow_and_stuck() -> int:
    async with tether.parallel() as p:
        stuck = p.start_soon(wait, 1.0)  # its save hangs
        p.start_soon(drain, 5)
    return int(stuck.result)


async def drain(n: int) -> None:
    async with tether.open_stream(ticks, n, 1.0) as items:
        async for _ in items:
            pass


@tether.workflow
async def drained(n: int) -> None:
    await drain(n)


async def test_leaving_the_events_loop_early_is_a_prompt_caller_cancellation(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = FaultyStore(tether.MemoryStore())
    store.inject("append", Hang())
    async with tether.open_engine(store) as engine:
        async with engine.open_run(slow_and_stuck, run_id="s") as run:
            async for event in run.events():
                if isinstance(event, tether.StreamItem) and event.index == 1:
                    break  # at 2.0, while wait#0's save hangs since 1.0
        assert trio.current_time() == 2.0  # the block left at once
        # wait#0's save; the stream's interrupted record, begun after the caller
        # cancelled, is refused before it reaches the store
        assert store.calls["append"] == 1
        with pytest.raises(tether.UsageError, match="did not finish"):
            await run.result()
        info = await engine.get_run("s")
        assert info is not None
        assert info.status is RunStatus.RUNNING
        assert info.entries == ()

        store.clear()
        assert await engine.resume("s") == 1


async def test_the_run_never_waits_for_the_reader(autojump_clock: trio.abc.Clock) -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        async with engine.open_run(drained, 1000, run_id="d") as run:
            await run.result()  # nobody read its events
        events = run.events()
        buffered: list[tether.RunEvent] = []
        with pytest.raises(trio.EndOfChannel):
            while True:
                buffered.append(events.receive_nowait())
        assert len(buffered) == 1005
        assert sum(isinstance(e, tether.StreamItem) for e in buffered) == 1000


async def test_result_and_an_unread_run(autojump_clock: trio.abc.Clock) -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(tether.UsageError, match="workflow"):
            engine.open_run(wait, 1.0)  # type: ignore[arg-type]

        async with engine.open_run(drained, 2) as run:
            assert len(run.run_id) == 32
            await run.result()
            await run.result()
            with pytest.raises(tether.UsageError, match="one loop"):
                run.events()
                run.events()
        # a completed run id: the stored result, nothing executes
        async with engine.open_run(drained, 2, run_id=run.run_id) as again:
            kinds = [type(e).__name__ async for e in again.events()]
        assert kinds == ["RunStarted", "RunFinished"]


async def test_a_run_left_immediately_stays_resumable(autojump_clock: trio.abc.Clock) -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        async with engine.open_run(drained, 3, run_id="x"):
            await trio.sleep(1.5)
        assert trio.current_time() == 1.5
        info = await engine.get_run("x")
        assert info is not None and info.status is RunStatus.RUNNING
        assert await engine.resume("x") is None


async def test_show_progress_prints_one_line_per_event(autojump_clock: trio.abc.Clock) -> None:
    out = io.StringIO()
    async with (
        tether.open_engine(tether.MemoryStore()) as engine,
        engine.open_run(watched, run_id="p") as run,
    ):
        await tether.show_progress(run, out)
    assert out.getvalue().splitlines()[3:] == [
        "  wait#0: stored (seq 1)",
        "  step wait#0: finished",
        "  wait#1: stored (seq 2)",
        "  step wait#1: finished",
        "  stream ticks#0: started",
        "  stream ticks#0: item 0: 0",
        "  stream ticks#0: item 1: 1",
        "  ticks#0: stored (seq 3)",
        "  stream ticks#0: finished",
        "  step boom#0: started",
        "  step boom#0: ended by ValueError: boom after 1",
        "run p: failed: ValueError: boom after 1",
    ]
    assert out.getvalue().splitlines()[0] == f"run p: started ({watched.name})"


def test_describe_event() -> None:
    request = tether.Request(key="ok", payload={"q": 1}, response_type="bool")
    assert tether.describe_event(tether.RunPaused(run_id="r", requests=(request,))) == (
        "run r: paused, waiting for responses to ok"
    )
    assert tether.describe_event(tether.RunFinished(run_id="r", result="x" * 100)) == (
        f"run r: completed: '{'x' * 56}..."
    )
    closed = tether.StepFinished(
        run_id="r", key="s#0", name="s", stream=True, exception=tether.StreamClosed("left")
    )
    assert tether.describe_event(closed) == "  stream s#0: ended by StreamClosed: left"


@tether.workflow
async def a_little_work() -> float:
    return await wait(0.5)


async def test_plain_runs_and_hooks_are_unchanged_by_observers(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        async with engine.open_run(a_little_work, run_id="o") as run:
            # a run started by plain engine.run() inside the block is not observed
            assert await engine.run(a_little_work, run_id="plain") == 0.5
            assert await run.result() == 0.5
        assert [type(e).__name__ async for e in run.events()] == [
            "RunStarted",
            "StepStarted",
            "CheckpointStored",
            "StepFinished",
            "RunFinished",
        ]


def test_refusals_and_cancels_are_not_described_as_failures() -> None:
    cases = [
        (
            tether.RunCancelledError("run 'r' is cancelled"),
            "run r: cancelled: run 'r' is cancelled",
        ),
        (tether.RunConflictError("held"), "run r: not executed here: RunConflictError: held"),
        (tether.LeaseLostError("lost"), "run r: stopped here: LeaseLostError: lost"),
        (ValueError("boom"), "run r: failed: ValueError: boom"),
    ]
    for error, line in cases:
        assert tether.describe_event(tether.RunFinished(run_id="r", error=error)) == line
