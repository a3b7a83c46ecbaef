"""Retry policies: ``@tether.step(retry=tether.Retry(...))``.

- Each failed attempt is journaled with its number, its error and when the
  next attempt is due; a crash in the middle of a backoff neither resets it
  nor retries early, and no attempt is lost (Done when 2, every store).
- Jitter is drawn once and journaled; errors not in ``on`` fail at once; an
  exhausted policy fails the step, and a resume starts a new round.
- A long backoff parks the run under a worker like a timer.
- ``retries=`` stays the simple form; both together are refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
import trio
import trio.testing

import tether
from tether.stores import Entry, EntryKind, EntryStatus, RunStatus, Store
from tether.testing import FaultyStore, SimulatedCrash
from tether.testing._clock import hold_clock

from ._cli import cli
from ._wall_clock import START, ModuleClock, fresh_test
from .conftest import reopen_store

#: when each attempt of ``flaky`` started, on the engine's clock
attempts: list[datetime] = []
#: how many of its first calls fail
FAILING = {"calls": 3}
clock = ModuleClock()

# (the workflows a test defines are forgotten after it)
pytestmark = pytest.mark.usefixtures("tether_registry")


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    FAILING["calls"] = 3
    with fresh_test(clock, attempts):
        yield


BACKOFF = tether.Retry(attempts=5, initial=60, backoff=2.0, maximum=600, on=(ConnectionError,))


@tether.step(retry=BACKOFF)
async def flaky(n: int) -> int:
    attempts.append(clock().now())
    if len(attempts) <= FAILING["calls"]:
        raise ConnectionError(f"the bank is down (call {len(attempts)})")
    return n * 2


@tether.workflow(name="tests.retry.pay")
async def pay(n: int) -> int:
    return await flaky(n)


def failed_attempts(entries: tuple[Entry, ...]) -> list[Entry]:
    return [e for e in entries if e.kind is EntryKind.STEP and e.status is EntryStatus.FAILED]


def next_at(entry: Entry) -> datetime | None:
    text = json.loads(entry.value or "null")["next_at"]
    return None if text is None else datetime.fromisoformat(text)


# -- Done when 2: the backoff survives a crash ------------------------------------------------


async def test_a_backoff_survives_a_crash_no_attempt_early_and_none_lost(
    tether_raw_store_factory: Callable[[], Store], autojump_clock: trio.testing.MockClock
) -> None:
    raw = tether_raw_store_factory()
    faulty = FaultyStore(hold_clock(raw))
    with trio.CancelScope() as process:
        async with trio.open_nursery() as nursery:

            async def crash_during_the_second_backoff() -> None:
                # Attempt 1 fails at 0 and attempt 2 at 30 to 60 s (jitter); its
                # backoff (60 to 120 s) ends at 90 s at the earliest.
                await trio.sleep(89)
                faulty.crash()
                process.cancel()

            nursery.start_soon(crash_during_the_second_backoff)
            try:
                async with tether.open_engine(faulty, clock=clock(), lease_ttl=600) as engine:
                    await engine.run(pay, 21, run_id="p")
            except* SimulatedCrash:
                pass
    assert len(attempts) == 2 and trio.current_time() == 89
    again = hold_clock(reopen_store(raw))
    async with tether.open_engine(again, clock=clock(), lease_ttl=600) as engine:
        before = await engine.get_run("p")
        assert before is not None
        journaled = failed_attempts(before.entries)
        assert [e.attempt for e in journaled] == [1, 2]
        due = next_at(journaled[-1])
        assert due is not None and due > clock().now()  # still in its backoff
        assert await engine.resume("p") == 42
        info = await engine.get_run("p")
    assert info is not None
    failed = failed_attempts(info.entries)
    (done,) = [e for e in info.entries if e.status is EntryStatus.COMPLETED]
    # None lost: attempts 1, 2, 3 failed, 4 completed, each journaled once.
    assert [e.attempt for e in failed] == [1, 2, 3] and done.attempt == 4
    assert len(attempts) == 4
    # None early: each attempt started exactly when the one before said it was due.
    dues = [next_at(e) for e in failed]
    assert attempts[1:] == dues
    for n, (entry, due_at) in enumerate(zip(failed, dues, strict=True), 1):
        assert entry.error is not None and entry.error.type == "ConnectionError"
        assert f"call {n}" in entry.error.message
        assert due_at is not None
        # The jittered delay: between half of the backoff and all of it.
        base = min(600.0, 60.0 * 2 ** (n - 1))
        delay = (due_at - entry.finished_at).total_seconds()
        assert base / 2 <= delay <= base, (n, delay)
        assert entry.started_at == attempts[n - 1]


async def test_each_failed_attempt_is_journaled_with_its_due_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    FAILING["calls"] = 2
    steady = tether.step(
        retry=tether.Retry(attempts=3, initial=10, backoff=3, jitter=False), name="steady"
    )(flaky.fn)

    @tether.workflow(name="tests.retry.steady")
    async def steady_pay(n: int) -> int:
        return await steady(n)

    async with tether.open_engine(tether.MemoryStore(), clock=clock()) as engine:
        assert await engine.run(steady_pay, 5, run_id="s") == 10
        info = await engine.get_run("s")
    assert info is not None
    values = [(e.attempt, e.status, e.value) for e in info.entries]
    assert values == [
        (1, EntryStatus.FAILED, '{"next_at":"2030-01-01T00:00:10+00:00"}'),
        (2, EntryStatus.FAILED, '{"next_at":"2030-01-01T00:00:40+00:00"}'),
        (3, EntryStatus.COMPLETED, "10"),
    ]
    assert attempts == [START, START + timedelta(seconds=10), START + timedelta(seconds=40)]
    assert [e.position for e in info.entries] == [0, 0, 0]


# -- which errors, how many attempts ---------------------------------------------------------


async def test_an_error_not_in_on_fails_at_once(autojump_clock: trio.testing.MockClock) -> None:
    @tether.step(retry=tether.Retry(attempts=5, on=(ConnectionError,)))
    async def strict() -> int:
        attempts.append(clock().now())
        raise ValueError("bad input")

    @tether.workflow(name="tests.retry.strict")
    async def strict_wf() -> int:
        return await strict()

    async with tether.open_engine(tether.MemoryStore(), clock=clock()) as engine:
        with pytest.raises(ValueError, match="bad input"):
            await engine.run(strict_wf, run_id="v")
        info = await engine.get_run("v")
    assert info is not None and info.status is RunStatus.FAILED
    (failed,) = failed_attempts(info.entries)
    assert failed.attempt == 1 and next_at(failed) is None
    assert len(attempts) == 1 and trio.current_time() == 0


class Ends:
    """A hook that records each step end's attempt number."""

    def __init__(self) -> None:
        self.attempts: list[int | None] = []

    async def on_step_end(self, event: tether.HookEvent) -> None:
        self.attempts.append(event.attempt)


async def test_an_exhausted_policy_fails_and_a_resume_starts_a_new_round(
    autojump_clock: trio.testing.MockClock,
) -> None:
    FAILING["calls"] = 4
    short = tether.step(
        retry=tether.Retry(attempts=3, initial=1, jitter=False, on=(ConnectionError,)),
        name="short",
    )(flaky.fn)

    @tether.workflow(name="tests.retry.short")
    async def short_wf(n: int) -> int:
        return await short(n)

    ends = Ends()
    async with tether.open_engine(tether.MemoryStore(), clock=clock(), hooks=[ends]) as engine:
        with pytest.raises(ConnectionError, match="call 3"):
            await engine.run(short_wf, 1, run_id="x")
        info = await engine.get_run("x")
        assert info is not None and info.status is RunStatus.FAILED
        assert [(e.attempt, next_at(e) is None) for e in failed_attempts(info.entries)] == [
            (1, False),
            (2, False),
            (3, True),  # gave up
        ]
        assert await engine.resume("x") == 2  # a new round: attempt 1 fails once more, 2 works
        info = await engine.get_run("x")
    assert info is not None
    assert [(e.attempt, e.status.value) for e in info.entries] == [
        (1, "failed"),
        (2, "failed"),
        (3, "failed"),
        (1, "failed"),
        (2, "completed"),
    ]
    assert ends.attempts == [3, 2]


async def test_cancellation_is_never_retried_and_cancelling_a_backoff_is_prompt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with tether.open_engine(tether.MemoryStore(), clock=clock()) as engine:
        with trio.move_on_after(30) as scope:
            await engine.run(pay, 1, run_id="c")
        assert scope.cancelled_caught and trio.current_time() == 30
        info = await engine.get_run("c")
        assert info is not None and info.status is RunStatus.RUNNING
        assert [e.attempt for e in failed_attempts(info.entries)] == [1]
        assert await engine.resume("c") == 2
    assert len(attempts) == 4


# -- parking on a long backoff ---------------------------------------------------------------


async def test_a_long_backoff_parks_the_run_under_a_worker(
    tether_store: Store, autojump_clock: trio.testing.MockClock
) -> None:
    FAILING["calls"] = 1
    patient = tether.step(
        retry=tether.Retry(attempts=2, initial=3600, jitter=False), name="patient"
    )(flaky.fn)

    @tether.workflow(name="tests.retry.patient")
    async def patient_wf(n: int) -> int:
        return await patient(n)

    due = START + timedelta(hours=1)
    async with (
        tether.open_engine(tether_store, clock=clock(), lease_ttl=60) as engine,
        tether.open_worker(engine, poll_interval=600) as worker,
    ):
        await engine.submit(patient_wf, 4, run_id="w")
        await trio.sleep(60)
        record = await tether_store.get_run("w")
        assert record is not None
        assert (record.status, record.owner, record.wake_at) == (RunStatus.WAITING, None, due)
        assert worker.running == set()
        assert await engine.wait("w") == 8
    assert attempts == [START, due]


# -- the policy itself ------------------------------------------------------------------


def test_retries_and_retry_together_are_refused() -> None:
    with pytest.raises(tether.UsageError, match="not both"):

        @tether.step(retries=2, retry=tether.Retry())
        async def both() -> None: ...

    with pytest.raises(tether.UsageError, match=r"retry= takes a tether\.Retry"):
        tether.step(retry=cast(Any, 3))(flaky.fn)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"attempts": 0}, "attempts"),
        ({"attempts": 1.5}, "attempts"),
        ({"attempts": True}, "attempts"),
        ({"initial": -1}, "initial"),
        ({"initial": math.nan}, "initial"),
        ({"backoff": 0.5}, "backoff"),
        ({"maximum": math.inf}, "maximum"),
        ({"initial": 10, "maximum": 5}, "below initial"),
        ({"jitter": 1}, "jitter"),
        ({"on": ()}, "on="),
        ({"on": (KeyboardInterrupt,)}, "on="),
        ({"on": trio.Cancelled}, "on="),
        ({"on": "ValueError"}, "on="),
    ],
)
def test_bad_policies_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(tether.UsageError, match=message):
        tether.Retry(**options)


def test_the_delay_backs_off_to_the_maximum_with_jitter_drawn_once() -> None:
    policy = tether.Retry(attempts=10, initial=1, backoff=3, maximum=20, jitter=False)
    assert [policy.delay(n) for n in range(1, 6)] == [1, 3, 9, 20, 20]
    assert policy.delay(10**6) == 20  # no overflow
    assert tether.Retry(initial=1, jitter=False).delay(10**6) == 10**9  # no maximum: capped
    draws: list[float] = []

    def draw() -> float:
        draws.append(0.5)
        return 0.5

    jittered = tether.Retry(initial=8, jitter=True)
    assert jittered.delay(1, draw) == 6.0 and draws == [0.5]
    assert tether.Retry(on=ValueError).on == (ValueError,)
    assert tether.Retry(on=[ValueError, KeyError]).on == (ValueError, KeyError)
    assert policy.retries(ValueError(), 9) and not policy.retries(ValueError(), 10)


async def test_the_simple_form_retries_at_once_and_journals_no_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    FAILING["calls"] = 2
    simple = tether.step(retries=2, name="simple")(flaky.fn)

    @tether.workflow(name="tests.retry.simple")
    async def simple_wf(n: int) -> int:
        return await simple(n)

    async with tether.open_engine(tether.MemoryStore(), clock=clock()) as engine:
        assert await engine.run(simple_wf, 3, run_id="q") == 6
        info = await engine.get_run("q")
    assert info is not None
    assert [(e.attempt, e.status) for e in info.entries] == [(3, EntryStatus.COMPLETED)]
    assert attempts == [START] * 3


# -- runs show -----------------------------------------------------------------------------


def test_runs_show_lists_failed_attempts_with_their_errors(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    FAILING["calls"] = 5

    class Stopped:
        def now(self) -> datetime:
            return START

    async def fail() -> None:
        store = hold_clock(tether.SQLiteStore(path))  # virtual time waits for its thread
        async with tether.open_engine(store, clock=Stopped()) as engine:
            with pytest.raises(ConnectionError):
                await engine.run(pay, 1, run_id="f")

    clock.reset()
    trio.run(fail, clock=trio.testing.MockClock(autojump_threshold=0))
    r = cli("runs", "show", "f", "--store", f"sqlite:{path}")
    assert r.status == 0, r.err
    assert "failed attempts (5):" in r.out
    lines = [line for line in r.out.splitlines() if line.startswith("  - flaky#0 attempt")]
    assert len(lines) == 5
    assert lines[0].startswith(
        "  - flaky#0 attempt 1: ConnectionError: the bank is down (call 1) (step flaky#0); "
        "next attempt at 2030-01-01 00:0"
    )
    assert lines[-1].endswith("(call 5) (step flaky#0); gave up")
