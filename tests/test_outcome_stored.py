"""An outcome is always stored, and one that cannot be is not re-executed in a loop.

A failure whose text UTF-8 cannot hold (a lone surrogate from ``os.listdir``)
is stored ``failed`` with a readable message and traceback, on every store.
When the store itself fails the outcome write, the execution counts as a
dispatch, the run backs off before it is claimed again (``waiting`` until a
``wake_at`` that doubles with each dispatch), and ``max_dispatches``
dead-letters it.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
import trio
import trio.testing

import tether
from tether._engine._info import backing_off
from tether._engine._outcomes import REDISPATCH_FIRST, REDISPATCH_MAX, redispatch_delay
from tether.stores import DEAD_LETTER_ERROR, RunRecord, RunStatus, Store
from tether.testing import Call, Do, FaultyStore, Raise, TrioWallClock

from ._poll import PATIENCE, apoll
from .conftest import reopen_store

#: a file name as ``os.listdir`` gives it when it is not UTF-8 (b"caf\xe9")
NAME = b"caf\xe9".decode("utf-8", "surrogateescape")
START = datetime(2030, 1, 1, tzinfo=UTC)

#: the engine clock's reading at each start of the steps below
starts: list[datetime] = []
clock = TrioWallClock(START)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    global clock
    starts.clear()
    clock = TrioWallClock(START)


@tether.step
async def import_file(name: str) -> str:
    starts.append(clock.now())
    raise ValueError(f"cannot import {name}")


@tether.workflow(name="tests.outcome.import")
async def importing(name: str) -> str:
    return await import_file(name)


@tether.step(retry=tether.Retry(attempts=2, initial=0, jitter=False))
async def import_retried(name: str) -> str:
    raise ValueError(f"cannot import {name}")


@tether.workflow(name="tests.outcome.retried")
async def retried(name: str) -> str:
    return await import_retried(name)


@tether.workflow(name="tests.outcome.both")
async def both(name: str) -> None:
    async with tether.parallel() as p:
        p.start_soon(import_file, name)


def test_the_surrogate_is_in_the_name() -> None:
    with pytest.raises(UnicodeEncodeError):
        NAME.encode("utf-8")


async def test_a_failure_with_a_lone_surrogate_is_stored_failed_and_readable(
    tether_store: Store,
) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(ValueError, match="cannot import") as raised:
            await engine.run(importing, NAME, run_id="surrogate")
        assert not getattr(raised.value, "__notes__", None), "storing it failed"
        with pytest.raises(ValueError):
            await engine.run(retried, NAME, run_id="attempts")
        with pytest.raises(ExceptionGroup):
            await engine.run(both, NAME, run_id="group")
    async with tether.open_engine(reopen_store(tether_store)) as engine:
        info = await engine.get_run("surrogate")
        attempts = await engine.get_run("attempts")
        group = await engine.get_run("group")
    assert info is not None and info.status is RunStatus.FAILED
    assert info.error is not None and info.error.message == "cannot import caf\\udce9"
    assert info.error.traceback is not None
    assert "ValueError: cannot import caf\\udce9" in info.error.traceback
    assert "in import_file" in info.error.traceback
    # Each failed attempt's entry too.
    assert attempts is not None and attempts.status is RunStatus.FAILED
    failed = [e.error for e in attempts.entries if e.error is not None]
    assert len(failed) == 2
    assert all(e.message == "cannot import caf\\udce9" and e.traceback for e in failed)
    # And a group's members.
    assert group is not None and group.status is RunStatus.FAILED and group.error is not None
    assert [m.message for m in group.error.members] == ["cannot import caf\\udce9"]


async def test_under_a_worker_the_surrogate_failure_executes_once(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store, clock=clock) as engine:
        await engine.submit(importing, NAME, run_id="surrogate")
        async with tether.open_worker(engine) as worker:
            with pytest.raises(tether.RunFailedError) as failed:
                await engine.wait("surrogate", timeout=30)
            await trio.sleep(10)  # several polls: it is not claimed again
        assert failed.value.error.message == "cannot import caf\\udce9"
        assert len(starts) == 1 and worker.claimed == 1


def test_the_redispatch_delay_doubles_up_to_its_cap() -> None:
    delays = [redispatch_delay(n) for n in range(1, 6)]
    assert delays == [REDISPATCH_FIRST * 2**k for k in range(5)]
    assert redispatch_delay(0) == REDISPATCH_FIRST
    assert redispatch_delay(40) == redispatch_delay(10_000) == REDISPATCH_MAX


def _outcome(record: RunRecord) -> bool:
    return record.status is RunStatus.FAILED


@pytest.mark.tether_stores("memory", "sqlite")
async def test_a_run_whose_outcome_write_fails_backs_off_and_is_dead_lettered(
    tether_store: Store, autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    # The hot loop: the outcome write fails, the release that follows
    # is stored. Each execution counts; each release waits longer.
    caplog.set_level(logging.ERROR, "tether")
    store = FaultyStore(tether_store)
    store.inject("update_run", Raise(), when=_outcome)
    released: list[RunRecord] = []

    async def note(call: Call) -> None:
        released.append(call.args[0])

    store.inject("update_run", Do(note), when=lambda r: r.status is RunStatus.WAITING, after=True)
    async with tether.open_engine(store, clock=clock) as engine:
        await engine.submit(importing, "x.csv", run_id="flaky")
        async with tether.open_worker(engine, max_dispatches=4, poll_interval=0.5):
            with pytest.raises(tether.RunFailedError) as dead:
                await engine.wait("flaky", timeout=600)
        assert dead.value.error.type == DEAD_LETTER_ERROR
        info = await engine.get_run("flaky")
    assert info is not None and info.status is RunStatus.DEAD_LETTER
    assert len(starts) == 4, "executed once per dispatch"
    assert [r.dispatches for r in released] == [1, 2, 3, 4]
    for n, record in enumerate(released):
        assert record.owner is None and record.wake_at is not None
        # Released to wait its backoff, from after its execution began ...
        assert record.wake_at - starts[n] >= timedelta(seconds=redispatch_delay(n + 1))
        # ... and not executed again before it ended.
        if n + 1 < len(starts):
            assert starts[n + 1] >= record.wake_at


@pytest.mark.slow
@pytest.mark.tether_stores("memory", "sqlite")
async def test_with_the_store_down_for_outcomes_a_run_executes_at_most_max_dispatches_times(
    tether_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    # Every status write fails, outcomes and releases alike: each lease
    # expires (on the store's clock, in real time), and each expiry is a
    # redispatch that counts.
    caplog.set_level(logging.ERROR, "tether")
    store = FaultyStore(tether_store)
    store.inject("update_run", Raise())
    async with tether.open_engine(store, clock=clock, lease_ttl=0.5) as engine:
        await engine.submit(importing, "x.csv", run_id="down")
        async with tether.open_worker(engine, max_dispatches=3, poll_interval=0.05) as worker:
            await apoll(lambda: worker.claimed == 3 and not worker.running, "three executions")
            store.clear()  # the store is back
            with pytest.raises(tether.RunFailedError) as dead:
                await engine.wait("down", timeout=PATIENCE)
        assert dead.value.error.type == DEAD_LETTER_ERROR
        info = await engine.get_run("down")
    assert info is not None and info.status is RunStatus.DEAD_LETTER and info.dispatches == 3
    assert len(starts) == 3 and worker.claimed == 3


async def test_engine_run_whose_outcome_write_fails_leaves_the_run_to_back_off(
    tether_store: Store,
) -> None:
    store = FaultyStore(tether_store)
    store.inject("update_run", Raise(), when=_outcome, times=1)
    async with tether.open_engine(store) as engine:
        with pytest.raises(ValueError) as raised:
            await engine.run(importing, "x.csv", run_id="once")
        assert any("as failed also failed" in note for note in raised.value.__notes__)
    # (closing the engine wrote the release)
    async with tether.open_engine(store) as engine:
        info = await engine.get_run("once")
        assert info is not None and info.status is RunStatus.WAITING
        assert info.wake_at is not None and not info.executing
        assert info.dispatches == 1 and backing_off(info)  # shown as a backoff, and counted
        with pytest.raises(ValueError):  # by hand it executes at once, and is stored
            await engine.resume("once")
        info = await engine.get_run("once")
    assert info is not None and info.status is RunStatus.FAILED and len(starts) == 2
