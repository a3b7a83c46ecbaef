"""Durable timers: ``tether.sleep``/``sleep_until``, and parking runs under workers.

- A three-day sleep survives a crash on day two and wakes at exactly day
  three (every store, virtual time on ``TrioWallClock``).
- Under a worker, a run parked on a one-hour timer holds no lease and no
  slot, and is taken up when due, at the due time (every store).
- A timer is journaled once, before it sleeps; cancelling it is prompt and
  leaves the run resumable; a timer inserted or removed is a divergence;
  bad input is refused.
- The explorer injects its faults where timers start and fall due.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import tether
from tether._engine._engine import internals
from tether.stores import Entry, EntryKind, RunRecord, RunStatus, Store
from tether.stores._record_json import dumps_record, loads_record
from tether.testing import FaultyStore, SimulatedCrash, explore
from tether.testing._clock import hold_clock
from tether.testing._explore import Explorer
from tether.testing._explore_plan import kinds_at

from ._cli import cli
from ._sqlite_schemas import back_to_6
from ._wall_clock import START, ModuleClock, fresh_test
from .conftest import reopen_store

DAY = 86400.0

#: what the steps saw: (step, the engine clock's reading when it ran)
seen: list[tuple[str, datetime]] = []
#: the clock the workflows' steps read (fresh for each test)
clock = ModuleClock()

# (the workflows a test defines are forgotten after it)
pytestmark = pytest.mark.usefixtures("tether_registry")


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    with fresh_test(clock, seen):
        yield


@tether.step
async def note(what: str) -> str:
    seen.append((what, clock().now()))
    return what


@tether.workflow(name="tests.timers.three_days")
async def three_days() -> str:
    await note("before")
    await tether.sleep(3 * DAY)
    return await note("after")


@tether.workflow(name="tests.timers.hour")
async def an_hour() -> str:
    await note("before")
    await tether.sleep(3600)
    return await note("after")


def entries_of(entries: tuple[Entry, ...], kind: EntryKind) -> list[Entry]:
    return [e for e in entries if e.kind is kind]


async def idle(worker: tether.Worker) -> None:
    """Wait until *worker* holds no run (engine.wait sees a stored outcome before the
    worker's task has ended the run; that task notifies the engine's changes)."""
    changes = internals(worker.engine).changes
    while worker.running:
        await changes.wait(changes.generation, math.inf)


# -- Done when 1: a three-day sleep through a crash on day two -----------------------------


async def test_a_three_day_sleep_wakes_at_day_three_through_a_crash_on_day_two(
    tether_raw_store_factory: Callable[[], Store], autojump_clock: trio.testing.MockClock
) -> None:
    raw = tether_raw_store_factory()
    faulty = FaultyStore(hold_clock(raw))
    with trio.CancelScope() as process:
        async with trio.open_nursery() as nursery:

            async def crash_on_day_two() -> None:
                await trio.sleep(2 * DAY)
                faulty.crash()  # the process dies: nothing more reaches the store
                process.cancel()

            nursery.start_soon(crash_on_day_two)
            try:
                # (A long lease: renewals would be thousands of writes in 3 days.)
                async with tether.open_engine(faulty, clock=clock(), lease_ttl=DAY) as engine:
                    await engine.run(three_days, run_id="r")
            except* SimulatedCrash:
                pass
    assert trio.current_time() == 2 * DAY
    assert [what for what, _ in seen] == ["before"]
    # A new process, on the same storage.
    again = hold_clock(reopen_store(raw))
    async with tether.open_engine(again, clock=clock(), lease_ttl=DAY) as engine:
        stored = await engine.get_run("r")
        assert stored is not None and stored.status is RunStatus.RUNNING
        (timer,) = entries_of(stored.entries, EntryKind.TIMER)
        assert timer.key == "sleep#0" and timer.position == 1
        assert timer.value == '{"due":"2030-01-04T00:00:00+00:00"}'
        assert await engine.resume("r") == "after"
        info = await engine.get_run("r")
    assert seen == [("before", START), ("after", START + timedelta(days=3))]
    assert trio.current_time() == 3 * DAY
    assert info is not None and info.status is RunStatus.COMPLETED
    assert len(entries_of(info.entries, EntryKind.TIMER)) == 1  # journaled once


# -- Done when 1: parked under a worker ------------------------------------------------------


async def test_a_run_parked_on_an_hour_holds_no_lease_nor_slot_and_wakes_when_due(
    tether_store: Store, autojump_clock: trio.testing.MockClock
) -> None:
    due = START + timedelta(hours=1)
    async with (
        tether.open_engine(tether_store, clock=clock(), lease_ttl=60) as engine,
        tether.open_worker(engine, concurrency=2, poll_interval=600) as worker,
    ):
        await engine.submit(an_hour, run_id="r")
        await trio.sleep(60)
        record = await tether_store.get_run("r")
        assert record is not None
        assert (record.status, record.owner, record.lease_expires_at, record.wake_at) == (
            RunStatus.WAITING,
            None,
            None,
            due,
        )
        assert worker.running == set() and worker.free_slots == 2
        assert worker.outcomes == {"waiting": 1}
        listed = await engine.list_runs(status="waiting")
        assert [(r.run_id, r.wake_at, r.executing) for r in listed] == [("r", due, False)]
        assert await engine.wait("r") == "after"
        await idle(worker)
    assert worker.outcomes == {"waiting": 1, "completed": 1}
    # Taken up at the due time, on the test's clock: not a poll later.
    assert seen == [("before", START), ("after", due)]
    info = await _info(tether_store, "r")
    # The park gave its dispatch back: only the claim that completed it counts.
    assert info.status is RunStatus.COMPLETED and info.wake_at is None and info.dispatches == 1


async def _info(store: Store, run_id: str) -> tether.RunInfo:
    async with tether.open_engine(store) as engine:
        info = await engine.get_run(run_id)
    assert info is not None
    return info


async def test_another_worker_takes_up_a_run_parked_elsewhere(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = tether.MemoryStore()
    async with (
        tether.open_engine(store, clock=clock()) as first,
        tether.open_worker(first),
    ):
        await first.submit(an_hour, run_id="r")
        await trio.sleep(60)
    record = await store.get_run("r")
    assert record is not None and record.status is RunStatus.WAITING
    # This worker never parked it: its poll finds the run once it is due.
    async with (
        tether.open_engine(store, clock=clock()) as second,
        tether.open_worker(second, poll_interval=1.0),
    ):
        assert await second.wait("r") == "after"
    when = seen[-1][1]
    assert START + timedelta(hours=1) <= when <= START + timedelta(hours=1, seconds=1)


async def test_a_short_timer_does_not_park_and_many_runs_park_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    @tether.workflow(name="tests.timers.short")
    async def short() -> str:
        await tether.sleep(30)
        return await note("short")

    store = tether.MemoryStore()
    async with (
        tether.open_engine(store, clock=clock()) as engine,
        tether.open_worker(engine, concurrency=2, park_after=60) as worker,
    ):
        await engine.submit(short, run_id="s")
        for i in range(5):
            await engine.submit(an_hour, run_id=f"h{i}")
        await trio.sleep(40)
        # Five hour-long sleepers went through two slots, parked one after the other.
        statuses = {r.run_id: r.status for r in await engine.list_runs()}
        assert statuses == {"s": RunStatus.COMPLETED} | {
            f"h{i}": RunStatus.WAITING for i in range(5)
        }
        for i in range(5):
            assert await engine.wait(f"h{i}") == "after"
        await idle(worker)
    assert worker.outcomes == {"completed": 6, "waiting": 5}


async def test_a_parallel_branch_sleeping_parks_with_the_earliest_wake_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def nap(minutes: int) -> str:
        await tether.sleep(minutes * 60)
        return await note(f"nap {minutes}")

    @tether.workflow(name="tests.timers.naps")
    async def naps() -> list[str]:
        async with tether.parallel() as p:
            first = p.start_soon(nap, 90)
            second = p.start_soon(nap, 120)
        return [first.result, second.result]

    store = tether.MemoryStore()
    async with (
        tether.open_engine(store, clock=clock()) as engine,
        tether.open_worker(engine, poll_interval=3600) as worker,
    ):
        await engine.submit(naps, run_id="n")
        await trio.sleep(1)
        record = await store.get_run("n")
        assert record is not None and record.wake_at == START + timedelta(minutes=90)
        assert await engine.wait("n") == ["nap 90", "nap 120"]
        await idle(worker)
    assert seen == [
        ("nap 90", START + timedelta(minutes=90)),
        ("nap 120", START + timedelta(minutes=120)),
    ]
    # Parked until 1:30, then until 2:00 (the rest of the first branch was not worth a park).
    assert worker.outcomes == {"waiting": 2, "completed": 1}


async def test_engine_run_wait_and_cancel_of_a_waiting_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store, clock=clock()) as engine:
        async with tether.open_worker(engine):
            for run_id in ("run", "cancel"):
                await engine.submit(an_hour, run_id=run_id)
            await trio.sleep(60)
        assert {r.status for r in await engine.list_runs()} == {RunStatus.WAITING}
        with trio.move_on_after(10):
            await engine.wait("run")  # waits through "waiting"
        assert trio.current_time() == 70
        await engine.cancel("cancel")  # no owner: cancelled at once
        cancelled = await store.get_run("cancel")
        assert cancelled is not None and cancelled.status is RunStatus.CANCELLED
        assert cancelled.wake_at is None
        # engine.run (outside a worker) continues it: it sleeps what remains, here.
        assert await engine.run(an_hour, run_id="run") == "after"
        assert trio.current_time() == 3600
        with pytest.raises(tether.RunCancelledError):
            await engine.resume("cancel")


@tether.workflow(name="tests.timers.asks")
async def asks() -> bool:
    return await tether.ask("ok?", bool)


@pytest.mark.parametrize("wf", [an_hour, asks], ids=["parks", "pauses"])
async def test_a_cancel_recorded_while_a_run_settles_makes_it_cancelled(
    wf: tether.Workflow[[], Any], autojump_clock: trio.testing.MockClock
) -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store, clock=clock()) as engine:
        record = await engine.submit(wf, run_id="r")
        (taken,) = await internals(engine).leases.claim_batch(
            [(wf.name, None)], max_dispatches=5, limit=1, gone=(), now=clock().now()
        )
        claimed = taken.record
        assert claimed.run_id == record
        await store.cancel_run("r")  # recorded: the owner holds a live lease
        with pytest.raises(tether.RunCancelledError):
            await internals(engine).execute_claimed(claimed, park_after=60)
    stored = await store.get_run("r")
    assert stored is not None and stored.status is RunStatus.CANCELLED


# -- one process: the timer itself -------------------------------------------------------


async def test_cancelling_a_sleep_is_prompt_and_the_run_resumes_where_it_was(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store, clock=clock()) as engine:
        with trio.move_on_after(600) as scope:
            await engine.run(an_hour, run_id="r")
        assert scope.cancelled_caught and trio.current_time() == 600
        info = await engine.get_run("r")
        assert info is not None and info.status is RunStatus.RUNNING  # interrupted
        assert await engine.resume("r") == "after"
    assert trio.current_time() == 3600  # the remaining 50 minutes, not another hour
    assert [what for what, _ in seen] == ["before", "after"]


async def test_an_already_due_timer_completes_at_once_as_a_checkpoint(
    autojump_clock: trio.testing.MockClock,
) -> None:
    checked: list[bool] = []

    @tether.workflow(name="tests.timers.past")
    async def past() -> str:
        with trio.testing.assert_checkpoints():
            await tether.sleep_until(START - timedelta(days=1))
        with trio.testing.assert_checkpoints():
            await tether.sleep(0)
        checked.append(True)
        return await note("past")

    async with tether.open_engine(tether.MemoryStore(), clock=clock()) as engine:
        assert await engine.run(past) == "past"
    assert checked == [True] and trio.current_time() == 0


async def test_sleep_until_journals_utc_and_a_changed_duration_keeps_the_journaled_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    durations = {"s": 3600.0}

    @tether.workflow(name="tests.timers.until")
    async def until() -> str:
        await tether.sleep_until(datetime(2030, 1, 1, 3, tzinfo=timezone(timedelta(hours=2))))
        await tether.sleep(durations["s"], key="custom")
        return await note("done")

    store = tether.MemoryStore()
    async with tether.open_engine(store, clock=clock()) as engine:
        with trio.move_on_after(4000):
            await engine.run(until, run_id="u")
        durations["s"] = 10 * DAY  # the code changed meanwhile: the journaled due time stands
        assert await engine.resume("u") == "done"
        info = await engine.get_run("u")
    assert info is not None
    values = [(e.key, e.value) for e in entries_of(info.entries, EntryKind.TIMER)]
    assert values == [
        ("sleep#0", '{"due":"2030-01-01T01:00:00+00:00"}'),
        ("custom", '{"due":"2030-01-01T02:00:00+00:00"}'),
    ]
    assert seen == [("done", START + timedelta(hours=2))]


async def test_a_timer_with_a_pending_ask_keeps_the_run_until_it_fires(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def remind() -> str:
        await tether.sleep(120)
        return await note("reminder")

    @tether.workflow(name="tests.timers.ask")
    async def approval() -> bool:
        async with tether.parallel() as p:
            p.start_soon(remind)
            answer = p.start_soon(tether.ask, "ok?", bool)
        approved: bool = answer.result
        return approved

    async with tether.open_engine(tether.MemoryStore(), clock=clock()) as engine:
        with pytest.raises(tether.Paused) as paused:
            await engine.run(approval, run_id="a")
        # Not paused before the reminder fired: a timer was still to wake a task.
        assert trio.current_time() == 120 and [w for w, _ in seen] == ["reminder"]
        (request,) = paused.value.requests
        assert await engine.resume("a", responses={request.key: True}) is True


async def test_timer_events_are_reported(autojump_clock: trio.testing.MockClock) -> None:
    async with (
        tether.open_engine(tether.MemoryStore(), clock=clock()) as engine,
        engine.open_run(an_hour, run_id="r") as run,
    ):
        events = [e async for e in run.events()]
    timers = [e for e in events if isinstance(e, tether.TimerStarted | tether.TimerFired)]
    due = START + timedelta(hours=1)
    assert timers == [
        tether.TimerStarted(run_id="r", key="sleep#0", due=due),
        tether.TimerFired(run_id="r", key="sleep#0", due=due),
    ]
    lines = [tether.describe_event(e) for e in timers]
    assert lines == [
        "  timer sleep#0: sleeping until 2030-01-01T01:00:00+00:00",
        "  timer sleep#0: due",
    ]


async def test_a_sleep_inside_a_step_is_keyed_under_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    @tether.step
    async def wait_then(n: int) -> int:
        await tether.sleep(5)
        return n + 1

    @tether.workflow(name="tests.timers.in_step")
    async def in_step() -> int:
        return await wait_then(1)

    async with tether.open_engine(tether.MemoryStore(), clock=clock()) as engine:
        assert await engine.run(in_step, run_id="s") == 2
        info = await engine.get_run("s")
    assert info is not None
    assert [e.key for e in entries_of(info.entries, EntryKind.TIMER)] == ["wait_then#0/sleep#0"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: tether.sleep(-1), "non-negative"),
        (lambda: tether.sleep(math.nan), "non-negative"),
        (lambda: tether.sleep(math.inf), "finite"),
        (lambda: tether.sleep(True), "number of seconds"),
        (lambda: tether.sleep("5"), "number of seconds"),  # type: ignore[arg-type]
        (lambda: tether.sleep_until(datetime(2030, 1, 1)), "timezone-aware"),
        (lambda: tether.sleep_until(5), "timezone-aware"),  # type: ignore[arg-type]
        (lambda: tether.sleep(1, key="a/b"), "without '/'"),
    ],
)
async def test_bad_input_is_a_usage_error(call: Callable[[], Any], message: str) -> None:
    @tether.workflow(name="tests.timers.bad")
    async def bad() -> None:
        await call()

    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(tether.UsageError, match=message):
            await engine.run(bad)


async def test_sleep_outside_a_run_is_refused() -> None:
    with pytest.raises(tether.NotInRunError, match=r"tether\.sleep\(\)"):
        await tether.sleep(1)
    with pytest.raises(tether.UsageError, match="past the year 9999"):
        async with tether.open_engine(tether.MemoryStore()) as engine:

            @tether.workflow(name="tests.timers.far")
            async def far() -> None:
                await tether.sleep(1e15)

            await engine.run(far)


# -- divergence -------------------------------------------------------------------------


@pytest.mark.parametrize("change", ["inserted", "removed"])
async def test_a_timer_inserted_or_removed_is_a_divergence(
    change: str, autojump_clock: trio.testing.MockClock
) -> None:
    code = {"v": "old"}
    failing = {"on": True}

    @tether.step
    async def fails() -> str:
        if failing["on"]:
            raise ValueError("down")
        return "ok"

    @tether.workflow(name="tests.timers.diverge")
    async def diverge() -> str:
        await note("first")
        if (code["v"] == "old") == (change == "removed"):
            await tether.sleep(10)
        await note("second")
        return await fails()

    store = tether.MemoryStore()
    async with tether.open_engine(store, clock=clock()) as engine:
        with pytest.raises(ValueError, match="down"):
            await engine.run(diverge, run_id="d")
        code["v"] = "new"
        failing["on"] = False
        with pytest.raises(tether.NonDeterminismError) as info:
            await engine.resume("d")
        record = await store.get_run("d")
    assert "position 1 in the workflow" in str(info.value)
    held = "timer sleep#0" if change == "removed" else "step note#1"
    assert held in str(info.value)
    assert record is not None and record.status is RunStatus.FAILED  # as it was


async def test_a_journaled_timer_under_a_step_key_is_a_divergence(
    autojump_clock: trio.testing.MockClock,
) -> None:
    code = {"v": "step"}

    @tether.step(name="sleep")
    async def a_step_named_sleep() -> int:
        return 1

    @tether.workflow(name="tests.timers.kind")
    async def kind() -> int:
        if code["v"] == "step":
            await a_step_named_sleep()
            raise ValueError("stop")
        await tether.sleep(1)
        return 2

    async with tether.open_engine(tether.MemoryStore(), clock=clock()) as engine:
        with pytest.raises(ValueError):
            await engine.run(kind, run_id="k")
        code["v"] = "timer"
        with pytest.raises(tether.NonDeterminismError, match="holds a step entry"):
            await engine.resume("k")


# -- records and stores ------------------------------------------------------------------


def _v4_record() -> dict[str, Any]:
    now = START.isoformat()
    return {
        "run_id": "old",
        "workflow": "wf",
        "args": "[]",
        "status": "running",
        "result": None,
        "error": None,
        "requests": [],
        "created_at": now,
        "updated_at": now,
        "owner": None,
        "token": 0,
        "cancel_requested": False,
        "dispatches": 0,
        "version": None,
        "format_version": 4,
    }


def test_run_records_keep_wake_at_and_older_formats_read_without_it() -> None:
    old = loads_record(dumps_record(_v4_record()), RunRecord.from_json)
    assert old.wake_at is None and old.format_version == 4
    with pytest.raises(ValueError, match=r"unknown field.*'wake_at'"):
        loads_record(dumps_record({**_v4_record(), "wake_at": None}), RunRecord.from_json)
    with pytest.raises(ValueError, match=r"missing field.*'wake_at'"):
        loads_record(dumps_record({**_v4_record(), "format_version": 5}), RunRecord.from_json)
    for bad in ("2030-01-01T00:00:00", "soon", 5):
        with pytest.raises(ValueError, match="wake_at"):
            data = {**_v4_record(), "format_version": 5, "wake_at": bad}
            loads_record(dumps_record(data), RunRecord.from_json)
    wake = datetime(2030, 1, 2, tzinfo=timezone(timedelta(hours=-3)))
    record = RunRecord(
        run_id="w",
        workflow="wf",
        args="[]",
        status=RunStatus.WAITING,
        wake_at=wake,
        created_at=START,
        updated_at=START,
    )
    again = loads_record(dumps_record(record.to_json()), RunRecord.from_json)
    assert again == record and again.wake_at == wake


async def test_an_sqlite_file_of_schema_4_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    store = tether.SQLiteStore(path)
    await store.open()
    await store.close()
    conn = sqlite3.connect(path)
    with conn:
        back_to_6(conn)
        conn.execute("DROP TABLE messages")  # (schema 6's, see tests/test_mailbox_stores.py)
        conn.execute("DROP INDEX runs_wake")
        conn.execute("ALTER TABLE runs DROP COLUMN wake_at")
        conn.execute(
            "INSERT INTO runs (run_id, data, status, workflow) VALUES ('old', ?, 'running', 'wf')",
            (dumps_record(_v4_record()),),
        )
        conn.execute("PRAGMA user_version = 4")
    conn.close()
    store = tether.SQLiteStore(path)
    await store.open()
    try:
        old = await store.get_run("old")
        assert old is not None and old.wake_at is None
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (tether.stores.SCHEMA_VERSION,)
    indexes = {row[1] for row in conn.execute("PRAGMA index_list(runs)")}
    assert "runs_wake" in indexes
    conn.close()


# -- the command line ----------------------------------------------------------------------


class StoppedClock:
    """A wall clock that always reads START (the command-line test runs in real time)."""

    def now(self) -> datetime:
        return START


def test_runs_list_and_show_tell_when_a_waiting_run_wakes(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"

    async def park() -> None:
        async with (
            tether.open_engine(tether.SQLiteStore(path), clock=StoppedClock()) as engine,
            tether.open_worker(engine, poll_interval=0.01),
        ):
            await engine.submit(an_hour, run_id="parked")
            with trio.fail_after(60):
                while True:
                    record = await engine.store.get_run("parked")
                    if record is not None and record.status is RunStatus.WAITING:
                        break
                    await trio.sleep(0.01)

    trio.run(park)
    r = cli("runs", "list", "--status", "waiting", "--store", f"sqlite:{path}")
    assert r.status == 0, r.err
    row = r.out.splitlines()[1]
    assert "parked" in row and "waiting" in row
    assert "parked on its timers until 2030-01-01 01:00:" in row
    r = cli("runs", "show", "parked", "--store", f"sqlite:{path}")
    assert r.status == 0, r.err
    assert "status:    waiting — parked on its timers, holding no lease" in r.out
    assert "wakes:     2030-01-01 01:00:" in r.out
    assert "due 2030-01-01 01:00:" in r.out  # the timer entry of the journal
    r = cli("runs", "show", "parked", "--json", "--store", f"sqlite:{path}")
    assert r.status == 0, r.err
    assert '"wake_at": "2030-01-01T01:00:' in r.out


# -- the explorer ------------------------------------------------------------------------------


calls = trio.lowlevel.RunVar[int]("calls")


@tether.step
async def prepare(n: int) -> int:
    return n + 1


@tether.step(retry=tether.Retry(attempts=4, initial=0.5, on=(ConnectionError,)))
async def flaky(n: int) -> int:
    # Fails on the first two calls of each trial (each trial is a trio.run of its own).
    count = calls.get(0) + 1
    calls.set(count)
    if count <= 2:
        raise ConnectionError(f"call {count}")
    return n * 10


@tether.workflow(name="tests.timers.explored")
async def explored(n: int) -> int:
    ready = await prepare(n)
    await tether.sleep(5)
    return await flaky(ready)


def test_the_explorer_injects_faults_where_timers_start_and_fall_due() -> None:
    points = Explorer(explored, 1).points(0)[0]
    assert "timer:sleep#0" in points and "due:sleep#0" in points
    assert points.index("save:sleep#0") < points.index("timer:sleep#0")
    assert points.index("timer:sleep#0") < points.index("due:sleep#0")
    for point in ("timer:sleep#0", "due:sleep#0"):
        assert kinds_at(point) == ("cancel", "fail", "crash")
    # The failed attempts are journaled saves too: faults land between them.
    assert [p for p in points if p.startswith("save:flaky")] == [
        "save:flaky#0",
        "save:flaky#0~2",
        "save:flaky#0~3",
    ]
    result = explore(explored, 1, seeds=2)
    assert result.outcome == "returned 20"
    assert result.trials > 2 * len(points)
