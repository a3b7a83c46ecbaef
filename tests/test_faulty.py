"""FaultyStore: crashes, faults after the call, custom faults, torn writes."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import tether
from tether.stores import Entry, RunRecord, RunStatus, Store, dumps_record
from tether.testing import (
    Call,
    ClockHoldingStore,
    Crash,
    Delay,
    Do,
    FaultyStore,
    Hang,
    Raise,
    SimulatedCrash,
)
from tether.testing._faulty import METHODS

from .conftest import make_store, reopen_store

executions: Counter[str] = Counter()


@tether.step
async def double(x: int) -> int:
    executions[f"double({x})"] += 1
    return 2 * x


@tether.step
async def swallow_everything(x: int) -> int:
    """A step that catches Exception around its own nested step: a crash must pass."""
    executions[f"swallow({x})"] += 1
    try:
        return await double(x)
    except Exception:
        return -1


@tether.workflow(name="tests.faulty.sequential")
async def sequential(n: int) -> list[int]:
    return [await double(i) for i in range(n)]


@tether.workflow(name="tests.faulty.fan_out")
async def fan_out(n: int) -> list[int]:
    async with tether.parallel() as p:
        handles = [p.start_soon(double, i) for i in range(n)]
    return [h.result for h in handles]


@tether.workflow(name="tests.faulty.swallowing")
async def swallowing(n: int) -> list[int]:
    out = []
    for i in range(n):
        try:
            out.append(await swallow_everything(i))
        except Exception:
            out.append(-2)
    return out


@tether.stream_step(name="tests.faulty.numbers")
async def numbers(n: int) -> AsyncIterator[int]:
    for i in range(n):
        executions[f"numbers({i})"] += 1
        yield i


@tether.workflow(name="tests.faulty.streaming")
async def streaming(n: int) -> list[int]:
    async with tether.open_stream(numbers, n) as items:
        return [await double(i) async for i in items]


@pytest.fixture(autouse=True)
def _reset() -> None:
    executions.clear()


def new_run(run_id: str = "r") -> RunRecord:
    now = tether.stores.utcnow()
    return RunRecord(run_id=run_id, workflow="w", args="[]", created_at=now, updated_at=now)


def new_entry(key: str, run_id: str = "r") -> Entry:
    now = tether.stores.utcnow()
    return Entry(
        run_id=run_id,
        key=key,
        kind=tether.stores.EntryKind.STEP,
        status=tether.stores.EntryStatus.COMPLETED,
        value="1",
        args_digest="d",
        started_at=now,
        finished_at=now,
        attempt=1,
    )


@attrs.frozen
class Snapshot:
    record: RunRecord | None
    entries: tuple[Entry, ...]


async def snapshot(store: Store, run_id: str = "r") -> Snapshot:
    return Snapshot(await store.get_run(run_id), tuple(await store.load_entries(run_id)))


async def stored(store: Store, run_id: str = "r") -> Snapshot:
    """The run as *store* holds it, read through a new engine (the store is closed after)."""
    async with tether.open_engine(store):
        return await snapshot(store, run_id)


def recording_store() -> tuple[FaultyStore, list[str]]:
    """A MemoryStore behind a FaultyStore whose rules log every call that reaches it."""
    log: list[str] = []

    async def record(call: Call) -> None:
        log.append(call.method)

    store = FaultyStore(tether.MemoryStore())
    for method in METHODS:
        store.inject(method, Do(record))
    return store, log


@attrs.define
class Gate:
    """Appends land in the store, then wait for :attr:`opened` before returning."""

    fail: bool = False  # ...and then raise OSError
    landed: trio.Event = attrs.Factory(trio.Event)
    opened: trio.Event = attrs.Factory(trio.Event)

    async def apply(self, call: Call) -> None:
        self.landed.set()
        await self.opened.wait()
        if self.fail:
            raise OSError("the disk went away")


# -- crashes in a run ------------------------------------------------------------------


@pytest.mark.parametrize(("method", "at"), [("append", 3), ("update_run", 1)])
async def test_a_crash_stops_every_write_and_a_new_engine_resumes(
    tether_store_factory: Callable[[], Store], method: str, at: int
) -> None:
    faulty = FaultyStore(tether_store_factory())
    at_crash: list[Snapshot] = []

    async def snapshot_then_crash(call: Call) -> None:
        at_crash.append(await snapshot(call.store.inner))
        await Crash().apply(call)

    faulty.inject(method, Do(snapshot_then_crash), at=at)
    async with tether.open_engine(faulty) as engine:
        with pytest.raises(SimulatedCrash) as info:
            await engine.run(sequential, 5, run_id="r")
        # As itself, not in a group: one task met the dead store.
        assert type(info.value) is SimulatedCrash
        assert f"at {method} call #{at}" in str(info.value)
        assert faulty.crashed
        with pytest.raises(SimulatedCrash, match=r"get_run call #2: the store crashed"):
            await engine.get_run("r")
    # The engine block exited (close() does not raise), and nothing reached the
    # inner store after the crash: the run is as it was at that moment.
    [then] = at_crash
    assert then.record is not None and then.record.status is RunStatus.RUNNING
    assert await stored(faulty.inner) == then
    expected_keys = [f"double#{i}" for i in range(at - 1 if method == "append" else 5)]
    assert [e.key for e in then.entries] == expected_keys

    before = dict(executions)
    async with tether.open_engine(faulty.inner) as engine:
        assert await engine.resume("r") == [0, 2, 4, 6, 8]
    # Steps stored before the crash replayed; only the unsaved one ran again.
    ran_again = Counter(executions) - Counter(before)
    if method == "append":
        assert before == {f"double({i})": 1 for i in range(at)}
        assert ran_again == {f"double({i})": 1 for i in range(at - 1, 5)}
    else:
        assert before == {f"double({i})": 1 for i in range(5)}
        assert ran_again == {}
    after = await stored(faulty.inner)
    assert after.record is not None and after.record.status is RunStatus.COMPLETED


async def test_except_exception_in_workflow_code_cannot_swallow_a_crash() -> None:
    faulty = FaultyStore(tether.MemoryStore())
    # Saves: swallow#0/double#0, swallow#0, then swallow#1/double#1, which
    # crashes inside the step's own `except Exception`.
    faulty.inject("append", Crash(), at=3)
    async with tether.open_engine(faulty) as engine:
        with pytest.raises(SimulatedCrash, match="at append call #3"):
            await engine.run(swallowing, 3, run_id="r")
    assert executions == {"swallow(0)": 1, "double(0)": 1, "swallow(1)": 1, "double(1)": 1}
    async with tether.open_engine(faulty.inner) as engine:
        assert await engine.resume("r") == [0, 2, 4]


@pytest.mark.parametrize("at", [2, 4])  # a step's save inside the stream; the stream's own
async def test_a_crash_inside_a_streaming_step_is_raised_as_itself(at: int) -> None:
    faulty = FaultyStore(tether.MemoryStore())
    faulty.inject("append", Crash(), at=at)
    async with tether.open_engine(faulty) as engine:
        with pytest.raises(SimulatedCrash, match=f"at append call #{at};") as info:
            await engine.run(streaming, 3, run_id="r")
        assert type(info.value) is SimulatedCrash
    keys = [e.key for e in (await stored(faulty.inner)).entries]
    assert keys == ["double#0", "double#1", "double#2"][: at - 1]
    async with tether.open_engine(faulty.inner) as engine:
        assert await engine.resume("r") == [0, 2, 4]


async def test_a_crash_in_a_batch_of_saves_fails_each_save_in_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    # The three parallel steps' saves wait at the same moment: one append
    # carries saves #1-3 (appends are counted per save), so a crash planned at
    # the second save crashes that append, and each step raises its own crash.
    faulty = FaultyStore(tether.MemoryStore())
    faulty.inject("append", Crash(), at=2)
    crash = pytest.RaisesExc(SimulatedCrash, match=r"^simulated crash .* at append call #1-3;")
    async with tether.open_engine(faulty) as engine:
        with pytest.RaisesGroup(crash, crash, crash) as info:
            await engine.run(fan_out, 3, run_id="r")
        assert len({id(e) for e in info.value.exceptions}) == 3
    assert faulty.calls["append"] == 3
    assert (await stored(faulty.inner)).entries == ()
    async with tether.open_engine(faulty.inner) as engine:
        assert await engine.resume("r") == [0, 2, 4]
    assert executions == {"double(0)": 2, "double(1)": 2, "double(2)": 2}  # none was stored


@tether.step
async def late_double(x: int) -> int:
    await trio.sleep(1.0)
    return 2 * x


@tether.workflow(name="tests.faulty.late")
async def late(x: int) -> int:
    return await late_double(x)


async def test_saves_waiting_in_faults_wake_when_the_store_crashes(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Runs a and b wait in their faults (a hung save, a slow one) when run c's
    # save crashes the store at t=1: both wake at once, with the crash.
    faulty = FaultyStore(tether.MemoryStore())
    faulty.inject("append", Hang(), when=lambda run_id, entries: run_id == "a")
    faulty.inject("append", Delay(50.0), when=lambda run_id, entries: run_id == "b")
    faulty.inject("append", Crash(), when=lambda run_id, entries: run_id == "c")
    raised: dict[str, tuple[str, float]] = {}
    async with tether.open_engine(faulty) as engine:

        async def one(run_id: str, wf: tether.Workflow[[int], Any]) -> None:
            with pytest.raises(SimulatedCrash) as info:
                await engine.run(wf, 1, run_id=run_id)
            raised[run_id] = (str(info.value), trio.current_time())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, "a", sequential_one)
            nursery.start_soon(one, "b", sequential_one)
            nursery.start_soon(one, "c", late)
    assert raised["a"][0].startswith("append call #")
    assert "was hanging: the store crashed" in raised["a"][0]
    assert "was waiting: the store crashed" in raised["b"][0]
    assert raised["c"][0].startswith("simulated crash")
    assert {at for _, at in raised.values()} == {1.0}


@tether.workflow(name="tests.faulty.sequential_one")
async def sequential_one(x: int) -> int:
    return await double(x)


async def test_crash_from_another_task_ends_a_run_waiting_on_a_slow_store(
    autojump_clock: trio.abc.Clock,
) -> None:
    faulty = FaultyStore(tether.MemoryStore())
    faulty.inject("append", Delay(100.0))
    async with tether.open_engine(faulty) as engine, trio.open_nursery() as nursery:

        async def crash_later() -> None:
            await trio.sleep(7.0)
            faulty.crash()

        nursery.start_soon(crash_later)
        with pytest.raises(SimulatedCrash, match=r"^append call #1 was waiting: .*crash\(\)"):
            await engine.run(sequential, 2, run_id="r")
        assert trio.current_time() == 7.0
    assert (await stored(faulty.inner)).entries == ()


# -- a crashed store -------------------------------------------------------------------


async def test_a_crashed_store_refuses_every_call_but_close() -> None:
    recording, log = recording_store()
    faulty = FaultyStore(recording)
    await faulty.open()
    await faulty.create_run(new_run())
    faulty.crash()
    faulty.crash()  # idempotent
    assert faulty.crashed
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("open", ()),
        ("create_run", (new_run("s"),)),
        ("update_run", (new_run(),)),
        ("append", ("r", [new_entry("k#0")])),
        ("get_run", ("r",)),
        ("list_runs", ()),
        ("load_entries", ("r",)),
    ]
    for method, args in calls:
        n = faulty.calls[method] + 1
        with pytest.raises(SimulatedCrash, match=rf"^{method} call #{n}: .*FaultyStore.crash"):
            await getattr(faulty, method)(*args)
    assert log == ["open", "create_run"]
    await faulty.close()  # returns: the OS releases a dead process's files
    assert log == ["open", "create_run", "close"]
    assert faulty.calls["append"] == 1 and faulty.calls["close"] == 1


@pytest.mark.parametrize("fail", [False, True])
async def test_a_call_inside_the_inner_store_at_the_crash_raises_when_it_returns(
    fail: bool,
) -> None:
    gate = Gate(fail=fail)
    gated = FaultyStore(tether.MemoryStore())
    gated.inject("append", gate, after=True)
    faulty = FaultyStore(gated)
    await faulty.open()
    await faulty.create_run(new_run())
    async with trio.open_nursery() as nursery:

        async def append() -> None:
            with pytest.raises(SimulatedCrash, match=r"^append call #1 .*crash") as info:
                await faulty.append("r", [new_entry("k#0")])
            assert isinstance(info.value.__cause__, OSError) is fail

        nursery.start_soon(append)
        await gate.landed.wait()
        faulty.crash()
        gate.opened.set()
    # The write landed, though its caller only saw the crash.
    assert [e.key for e in await gated.inner.load_entries("r")] == ["k#0"]


async def test_close_returns_when_the_store_crashes_during_it() -> None:
    recording, log = recording_store()
    faulty = FaultyStore(recording)
    faulty.inject("close", Crash())
    await faulty.close()
    faulty.restart()
    faulty.inject("close", Crash(), after=True)
    await faulty.close()
    assert log == ["close", "close"]  # closed once each time
    assert faulty.crashed


# -- after=True --------------------------------------------------------------------------


async def test_raise_after_the_write_is_an_unclear_failure(
    tether_store_factory: Callable[[], Store],
) -> None:
    faulty = FaultyStore(tether_store_factory())
    faulty.inject("append", Raise(), at=2, after=True)
    async with tether.open_engine(faulty) as engine:
        with pytest.raises(tether.StoreError, match=r"append call #2 after the inner store"):
            await engine.run(sequential, 3, run_id="r")
        info = await engine.get_run("r")
        assert info is not None and info.status is RunStatus.FAILED
        # Stored, though the caller saw an error.
        assert [e.key for e in info.entries] == ["double#0", "double#1"]
        assert await engine.resume("r") == [0, 2, 4]
    assert executions == {"double(0)": 1, "double(1)": 1, "double(2)": 1}


async def test_crash_after_the_write_keeps_the_write(
    tether_store_factory: Callable[[], Store],
) -> None:
    faulty = FaultyStore(tether_store_factory())
    faulty.inject("append", Crash(), at=2, after=True)
    async with tether.open_engine(faulty) as engine:
        with pytest.raises(SimulatedCrash, match=r"at append call #2, after the inner store"):
            await engine.run(sequential, 3, run_id="r")
    assert [e.key for e in (await stored(faulty.inner)).entries] == ["double#0", "double#1"]
    async with tether.open_engine(faulty.inner) as engine:
        assert await engine.resume("r") == [0, 2, 4]
    assert executions == {"double(0)": 1, "double(1)": 1, "double(2)": 1}


async def test_hang_after_the_write_is_a_lost_acknowledgement(
    autojump_clock: trio.abc.Clock,
) -> None:
    inner = tether.MemoryStore()
    faulty = FaultyStore(inner)
    faulty.inject("append", Delay(3.0), at=1, after=True)
    faulty.inject("append", Hang(), at=2, after=True)
    await faulty.open()
    await faulty.create_run(new_run())
    [first] = await faulty.append("r", [new_entry("a#0")])
    assert first.seq == 1 and trio.current_time() == 3.0
    with trio.move_on_after(10.0) as scope:
        await faulty.append("r", [new_entry("b#0")])
    assert scope.cancelled_caught and trio.current_time() == 13.0
    assert [e.key for e in await inner.load_entries("r")] == ["a#0", "b#0"]


async def test_one_rule_before_and_one_after_apply_to_the_same_call(
    autojump_clock: trio.abc.Clock,
) -> None:
    inner = tether.MemoryStore()
    faulty = FaultyStore(inner)
    faulty.inject("create_run", Delay(2.0))
    faulty.inject("create_run", Delay(100.0))  # shadowed: the first matching rule wins
    faulty.inject("create_run", Raise(lambda: OSError("ack lost")), after=True)
    with pytest.raises(OSError, match="ack lost"):
        await faulty.create_run(new_run())
    assert trio.current_time() == 2.0
    assert await inner.get_run("r") is not None


# -- custom faults ------------------------------------------------------------------------


async def test_do_sees_the_call_and_may_raise_or_crash() -> None:
    inner = tether.MemoryStore()
    faulty = FaultyStore(inner)
    seen: list[Call] = []
    entry = new_entry("a#0")

    async def record(call: Call) -> None:
        seen.append(call)

    async def refuse(call: Call) -> None:
        raise tether.StoreError(f"refused {call.method} #{call.n}")

    async def crash(call: Call) -> None:
        call.store.crash()

    faulty.inject("append", Do(record), at=1)
    faulty.inject("append", Do(record), at=1, after=True)
    faulty.inject("append", Do(refuse), at=2)
    faulty.inject("append", Do(crash), at=3)
    await faulty.create_run(new_run())
    await faulty.append("r", [entry])
    assert seen == [
        Call(store=faulty, method="append", n=1, args=("r", [entry]), after=False),
        Call(store=faulty, method="append", n=1, args=("r", [entry]), after=True),
    ]
    with pytest.raises(tether.StoreError, match="refused append #2"):
        await faulty.append("r", [new_entry("b#0")])
    with pytest.raises(SimulatedCrash, match=r"^append call #3: the store crashed by Faulty"):
        await faulty.append("r", [new_entry("c#0")])
    assert [e.key for e in await inner.load_entries("r")] == ["a#0"]


async def test_store_sleep_returns_is_cancellable_and_wakes_on_a_crash(
    autojump_clock: trio.abc.Clock,
) -> None:
    faulty = FaultyStore(tether.MemoryStore())
    await faulty.sleep(4.0)
    assert trio.current_time() == 4.0
    with trio.move_on_after(1.0) as scope:
        await faulty.sleep_forever()
    assert scope.cancelled_caught and trio.current_time() == 5.0

    async with trio.open_nursery() as nursery:

        async def sleeper(afn: Callable[[], Any], pattern: str) -> None:
            with pytest.raises(SimulatedCrash, match=pattern):
                await afn()
            assert trio.current_time() == 7.0

        nursery.start_soon(sleeper, lambda: faulty.sleep(100.0), r"store\.sleep\(\).*waiting")
        nursery.start_soon(sleeper, faulty.sleep_forever, r"store\.sleep\(\).*hanging")
        await trio.sleep(2.0)
        faulty.crash()
    with pytest.raises(SimulatedCrash):  # already crashed: at once
        await faulty.sleep(0.0)


async def test_a_custom_fault_object_follows_the_protocol(
    autojump_clock: trio.abc.Clock,
) -> None:
    @attrs.frozen
    class SlowThenFail:
        seconds: float

        async def apply(self, call: Call) -> None:
            await call.store.sleep(self.seconds)
            raise tether.StoreError(f"{call.method} #{call.n} gave up")

    faulty = FaultyStore(tether.MemoryStore())
    faulty.inject("get_run", SlowThenFail(3.0))
    with pytest.raises(tether.StoreError, match="get_run #1 gave up"):
        await faulty.get_run("r")
    assert trio.current_time() == 3.0


# -- restart -----------------------------------------------------------------------------


async def test_restart_brings_the_store_back_without_rules() -> None:
    faulty = FaultyStore(tether.MemoryStore())
    faulty.inject("append", Crash(), at=2)
    faulty.inject("list_runs", Raise())
    with pytest.raises(tether.StoreError):
        await faulty.list_runs()
    async with tether.open_engine(faulty) as engine:
        with pytest.raises(SimulatedCrash):
            await engine.run(sequential, 3, run_id="r")
    with pytest.raises(SimulatedCrash):
        async with tether.open_engine(faulty):
            pass  # cannot even open
    faulty.restart()
    assert not faulty.crashed
    assert faulty.calls["append"] == 2 and faulty.calls["list_runs"] == 1
    async with tether.open_engine(faulty) as engine:
        assert [r.run_id for r in await engine.list_runs()] == ["r"]  # its rule is gone too
        assert await engine.resume("r") == [0, 2, 4]
    assert executions == {"double(0)": 1, "double(1)": 2, "double(2)": 1}


async def test_restart_ends_calls_of_the_old_process(autojump_clock: trio.abc.Clock) -> None:
    faulty = FaultyStore(tether.MemoryStore())
    faulty.inject("get_run", Hang())
    with trio.fail_after(60.0):  # a Hang that outlived the restart fails the test, not hangs it
        async with trio.open_nursery() as nursery:

            async def hung() -> None:
                with pytest.raises(SimulatedCrash, match="get_run call #1 was hanging"):
                    await faulty.get_run("r")

            nursery.start_soon(hung)
            await trio.sleep(1.0)
            faulty.restart()
        assert trio.current_time() == 1.0
        assert not faulty.crashed
        assert await faulty.get_run("r") is None  # the new life has no Hang rule


# -- torn writes ---------------------------------------------------------------------------


def temp_files(folder: Path) -> list[Path]:
    return sorted(folder.glob(".tmp-*"))


async def test_torn_append_leaves_half_a_temp_file_that_a_new_store_ignores(
    tmp_path: Path,
) -> None:
    files = make_store("file", tmp_path)
    assert isinstance(files, tether.FileStore)
    faulty = FaultyStore(ClockHoldingStore(files))  # found through the wrapper
    torn: list[Entry] = []

    async def tear(call: Call) -> None:
        torn.extend(call.args[1])
        await Crash(torn=True).apply(call)

    faulty.inject("append", Do(tear), at=3)
    async with tether.open_engine(faulty) as engine:
        with pytest.raises(SimulatedCrash, match="at append call #3, in the middle of its write"):
            await engine.run(sequential, 4, run_id="r")
    entries_dir = files.directory / "r" / "entries"
    [temp] = temp_files(entries_dir)
    whole = dumps_record(torn[0].stored_as(3).to_json()).encode("utf-8")
    assert temp.read_bytes() == whole[: len(whole) // 2]
    with pytest.raises(json.JSONDecodeError):
        json.loads(temp.read_bytes())
    assert sorted(p.name for p in entries_dir.iterdir() if not p.name.startswith(".")) == [
        "000000000001.json",
        "000000000002.json",
    ]

    fresh = reopen_store(files)
    async with tether.open_engine(fresh) as engine:
        info = await engine.get_run("r")
        assert info is not None and info.status is RunStatus.RUNNING
        assert [e.key for e in info.entries] == ["double#0", "double#1"]
        assert await engine.resume("r") == [0, 2, 4, 6]
        info = await engine.get_run("r")
        assert info is not None and [e.seq for e in info.entries] == [1, 2, 3, 4]
    assert executions == {"double(0)": 1, "double(1)": 1, "double(2)": 2, "double(3)": 1}


async def test_torn_update_keeps_the_old_run_record(tmp_path: Path) -> None:
    files = make_store("file", tmp_path)
    assert isinstance(files, tether.FileStore)
    faulty = FaultyStore(ClockHoldingStore(files))
    torn: list[RunRecord] = []

    async def tear(call: Call) -> None:
        torn.append(call.args[0])
        await Crash(torn=True).apply(call)

    faulty.inject("update_run", Do(tear), at=1)  # storing the completed run
    async with tether.open_engine(faulty) as engine:
        with pytest.raises(SimulatedCrash, match="at update_run call #1, in the middle"):
            await engine.run(sequential, 2, run_id="r")
    run_dir = files.directory / "r"
    [temp] = temp_files(run_dir)
    assert torn[0].status is RunStatus.COMPLETED
    whole = dumps_record(torn[0].to_json()).encode("utf-8")
    assert temp.read_bytes() == whole[: len(whole) // 2]
    assert json.loads((run_dir / "run.json").read_bytes())["status"] == "running"

    async with tether.open_engine(reopen_store(files)) as engine:
        info = await engine.get_run("r")
        assert info is not None and info.status is RunStatus.RUNNING
        assert len(info.entries) == 2
        assert await engine.resume("r") == [0, 2]
    assert executions == {"double(0)": 1, "double(1)": 1}  # nothing ran again


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_torn_crash_is_refused_where_it_cannot_be_simulated(
    kind: str, tmp_path: Path
) -> None:
    inner = make_store(kind, tmp_path)
    faulty = FaultyStore(inner if kind == "memory" else ClockHoldingStore(inner))
    for method in ("append", "update_run"):
        with pytest.raises(tether.UsageError, match=f"simulate a torn {method}") as info:
            faulty.inject(method, Crash(torn=True))
        message = str(info.value)
        assert repr(faulty.inner) in message
        assert "MemoryStore writes are atomic" in message
        assert "SQLiteStore rolls back an uncommitted transaction" in message
    faulty.inject("append", Crash(), at=2)  # an untorn crash is fine

    # Applied by a custom fault, it fails the call without crashing the store.
    async def tear(call: Call) -> None:
        await Crash(torn=True).apply(call)

    faulty.inject("append", Do(tear), at=1)
    with pytest.raises(tether.UsageError, match="simulate a torn append"):
        await faulty.append("r", [new_entry("a#0")])
    assert not faulty.crashed


async def test_torn_crash_needs_a_write_before_the_call(tmp_path: Path) -> None:
    faulty = FaultyStore(make_store("file", tmp_path))
    with pytest.raises(tether.UsageError, match="applies to append and update_run, not get_run"):
        faulty.inject("get_run", Crash(torn=True))
    with pytest.raises(tether.UsageError, match="cannot apply after the call"):
        faulty.inject("append", Crash(torn=True), after=True)
    faulty.inject("update_run", Crash(torn=True))


# -- inject() arguments -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({"method": "save"}, ValueError, "unknown store method 'save'; one of open, close"),
        ({"fault": "hang"}, TypeError, "'hang' is not a fault"),
        ({"at": 0}, ValueError, "at must be call numbers counted from 1"),
        ({"at": []}, ValueError, "at must be call numbers counted from 1"),
        ({"at": "1"}, TypeError, "at must be an int, not '1'"),
        ({"at": [1, True]}, TypeError, "at must be an int, not True"),
        ({"times": -1}, ValueError, "times must be 0 or more"),
        ({"times": 1.5}, TypeError, "times must be an int"),
        ({"when": 3}, TypeError, "when must be a predicate"),
        ({"after": "yes"}, TypeError, "after must be True or False"),
    ],
)
def test_inject_refuses_bad_arguments(
    kwargs: dict[str, Any], error: type[Exception], pattern: str
) -> None:
    faulty = FaultyStore(tether.MemoryStore())
    args: dict[str, Any] = {"method": "append", "fault": Hang(), **kwargs}
    with pytest.raises(error, match=pattern):
        faulty.inject(args.pop("method"), args.pop("fault"), **args)


async def test_at_and_times_choose_the_calls() -> None:
    faulty = FaultyStore(tether.MemoryStore())
    faulty.inject("get_run", Raise(), at=(2, 4))
    faulty.inject("list_runs", Raise(), times=1)
    outcomes = []
    for _ in range(4):
        try:
            await faulty.get_run("r")
            outcomes.append("ok")
        except tether.StoreError as exc:
            outcomes.append(str(exc))
    assert outcomes == [
        "ok",
        "injected failure of get_run call #2",
        "ok",
        "injected failure of get_run call #4",
    ]
    with pytest.raises(tether.StoreError):
        await faulty.list_runs()
    assert await faulty.list_runs() == []


async def test_appends_are_counted_and_chosen_per_save() -> None:
    # One append carrying saves #2-4: `at` and `when` pick it by any of its
    # saves, a fault applies to the whole call, and Call.n is its first save.
    faulty = FaultyStore(tether.MemoryStore())
    seen: list[tuple[int, list[str]]] = []

    async def record(call: Call) -> None:
        seen.append((call.n, [e.key for e in call.args[1]]))

    faulty.inject("append", Do(record), at=3)
    faulty.inject("append", Raise(), when=lambda run_id, entries: entries[0].key == "k#5", times=1)
    await faulty.create_run(new_run())
    await faulty.append("r", [new_entry("k#1")])
    await faulty.append("r", [new_entry(f"k#{i}") for i in (2, 3, 4)])
    assert seen == [(2, ["k#2", "k#3", "k#4"])]
    assert faulty.calls["append"] == 4
    with pytest.raises(tether.StoreError, match=r"^injected failure of append call #5-6$"):
        await faulty.append("r", [new_entry("k#6"), new_entry("k#5")])
    assert faulty.calls["append"] == 6
    await faulty.append("r", [])  # no save: counted as none, matched by no numbered rule
    assert faulty.calls["append"] == 6
    assert [e.key for e in await faulty.inner.load_entries("r")] == [
        "k#1",
        "k#2",
        "k#3",
        "k#4",
    ]
