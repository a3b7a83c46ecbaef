"""The save path (``tether._saver``): batches, hand-offs, and cancellation while saves wait."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
import trio

import tether
from tether._core._store_calls import nowait_append
from tether.stores import Entry, RunStatus, Store
from tether.testing import Call, Delay, Do, FaultyStore, Hang, Raise

runs: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _reset() -> None:
    runs.clear()


@tether.step
async def quick(i: int) -> int:
    runs[f"quick({i})"] += 1
    return i


@tether.step
async def slow(seconds: float) -> float:
    runs[f"slow({seconds})"] += 1
    await trio.sleep(seconds)
    return seconds


@tether.step
async def fail_later(seconds: float) -> None:
    await trio.sleep(seconds)
    raise ValueError("a sibling failed")


@tether.workflow(name="tests.saver.fan_out")
async def fan_out(n: int) -> list[int]:
    async with tether.parallel() as p:
        handles = [p.start_soon(quick, i) for i in range(n)]
    return [h.result for h in handles]


def append_sizes(store: FaultyStore) -> list[int]:
    """The number of entries of each append that *store* completed (filled as they come).

    Recorded after the call, so that faults injected before it still apply.
    """
    sizes: list[int] = []

    async def record(call: Call) -> None:
        sizes.append(len(call.args[1]))

    store.inject("append", Do(record), after=True)
    return sizes


# -- group commit ----------------------------------------------------------------------


async def test_the_records_of_parallel_steps_go_to_the_store_in_one_append(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    faulty = FaultyStore(tether_store)
    sizes = append_sizes(faulty)
    async with tether.open_engine(faulty) as engine:
        assert await engine.run(fan_out, 10, run_id="r") == list(range(10))
        info = await engine.get_run("r")
    assert sizes == [10]  # one batch, one commit
    assert faulty.calls["append"] == 10  # counted per save
    assert info is not None
    assert sorted(e.seq or 0 for e in info.entries) == list(range(1, 11))
    assert {e.key for e in info.entries} == {f"quick#{i}" for i in range(10)}


@pytest.mark.filterwarnings("ignore::tether.UnjournaledAwaitWarning")  # blocks on purpose
async def test_a_step_queued_behind_a_save_in_flight_returns_once_its_own_is_stored(
    autojump_clock: trio.abc.Clock,
) -> None:
    @tether.workflow(name="tests.saver.behind")
    async def behind() -> tuple[int, float]:
        async with tether.parallel() as p:
            p.start_soon(quick, 1)  # its record's append takes 1.0
            later = p.start_soon(after, 0.5)
        return later.result

    async def after(delay: float) -> tuple[int, float]:
        await trio.sleep(delay)
        value = await quick(2)  # the saver is busy: it waits in the queue
        return value, trio.current_time()

    faulty = FaultyStore(tether.MemoryStore())
    sizes = append_sizes(faulty)
    faulty.inject("append", Delay(1.0), at=1)
    async with tether.open_engine(faulty) as engine:
        assert await engine.run(behind, run_id="r") == (2, 1.0)
    assert sizes == [1, 1]


@pytest.mark.filterwarnings("ignore::tether.UnjournaledAwaitWarning")  # blocks on purpose
async def test_save_timeout_counts_from_when_a_save_was_queued(
    autojump_clock: trio.abc.Clock,
) -> None:
    @tether.workflow(name="tests.saver.timeouts")
    async def timeouts() -> None:
        async with tether.parallel() as p:
            p.start_soon(quick, 1)  # queued at 0: times out at 2
            p.start_soon(queued_at, 1.0)  # queued at 1, behind it: times out at 3

    async def queued_at(delay: float) -> None:
        await trio.sleep(delay)
        await quick(2)

    faulty = FaultyStore(tether.MemoryStore())
    faulty.inject("append", Hang())
    async with tether.open_engine(faulty, save_timeout=2.0) as engine:
        with pytest.RaisesGroup(
            tether.SaveTimeoutError, tether.SaveTimeoutError, flatten_subgroups=True
        ):
            await engine.run(timeouts, run_id="r")
        assert trio.current_time() == 3.0
        info = await engine.get_run("r")
    assert info is not None and info.status is RunStatus.FAILED


# -- a sibling's failure, and the caller -------------------------------------------------


@tether.workflow(name="tests.saver.failing_sibling")
async def failing_sibling(n: int) -> None:
    async with tether.parallel() as p:
        for i in range(n):
            p.start_soon(quick, i)
        p.start_soon(fail_later, 0.5)


async def test_a_sibling_failure_never_loses_a_batch_in_flight(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    faulty = FaultyStore(tether_store)
    faulty.inject("append", Delay(1.0))  # in flight when the sibling fails at 0.5
    async with tether.open_engine(faulty) as engine:
        with pytest.RaisesGroup(ValueError):
            await engine.run(failing_sibling, 3, run_id="r")
        assert trio.current_time() == 1.0  # the run failed once the batch was in
        info = await engine.get_run("r")
        assert info is not None and info.status is RunStatus.FAILED
        assert {e.key for e in info.entries} == {"quick#0", "quick#1", "quick#2"}
        faulty.clear()
        with pytest.RaisesGroup(ValueError):
            await engine.resume("r")
    assert runs == {"quick(0)": 1, "quick(1)": 1, "quick(2)": 1}  # stored: replayed


async def test_a_failed_batch_fails_each_step_in_it_and_stops_their_siblings(
    autojump_clock: trio.abc.Clock,
) -> None:
    @tether.workflow(name="tests.saver.failed_batch")
    async def failed_batch() -> None:
        async with tether.parallel() as p:
            for i in range(3):
                p.start_soon(quick, i)
            p.start_soon(slow, 5.0)

    faulty = FaultyStore(tether.MemoryStore())
    faulty.inject("append", Raise(lambda: OSError("disk full")), at=2)  # saves 1-3: one append
    async with tether.open_engine(faulty) as engine:
        with pytest.RaisesGroup(
            *[
                pytest.RaisesExc(tether.StoreError, match=rf"saving step quick#{i} ")
                for i in range(3)
            ]
        ) as info:
            await engine.run(failed_batch, run_id="r")
        assert trio.current_time() == 0.0  # slow#0 was cancelled, as for a failing child
        errors = info.value.exceptions
        assert len({id(e) for e in errors}) == 3  # each step raises its own
        assert all(isinstance(e.__cause__, OSError) for e in errors)
        stored = await engine.get_run("r")
    assert stored is not None and stored.entries == ()
    assert stored.error is not None and stored.error.key is not None


async def test_the_caller_wins_over_a_sibling_failure_while_saves_wait(
    autojump_clock: trio.abc.Clock,
) -> None:
    # The inner block waits for its child's record (the store hangs); the
    # outer sibling fails at 0.1 and the wait goes on (framework-owned); the
    # caller's deadline at 0.3 ends it at once.
    @tether.workflow(name="tests.saver.nested")
    async def nested() -> None:
        async with tether.parallel() as outer:
            outer.start_soon(inner)
            outer.start_soon(fail_later, 0.1)

    async def inner() -> None:
        async with tether.parallel() as p:
            p.start_soon(quick, 1)

    faulty = FaultyStore(tether.MemoryStore())
    faulty.inject("append", Hang())
    async with tether.open_engine(faulty) as engine:
        with pytest.raises(trio.TooSlowError):
            await engine.run(nested, run_id="r", timeout=0.3)
        assert trio.current_time() == 0.3
        info = await engine.get_run("r")
    assert info is not None and info.status is RunStatus.RUNNING  # no status written


@pytest.mark.filterwarnings("ignore::tether.UnjournaledAwaitWarning")  # blocks on purpose
async def test_a_queued_step_is_cut_short_by_the_caller_at_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    @tether.workflow(name="tests.saver.queued")
    async def queued() -> None:
        async with tether.parallel() as p:
            p.start_soon(quick, 1)  # its append hangs
            p.start_soon(sequential_after, 0.1)

    async def sequential_after(delay: float) -> None:
        await trio.sleep(delay)
        await quick(2)  # waits behind the hung append

    faulty = FaultyStore(tether.MemoryStore())
    faulty.inject("append", Hang())
    async with tether.open_engine(faulty) as engine:
        with trio.move_on_after(0.5) as caller:
            await engine.run(queued, run_id="r")
        assert caller.cancelled_caught
        assert trio.current_time() == 0.5
        faulty.clear()
        await engine.resume("r")
    assert runs == {"quick(1)": 2, "quick(2)": 2}  # neither record was stored


# -- what observers see ---------------------------------------------------------------------


async def test_hooks_of_parallel_steps_see_the_checkpoint_before_the_end(
    autojump_clock: trio.abc.Clock,
) -> None:
    seen: list[tuple[str, str | None]] = []

    class Recorder:
        async def on_step_start(self, event: tether.HookEvent) -> None:
            seen.append(("start", event.key))

        async def on_checkpoint(self, event: tether.HookEvent) -> None:
            assert event.entry is not None and event.entry.seq is not None
            seen.append(("checkpoint", event.key))

        async def on_step_end(self, event: tether.HookEvent) -> None:
            seen.append(("end", event.key))

    faulty = FaultyStore(tether.MemoryStore())
    faulty.inject("append", Delay(1.0))
    async with tether.open_engine(faulty, hooks=[Recorder()]) as engine:
        assert await engine.run(fan_out, 3, run_id="r") == [0, 1, 2]
    for i in range(3):
        mine = [what for what, key in seen if key == f"quick#{i}"]
        assert mine == ["start", "checkpoint", "end"]


async def test_live_events_report_a_handed_off_step_once_it_is_stored(
    autojump_clock: trio.abc.Clock,
) -> None:
    faulty = FaultyStore(tether.MemoryStore())
    faulty.inject("append", Delay(1.0))
    events: list[tether.RunEvent] = []
    async with (
        tether.open_engine(faulty) as engine,
        engine.open_run(fan_out, 3, run_id="r") as run,
    ):
        async for event in run.events():
            events.append(event)
        assert await run.result() == [0, 1, 2]
    for i in range(3):
        key = f"quick#{i}"
        mine = [type(e).__name__ for e in events if getattr(e, "key", None) == key]
        assert mine == ["StepStarted", "CheckpointStored", "StepFinished"]
    stored = [e for e in events if isinstance(e, tether.CheckpointStored)]
    assert sorted(e.entry.seq or 0 for e in stored) == [1, 2, 3]


# -- the fast path ---------------------------------------------------------------------------


class CountingStore(tether.MemoryStore):  # type: ignore[misc]  # final, but a test may
    """Overrides append: the engine must call it, not the inherited append_nowait."""

    def __init__(self) -> None:
        super().__init__()
        self.appends = 0

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        self.appends += 1
        result: Sequence[Entry] = await super().append(run_id, entries)
        return result


def test_the_fast_path_is_taken_only_while_append_is_the_stores_own() -> None:
    plain = tether.MemoryStore()
    assert nowait_append(plain) is not None
    assert nowait_append(CountingStore()) is None  # append overridden
    patched = tether.MemoryStore()

    async def append(run_id: str, entries: Any) -> Any:
        raise AssertionError("not called here")

    patched.append = append  # type: ignore[method-assign]
    assert nowait_append(patched) is None
    assert nowait_append(FaultyStore(plain)) is None  # a wrapper forwards append only


async def test_a_store_that_overrides_append_sees_every_save() -> None:
    store = CountingStore()
    async with tether.open_engine(store) as engine:
        assert await engine.run(fan_out, 4, run_id="r") == [0, 1, 2, 3]
    assert store.appends == 1  # its own append, once, for the batch of four records


@tether.step
async def flaky_step(i: int) -> int:
    runs[f"flaky({i})"] += 1
    if runs[f"flaky({i})"] == 1:
        raise ValueError("first attempt fails")
    return i


@tether.workflow(name="tests.saver.numbered")
async def numbered(n: int) -> list[int]:
    out = [await quick(i) for i in range(n)]
    out.append(await flaky_step(n))
    out += [await quick(i) for i in range(n + 1, 2 * n)]
    return out


async def test_entries_numbered_ahead_keep_contiguous_seqs_across_executions() -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store) as engine:
        with pytest.raises(ValueError, match="first attempt"):
            await engine.run(numbered, 3, run_id="r")
        assert await engine.resume("r") == [0, 1, 2, 3, 4, 5]
        info = await engine.get_run("r")
    assert info is not None
    assert [e.seq for e in info.entries] == list(range(1, 7))
    assert [e.key for e in info.entries] == [
        "quick#0",
        "quick#1",
        "quick#2",
        "flaky_step#0",
        "quick#3",
        "quick#4",
    ]
