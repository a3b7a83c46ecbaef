"""DBOS (``dbos``), its asyncio API, on its SQLite system database.

Every workflow is written the way DBOS's docs write one: ``@DBOS.workflow()``
async functions calling ``@DBOS.step()`` async functions, the workflow called
with ``await`` under ``asyncio.run`` (so its body runs in the caller's task),
``SetWorkflowID`` naming a run. Parallel steps are DBOS's documented pattern
for an async workflow: one ``asyncio.create_task`` per step, in a fixed order
(DBOS numbers a step when its task starts), then ``asyncio.gather``. DBOS is
configured with ``system_database_url="sqlite:///<fresh file>"``, its embedded
store, and otherwise its defaults; there is no in-memory mode, so the
in-memory figures are ``Unsupported`` and *memory* runs on SQLite.

How DBOS checkpoints a step: ``invoke_step`` (``dbos/_core.py``) runs the
step's body, then, for an async step, its ``record_step_result`` in a worker
thread (``asyncio.to_thread``, on DBOS's executor) which calls
``SystemDatabase.record_operation_result(step_output)``: one transaction that
inserts the step's output into the ``operation_outputs`` table. That row is
the checkpoint a replay reads (``check_operation_execution``) to skip the
step; nothing else saves a completed step.

*cancel*: what hangs is that ``record_operation_result`` call, for the steps
of the benchmark (``function_name == "noop"``). DBOS has no public hook into
its system database, so the driver replaces the method on the launched
instance's ``SystemDatabase`` (``DBOS(...)._sys_db``) by a wrapper that waits
in the trial's :class:`~_protocol.Hang` (``wait_sync``: it runs in DBOS's
worker thread) before the real write. Each trial is a fresh DBOS instance
on a fresh SQLite file (launched before the trial, destroyed after it), so
``leftover_threads`` counts the worker threads that trial started and that are
still alive, which are those blocked in the hung save: asyncio's cancellation
of ``await asyncio.to_thread(...)`` returns at once to the caller, but cannot
stop the thread. (For these per-trial instances the notification listener
polls every 0.1 s instead of DBOS's 1 s, a documented setting: ``DBOS.destroy``
waits for that thread, and 1 s per trial would spend the benchmark's budget.)
What the trials show with the pinned version: the deadline cancels the
caller's task, ``asyncio.gather`` cancels the step tasks, each awaiting its
``to_thread`` save, and the call returns at once; the saving threads stay
blocked. At width 1000 no step has reached its save by the deadline (DBOS is
still starting the steps, each of which first reads its checkpoint in a worker
thread), so ``hung_saves_ok`` is false there and the notes say so: that
overshoot is the cancellation of steps in progress, not of hung saves.

*sibling*: the same wrapper makes A's ``record_operation_result`` first sleep
``slow_save`` seconds (in its worker thread, before the real write); B waits
until A's save has begun, then raises. B's exception is recorded as B's step
output, the workflow ends with status ``ERROR``, and DBOS cannot run a
finished workflow id again (``resume_workflow`` leaves ``ERROR`` alone; a new
call with the same id returns the recorded error). DBOS's way to re-run a
failed workflow is a fork: ``DBOS.fork_workflow_async(id, start_step)`` starts
a new workflow (a new id) that copies the checkpoints of the steps before
``start_step`` and runs the rest; the driver forks at B's step, as listed by
``DBOS.list_workflow_steps_async``, right after the failed run returned.
``asyncio.gather`` raises B's exception without waiting for A, so the failed
run returns while A's save is still in its worker thread (the notes say
whether it had landed), and a fork made then finds no checkpoint of A and
runs A again. (With ``gather(..., return_exceptions=True)`` the workflow
would wait for A's save, but would then have to raise B's error itself.) The
fork is dispatched through a queue registered with a 10 ms polling interval
(DBOS's internal queue polls once a second) and awaited with
``get_result(polling_interval_sec=0.001)``, so DBOS's polling costs little.

*resume*: the run fails after its last step (status ``ERROR``) and is re-run
the same way, forked at step ``n + 1`` (every step's checkpoint copied): the
time is from the fork call until its result.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from _protocol import (
    CancelConfig,
    CancelRecorder,
    CancelResult,
    Hang,
    MemoryConfig,
    MemoryMeter,
    MemoryResult,
    ParallelConfig,
    ParallelResult,
    ResumeConfig,
    ResumeResult,
    SiblingConfig,
    SiblingResult,
    StepsConfig,
    StepsResult,
    ThreadCount,
    Unsupported,
    asyncio_deadline_trial,
    asyncio_leftover_tasks,
    main,
    package_version,
)
from dbos import DBOS, SetWorkflowID

ENGINE = "DBOS"
DISTRIBUTION = "dbos"

RESUME_QUEUE = "peers-resume"
QUEUE_POLL = 0.01  # seconds: the resume queue's polling interval (DBOS's default is 1 s)
RESULT_POLL = 0.001  # seconds: get_result's polling interval (DBOS's default is 1 s)
SETTLE_LIMIT = 10.0  # seconds: at most this long for a trial's threads to end after it
LISTENER_POLL = 0.1  # seconds: cancel's notification listener (1 s default; destroy waits it)


def version() -> str:
    return package_version(DISTRIBUTION)


def _quiet() -> None:
    # DBOS logs a warning for every cancelled step task (scenario 1 cancels thousands) and
    # an error for every failed workflow (scenarios 2 and 5 fail on purpose).
    logging.getLogger("dbos").setLevel(logging.CRITICAL)


class _State:
    """What the steps count and wait on (reset by each scenario)."""

    ran = 0
    a_ran = 0
    b_ran = 0
    b_fixed = False
    fail_at_end = False
    a_save_began: asyncio.Event | None = None
    parked = 0
    target = 0
    all_parked: asyncio.Event | None = None
    release: asyncio.Event | None = None


S = _State()


@DBOS.step(name="noop")
async def noop(i: int) -> int:
    S.ran += 1
    return i + 1


@DBOS.workflow(name="peers.sequential")
async def sequential(n: int) -> int:
    total = 0
    for _ in range(n):
        total = await noop(total)
    return total


@DBOS.workflow(name="peers.fanout")
async def fanout(n: int) -> int:
    tasks = [asyncio.create_task(noop(i)) for i in range(n)]
    await asyncio.gather(*tasks)
    return n


@DBOS.workflow(name="peers.sequential_then_fail")
async def sequential_then_fail(n: int) -> int:
    total = 0
    for _ in range(n):
        total = await noop(total)
    if S.fail_at_end:
        raise RuntimeError("failing at the end, to be re-run")
    return total


@DBOS.step(name="sibling_a")
async def sibling_a() -> int:
    S.a_ran += 1
    return 1


@DBOS.step(name="sibling_b")
async def sibling_b(wait: float) -> int:
    S.b_ran += 1
    if not S.b_fixed:
        assert S.a_save_began is not None
        await asyncio.wait_for(S.a_save_began.wait(), wait)  # A's save is in flight now
        raise RuntimeError("B fails")
    return 2


@DBOS.workflow(name="peers.sibling")
async def sibling(wait: float) -> int:
    a = asyncio.create_task(sibling_a())
    b = asyncio.create_task(sibling_b(wait))
    results = await asyncio.gather(a, b)
    return sum(results)


@DBOS.step(name="park")
async def park(i: int) -> int:
    S.parked += 1
    if S.parked == S.target and S.all_parked is not None:
        S.all_parked.set()
    assert S.release is not None
    await S.release.wait()
    return i


@DBOS.workflow(name="peers.two_steps")
async def two_steps(i: int) -> int:
    first = await noop(i)
    return await park(first)


# -- DBOS, launched on a fresh SQLite file, with its step checkpoint save gated ------------

Gate = Callable[[str], None]  # called with the step's name in the saving thread


class Saves:
    """The gated step saves of one DBOS instance, as seen from the saving threads."""

    def __init__(self) -> None:
        self.in_flight = 0  #: saves that entered the gate and have not finished the write
        self.first_entry: float | None = None  #: time.monotonic() (asyncio's clock) of the first
        self._lock = threading.Lock()

    def enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            if self.first_entry is None:
                self.first_entry = time.monotonic()

    def leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    async def drained(self, limit: float) -> None:
        """Wait (bounded) until every save that entered has finished its write."""
        await _until(lambda: self.in_flight == 0, limit)


async def _until(condition: Callable[[], bool], limit: float) -> None:
    # Polling: what is awaited happens in DBOS's threads, which signal nothing.
    end = time.monotonic() + limit
    while not condition() and time.monotonic() < end:  # noqa: ASYNC110
        await asyncio.sleep(0.005)


@asynccontextmanager
async def launched(
    gate: Gate | None = None, *, queue: bool = False, listener_poll: float | None = None
) -> AsyncIterator[Saves]:
    """A launched DBOS on a fresh SQLite system database; destroyed on exit.

    *gate*, when given, runs in ``record_operation_result`` before the real
    write (in the worker thread that saves the step); the :class:`Saves`
    yielded counts those saves. *queue* registers the fork's queue.
    *listener_poll* sets the notification listener's polling interval (DBOS's
    default 1 s is also how long ``DBOS.destroy`` waits for it). On exit, after
    ``DBOS.destroy``, waits (bounded) for the threads DBOS started to end, so
    that none still writes to the file when its folder is removed.
    """
    threads = threading.active_count()
    saves = Saves()
    with tempfile.TemporaryDirectory(prefix="peers-dbos-", ignore_cleanup_errors=True) as folder:
        path = os.path.join(folder, "dbos.sqlite")
        config: Any = {"name": "peers", "system_database_url": f"sqlite:///{path}"}
        if listener_poll is not None:
            config["notification_listener_polling_interval_sec"] = listener_poll
        dbos = DBOS(config=config)
        _quiet()
        DBOS.launch()
        try:
            if gate is not None:
                _gate_step_saves(dbos, gate, saves)
            if queue:
                await DBOS.register_queue_async(RESUME_QUEUE, polling_interval_sec=QUEUE_POLL)
            yield saves
        finally:
            DBOS.destroy()
            await _until(lambda: threading.active_count() <= threads, SETTLE_LIMIT)


def _gate_step_saves(dbos: DBOS, gate: Gate, saves: Saves) -> None:
    sys_db: Any = dbos._sys_db  # no public hook: see the module docstring
    save = sys_db.record_operation_result

    def record_operation_result(result: Any, *args: Any, **kwargs: Any) -> None:
        saves.enter()
        try:
            gate(result["function_name"])
            save(result, *args, **kwargs)
        finally:
            saves.leave()

    sys_db.record_operation_result = record_operation_result


async def _named(workflow_id: str, wf: Any, *args: Any) -> Any:
    with SetWorkflowID(workflow_id):
        return await wf(*args)


async def _fork(workflow_id: str, start_step: int) -> Any:
    handle = await DBOS.fork_workflow_async(workflow_id, start_step, queue_name=RESUME_QUEUE)
    return await handle.get_result(polling_interval_sec=RESULT_POLL)


# -- 1. cancel ------------------------------------------------------------------------------


async def _cancel(cfg: CancelConfig) -> CancelResult:
    rec = CancelRecorder(cfg)
    hang = Hang(cfg.hang_limit)

    def gate(step: str) -> None:
        if step == "noop":
            hang.wait_sync()

    late = 0  # trials whose deadline passed before any step's save had begun
    for i in rec.trials():
        hang = Hang(cfg.hang_limit)
        async with launched(gate, listener_poll=LISTENER_POLL) as saves:
            threads = ThreadCount()

            async def call(i: int = i) -> None:
                with SetWorkflowID(f"cancel-{i}"):
                    await fanout(cfg.width)

            trial = await asyncio_deadline_trial(call, cfg, rec.rng)
            deadline = time.monotonic() - trial.overshoot  # asyncio's clock is time.monotonic
            rec.add(trial, hang, tasks=asyncio_leftover_tasks(), threads=threads.leftover())
            if rec.seen > cfg.warmup and (saves.first_entry or math.inf) > deadline:
                late += 1
            hang.release()
            await saves.drained(cfg.hang_limit)
        if rec.done():
            break
    notes = [
        "SQLite system database; the hang is in SystemDatabase.record_operation_result, "
        "run in DBOS's worker threads; a fresh DBOS instance and database per trial "
        f"(its notification listener polling every {LISTENER_POLL:g} s, so that "
        "DBOS.destroy between trials takes that long, not 1 s)"
    ]
    if late:
        notes.append(
            f"in {late} of {len(rec.result.samples)} trials the deadline passed before any "
            "step had reached its save: DBOS was still starting the steps"
        )
    return rec.finish("; ".join(notes))


def scenario_cancel(cfg: CancelConfig) -> CancelResult:
    return asyncio.run(_cancel(cfg))


# -- 2. sibling -----------------------------------------------------------------------------


async def _sibling(cfg: SiblingConfig) -> SiblingResult:
    S.a_ran, S.b_ran, S.b_fixed = 0, 0, False
    S.a_save_began = began = asyncio.Event()
    loop = asyncio.get_running_loop()
    slowed = threading.Event()  # only the failed run's save of A is slow

    def gate(step: str) -> None:
        if step == "sibling_a" and not slowed.is_set():
            slowed.set()
            loop.call_soon_threadsafe(began.set)
            time.sleep(cfg.slow_save)

    b_failed = completed = False
    async with launched(gate, queue=True):
        try:
            with SetWorkflowID("sibling"):
                await sibling(max(1.0, 10 * cfg.slow_save))
        except RuntimeError:
            b_failed = S.b_ran == 1
        steps = await DBOS.list_workflow_steps_async("sibling")
        landed_first = any(s["function_name"] == "sibling_a" for s in steps)
        b_step = next(s["function_id"] for s in steps if s["function_name"] == "sibling_b")
        S.b_fixed = True
        completed = await _fork("sibling", b_step) == 3
    notes = (
        f"re-run as a fork at B's step (step {b_step}); A's save had "
        + ("" if landed_first else "not ")
        + "landed when the failed run returned"
    )
    return SiblingResult(a_executions=S.a_ran, b_failed=b_failed, completed=completed, notes=notes)


def scenario_sibling(cfg: SiblingConfig) -> SiblingResult:
    return asyncio.run(_sibling(cfg))


# -- 3. steps and 4. parallel ---------------------------------------------------------------


async def _timed_runs(wf: Any, n: int, repeats: int) -> tuple[float, int]:
    """Best wall time of *repeats* runs of ``wf(n)`` (after a warm-up run), and steps run."""
    best, ran = float("inf"), 0
    async with launched():
        with SetWorkflowID("warm-up"):
            await wf(min(n, 200))
        for i in range(repeats):
            S.ran = 0
            t0 = time.perf_counter()
            with SetWorkflowID(f"run-{i}"):
                await wf(n)
            best = min(best, time.perf_counter() - t0)
            ran = S.ran
    return best, ran


def scenario_steps(cfg: StepsConfig) -> StepsResult:
    if not cfg.durable:
        raise Unsupported("DBOS has no in-memory mode: every step is checkpointed to its database")
    best, ran = asyncio.run(_timed_runs(sequential, cfg.n, cfg.repeats))
    return StepsResult(
        us_per_step=best / cfg.n * 1e6,
        steps_ran=ran,
        notes=f"SQLite system database; best of {cfg.repeats} runs, the run's fixed cost included",
    )


def scenario_parallel(cfg: ParallelConfig) -> ParallelResult:
    best, ran = asyncio.run(_timed_runs(fanout, cfg.n, cfg.repeats))
    return ParallelResult(
        seconds=best,
        steps_ran=ran,
        notes="SQLite system database; asyncio.create_task per step, then asyncio.gather",
    )


# -- 5. resume ------------------------------------------------------------------------------


async def _resume(cfg: ResumeConfig) -> ResumeResult:
    async with launched(queue=True):
        # A first fork, untimed: DBOS starts the queue's worker thread on its first poll.
        with SetWorkflowID("warm-up"):
            await sequential(1)
        await _fork("warm-up", 2)
        S.fail_at_end = True
        with contextlib.suppress(RuntimeError), SetWorkflowID("long"):
            await sequential_then_fail(cfg.n)
        S.fail_at_end, S.ran = False, 0
        t0 = time.perf_counter()
        result = await _fork("long", cfg.n + 1)
        seconds = time.perf_counter() - t0
    if result != cfg.n:
        raise RuntimeError(f"the re-run returned {result}, not {cfg.n}")
    return ResumeResult(
        seconds=seconds,
        steps_reexecuted=S.ran,
        notes=(
            f"SQLite system database; the failed run forked at step {cfg.n + 1} (a new id), "
            f"dispatched by a queue polling every {QUEUE_POLL * 1000:g} ms"
        ),
    )


def scenario_resume(cfg: ResumeConfig) -> ResumeResult:
    return asyncio.run(_resume(cfg))


# -- 6. memory ------------------------------------------------------------------------------


async def _memory(cfg: MemoryConfig) -> MemoryResult:
    S.parked, S.target = 0, cfg.runs
    S.all_parked, S.release = asyncio.Event(), asyncio.Event()
    async with launched():
        with SetWorkflowID("warm-up"):
            await sequential(1)  # first-use caches, outside the peak
        meter = MemoryMeter()
        async with asyncio.TaskGroup() as group:
            for i in range(cfg.runs):
                group.create_task(_named(f"run-{i}", two_steps, i))
            await S.all_parked.wait()
            peak = meter.stop()
            started = S.parked
            S.release.set()
    return MemoryResult(
        peak_bytes=peak,
        runs_started=started,
        notes="SQLite system database (DBOS has no in-memory mode); one task per run",
    )


def scenario_memory(cfg: MemoryConfig) -> MemoryResult:
    return asyncio.run(_memory(cfg))


if __name__ == "__main__":
    main(sys.modules[__name__])
