"""LangGraph (``langgraph``), its functional API under ``asyncio.run``.

Every workflow is written the way LangGraph's docs write one with the
functional API: an ``@entrypoint(checkpointer=...)`` async function calling
``@task`` async functions, run with ``ainvoke(input, config)`` where
``config = {"configurable": {"thread_id": ...}}`` names the run, with the
default durability (``"async"``). A task call returns a future; *n*
sequential steps await each call before the next, *n* parallel steps make
the *n* calls first and then await their futures (the docs' parallel
execution). Durable means ``AsyncSqliteSaver`` (``langgraph-checkpoint-sqlite``,
the asyncio form of ``SqliteSaver``) on a fresh file; in memory means
``InMemorySaver``. A failed run is resumed as the docs resume one after an
error: ``ainvoke(None, config)`` with the same ``thread_id``, which re-runs
the entrypoint and hands every task that had finished its saved result
instead of running it again.

How LangGraph checkpoints a step: when a task finishes, the Pregel loop's
``put_writes`` submits the checkpointer's ``aput_writes(config, writes,
task_id, task_path)`` as a background task (``AsyncBackgroundExecutor``).
Those *writes* are the task's result (``[("__return__", value)]``), stored
as pending writes of the current checkpoint; they are what a resume reads to
skip the task. (``aput``, the checkpoint itself, is written once per
superstep: at the start of the run and after the entrypoint returns, since
every task call is pushed inside the entrypoint's single step.)

*cancel*: what hangs is that ``aput_writes``, for a task's writes (a
``task_path`` starting with ``~__pregel_push``: a ``@task`` call, not the
run's input or the entrypoint's own end). The checkpointer is
:class:`_GatedSaver`, an ``AsyncSqliteSaver`` whose ``aput_writes`` awaits
the trial's :class:`~_protocol.Hang` (``wait_asyncio``) before the real
write. A fresh saver on a fresh SQLite file per trial; after a trial the hang
is released and the saves it left running are let finish before the saver
closes (they are counted in ``leftover_tasks`` before that). What the trials
show with the pinned version: by the deadline the entrypoint has returned and
the Pregel loop is leaving, its exit (run in a task of its own) waiting for
the pending saves (``AsyncBackgroundExecutor.__aexit__``); the deadline
cancels that wait and the call returns at once, leaving the hung saves running
as tasks nobody awaits. At width 1000 the deadline passes before the first
task has finished (LangGraph is still starting the tasks) and the call returns
only after they have all run; the notes count those trials.

*sibling*: the same wrapper makes A's ``aput_writes`` first sleep
``slow_save`` seconds (a cancellable ``asyncio.sleep``, before the real
write); B waits until A's save has begun, then raises; the notes say whether
A's save had landed when the failed run returned. (With the pinned version it
had: on B's exception the loop's exit waits for the pending saves before the
error reaches the caller, so the resume finds A's result.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
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
    asyncio_deadline_trial,
    asyncio_leftover_tasks,
    main,
    package_version,
)
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.func import entrypoint, task
from langgraph.pregel import Pregel

ENGINE = "LangGraph"
DISTRIBUTION = "langgraph"

TASK_PATH = "~__pregel_push"  # how a @task call's task_path starts

# LangGraph logs failed tasks; the sibling and resume scenarios fail on purpose.
logging.getLogger("langgraph").setLevel(logging.CRITICAL)


def version() -> str:
    return package_version(DISTRIBUTION)


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


@task
async def noop(i: int) -> int:
    S.ran += 1
    return i + 1


@task
async def sibling_a() -> int:
    S.a_ran += 1
    return 1


@task
async def sibling_b(wait: float) -> int:
    S.b_ran += 1
    if not S.b_fixed:
        assert S.a_save_began is not None
        await asyncio.wait_for(S.a_save_began.wait(), wait)  # A's save is in flight now
        raise RuntimeError("B fails")
    return 2


@task
async def park(i: int) -> int:
    S.parked += 1
    if S.parked == S.target and S.all_parked is not None:
        S.all_parked.set()
    assert S.release is not None
    await S.release.wait()
    return i


# An entrypoint binds its checkpointer when it is defined, so each is made per saver.


def sequential(saver: BaseCheckpointSaver[Any]) -> Pregel[Any, Any, Any, Any]:
    @entrypoint(checkpointer=saver)
    async def sequential_run(n: int) -> int:
        total = 0
        for _ in range(n):
            total = await noop(total)
        if S.fail_at_end:
            raise RuntimeError("failing at the end, to be resumed")
        return total

    return sequential_run


def fanout(saver: BaseCheckpointSaver[Any]) -> Pregel[Any, Any, Any, Any]:
    @entrypoint(checkpointer=saver)
    async def fanout_run(n: int) -> int:
        futures = [noop(i) for i in range(n)]
        for future in futures:
            await future
        return n

    return fanout_run


def sibling(saver: BaseCheckpointSaver[Any]) -> Pregel[Any, Any, Any, Any]:
    @entrypoint(checkpointer=saver)
    async def sibling_run(wait: float) -> int:
        a, b = sibling_a(), sibling_b(wait)
        return await a + await b

    return sibling_run


def two_steps(saver: BaseCheckpointSaver[Any]) -> Pregel[Any, Any, Any, Any]:
    @entrypoint(checkpointer=saver)
    async def two_steps_run(i: int) -> int:
        first = await noop(i)
        return await park(first)

    return two_steps_run


def thread(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


# -- the checkpointers ----------------------------------------------------------------------

Gate = Callable[[], Awaitable[None]]


class _GatedSaver(AsyncSqliteSaver):
    """``aput_writes`` of a task's result awaits *gate* before the real write."""

    gate: Gate | None = None
    landed = 0  #: task writes that reached the end of the real write

    async def aput_writes(
        self,
        config: Any,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        is_task = task_path.startswith(TASK_PATH)
        if is_task and self.gate is not None:
            await self.gate()
        await super().aput_writes(config, writes, task_id, task_path)
        if is_task:
            self.landed += 1


@contextlib.asynccontextmanager
async def sqlite_saver(gate: Gate | None = None) -> AsyncIterator[_GatedSaver]:
    """An ``AsyncSqliteSaver`` (gated when *gate* is given) on a fresh file."""
    with tempfile.TemporaryDirectory(prefix="peers-langgraph-") as folder:
        async with _GatedSaver.from_conn_string(os.path.join(folder, "lg.db")) as saver:
            assert isinstance(saver, _GatedSaver)
            saver.gate = gate
            await saver.setup()
            yield saver


@contextlib.asynccontextmanager
async def saver_for(durable: bool) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    if durable:
        async with sqlite_saver() as saver:
            yield saver
    else:
        yield InMemorySaver()


async def _settle(limit: float) -> None:
    """Let the tasks a trial left behind finish (bounded), so the next trial starts clean."""
    others = asyncio.all_tasks() - {asyncio.current_task()}
    if others:
        await asyncio.wait(others, timeout=limit)


# -- 1. cancel ------------------------------------------------------------------------------


async def _cancel(cfg: CancelConfig) -> CancelResult:
    rec = CancelRecorder(cfg)
    hang = Hang(cfg.hang_limit)
    loop = asyncio.get_running_loop()
    first_entry = math.inf

    async def gate() -> None:
        nonlocal first_entry
        first_entry = min(first_entry, loop.time())
        await hang.wait_asyncio()

    late = 0  # trials whose deadline passed before any task's save had begun
    for i in rec.trials():
        hang, first_entry = Hang(cfg.hang_limit), math.inf
        async with sqlite_saver(gate) as saver:
            wf = fanout(saver)
            threads = ThreadCount()

            async def call(i: int = i, wf: Pregel[Any, Any, Any, Any] = wf) -> None:
                await wf.ainvoke(cfg.width, thread(f"cancel-{i}"))

            trial = await asyncio_deadline_trial(call, cfg, rec.rng)
            deadline = loop.time() - trial.overshoot
            rec.add(trial, hang, tasks=asyncio_leftover_tasks(), threads=threads.leftover())
            if rec.seen > cfg.warmup and first_entry > deadline:
                late += 1
            hang.release()
            await _settle(cfg.hang_limit)
        if rec.done():
            break
    notes = [
        "AsyncSqliteSaver; the hang is in aput_writes of each task's result; "
        "a fresh saver and database per trial"
    ]
    if late:
        notes.append(
            f"in {late} of {len(rec.result.samples)} trials the deadline passed before any "
            "task had reached its save: LangGraph was still starting the tasks"
        )
    return rec.finish("; ".join(notes))


def scenario_cancel(cfg: CancelConfig) -> CancelResult:
    return asyncio.run(_cancel(cfg))


# -- 2. sibling -----------------------------------------------------------------------------


async def _sibling(cfg: SiblingConfig) -> SiblingResult:
    S.a_ran, S.b_ran, S.b_fixed = 0, 0, False
    S.a_save_began = began = asyncio.Event()
    gated = True

    async def gate() -> None:
        nonlocal gated
        if gated:  # the first task save is A's: B has not finished
            gated = False
            began.set()
            await asyncio.sleep(cfg.slow_save)

    b_failed = completed = False
    async with sqlite_saver(gate) as saver:
        wf = sibling(saver)
        try:
            await wf.ainvoke(max(1.0, 10 * cfg.slow_save), thread("sibling"))
        except RuntimeError:
            b_failed = S.b_ran == 1
        landed_first = saver.landed
        S.b_fixed = True
        completed = await wf.ainvoke(None, thread("sibling")) == 3
    notes = (
        "resumed with ainvoke(None) on the same thread_id; A's save had "
        + ("" if landed_first else "not ")
        + "landed when the failed run returned"
    )
    return SiblingResult(a_executions=S.a_ran, b_failed=b_failed, completed=completed, notes=notes)


def scenario_sibling(cfg: SiblingConfig) -> SiblingResult:
    return asyncio.run(_sibling(cfg))


# -- 3. steps and 4. parallel ---------------------------------------------------------------


async def _timed_runs(
    make: Callable[[BaseCheckpointSaver[Any]], Pregel[Any, Any, Any, Any]],
    n: int,
    repeats: int,
    durable: bool,
) -> tuple[float, int]:
    """Best wall time of *repeats* runs of ``make(saver)(n)`` (after a warm-up run)."""
    S.fail_at_end = False
    best, ran = float("inf"), 0
    async with saver_for(durable) as saver:
        wf = make(saver)
        await wf.ainvoke(min(n, 200), thread("warm-up"))
        for i in range(repeats):
            S.ran = 0
            t0 = time.perf_counter()
            await wf.ainvoke(n, thread(f"run-{i}"))
            best = min(best, time.perf_counter() - t0)
            ran = S.ran
    return best, ran


def scenario_steps(cfg: StepsConfig) -> StepsResult:
    best, ran = asyncio.run(_timed_runs(sequential, cfg.n, cfg.repeats, cfg.durable))
    saver = "AsyncSqliteSaver" if cfg.durable else "InMemorySaver"
    return StepsResult(
        us_per_step=best / cfg.n * 1e6,
        steps_ran=ran,
        notes=f"{saver}; best of {cfg.repeats} runs, the run's fixed cost included",
    )


def scenario_parallel(cfg: ParallelConfig) -> ParallelResult:
    best, ran = asyncio.run(_timed_runs(fanout, cfg.n, cfg.repeats, True))
    return ParallelResult(
        seconds=best,
        steps_ran=ran,
        notes="AsyncSqliteSaver; n task calls, then their futures awaited",
    )


# -- 5. resume ------------------------------------------------------------------------------


async def _resume(cfg: ResumeConfig) -> ResumeResult:
    async with sqlite_saver() as saver:
        wf = sequential(saver)
        S.fail_at_end = True
        with contextlib.suppress(RuntimeError):
            await wf.ainvoke(cfg.n, thread("long"))
        S.fail_at_end, S.ran = False, 0
        t0 = time.perf_counter()
        result = await wf.ainvoke(None, thread("long"))
        seconds = time.perf_counter() - t0
    if result != cfg.n:
        raise RuntimeError(f"the resumed run returned {result}, not {cfg.n}")
    return ResumeResult(
        seconds=seconds,
        steps_reexecuted=S.ran,
        notes="AsyncSqliteSaver; ainvoke(None) on the same thread_id",
    )


def scenario_resume(cfg: ResumeConfig) -> ResumeResult:
    return asyncio.run(_resume(cfg))


# -- 6. memory ------------------------------------------------------------------------------


async def _memory(cfg: MemoryConfig) -> MemoryResult:
    S.parked, S.target = 0, cfg.runs
    S.all_parked, S.release = asyncio.Event(), asyncio.Event()
    saver = InMemorySaver()
    wf, warm = two_steps(saver), sequential(saver)
    S.fail_at_end = False
    await warm.ainvoke(1, thread("warm-up"))  # first-use caches, outside the peak
    meter = MemoryMeter()
    async with asyncio.TaskGroup() as group:
        for i in range(cfg.runs):
            group.create_task(wf.ainvoke(i, thread(f"run-{i}")))
        await S.all_parked.wait()
        peak = meter.stop()
        started = S.parked
        S.release.set()
    return MemoryResult(peak_bytes=peak, runs_started=started, notes="InMemorySaver")


def scenario_memory(cfg: MemoryConfig) -> MemoryResult:
    return asyncio.run(_memory(cfg))


if __name__ == "__main__":
    main(sys.modules[__name__])
