"""Schedules: ``tether.schedule``, served by workers, exactly one run per tick.

- a schedule is checked where it is defined: its cron expression, name,
  catch-up policy and arguments (encoded with the workflow's signature);
- its ticks and run ids, and the schedules ``open_worker`` accepts;
- two workers (two engines on one store, every store kind) and a 1-minute
  schedule over 10 virtual minutes give exactly 10 runs, also when one of
  them leaves or crashes in the middle;
- missed ticks: ``skip`` runs none, ``once`` the most recent one, when a worker
  starts after a gap or falls behind while its store fails (retried, logged);
- a tick whose run id is taken by other arguments is logged and skipped; a
  submit in flight when the worker leaves is cut promptly;
- ``tether schedules list`` and ``tether worker`` (its schedules, in real
  processes, one of them SIGKILLed).

In-process tests run in virtual time (``autojump_clock``) with the engines on
``TrioWallClock``: ten minutes pass at once.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Final

import pytest
import trio
import trio.testing

import tether
from tether._worker._schedule import LOOKBACK, Schedule
from tether.stores import RunStatus, Store
from tether.testing import Do, FaultyStore, Hang, SimulatedCrash, TrioWallClock
from tether.testing._clock import ClockHoldingStore, hold_clock

from . import _fleet, _schedules
from ._cli import cli
from ._fleet import RawStore, TetherProcess
from ._poll import PATIENCE, poll
from .conftest import reopen_store

#: Virtual time 0 on the engines' clocks: half a minute before the first tick.
START: Final = datetime(2026, 12, 1, 9, 59, 30, tzinfo=UTC)
MINUTE: Final = timedelta(minutes=1)
#: Long leases and slow polls: fewer store calls in ten virtual minutes.
LEASE: Final = 60.0
POLL: Final = 30.0


@tether.step
async def note(label: str, n: int) -> str:
    return f"{label}:{n}"


@tether.workflow(name="tests.schedule.beat")
async def beat(label: str, n: int) -> str:
    return await note(label, n)


def minutely(name: str, catch_up: Any = "skip") -> Schedule:
    return tether.schedule(beat, cron="* * * * *", args=(name, 1), name=name, catch_up=catch_up)


def at(hour: int, minute: int) -> datetime:
    return datetime(2026, 12, 1, hour, minute, tzinfo=UTC)


def minute_ids(s: Schedule, *minutes: tuple[int, int]) -> list[str]:
    return [s.run_id(at(h, m)) for h, m in minutes]


def ten_minutes(s: Schedule) -> list[str]:
    return minute_ids(s, *((10, m) for m in range(10)))


async def scheduled(engine: tether.Engine, s: Schedule) -> list[str]:
    """The ids of the schedule's runs in the store, oldest tick first."""
    runs = await engine.list_runs(workflow=s.workflow.name)
    return sorted(r.run_id for r in runs if r.run_id.startswith(f"sched:{s.name}:"))


def _another(store: Store) -> Store:
    """Another store object on the same place as *store* (memory: itself), wrapped alike."""
    if isinstance(store, ClockHoldingStore):
        return hold_clock(reopen_store(store.inner))
    return reopen_store(store)


def _engine(store: Store) -> Any:
    return tether.open_engine(store, clock=TrioWallClock(START), lease_ttl=LEASE)


# -- definitions -----------------------------------------------------------------------------


def test_a_schedule_knows_its_ticks_and_run_ids() -> None:
    s = tether.schedule(beat, cron="*/5 * * * *", args=["a", 1], name="five")
    assert s.args == ("a", 1) and s.encoded_args == '["a",1]' and s.catch_up == "skip"
    assert repr(s) == (
        "tether.schedule(tests.schedule.beat, cron='*/5 * * * *', args=('a', 1), "
        "name='five', catch_up='skip')"
    )
    assert s.run_id(at(10, 5)) == "sched:five:2026-12-01T10:05:00Z"
    # Any timezone: the id is the tick in UTC.
    paris = timezone(timedelta(hours=1))
    assert s.run_id(datetime(2026, 12, 1, 11, 5, tzinfo=paris)) == s.run_id(at(10, 5))
    assert s.next_tick(at(10, 5)) == at(10, 5)  # a tick now is due now
    assert s.next_tick(at(10, 5) + timedelta(microseconds=1)) == at(10, 10)
    assert s.next_tick(at(10, 6)) == at(10, 10)
    seconds = tether.schedule(beat, cron="* * * * * */20", args=("a", 1), name="secs")
    assert seconds.next_tick(at(10, 0) + timedelta(seconds=1)) == at(10, 0) + timedelta(seconds=20)
    # H is spread by the schedule's name: the same for one name, a minute in range.
    h1 = tether.schedule(beat, cron="H * * * *", args=("a", 1), name="spread-1")
    again = tether.schedule(beat, cron="H * * * *", args=("b", 2), name="spread-1")
    tick = h1.next_tick(at(10, 0))
    assert tick is not None and tick == again.next_tick(at(10, 0)) and tick.hour == 10


def test_the_arguments_are_a_copy_taken_at_definition() -> None:
    @tether.workflow(name="tests.schedule.lists")
    async def lists(items: list[int]) -> int:
        return len(items)

    items = [1, 2]
    s = tether.schedule(lists, cron="@daily", args=(items,), name="copied")
    items.append(3)
    assert s.args == ([1, 2],) and s.encoded_args == "[[1,2]]"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cron": "61 * * * *"}, "schedule 'bad': cron '61 * * * *' is not a cron expression: "),
        ({"cron": "* * *"}, "schedule 'bad': cron '* * *' is not a cron expression: "),
        ({"cron": "0 0 31 2 *"}, "schedule 'bad': cron '0 0 31 2 *' never fires"),
        ({"cron": 5}, "schedule 'bad': cron takes a cron expression such as"),
        ({"name": ""}, "a schedule name is 1 to 100 letters"),
        ({"name": "a:b"}, "(it is part of each run id, sched:NAME:TICK), not 'a:b'"),
        ({"name": "a/b"}, "not 'a/b'"),
        ({"name": None}, "not None"),
        ({"catch_up": "all"}, "schedule 'bad': catch_up must be 'skip' or 'once', not 'all'"),
        ({"args": ("x",)}, "schedule 'bad': workflow tests.schedule.beat: missing a required"),
        ({"args": ("x", 1, 2)}, "schedule 'bad': workflow tests.schedule.beat: too many"),
        ({"args": "x1"}, "schedule 'bad': args must be a tuple of the workflow's arguments"),
    ],
)
def test_a_bad_schedule_fails_where_it_is_defined(options: dict[str, Any], message: str) -> None:
    given: dict[str, Any] = {"cron": "* * * * *", "args": ("x", 1), "name": "bad"} | options
    with pytest.raises(tether.UsageError) as refused:
        tether.schedule(beat, **given)
    assert message in str(refused.value)


def test_an_argument_that_does_not_encode_fails_at_definition() -> None:
    with pytest.raises(tether.CodecError, match="schedule 'bad': arguments of workflow"):
        tether.schedule(beat, cron="* * * * *", args=("x", "not an int"), name="bad")
    with pytest.raises(tether.UsageError, match=r"takes a @tether\.workflow"):
        tether.schedule(note, cron="* * * * *", args=("x", 1), name="bad")  # type: ignore[arg-type]


def test_without_croniter_the_message_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "croniter", None)  # import croniter: ImportError
    with pytest.raises(tether.UsageError, match=r"pip install -e '\.\[schedules\]'"):
        tether.schedule(beat, cron="* * * * *", args=("x", 1), name="x")


async def test_open_worker_checks_its_schedules() -> None:
    s = minutely("one")
    twin = minutely("one")
    async with tether.open_engine(tether.MemoryStore()) as engine:
        for schedules, message in [
            (s, "takes a tuple of schedules, not one"),
            (("one",), "takes tether.schedule\\(\\) objects, not 'one'"),
            (None, "takes a tuple of tether.schedule\\(\\) objects, not None"),
            ("one", "takes a tuple of tether.schedule\\(\\) objects, not 'one'"),
            ((s, twin), "two schedules are named 'one'"),
        ]:
            with pytest.raises(tether.UsageError, match=message):
                async with tether.open_worker(engine, schedules=schedules):  # type: ignore[arg-type]
                    pass
        async with tether.open_worker(engine, schedules=[s, s]) as worker:  # one, twice
            assert worker.schedules == (s,)


# -- two workers, one run per tick -----------------------------------------------------------


@pytest.mark.parametrize("b_ends", ["at the end", "cancelled", "crashed"])
async def test_two_workers_start_exactly_one_run_per_tick(
    tether_store: Store, autojump_clock: trio.abc.Clock, b_ends: str
) -> None:
    s = minutely("two")
    a_store, b_store = FaultyStore(tether_store), FaultyStore(_another(tether_store))
    b_scope = trio.CancelScope()
    end = trio.Event()

    async def worker_b() -> None:
        try:
            async with _engine(b_store) as b:
                with b_scope:
                    async with tether.open_worker(b, schedules=(s,), poll_interval=POLL):
                        await trio.sleep_forever()
                # (The engine stays open: a PostgresStore closed in a cancelled scope hangs.)
                await end.wait()
        except* SimulatedCrash:
            pass  # worker B's process died: nothing of it runs any more

    async with _engine(a_store) as a:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker_b)
            async with tether.open_worker(a, schedules=(s,), poll_interval=POLL):
                await trio.sleep(5 * 60)  # 10:04:30
                if b_ends == "cancelled":
                    b_scope.cancel()  # its worker block is left
                elif b_ends == "crashed":
                    b_store.crash()  # every call of B's from now on dies
                await trio.sleep(5 * 60)  # 10:09:30: ten ticks, 10:00 to 10:09
                for run_id in ten_minutes(s):  # B may have claimed some: it ran, or expires
                    assert await a.wait(run_id, timeout=3 * LEASE) == "two:1"
                b_scope.cancel()
                end.set()
        listed = await scheduled(a, s)
        if listed != ten_minutes(s):
            # Seen twice on PostgreSQL, in whole-suite runs only: every run waited for
            # above, yet the listing by workflow missed some. Say what the store holds.
            every = [(r.run_id, r.workflow, r.status.value) for r in await a.list_runs()]
            read = [await a.get_run(run_id) for run_id in ten_minutes(s)]
            pytest.fail(
                f"list_runs(workflow=) listed {listed}; list_runs() listed {every}; "
                f"get_run read {[(i.run_id, i.workflow, i.status.value) for i in read if i]}"
            )
        assert [r.run_id for r in await a.list_runs()] == ten_minutes(s)  # nothing else
        for run_id in ten_minutes(s):
            info = await a.get_run(run_id)
            assert info is not None and info.status is RunStatus.COMPLETED
            assert [e.key for e in info.entries] == ["note#0"]  # executed once
    # Both submitted every tick while they were up: the run ids made it one run each.
    assert a_store.calls["create_run"] == 10
    # (A crashed B may have tried 10:05 before it died: the call counts, and failed.)
    expected_b = {"at the end": {10}, "cancelled": {5}, "crashed": {5, 6}}[b_ends]
    assert b_store.calls["create_run"] in expected_b


# -- missed ticks ----------------------------------------------------------------------------


@pytest.mark.parametrize("catch_up", ["skip", "once"])
async def test_ticks_missed_while_no_worker_was_up(
    tether_store: Store, autojump_clock: trio.abc.Clock, catch_up: str
) -> None:
    s = minutely(f"gap-{catch_up}", catch_up)
    counted = FaultyStore(tether_store)
    async with _engine(counted) as engine:
        async with tether.open_worker(engine, schedules=(s,)):
            await trio.sleep(140)  # 10:01:50: 10:00 and 10:01 ran
        await trio.sleep(10 * 60)  # 10:11:50: no worker for 10:02 to 10:11
        async with tether.open_worker(engine, schedules=(s,)):
            await trio.sleep(60)  # 10:12:50: 10:12 ran
        missed = [(10, 11)] if catch_up == "once" else []
        expected = minute_ids(s, (10, 0), (10, 1), *missed, (10, 12))
        assert await scheduled(engine, s) == expected
        # A restart right after a tick that ran has nothing to catch up: no submit at start.
        before = counted.calls["create_run"]
        await trio.sleep(3)  # 10:12:53
        async with tether.open_worker(engine, schedules=(s,)):
            await trio.sleep(5)
        assert counted.calls["create_run"] == before
        assert await scheduled(engine, s) == expected


async def test_a_new_schedule_catches_up_nothing(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    s = minutely("fresh", "once")
    counted = FaultyStore(tether_store)
    async with _engine(counted) as engine:
        async with tether.open_worker(engine, schedules=(s,)):
            await trio.sleep(60)  # 10:00:30
        assert await scheduled(engine, s) == minute_ids(s, (10, 0))
        # It looked back LOOKBACK ticks for a run before starting, and found none.
        assert counted.calls["get_run"] >= LOOKBACK


@pytest.mark.parametrize("catch_up", ["skip", "once"])
async def test_a_worker_whose_store_fails_retries_then_applies_the_policy(
    tether_store: Store,
    autojump_clock: trio.abc.Clock,
    catch_up: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = minutely(f"behind-{catch_up}", catch_up)
    faulty = FaultyStore(tether_store)
    away_until = 4 * 60 + 40  # 10:04:10 in virtual time

    async def refuse(call: Any) -> None:
        if trio.current_time() < away_until and call.args[0].run_id != s.run_id(at(10, 0)):
            raise tether.StoreError("the database is away")

    faulty.inject("create_run", Do(refuse))
    caplog.set_level(logging.INFO, logger="tether.worker")
    async with _engine(faulty) as engine:
        async with tether.open_worker(engine, schedules=(s,)):
            await trio.sleep(7 * 60)  # 10:06:30
        # 10:01 was being submitted: it runs once the store answers; 10:02 to 10:04 came
        # and went meanwhile (missed): skip runs none, once the latest.
        latest = [(10, 4)] if catch_up == "once" else []
        expected = minute_ids(s, (10, 0), (10, 1), *latest, (10, 5), (10, 6))
        assert await scheduled(engine, s) == expected
    retried = [r.getMessage() for r in caplog.records if "(retried in" in r.getMessage()]
    assert retried and all(f"schedule {s.name}: submitting " in m for m in retried)
    assert all(r.levelno == logging.WARNING for r in caplog.records if "(retried in" in r.message)
    assert any(
        "missed ticks 2026-12-01 10:02:00+00:00 to 2026-12-01 10:04:00" in m
        for m in [r.getMessage() for r in caplog.records]
    )


async def test_a_tick_whose_run_id_is_taken_is_logged_and_skipped(
    tether_store: Store, autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    s = minutely("taken")
    taken = s.run_id(at(10, 1))
    async with _engine(tether_store) as engine:
        await engine.submit(beat, "someone else", 2, run_id=taken)
        async with tether.open_worker(engine, schedules=(s,)):
            await trio.sleep(200)  # 10:02:50
            assert await engine.wait(taken, timeout=10) == "someone else:2"
        assert await scheduled(engine, s) == minute_ids(s, (10, 0), (10, 1), (10, 2))
    (warning,) = [r for r in caplog.records if "skipped" in r.getMessage()]
    assert warning.levelno == logging.WARNING and warning.name == "tether.worker"
    assert f"schedule taken: tick 2026-12-01 10:01:00+00:00 skipped: run {taken!r} exists" in (
        warning.getMessage()
    )


async def test_leaving_the_worker_cuts_a_submit_in_flight(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    s = minutely("cut", "once")
    hung = FaultyStore(tether_store)
    hung.inject("create_run", Hang(), when=lambda record: record.run_id == s.run_id(at(10, 1)))
    async with _engine(hung) as engine:
        async with tether.open_worker(engine, schedules=(s,)):
            await trio.sleep(100)  # 10:01:10; 10:01 is being submitted, forever
            left = trio.current_time()
        assert trio.current_time() == left  # the block was left at once
        assert await scheduled(engine, s) == minute_ids(s, (10, 0))
    await trio.sleep(20)
    # The next worker (10:01:30) catches the tick up: it has no run, and 10:00 has one.
    async with _engine(_another(tether_store)) as engine:
        async with tether.open_worker(engine, schedules=(s,)):
            await trio.sleep(10)
        assert await scheduled(engine, s) == minute_ids(s, (10, 0), (10, 1))


async def test_a_schedule_that_fires_no_more_ends_alone(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    past = tether.schedule(beat, cron="0 0 1 1 * 0 2020", args=("x", 1), name="past")
    s = minutely("alive")
    async with _engine(tether.MemoryStore()) as engine:
        async with tether.open_worker(engine, schedules=(past, s)):
            await trio.sleep(90)
        assert await scheduled(engine, s) == minute_ids(s, (10, 0))
        assert await scheduled(engine, past) == []
    assert any("schedule past: the cron" in r.getMessage() for r in caplog.records)


# -- the command line ------------------------------------------------------------------------


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, body: str) -> str:
    """A module *name* in *tmp_path*, importable; its name."""
    (tmp_path / f"{name}.py").write_text(
        "import tether\nfrom tests._schedules import stamped\n" + body, encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_schedules_list_shows_the_next_tick_and_the_last_run(tmp_path: Path) -> None:
    spec = f"sqlite:{tmp_path / 's.db'}"
    nightly = _schedules.nightly
    now = datetime.now(UTC)
    last = nightly.next_tick(now - timedelta(days=2))
    assert last is not None

    async def submit() -> None:
        async with tether.open_engine(tether.SQLiteStore(tmp_path / "s.db")) as engine:
            await engine.submit(nightly.workflow, *nightly.args, run_id=nightly.run_id(last))

    trio.run(submit)
    listed = cli("schedules", "list", "--json", "--import", "tests._schedules", "--store", spec)
    assert listed.status == 0, listed.err
    beat_row, nightly_row = json.loads(listed.out)
    assert nightly_row == {
        "name": "tests.nightly",
        "workflow": "tests.schedules.stamp",
        "cron": "0 3 * * *",
        "catch_up": "skip",
        "args": ["night", 1],
        "next_tick": nightly_row["next_tick"],
        "last_tick": last.isoformat(),
        "last_run_id": nightly.run_id(last),
        "last_status": "queued",
    }
    assert now < datetime.fromisoformat(nightly_row["next_tick"]) <= now + timedelta(days=1)
    assert beat_row["name"] == "tests.beat" and beat_row["last_tick"] is None
    table = cli("schedules", "list", "--import", "tests._schedules", "--store", spec)
    assert table.status == 0, table.err
    lines = table.out.splitlines()
    assert lines[0].split() == [
        "NAME", "WORKFLOW", "CRON", "CATCH-UP", "NEXT", "TICK", "(UTC)", "LAST", "RUN", "(UTC)"
    ]  # fmt: skip
    assert lines[2].startswith("tests.nightly  tests.schedules.stamp  0 3 * * *")
    assert lines[2].endswith(f"{last:%Y-%m-%d %H:%M:%S} queued")
    assert lines[1].rstrip().endswith("-")  # tests.beat: no run yet
    assert lines[-1] == f"2 schedules in tests._schedules; runs in {spec}"


def test_schedules_list_refuses_what_it_cannot_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = f"sqlite:{tmp_path / 's.db'}"
    missing = cli("schedules", "list", "--import", "tests._schedules", "--store", spec)
    assert missing.status == 1 and "never creates a store" in missing.err
    assert not (tmp_path / "s.db").exists()
    trio.run(_create, tmp_path / "s.db")
    none = cli("schedules", "list", "--import", "tests._fleet", "--store", spec)
    assert (none.status, none.out) == (0, "no schedules in tests._fleet\n"), none.err
    clash = _module(
        tmp_path,
        monkeypatch,
        "clashing_schedules",
        "again = tether.schedule(stamped, cron='@hourly', args=('a', 1), name='tests.beat')\n",
    )
    for argv in (
        ["schedules", "list", "--import", "tests._schedules", "--import", clash],
        ["worker", "--import", "tests._schedules", "--import", clash],
        ["schedules", "list"],
    ):
        with pytest.raises(SystemExit) as exited:
            cli(*argv, "--store", spec)
        assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "two schedules are named 'tests.beat'" in err
    assert "--import MODULE" in err


async def _create(path: Path) -> None:
    async with tether.open_engine(tether.SQLiteStore(path)):
        pass


# -- tether worker, in real processes --------------------------------------------------------

BEAT: Final = _schedules.every_two_seconds


def _beats(raw: RawStore) -> dict[str, str]:
    rows = raw.query("SELECT run_id, status FROM {s}.runs WHERE run_id LIKE 'sched:%'")
    return dict(rows)


def _consecutive(run_ids: list[str]) -> list[str]:
    """Every tick's id from the first of *run_ids* to the last."""
    ticks = sorted(datetime.fromisoformat(i.removeprefix(f"sched:{BEAT.name}:")) for i in run_ids)
    out, tick = [], ticks[0]
    while tick <= ticks[-1]:
        out.append(BEAT.run_id(tick))
        tick += timedelta(seconds=2)
    return out


def _worker(name: str, tmp_path: Path, spec: str, *options: str) -> TetherProcess:
    env = _fleet.process_env(spec, tmp_path)
    args = ["worker", "--store", spec, "--import", "tests._schedules", "--grace", "0", *options]
    return TetherProcess(name, tmp_path, [*args, "--poll-interval", "0.2", "--lease-ttl", "5"], env)


def test_tether_worker_serves_the_schedules_of_its_modules(tmp_path: Path) -> None:
    spec = f"sqlite:{tmp_path / 'w.db'}"
    quiet = _worker("quiet", tmp_path, spec, "--no-schedules")
    try:
        quiet.owner(PATIENCE)
        quiet.signal(signal.SIGTERM)
        assert quiet.wait(PATIENCE) == 0, quiet.tail()
        assert ": schedules " not in quiet.stdout() and ": stopped;" in quiet.stdout()
    finally:
        quiet.stop()
    raw = RawStore(spec)
    w = _worker("serving", tmp_path, spec)
    try:
        owner = w.owner(PATIENCE)
        assert f"tether worker {owner}: schedules tests.beat (* * * * * */2), tests.nightly" in (
            w.stdout()
        )
        poll(lambda: list(_beats(raw).values()).count("completed") >= 3, "3 beats", w)
        w.signal(signal.SIGTERM)
        assert w.wait(PATIENCE) == 0, w.tail()
    finally:
        w.stop()
    beats = _beats(raw)
    assert sorted(beats) == _consecutive(list(beats)), beats


@pytest.mark.slow
def test_two_worker_processes_one_sigkilled_leave_no_tick_without_a_run(tmp_path: Path) -> None:
    spec = f"sqlite:{tmp_path / 'k.db'}"
    raw = RawStore(spec)
    first = _worker("first", tmp_path, spec)
    second = _worker("second", tmp_path, spec)
    try:
        first.owner(PATIENCE)
        second.owner(PATIENCE)
        poll(lambda: len(_beats(raw)) >= 3, "3 beats with both workers up", first, second)
        first.signal(signal.SIGKILL)
        assert first.wait(PATIENCE) == -signal.SIGKILL
        after_kill = len(_beats(raw))
        poll(lambda: len(_beats(raw)) >= after_kill + 3, "3 beats more", second)
        second.signal(signal.SIGTERM)
        assert second.wait(PATIENCE) == 0, second.tail()
    finally:
        first.stop()
        second.stop()
    beats = _beats(raw)
    assert sorted(beats) == _consecutive(list(beats)), beats
    # A run the killed worker held is taken over at once (its owner is gone): all complete
    # once a worker serves them again.
    third = _worker("third", tmp_path, spec, "--no-schedules")
    try:
        poll(lambda: set(_beats(raw).values()) == {"completed"}, "every beat to complete", third)
    finally:
        third.signal(signal.SIGTERM)
        third.wait(PATIENCE)
        third.stop()
