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
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from functools import partial
from typing import Any

from _protocol import (
    CancelConfig,
    CancelRecorder,
    CancelResult,
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
    asyncio_settle,
    main,
    package_version,
)
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.func import entrypoint, task
from langgraph.pregel import Pregel

from engines._common import (
    Gate,
    Runner,
    SiblingCase,
    SiblingFailure,
    Tally,
    asyncio_scenario,
    best_run,
    resume_after_failure,
)

ENGINE = "LangGraph"
DISTRIBUTION = "langgraph"

TASK_PATH = "~__pregel_push"  # how a @task call's task_path starts

# LangGraph logs failed tasks; the sibling and resume scenarios fail on purpose.
logging.getLogger("langgraph").setLevel(logging.CRITICAL)


def version() -> str:
    return package_version(DISTRIBUTION)


S = Tally()


@task
async def noop(i: int) -> int:
    S.ran += 1
    return i + 1


@task
async def sibling_a() -> int:
    S.sibling.a()
    return 1


@task
async def sibling_b(wait: float) -> int:
    await S.sibling.b(wait)  # fails once A's save is in flight
    return 2


@task
async def park(i: int) -> int:
    await S.parking.park()
    return i


# An entrypoint binds its checkpointer when it is defined, so each is made per saver.


def sequential(saver: BaseCheckpointSaver[Any]) -> Pregel[Any, Any, Any, Any]:
    @entrypoint(checkpointer=saver)
    async def sequential_run(n: int) -> int:
        total = 0
        for _ in range(n):
            total = await noop(total)
        S.end_of_run()
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


# -- 1. cancel ------------------------------------------------------------------------------


@asyncio_scenario
async def scenario_cancel(cfg: CancelConfig) -> CancelResult:
    rec = CancelRecorder(cfg)
    for i, hang in rec.trials():
        async with sqlite_saver(hang.wait_asyncio) as saver:
            call = partial(fanout(saver).ainvoke, cfg.width, thread(f"cancel-{i}"))
            await rec.asyncio_trial(call, hang)
            await asyncio_settle(cfg.hang_limit)
    return rec.finish(
        "AsyncSqliteSaver; the hang is in aput_writes of each task's result; "
        "a fresh saver and database per trial",
        rec.late_note("task", "LangGraph"),
    )


# -- 2. sibling -----------------------------------------------------------------------------


@asyncio_scenario
async def scenario_sibling(cfg: SiblingConfig) -> SiblingResult:
    S.sibling = case = SiblingCase(cfg)
    # the first task save is A's (B has not finished): only that one is slow
    async with sqlite_saver(partial(case.slow_save, once=True)) as saver:
        wf = sibling(saver)
        try:
            await wf.ainvoke(case.patience, thread("sibling"))
        except SiblingFailure:
            case.first_run_failed()
        landed_first = saver.landed
        case.fixed = True
        completed = await wf.ainvoke(None, thread("sibling")) == 3
    notes = "resumed with ainvoke(None) on the same thread_id; " + case.landed(landed_first > 0)
    return case.result(completed, notes)


# -- 3. steps and 4. parallel ---------------------------------------------------------------


def _runner(wf: Pregel[Any, Any, Any, Any]) -> Runner:
    """``best_run``'s ``run(n, run_id)``: ``wf`` invoked with *n* on that thread."""
    return lambda n, run_id: wf.ainvoke(n, thread(run_id))


@asyncio_scenario
async def scenario_steps(cfg: StepsConfig) -> StepsResult:
    async with saver_for(cfg.durable) as saver:
        best = await best_run(S, cfg.n, cfg.repeats, _runner(sequential(saver)))
    return best.steps(cfg, "AsyncSqliteSaver" if cfg.durable else "InMemorySaver")


@asyncio_scenario
async def scenario_parallel(cfg: ParallelConfig) -> ParallelResult:
    async with saver_for(True) as saver:
        best = await best_run(S, cfg.n, cfg.repeats, _runner(fanout(saver)))
    return best.parallel("AsyncSqliteSaver; n task calls, then their futures awaited")


# -- 5. resume ------------------------------------------------------------------------------


@asyncio_scenario
async def scenario_resume(cfg: ResumeConfig) -> ResumeResult:
    async with sqlite_saver() as saver:
        wf = sequential(saver)
        r = await resume_after_failure(
            S,
            cfg.n,
            partial(wf.ainvoke, cfg.n, thread("long")),
            partial(wf.ainvoke, None, thread("long")),
        )
    return r.result("AsyncSqliteSaver; ainvoke(None) on the same thread_id")


# -- 6. memory ------------------------------------------------------------------------------


@asyncio_scenario
async def scenario_memory(cfg: MemoryConfig) -> MemoryResult:
    S.parking.expect(cfg.runs, asyncio.Event)
    saver = InMemorySaver()
    wf, warm = two_steps(saver), sequential(saver)
    await warm.ainvoke(1, thread("warm-up"))  # first-use caches, outside the peak
    meter = MemoryMeter()
    async with asyncio.TaskGroup() as group:
        for i in range(cfg.runs):
            group.create_task(wf.ainvoke(i, thread(f"run-{i}")))
        await S.parking.measure(meter)
    return S.parking.result(meter, notes="InMemorySaver")


if __name__ == "__main__":
    main(sys.modules[__name__])
