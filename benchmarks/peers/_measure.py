"""How drivers measure: the hung save, the deadline trials and their leftovers, best-of timing.

Memory is measured with ``_memory``; ``_protocol`` re-exports both for the drivers.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import random
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

from _scenarios import CAPPED_TRIALS, HANG_LIMIT, CancelConfig, CancelResult


class HangExpired(Exception):
    """A :class:`Hang` was not released within its limit: the benchmark gave up on it."""


# -- the hang: a checkpoint save that blocks until the trial ends --------------------------


class Hang:
    """A save that blocks until :meth:`release` (or *limit* seconds: :class:`HangExpired`).

    Call one of the ``wait_*`` methods where the engine's checkpoint save would
    persist, *before* the real write. ``entered`` counts saves that reached the
    hang; ``returned`` counts saves that went on to the real write after being
    released (so, checked before :meth:`release`, a real hang has
    ``entered >= 1`` and ``returned == 0``: :meth:`held`); ``first_entered`` is
    when the first save reached it, on ``time.monotonic()`` (asyncio's loop
    clock), or None. Safe from any thread and any event loop; a cancelled wait
    raises the loop's cancellation and counts as neither returned nor expired.
    """

    def __init__(self, limit: float = HANG_LIMIT) -> None:
        self.limit = limit
        self.entered = 0
        self.first_entered: float | None = None
        self.returned = 0
        self.expired = 0
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._wakers: list[Callable[[], None]] = []

    def held(self) -> bool:
        """Saves entered the hang and none has got past it."""
        return self.entered >= 1 and self.returned == 0

    def _enter(self, waker: Callable[[], None] | None) -> None:
        with self._lock:
            self.entered += 1
            if self.first_entered is None:
                self.first_entered = time.monotonic()
            if waker is not None:
                self._wakers.append(waker)

    def _leave(self, released: bool) -> None:
        with self._lock:
            if released:
                self.returned += 1
            else:
                self.expired += 1
        if not released:
            raise HangExpired(f"hung save not released within {self.limit} s")

    def note_entered(self) -> None:
        """Count a save that waits somewhere else (the floors' ``sleep_forever``)."""
        self._enter(None)

    def wait_sync(self) -> None:
        """Block this thread (a save run in a worker thread, or inline in the loop)."""
        self._enter(None)
        self._leave(self._released.wait(self.limit))

    async def wait_asyncio(self) -> None:
        """Wait in the running asyncio loop; cancellable."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            def set_done() -> None:
                if not future.done():
                    future.set_result(None)

            # RuntimeError: the loop is closed, so nobody is waiting any more
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(set_done)

        self._enter(wake)
        if self._released.is_set():
            wake()
        try:
            await asyncio.wait_for(asyncio.shield(future), self.limit)
        except TimeoutError:
            self._leave(False)
        else:
            self._leave(True)

    async def wait_trio(self) -> None:
        """Wait in the running trio loop; cancellable."""
        import trio

        event = trio.Event()
        token = trio.lowlevel.current_trio_token()

        def wake() -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(event.set)

        self._enter(wake)
        if self._released.is_set():
            event.set()
        with trio.move_on_after(self.limit):
            await event.wait()
            self._leave(True)
            return
        self._leave(False)

    def release(self) -> None:
        """Let every waiting save (and every later one) through."""
        self._released.set()
        with self._lock:
            wakers, self._wakers = self._wakers, []
        for wake in wakers:
            wake()


# -- the deadline trial ----------------------------------------------------------------------


@dataclass
class Trial:
    overshoot: float  #: seconds from the deadline until the call returned to the caller
    outcome: str  #: "cancelled", "returned", or "raised <ExceptionType>"
    deadline: float  #: the deadline on time.monotonic() (the clock of Hang.first_entered)


class ReturnedEarly(RuntimeError):
    """The call finished before the deadline: the saves did not hang; a driver bug."""


def _check(at: float, t1: float, outcome: str) -> Trial:
    if t1 < at:
        raise ReturnedEarly(f"the call ended ({outcome}) {at - t1:.3f} s before the deadline")
    # time.monotonic() is asyncio's loop clock, not trio's: now, less the overshoot
    return Trial(overshoot=t1 - at, outcome=outcome, deadline=time.monotonic() - (t1 - at))


async def asyncio_deadline_trial(
    call: Callable[[], Awaitable[object]], cfg: CancelConfig, rng: random.Random
) -> Trial:
    """Run ``await call()`` under ``asyncio.timeout_at(start + deadline + jitter)``.

    Any exception the call raises after the deadline is an outcome, not a
    failure (an engine may turn the cancellation into its own error).
    """
    loop = asyncio.get_running_loop()
    gc.collect()
    at = loop.time() + cfg.deadline + rng.random() * cfg.jitter
    outcome = "returned"
    try:
        async with asyncio.timeout_at(at) as scope:
            await call()
    except TimeoutError:
        outcome = "cancelled" if scope.expired() else "raised TimeoutError"
    except Exception as exc:
        outcome = f"raised {type(exc).__name__}"
    return _check(at, loop.time(), outcome)


async def trio_deadline_trial(
    call: Callable[[], Awaitable[object]], cfg: CancelConfig, rng: random.Random
) -> Trial:
    """Run ``await call()`` under ``trio.move_on_at(start + deadline + jitter)``."""
    import trio

    gc.collect()
    at = trio.current_time() + cfg.deadline + rng.random() * cfg.jitter
    outcome = "returned"
    try:
        with trio.move_on_at(at) as scope:
            await call()
        if scope.cancelled_caught:
            outcome = "cancelled"
    except Exception as exc:
        outcome = f"raised {type(exc).__name__}"
    return _check(at, trio.current_time(), outcome)


def asyncio_leftover_tasks() -> int:
    """Tasks of the running loop other than the current one."""
    return len(asyncio.all_tasks()) - 1


def trio_task_count() -> int:
    """Tasks alive in the whole trio run (the root task's tree); compare before and after."""
    import trio

    def count(task: trio.lowlevel.Task) -> int:
        return 1 + sum(count(t) for n in task.child_nurseries for t in n.child_tasks)

    root = trio.lowlevel.current_root_task()
    return 0 if root is None else count(root)


class ThreadCount:
    """Threads alive now, to count the ones a trial leaves behind.

    A thread counts when it was started after this count was taken and is
    still alive: threads that end meanwhile (another test's, a pool's) do not
    make the count negative. An idle thread of trio's thread cache (named
    ``Trio thread N`` between jobs) is parked for reuse, not left running.
    """

    def __init__(self) -> None:
        self.before = set(threading.enumerate())

    def leftover(self) -> int:
        return sum(
            1
            for t in threading.enumerate()
            if t not in self.before and t.is_alive() and not _idle_trio_worker(t)
        )


def _idle_trio_worker(thread: threading.Thread) -> bool:
    return thread.name.startswith("Trio thread ")


class CancelRecorder:
    """Runs and collects the trials of one cancel scenario (dropping the warm-up ones).

    A driver loops over :meth:`trials`, makes the trial's fresh state with its
    save gated by the trial's :class:`Hang`, and hands the call to
    :meth:`asyncio_trial` or :meth:`trio_trial`, which run it under the
    deadline, count what it left running, record it and release the hang; the
    driver then lets its engine wind down. ``late`` counts the recorded trials
    whose deadline passed before any save had reached the hang.
    """

    def __init__(self, cfg: CancelConfig) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.seen = 0
        self.late = 0
        self.started = time.perf_counter()
        self.hang = Hang(cfg.hang_limit)  #: the current trial's (for a hook made once)
        self.result = CancelResult(
            samples=[], hung_saves_ok=True, leftover_tasks=[], leftover_threads=[]
        )

    def trials(self) -> Iterator[tuple[int, Hang]]:
        """Each trial's index and fresh :class:`Hang`, warm-up included, until :meth:`done`."""
        for i in range(self.cfg.warmup + self.cfg.trials):
            self.hang = Hang(self.cfg.hang_limit)
            yield i, self.hang
            if self.done():
                return

    async def asyncio_trial(
        self,
        call: Callable[[], Awaitable[object]],
        hang: Hang,
        before_release: Callable[[], object] | None = None,
    ) -> Trial:
        """:func:`asyncio_deadline_trial`, its leftovers recorded, then ``hang.release()``.

        *before_release* is called in between, to note what the engine's saves
        did while the hang held them.
        """
        threads = ThreadCount()
        trial = await asyncio_deadline_trial(call, self.cfg, self.rng)
        self.add(trial, hang, tasks=asyncio_leftover_tasks(), threads=threads.leftover())
        if before_release is not None:
            before_release()
        hang.release()
        return trial

    async def trio_trial(self, call: Callable[[], Awaitable[object]], hang: Hang) -> Trial:
        """:func:`trio_deadline_trial`, its leftovers recorded, then ``hang.release()``."""
        tasks, threads = trio_task_count(), ThreadCount()
        trial = await trio_deadline_trial(call, self.cfg, self.rng)
        self.add(trial, hang, tasks=trio_task_count() - tasks, threads=threads.leftover())
        hang.release()
        return trial

    def add(self, trial: Trial, hang: Hang, *, tasks: int, threads: int) -> None:
        """Record one trial; call before ``hang.release()``."""
        self.seen += 1
        r = self.result
        if hang.expired:
            r.capped += 1
        if self.seen <= self.cfg.warmup:
            return
        if hang.first_entered is None or hang.first_entered > trial.deadline:
            self.late += 1
        r.samples.append(trial.overshoot)
        r.outcomes.append(trial.outcome)
        r.hung_saves_ok = r.hung_saves_ok and hang.held()
        r.saves_entered.append(hang.entered)
        r.leftover_tasks.append(tasks)
        r.leftover_threads.append(threads)

    def over_budget(self) -> bool:
        return time.perf_counter() - self.started > self.cfg.budget

    def done(self) -> bool:
        """Enough trials, the engine waited for the hung save CAPPED_TRIALS times, or the
        width's time budget is spent."""
        return (
            self.seen >= self.cfg.warmup + self.cfg.trials
            or self.result.capped >= CAPPED_TRIALS
            or self.over_budget()
        )

    def late_note(self, step: str, engine: str) -> str:
        """The notes' sentence on the ``late`` trials ("" if none): *engine* was still
        starting its steps (called *step*) when the deadline passed."""
        if not self.late:
            return ""
        return (
            f"in {self.late} of {len(self.result.samples)} trials the deadline passed before "
            f"any {step} had reached its save: {engine} was still starting the {step}s"
        )

    def finish(self, *notes: str) -> CancelResult:
        """The result, its notes saying why it stopped early (if it did), then *notes*."""
        r = self.result
        if r.capped >= CAPPED_TRIALS and len(r.samples) < self.cfg.trials:
            r.notes = (
                f"stopped after {self.seen} trials: {r.capped} waited for the hung save until "
                f"the benchmark's {self.cfg.hang_limit:g} s limit"
            )
        elif len(r.samples) < self.cfg.trials:
            r.notes = (
                f"stopped after {len(r.samples)} of {self.cfg.trials} trials: the "
                f"{self.cfg.budget:g} s budget of this width was spent"
            )
        r.notes = "; ".join(x for x in (r.notes, *notes) if x)
        return r


async def asyncio_settle(limit: float) -> None:
    """Let the tasks a trial left behind finish (bounded), so the next trial starts clean."""
    others = asyncio.all_tasks() - {asyncio.current_task()}
    if others:
        await asyncio.wait(others, timeout=limit)


# -- steps ------------------------------------------------------------------------------------


def best_of(repeats: int, run_once: Callable[[], float]) -> float:
    """The smallest of *repeats* calls of *run_once* (each returns seconds), gc collected first."""
    best = math.inf
    for _ in range(repeats):
        gc.collect()
        best = min(best, run_once())
    return best
