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
import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
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
    Unsupported,
    main,
    package_version,
)
from dbos import DBOS, SetWorkflowID

from engines._common import (
    Runner,
    SiblingCase,
    SiblingFailure,
    Tally,
    asyncio_scenario,
    best_run,
    resume_after_failure,
)

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


S = Tally()


@DBOS.step(name="noop")
async def noop(i: int) -> int:
    S.ran += 1
    return i + 1


@DBOS.workflow(name="peers.sequential")
async def sequential(n: int) -> int:
    total = 0
    for _ in range(n):
        total = await noop(total)
    S.end_of_run()  # the first run of scenario 5 fails here
    return total


@DBOS.workflow(name="peers.fanout")
async def fanout(n: int) -> int:
    tasks = [asyncio.create_task(noop(i)) for i in range(n)]
    await asyncio.gather(*tasks)
    return n


@DBOS.step(name="sibling_a")
async def sibling_a() -> int:
    S.sibling.a()
    return 1


@DBOS.step(name="sibling_b")
async def sibling_b(wait: float) -> int:
    await S.sibling.b(wait)  # fails once A's save is in flight
    return 2


@DBOS.workflow(name="peers.sibling")
async def sibling(wait: float) -> int:
    a = asyncio.create_task(sibling_a())
    b = asyncio.create_task(sibling_b(wait))
    results = await asyncio.gather(a, b)
    return sum(results)


@DBOS.step(name="park")
async def park(i: int) -> int:
    await S.parking.park()
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
        self._lock = threading.Lock()

    def enter(self) -> None:
        with self._lock:
            self.in_flight += 1

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


def _hang_noop(hang: Hang, step: str) -> None:
    if step == "noop":
        hang.wait_sync()


@asyncio_scenario
async def scenario_cancel(cfg: CancelConfig) -> CancelResult:
    rec = CancelRecorder(cfg)
    for i, hang in rec.trials():
        async with launched(partial(_hang_noop, hang), listener_poll=LISTENER_POLL) as saves:
            await rec.asyncio_trial(partial(_named, f"cancel-{i}", fanout, cfg.width), hang)
            await saves.drained(cfg.hang_limit)
    return rec.finish(
        "SQLite system database; the hang is in SystemDatabase.record_operation_result, "
        "run in DBOS's worker threads; a fresh DBOS instance and database per trial "
        f"(its notification listener polling every {LISTENER_POLL:g} s, so that "
        "DBOS.destroy between trials takes that long, not 1 s)",
        rec.late_note("step", "DBOS"),
    )


# -- 2. sibling -----------------------------------------------------------------------------


@asyncio_scenario
async def scenario_sibling(cfg: SiblingConfig) -> SiblingResult:
    S.sibling = case = SiblingCase(cfg)
    loop = asyncio.get_running_loop()

    def gate(step: str) -> None:
        if step == "sibling_a":
            case.slow_save_in_thread(loop)  # only the failed run's save of A is slow

    async with launched(gate, queue=True):
        try:
            await _named("sibling", sibling, case.patience)
        except SiblingFailure:
            case.first_run_failed()
        steps = await DBOS.list_workflow_steps_async("sibling")
        landed_first = any(s["function_name"] == "sibling_a" for s in steps)
        b_step = next(s["function_id"] for s in steps if s["function_name"] == "sibling_b")
        case.fixed = True
        completed = await _fork("sibling", b_step) == 3
    return case.result(
        completed, f"re-run as a fork at B's step (step {b_step}); {case.landed(landed_first)}"
    )


# -- 3. steps and 4. parallel ---------------------------------------------------------------


def _runner(wf: Any) -> Runner:
    """``best_run``'s ``run(n, run_id)``: ``wf(n)`` under that workflow id."""
    return lambda n, run_id: _named(run_id, wf, n)


@asyncio_scenario
async def scenario_steps(cfg: StepsConfig) -> StepsResult:
    if not cfg.durable:
        raise Unsupported("DBOS has no in-memory mode: every step is checkpointed to its database")
    async with launched():
        best = await best_run(S, cfg.n, cfg.repeats, _runner(sequential))
    return best.steps(cfg, "SQLite system database")


@asyncio_scenario
async def scenario_parallel(cfg: ParallelConfig) -> ParallelResult:
    async with launched():
        best = await best_run(S, cfg.n, cfg.repeats, _runner(fanout))
    return best.parallel(
        "SQLite system database; asyncio.create_task per step, then asyncio.gather"
    )


# -- 5. resume ------------------------------------------------------------------------------


@asyncio_scenario
async def scenario_resume(cfg: ResumeConfig) -> ResumeResult:
    async with launched(queue=True):
        # A first fork, untimed: DBOS starts the queue's worker thread on its first poll.
        await _named("warm-up", sequential, 1)
        await _fork("warm-up", 2)
        r = await resume_after_failure(
            S,
            cfg.n,
            partial(_named, "long", sequential, cfg.n),
            partial(_fork, "long", cfg.n + 1),
        )
    return r.result(
        f"SQLite system database; the failed run forked at step {cfg.n + 1} (a new id), "
        f"dispatched by a queue polling every {QUEUE_POLL * 1000:g} ms"
    )


# -- 6. memory ------------------------------------------------------------------------------


@asyncio_scenario
async def scenario_memory(cfg: MemoryConfig) -> MemoryResult:
    S.parking.expect(cfg.runs, asyncio.Event)
    async with launched():
        await _named("warm-up", sequential, 1)  # first-use caches, outside the peak
        meter = MemoryMeter()
        async with asyncio.TaskGroup() as group:
            for i in range(cfg.runs):
                group.create_task(_named(f"run-{i}", two_steps, i))
            await S.parking.measure(meter)
    return S.parking.result(
        meter, notes="SQLite system database (DBOS has no in-memory mode); one task per run"
    )


if __name__ == "__main__":
    main(sys.modules[__name__])
