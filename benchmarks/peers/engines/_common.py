"""What the engine drivers share, parameterised by what differs: how each writes its workflow.

* :class:`Tally`: what a driver's step bodies count and wait on (the no-op
  steps run, the run that fails at its end, the sibling case, the parked runs).
* :class:`SiblingCase`: scenario 2's A and B and its checks.
* :func:`best_run`: scenarios 3 and 4 on one engine or store (a warm-up run,
  then the best of the repeats).
* :func:`resume_after_failure`: scenario 5's failed run and timed resume.
* :func:`all_hung_note`: how long an asyncio engine takes, with no deadline,
  until every step waits in its hung save (scenario 1's notes).
* :func:`asyncio_scenario`, :func:`trio_scenario`: a driver's async scenario
  as the synchronous function the contract wants.

A driver keeps what is its engine's own: its workflows and steps, its store,
where its save was made to hang, and how it resumes a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import math
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from _protocol import (
    CancelConfig,
    Hang,
    ParallelResult,
    Parking,
    ResumeResult,
    SiblingConfig,
    SiblingResult,
    StepsConfig,
    StepsResult,
)

WARM_UP_STEPS = 200  #: best_run's warm-up run: this many steps at most
TIME_TO_HANG_LIMIT = 60.0  #: all_hung_note: seconds at most (a driver bug, not a figure)

Gate = Callable[[], Awaitable[None]]  #: awaited by a gated save before its real write
Call = Callable[[], Awaitable[object]]
Runner = Callable[[int, str], Awaitable[object]]  #: best_run's run(n, run_id)
C = TypeVar("C")
R = TypeVar("R")


def asyncio_scenario(main: Callable[[C], Coroutine[Any, Any, R]]) -> Callable[[C], R]:
    """The scenario function that runs ``main(cfg)`` under ``asyncio.run``."""

    @functools.wraps(main)
    def scenario(cfg: C) -> R:
        return asyncio.run(main(cfg))

    return scenario


def trio_scenario(main: Callable[[C], Awaitable[R]]) -> Callable[[C], R]:
    """The scenario function that runs ``main(cfg)`` under ``trio.run``."""
    import trio  # the asyncio drivers need not import it

    @functools.wraps(main)
    def scenario(cfg: C) -> R:
        return trio.run(main, cfg)

    return scenario


class SiblingFailure(RuntimeError):
    """B's planned failure (scenario 2)."""


class SiblingCase:
    """Scenario 2: A completes at once, B fails while A's save is in flight, then B is fixed.

    A's step body calls :meth:`a`. B's calls :meth:`b` (asyncio: B waits until
    A's save has begun, then fails), or, written otherwise, :meth:`b_starts`
    and :meth:`fail`. The gated save of A calls :meth:`slow_save` (or
    :meth:`slow_save_in_thread`). The driver calls :meth:`first_run_failed`
    when the first run raised :class:`SiblingFailure`, sets :attr:`fixed`,
    resumes the run and returns :meth:`result`.
    """

    def __init__(self, cfg: SiblingConfig | None = None) -> None:
        self.cfg = cfg or SiblingConfig()
        self.a_ran = 0
        self.b_ran = 0
        self.fixed = False  #: B succeeds from now on
        self.b_failed = False  #: B raised in the first run, which it ran once, and that run failed
        self.a_save_began = asyncio.Event()  # binds no loop until awaited
        self._b_raised = False
        self._slowed = False
        self._lock = threading.Lock()

    @property
    def patience(self) -> float:
        """Seconds B waits for A's save to begin: far longer than it should take."""
        return max(1.0, 10 * self.cfg.slow_save)

    def a(self) -> None:
        self.a_ran += 1

    def b_starts(self) -> bool:
        """Count a run of B's body; whether this one is to fail."""
        self.b_ran += 1
        return not self.fixed

    def fail(self) -> NoReturn:
        self._b_raised = True
        raise SiblingFailure("B fails while A's save is in flight")

    async def b(self, wait: float) -> None:
        """B's body under asyncio: fail once A's save has begun (at most *wait* seconds)."""
        if self.b_starts():
            await asyncio.wait_for(self.a_save_began.wait(), wait)
            self.fail()

    async def slow_save(self, *, once: bool = False) -> None:
        """A gated save: signal that A's save began, then take ``slow_save`` seconds
        (cancellable). With *once*, only the first save does."""
        if once and self._slowed:
            return
        self._slowed = True
        self.a_save_began.set()
        await asyncio.sleep(self.cfg.slow_save)

    def slow_save_in_thread(self, loop: asyncio.AbstractEventLoop) -> None:
        """A gated save run in a worker thread of *loop*: the first one signals, then
        blocks ``slow_save`` seconds; later ones go straight on."""
        with self._lock:
            first, self._slowed = not self._slowed, True
        if first:
            loop.call_soon_threadsafe(self.a_save_began.set)
            time.sleep(self.cfg.slow_save)

    def first_run_failed(self) -> None:
        """The first run raised :class:`SiblingFailure`: check that B really failed."""
        self.b_failed = self._b_raised and self.b_ran == 1

    @staticmethod
    def landed(landed: bool) -> str:
        """The notes' words on whether A's save had landed when the failed run returned."""
        return f"A's save had {'' if landed else 'not '}landed when the failed run returned"

    def result(self, completed: bool, notes: str = "") -> SiblingResult:
        return SiblingResult(
            a_executions=self.a_ran, b_failed=self.b_failed, completed=completed, notes=notes
        )


class Tally:
    """What a driver's step bodies count and wait on; each scenario resets what it uses."""

    def __init__(self) -> None:
        self.ran = 0  #: no-op step bodies run
        self.fail_at_end = False  #: resume: the run raises after its last step
        self.sibling = SiblingCase()  #: sibling: replaced by each run of the scenario
        self.parking = Parking()  #: memory: where the runs wait at their second step

    def end_of_run(self) -> None:
        """Where a run that is to fail at its end (scenario 5) raises."""
        if self.fail_at_end:
            raise RuntimeError("failing at the end, to be resumed")


@dataclass(frozen=True)
class Best:
    """What :func:`best_run` measured, as the scenario's result."""

    seconds: float  #: the best wall time of one run
    ran: int  #: step bodies the last run ran
    repeats: int

    def steps(self, cfg: StepsConfig, store: str) -> StepsResult:
        return StepsResult(
            us_per_step=self.seconds / cfg.n * 1e6,
            steps_ran=self.ran,
            notes=f"{store}; best of {self.repeats} runs, the run's fixed cost included",
        )

    def parallel(self, notes: str) -> ParallelResult:
        return ParallelResult(seconds=self.seconds, steps_ran=self.ran, notes=notes)


async def best_run(tally: Tally, n: int, repeats: int, run: Runner) -> Best:
    """The best wall time of *repeats* calls ``run(n, run_id)``, and the steps the last ran.

    One engine or store for all of them: first a warm-up run of at most
    :data:`WARM_UP_STEPS` steps, then each timed run under a new run id, after
    a garbage collection.
    """
    await run(min(n, WARM_UP_STEPS), "warm-up")
    best, ran = math.inf, 0
    for i in range(repeats):
        tally.ran = 0
        gc.collect()
        t0 = time.perf_counter()
        await run(n, f"run-{i}")
        best = min(best, time.perf_counter() - t0)
        ran = tally.ran
    return Best(best, ran, repeats)


@dataclass(frozen=True)
class Resumed:
    seconds: float  #: the resume, until it returned
    reexecuted: int  #: step bodies run during it
    failed_seconds: float  #: the run that failed at its end
    stored: int  #: step bodies that run ran

    def result(self, notes: str) -> ResumeResult:
        return ResumeResult(seconds=self.seconds, steps_reexecuted=self.reexecuted, notes=notes)


async def resume_after_failure(tally: Tally, n: int, fail: Call, resume: Call) -> Resumed:
    """Scenario 5: ``fail()`` runs *n* steps and raises at its end (:meth:`Tally.end_of_run`),
    then ``resume()`` (which returns the run's count of steps) is timed.

    Raises RuntimeError if the resumed run does not return *n*.
    """
    tally.fail_at_end, tally.ran = True, 0
    t0 = time.perf_counter()
    with contextlib.suppress(RuntimeError):
        await fail()
    failed_seconds, stored = time.perf_counter() - t0, tally.ran
    tally.fail_at_end, tally.ran = False, 0
    t0 = time.perf_counter()
    result = await resume()
    seconds = time.perf_counter() - t0
    if result != n:
        raise RuntimeError(f"the resumed run returned {result!r}, not {n}")
    return Resumed(seconds, tally.ran, failed_seconds, stored)


async def all_hung_note(cfg: CancelConfig, prepare: Callable[[Gate], Awaitable[Call]]) -> str:
    """How long, with no deadline, until all ``cfg.width`` steps wait in their saves.

    ``await prepare(gate)`` builds the fan-out of ``cfg.width`` steps with its
    saves gated by *gate* (on an in-memory store) and returns the call that
    runs it; the time is from that call until the last step's save waits.
    Under asyncio; the run is cancelled afterwards. The notes' sentence.
    """
    hang = Hang(limit=TIME_TO_HANG_LIMIT)
    entered = 0
    all_in = asyncio.Event()

    async def gate() -> None:
        nonlocal entered
        entered += 1
        if entered == cfg.width:
            all_in.set()
        await hang.wait_asyncio()

    call = await prepare(gate)
    t0 = time.perf_counter()
    task = asyncio.ensure_future(call())
    async with asyncio.timeout(TIME_TO_HANG_LIMIT):
        await all_in.wait()
    ready = time.perf_counter() - t0
    task.cancel()
    hang.release()  # before awaiting: a save on the run's way out would wait in it
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return (
        f"without a deadline, all {cfg.width} steps were waiting in their saves "
        f"{ready:.3f} s after the run started (the deadline is {cfg.deadline:g} s)"
    )
