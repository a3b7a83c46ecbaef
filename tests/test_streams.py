"""Streaming steps: prompt cleanup, one end hook, journal and replay.

What they promise: docs/reference/api.md, "Streaming steps and live runs".
"""

from __future__ import annotations

import dataclasses
import gc
import json
import logging
import warnings
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator

import attrs
import pytest
import trio
import trio.testing

import tether
from tether.stores import EntryKind, EntryStatus, RunStatus
from tether.testing import FaultyStore, Hang

log: list[str] = []
produced: Counter[str] = Counter()  # how many times each generator was started
flaky: dict[str, bool] = {}


@pytest.fixture(autouse=True)
def _reset() -> None:
    log.clear()
    produced.clear()
    flaky.clear()


@attrs.define
class Recorder:
    """A hook writing step starts, ends and checkpoints into the shared log."""

    def _name(self, event: tether.HookEvent) -> str:
        exc = event.exception
        return f"{event.key} {'-' if exc is None else type(exc).__name__}"

    async def on_step_start(self, event: tether.HookEvent) -> None:
        log.append(f"start {event.key}")

    async def on_step_end(self, event: tether.HookEvent) -> None:
        log.append(f"end {self._name(event)}")

    async def on_checkpoint(self, event: tether.HookEvent) -> None:
        assert event.entry is not None
        log.append(f"checkpoint {event.key} {event.entry.value}")


def ends() -> list[str]:
    return [line for line in log if line.startswith("end ")]


@tether.stream_step
async def ticks(n: int, interval: float = 0.0) -> AsyncIterator[int]:
    """Yields 0..n-1, sleeping *interval* before each; logs what it does."""
    produced["ticks"] += 1
    try:
        for i in range(n):
            if interval:
                await trio.sleep(interval)
            log.append(f"yield {i}")
            yield i
    finally:
        log.append("cleanup")


# -- 1. break: cleanup before the block exits, one end hook after it ----------------------


@tether.workflow
async def take_first(n: int) -> int:
    first = -1
    async with tether.open_stream(ticks, n) as items:
        async for item in items:
            first = item
            break
    log.append("block exited")
    # no task outlives the block
    assert not trio.lowlevel.current_task().child_nurseries
    return first


async def test_break_runs_cleanup_before_the_block_exits_and_the_end_hook_once() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with tether.open_engine(tether.MemoryStore(), hooks=[Recorder()]) as engine:
            assert await engine.run(take_first, 5, run_id="r") == 0
            info = await engine.get_run("r")
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]
    # nothing was produced ahead of the consumer: "yield 1" never happened
    assert log == [
        "start ticks#0",
        "yield 0",
        "cleanup",
        "end ticks#0 StreamClosed",
        "block exited",
    ]
    assert info is not None
    [entry] = info.entries
    assert (entry.key, entry.kind, entry.status) == (
        "ticks#0",
        EntryKind.STREAM,
        EntryStatus.INTERRUPTED,
    )
    assert entry.value == "[0]"  # the items seen so far
    assert entry.error is not None and entry.error.type == "tether.StreamClosed"


# -- 2. error, cancellation of the consumer, deadlines --------------------------------------


@tether.workflow
async def raise_in_body() -> None:
    async with tether.open_stream(ticks, 5, 1.0) as items:
        async for i in items:
            if i == 1:
                raise ValueError("consumer broke")
    log.append("not reached")


async def test_an_error_in_the_consumer_body(autojump_clock: trio.abc.Clock) -> None:
    async with tether.open_engine(tether.MemoryStore(), hooks=[Recorder()]) as engine:
        with pytest.raises(ValueError, match="consumer broke"):  # as itself, not in a group
            await engine.run(raise_in_body, run_id="r")
        info = await engine.get_run("r")
    assert log == [
        "start ticks#0",
        "yield 0",
        "yield 1",
        "cleanup",
        "end ticks#0 ValueError",
    ]
    assert info is not None and info.status is RunStatus.FAILED
    assert [(e.status, e.value) for e in info.entries] == [(EntryStatus.INTERRUPTED, "[0,1]")]


async def consume(n: int) -> None:
    async with tether.open_stream(ticks, n, 1.0) as items:
        async for _ in items:
            pass


@tether.step
async def fail_after(seconds: float) -> None:
    await trio.sleep(seconds)
    raise ValueError("sibling failed")


@tether.workflow
async def consumer_with_failing_sibling() -> None:
    async with tether.parallel() as p:
        p.start_soon(consume, 10)
        p.start_soon(fail_after, 1.5)


@tether.workflow
async def consumer_with_a_deadline() -> None:
    with trio.move_on_after(1.5):
        await consume(10)
    log.append("moved on")


@tether.workflow
async def consumer() -> None:
    await consume(10)


async def test_cancelling_the_consuming_task_by_a_sibling_failure(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with tether.open_engine(tether.MemoryStore(), hooks=[Recorder()]) as engine:
        with pytest.RaisesGroup(pytest.RaisesExc(ValueError, match="sibling failed")):
            await engine.run(consumer_with_failing_sibling, run_id="r")
        assert trio.current_time() == 1.5
        info = await engine.get_run("r")
    # the two starts come in either order; then the producer was sleeping
    # towards item 1 when the sibling's failure cancelled the consumer
    assert sorted(log[:2]) == ["start consume#0/ticks#0", "start fail_after#0"]
    assert log[2:] == [
        "yield 0",
        "end fail_after#0 ValueError",
        "cleanup",
        "end consume#0/ticks#0 Cancelled",
    ]
    assert info is not None
    # framework cancellation: the interrupted record was stored all the same
    assert [(e.key, e.status, e.value) for e in info.entries] == [
        ("consume#0/ticks#0", EntryStatus.INTERRUPTED, "[0]")
    ]


async def test_cancellation_by_an_enclosing_deadline(autojump_clock: trio.abc.Clock) -> None:
    async with tether.open_engine(tether.MemoryStore(), hooks=[Recorder()]) as engine:
        await engine.run(consumer_with_a_deadline, run_id="r")
        assert trio.current_time() == 1.5
    assert log == [
        "start ticks#0",
        "yield 0",
        "cleanup",
        "end ticks#0 Cancelled",
        "moved on",
    ]


async def test_cancellation_by_the_callers_deadline(autojump_clock: trio.abc.Clock) -> None:
    store = FaultyStore(tether.MemoryStore())
    store.inject("append", Hang())  # even the interrupted record's save hangs
    async with tether.open_engine(store, hooks=[Recorder()]) as engine:
        with pytest.raises(trio.TooSlowError):
            await engine.run(consumer, run_id="r", timeout=1.5)
        assert trio.current_time() == 1.5  # prompt
        info = await engine.get_run("r")
    assert log == ["start ticks#0", "yield 0", "cleanup", "end ticks#0 Cancelled"]
    assert info is not None and info.status is RunStatus.RUNNING and info.entries == ()


# -- 3. journal and resume -----------------------------------------------------------------


@tether.step
async def fragile(total: int) -> int:
    if flaky.get("fragile"):
        raise ValueError("fragile failed")
    return total


@tether.workflow
async def sum_then_fail(n: int) -> list[int]:
    async with tether.open_stream(ticks, n) as items:
        seen = [i async for i in items]
    return [*seen, await fragile(sum(seen))]


@tether.workflow
async def first_then_fail(n: int) -> int:
    first = -1
    async with tether.open_stream(ticks, n) as items:
        async for item in items:
            first = item
            break
    return await fragile(first)


async def test_an_exhausted_stream_replays_without_running_the_producer() -> None:
    flaky["fragile"] = True
    async with tether.open_engine(tether.MemoryStore(), hooks=[Recorder()]) as engine:
        with pytest.raises(ValueError, match="fragile failed"):
            await engine.run(sum_then_fail, 3, run_id="r")
        info = await engine.get_run("r")
        assert info is not None
        [entry] = info.entries
        assert (entry.kind, entry.status, entry.value) == (
            EntryKind.STREAM,
            EntryStatus.COMPLETED,
            "[0,1,2]",
        )
        assert "checkpoint ticks#0 [0,1,2]" in log
        assert log.index("checkpoint ticks#0 [0,1,2]") < log.index("end ticks#0 -")
        assert produced["ticks"] == 1

        flaky["fragile"] = False
        log.clear()
        assert await engine.resume("r") == [0, 1, 2, 3]
        assert produced["ticks"] == 1  # replayed: the generator did not run again
        assert "yield 0" not in log and "start ticks#0" not in log


async def test_an_early_closed_stream_runs_again_on_resume() -> None:
    flaky["fragile"] = True
    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(ValueError, match="fragile failed"):
            await engine.run(first_then_fail, 3, run_id="r")
        flaky["fragile"] = False
        assert await engine.resume("r") == 0
        assert produced["ticks"] == 2
        info = await engine.get_run("r")
    assert info is not None
    # nothing completed was stored for the stream: each execution ran it
    assert [(e.key, e.status, e.value) for e in info.entries] == [
        ("ticks#0", EntryStatus.INTERRUPTED, "[0]"),
        ("ticks#0", EntryStatus.INTERRUPTED, "[0]"),
        ("fragile#0", EntryStatus.COMPLETED, "0"),
    ]


@tether.workflow
async def replay_with(n: int) -> list[int]:
    async with tether.open_stream(ticks, n + int(flaky.get("shift", False))) as items:
        seen = [i async for i in items]
    return [*seen, await fragile(0)]


async def test_replaying_a_stream_with_other_arguments_raises() -> None:
    flaky["fragile"] = True
    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(ValueError):
            await engine.run(replay_with, 2, run_id="r")
        flaky["shift"] = True
        with pytest.raises(tether.NonDeterminismError, match=r"ticks#0"):
            await engine.resume("r")


@dataclasses.dataclass
class Point:
    x: int
    tags: list[str]


@tether.stream_step(name="points")
async def mutating_points() -> AsyncGenerator[Point, None]:
    p = Point(0, [])
    for i in range(3):
        p.x = i
        p.tags.append(str(i))
        yield p  # the same object, changed after each yield


@tether.workflow
async def collect_points() -> list[Point]:
    async with tether.open_stream(mutating_points) as items:
        seen = [p async for p in items]
    await fragile(0)
    return seen


async def test_items_are_snapshotted_when_produced_and_replayed_as_their_type() -> None:
    flaky["fragile"] = True
    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(ValueError):
            await engine.run(collect_points, run_id="r")
        info = await engine.get_run("r")
        assert info is not None
        stored = json.loads(info.entries[0].value or "")
        assert stored == [
            {"x": 0, "tags": ["0"]},
            {"x": 1, "tags": ["0", "1"]},
            {"x": 2, "tags": ["0", "1", "2"]},
        ]
        flaky["fragile"] = False
        points = await engine.resume("r")
    assert points == [Point(0, ["0"]), Point(1, ["0", "1"]), Point(2, ["0", "1", "2"])]
    assert all(type(p) is Point for p in points)


# -- 4. errors while stopping ---------------------------------------------------------------


@tether.stream_step
async def bad_cleanup(fail: bool) -> AsyncIterator[int]:
    try:
        yield 1
        yield 2
    finally:
        if fail:
            raise KeyError("cleanup failed")


class BadEndHook:
    async def on_step_end(self, event: tether.HookEvent) -> None:
        log.append(f"end {event.key} {type(event.exception).__name__}")
        raise OSError("hook failed")


caught: list[BaseException] = []


@tether.workflow
async def close_twice(fail: bool) -> None:
    try:
        async with tether.open_stream(bad_cleanup, fail) as items:
            async for _ in items:
                break
            for _ in range(2):
                try:
                    await items.aclose()
                except Exception as exc:
                    caught.append(exc)
    except Exception as exc:  # the block's exit closes once more
        caught.append(exc)


async def test_a_cleanup_error_wins_over_a_hook_error_and_every_close_raises_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caught.clear()
    async with tether.open_engine(tether.MemoryStore(), hooks=[BadEndHook()]) as engine:
        with caplog.at_level(logging.ERROR, logger="tether"):
            await engine.run(close_twice, True, run_id="r")
    assert [type(e) for e in caught] == [KeyError, KeyError, KeyError]
    assert caught[0] is caught[1] is caught[2]
    assert log == ["end bad_cleanup#0 KeyError"]  # once, told the cleanup error
    # the hook's error is not lost
    assert any(r.exc_info and isinstance(r.exc_info[1], OSError) for r in caplog.records), (
        caplog.records
    )


async def test_a_hook_error_alone_is_raised_by_every_close() -> None:
    caught.clear()
    async with tether.open_engine(tether.MemoryStore(), hooks=[BadEndHook()]) as engine:
        await engine.run(close_twice, False, run_id="r")
    assert [type(e) for e in caught] == [OSError, OSError, OSError]
    assert caught[0] is caught[1] is caught[2]
    assert log == ["end bad_cleanup#0 StreamClosed"]


@tether.workflow
async def fail_while_open() -> None:
    async with tether.open_stream(bad_cleanup, True) as items:
        async for _ in items:
            raise ValueError("already failing")


async def test_an_error_already_propagating_is_never_replaced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with tether.open_engine(tether.MemoryStore(), hooks=[BadEndHook()]) as engine:
        with (
            caplog.at_level(logging.ERROR, logger="tether"),
            pytest.raises(ValueError, match="already failing"),
        ):
            await engine.run(fail_while_open, run_id="r")
    assert log == ["end bad_cleanup#0 ValueError"]
    superseded = [type(r.exc_info[1]) for r in caplog.records if r.exc_info]
    assert superseded == [KeyError, OSError]


@tether.stream_step
async def breaks_midway() -> AsyncIterator[int]:
    yield 1
    raise LookupError("producer failed")


@tether.workflow
async def producer_fails() -> list[int]:
    seen: list[int] = []
    async with tether.open_stream(breaks_midway) as items:
        async for i in items:
            seen.append(i)
    return seen


async def test_a_producer_error_reaches_the_consumer_as_itself() -> None:
    async with tether.open_engine(tether.MemoryStore(), hooks=[Recorder()]) as engine:
        with pytest.raises(LookupError, match="producer failed"):
            await engine.run(producer_fails, run_id="r")
        info = await engine.get_run("r")
    assert ends() == ["end breaks_midway#0 LookupError"]
    assert info is not None and info.error is not None
    assert info.error.key == "breaks_midway#0"
    assert [(e.status, e.value) for e in info.entries] == [(EntryStatus.FAILED, "[1]")]


# -- 5. closing while the stream is producing ----------------------------------------------


@tether.workflow
async def close_from_another_task() -> list[int]:
    errors: list[BaseException] = []
    async with tether.open_stream(ticks, 3, 1.0) as items:

        async def closer() -> None:
            await trio.sleep(0.5)  # the consumer is waiting for item 0
            try:
                await items.aclose()
            except RuntimeError as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(closer)
            seen = [i async for i in items]
    assert len(errors) == 1
    assert "cancel the consuming task" in str(errors[0])
    return seen


async def test_closing_while_producing_raises_and_the_stream_carries_on(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with tether.open_engine(tether.MemoryStore(), hooks=[Recorder()]) as engine:
        assert await engine.run(close_from_another_task, run_id="r") == [0, 1, 2]
        info = await engine.get_run("r")
    assert ends() == ["end ticks#0 -"]
    assert info is not None
    assert [(e.status, e.value) for e in info.entries] == [(EntryStatus.COMPLETED, "[0,1,2]")]


# -- 6. cleanup that awaits ---------------------------------------------------------------


@tether.stream_step
async def awaiting_cleanup(style: str) -> AsyncIterator[int]:
    try:
        yield 1
        yield 2
    finally:
        if style == "unshielded":
            await trio.sleep(1)  # raises Cancelled: the stream is being closed
            log.append("unshielded cleanup done")
        elif style == "shielded":
            with trio.CancelScope(shield=True, deadline=trio.current_time() + 5):
                await trio.sleep(1)
                log.append("shielded cleanup done")
        elif style == "cleanup_scope":
            with tether.cleanup_scope(5):
                await trio.sleep(1)
                log.append("cleanup_scope done")
        elif style == "hung":
            with tether.cleanup_scope(2):
                await trio.sleep_forever()
            log.append("hung cleanup given up")


@tether.workflow
async def stop_after_first(style: str) -> None:
    async with tether.open_stream(awaiting_cleanup, style) as items:
        async for _ in items:
            break
    log.append(f"block exited at {trio.current_time()}")


async def test_an_unshielded_await_in_cleanup_is_cancelled(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with tether.open_engine(tether.MemoryStore(), hooks=[Recorder()]) as engine:
        await engine.run(stop_after_first, "unshielded", run_id="r")
    # the sleep was cancelled at once; that is not a cleanup error
    assert log == [
        "start awaiting_cleanup#0",
        "end awaiting_cleanup#0 StreamClosed",
        "block exited at 0.0",
    ]


@pytest.mark.parametrize(
    ("style", "done", "at"),
    [
        ("shielded", "shielded cleanup done", 1.0),
        ("cleanup_scope", "cleanup_scope done", 1.0),
        ("hung", "hung cleanup given up", 2.0),  # bounded
    ],
)
async def test_a_shielded_cleanup_completes_before_the_block_exits(
    style: str, done: str, at: float, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether.MemoryStore(), hooks=[Recorder()]) as engine:
        await engine.run(stop_after_first, style, run_id="r")
    assert log == [
        "start awaiting_cleanup#0",
        done,
        "end awaiting_cleanup#0 StreamClosed",
        f"block exited at {at}",
    ]


@tether.workflow
async def hold_open(style: str) -> None:
    async with tether.open_stream(awaiting_cleanup, style) as items:
        async for _ in items:
            await trio.sleep_forever()


@pytest.mark.filterwarnings("ignore::tether.UnjournaledAwaitWarning")  # blocks on purpose
async def test_the_callers_cancellation_cuts_cleanup_scope_short(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with tether.open_engine(tether.MemoryStore(), hooks=[Recorder()]) as engine:
        with trio.move_on_after(0.5):
            await engine.run(hold_open, "hung", run_id="r")
        assert trio.current_time() == 0.5  # not 2.5: the caller is never held
    assert ends() == ["end awaiting_cleanup#0 Cancelled"]


def test_cleanup_scope_checks_its_timeout() -> None:
    for bad in (0, -1, float("nan"), True, "1"):
        with (
            pytest.raises(tether.UsageError, match="positive number"),
            tether.cleanup_scope(bad),  # type: ignore[arg-type]
        ):
            pass


# -- usage -------------------------------------------------------------------------------


@tether.stream_step
async def nested_stream(n: int) -> AsyncIterator[int]:
    for i in range(n):
        yield await fragile(i)  # a step inside a stream journals under the stream's key


@tether.step
async def stream_in_a_step(n: int) -> list[int]:
    async with tether.open_stream(nested_stream.with_key("inner"), n) as items:
        return [i async for i in items]


@tether.workflow
async def nested_keys() -> list[int]:
    first = await stream_in_a_step(2)
    async with tether.open_stream(ticks, 1, key="explicit") as items:
        second = [i async for i in items]
    return first + second


async def test_keys_of_nested_and_explicitly_keyed_streams() -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        assert await engine.run(nested_keys, run_id="r") == [0, 1, 0]
        info = await engine.get_run("r")
    assert info is not None
    assert [e.key for e in info.entries] == [
        "stream_in_a_step#0/inner/fragile#0",
        "stream_in_a_step#0/inner/fragile#1",
        "stream_in_a_step#0/inner",
        "stream_in_a_step#0",
        "explicit",
    ]


async def test_usage_errors() -> None:
    with pytest.raises(tether.UsageError, match="async generator"):
        tether.stream_step(fragile.fn)  # type: ignore[arg-type]
    with pytest.raises(tether.UsageError, match="stream_step"):
        tether.step(ticks.fn)  # type: ignore[arg-type]
    with pytest.raises(tether.UsageError, match="open_stream"):
        ticks(1)
    with pytest.raises(tether.NotInRunError):
        tether.open_stream(ticks, 1)
    assert ticks.item_type is int
    assert mutating_points.item_type is Point
    assert mutating_points.name == "points"


@tether.workflow
async def misuse() -> str:
    with pytest.raises(tether.UsageError, match="stream_step"):
        tether.open_stream(fragile, 1)  # type: ignore[arg-type]
    async with tether.open_stream(ticks, 2) as items:
        with pytest.raises(tether.UsageError, match="once"):
            async with items:
                pass
        assert await items.__anext__() == 0
        await items.aclose()
        with pytest.raises(trio.ClosedResourceError):
            await items.__anext__()
    stream = tether.open_stream(ticks, 1, key="k")
    with pytest.raises(tether.UsageError, match="twice"):
        async with tether.open_stream(ticks, 1, key="k"), stream:
            pass
    return "ok"


async def test_misuse_inside_a_run() -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        assert await engine.run(misuse, run_id="r") == "ok"


async def test_every_start_has_one_end_in_a_busy_run(autojump_clock: trio.abc.Clock) -> None:
    async with tether.open_engine(tether.MemoryStore(), hooks=[Recorder()]) as engine:
        with pytest.RaisesGroup(ValueError):
            await engine.run(consumer_with_failing_sibling, run_id="a")
        await engine.run(take_first, 3, run_id="b")
        await engine.run(consumer_with_a_deadline, run_id="c")
    starts = Counter(line.split()[1] for line in log if line.startswith("start "))
    finished = Counter(line.split()[1] for line in ends())
    assert starts == finished
    assert len(starts) == 3  # the three runs reuse keys; each key started and ended alike


@tether.workflow
async def impatient() -> list[int]:
    async with tether.open_stream(ticks, 3, 1.0) as items:
        with trio.move_on_after(0.5):
            await items.__anext__()  # gives up waiting for item 0...
        log.append("gave up")
        return [i async for i in items]  # ...which is not lost, nor produced twice


async def test_a_consumer_cancelled_while_waiting_loses_no_item(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        assert await engine.run(impatient, run_id="r") == [0, 1, 2]
        assert trio.current_time() == 3.0
    assert log == ["gave up", "yield 0", "yield 1", "yield 2", "cleanup"]


@tether.workflow
async def two_consumers() -> str:
    async with tether.open_stream(ticks, 3, 1.0) as items, trio.open_nursery() as nursery:
        nursery.start_soon(items.__anext__)
        await trio.sleep(0.5)
        with pytest.raises(trio.BusyResourceError):
            await items.__anext__()
    return "ok"


@pytest.mark.filterwarnings("ignore::tether.UnjournaledAwaitWarning")  # blocks on purpose
async def test_only_one_task_waits_for_an_item(autojump_clock: trio.abc.Clock) -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        assert await engine.run(two_consumers, run_id="r") == "ok"


class BadStartHook:
    async def on_step_start(self, event: tether.HookEvent) -> None:
        raise OSError("start hook failed")

    async def on_step_end(self, event: tether.HookEvent) -> None:
        log.append(f"end {event.key} {type(event.exception).__name__}")


async def test_a_start_hook_error_is_matched_by_one_end() -> None:
    async with tether.open_engine(tether.MemoryStore(), hooks=[BadStartHook()]) as engine:
        with pytest.raises(OSError, match="start hook failed"):
            await engine.run(take_first, 3, run_id="r")
        info = await engine.get_run("r")
    assert log == ["end ticks#0 OSError"]
    assert produced["ticks"] == 0
    assert info is not None and info.entries == ()


@tether.stream_step
async def with_a_nursery(fail: bool) -> AsyncIterator[int]:
    # Yielding inside a nursery is safe here: one task drives the generator.
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.sleep_forever)
        try:
            yield 1
            yield 2
        finally:
            nursery.cancel_scope.cancel()
            log.append("nursery closed")
            if fail:
                raise KeyError("cleanup failed")


@tether.workflow
async def first_of_a_nursery(fail: bool) -> int:
    first = -1
    async with tether.open_stream(with_a_nursery, fail) as items:
        async for item in items:
            first = item
            break
    return first


async def test_a_generator_with_a_nursery_of_its_own() -> None:
    async with tether.open_engine(tether.MemoryStore(), hooks=[Recorder()]) as engine:
        assert await engine.run(first_of_a_nursery, False, run_id="ok") == 1
        with pytest.RaisesGroup(pytest.RaisesExc(KeyError, match="cleanup failed")):
            await engine.run(first_of_a_nursery, True, run_id="bad")
    assert ends() == ["end with_a_nursery#0 StreamClosed", "end with_a_nursery#0 ExceptionGroup"]
