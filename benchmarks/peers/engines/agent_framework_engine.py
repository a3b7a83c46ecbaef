"""Microsoft Agent Framework functional workflows (``agent-framework-core``), under asyncio.

Every workflow is written the way the framework's docs write a functional
workflow: an ``@workflow`` async function that calls ``@step`` async functions
(parallel steps with ``asyncio.gather``), built with
``.build(checkpoint_storage=...)`` and run with ``await workflow.run(message)``;
a failed run is resumed with ``run(checkpoint_id=...)`` from the storage's
``get_latest(workflow_name=...)``. Durable means the framework's embedded
store, ``FileCheckpointStorage`` (a JSON file per checkpoint); in memory means
its ``InMemoryCheckpointStorage``, so the per-step checkpoint path runs in both.

How the framework persists a step: ``StepWrapper.__call__`` (what ``@step``
returns) runs the body, puts the result in the run's step cache, then awaits
``RunContext._on_step_completed``, which ``FunctionalWorkflow._run_core`` sets
(whenever a checkpoint storage is configured) to
``FunctionalWorkflow._save_checkpoint``: it snapshots the whole step cache into
a ``WorkflowCheckpoint`` and awaits ``CheckpointStorage.save(checkpoint)``.
That ``save`` is the only write of a completed step's result ("a checkpoint
is saved after each live execution", the ``@step`` docs say), awaited in the
step's own task before the step call returns.

*cancel*: what hangs is ``CheckpointStorage.save``. The storage handed to
``build()`` is :class:`_GatedStorage`, an implementation of the framework's
public ``CheckpointStorage`` protocol that awaits the trial's
:class:`~_protocol.Hang` (``wait_asyncio``) and only then delegates to a
``FileCheckpointStorage``; so every completed step of the ``gather`` waits, in
its own task, inside the per-step checkpoint save described above. The
notes add how long, with no deadline, the run takes until every step waits in
its save: at large widths that is longer than the deadline, and the overshoot
then includes the event loop being busy starting steps.
*sibling*: the same wrapper makes every save first sleep ``slow_save`` seconds
(a cancellable ``asyncio.sleep``, before the real write); B waits until A's
save has begun, then raises. When the workflow function raises,
``FunctionalWorkflow._execute`` cancels the tasks the run still has, A's
in-flight save among them; the notes say whether any checkpoint was left to
resume from.

Worth knowing when reading the figures: each per-step checkpoint is a snapshot
of every step result so far, and each new step scans the step cache, so the
cost per step grows with the length of the run (the *steps* notes give the cost
per step in a run a tenth as long). For *resume* the driver deletes each checkpoint the next one
supersedes, through the storage's public ``delete``: 10,000 snapshots of up to
10,000 results would otherwise fill gigabytes of disk and make
``get_latest`` read every one of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable
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
    ThreadCount,
    asyncio_deadline_trial,
    asyncio_leftover_tasks,
    best_of,
    main,
    package_version,
)

# The functional API is marked experimental and says so on every decoration.
warnings.filterwarnings("ignore", message=r"\[FUNCTIONAL_WORKFLOWS\]")

from agent_framework import (  # noqa: E402 (after the warning filter)
    CheckpointStorage,
    FileCheckpointStorage,
    InMemoryCheckpointStorage,
    WorkflowCheckpoint,
    step,
    workflow,
)

ENGINE = "Microsoft Agent Framework"
DISTRIBUTION = "agent-framework-core"


def version() -> str:
    return package_version(DISTRIBUTION)


class _DelegatingStorage:
    """A ``CheckpointStorage`` that hands every call to *inner*."""

    def __init__(self, inner: CheckpointStorage) -> None:
        self._inner = inner

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        return await self._inner.save(checkpoint)

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        return await self._inner.load(checkpoint_id)

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        return await self._inner.list_checkpoints(workflow_name=workflow_name)

    async def delete(self, checkpoint_id: str) -> bool:
        return await self._inner.delete(checkpoint_id)

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        return await self._inner.get_latest(workflow_name=workflow_name)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return await self._inner.list_checkpoint_ids(workflow_name=workflow_name)


class _GatedStorage(_DelegatingStorage):
    """Each ``save`` awaits *gate* (the hang, or the slow save) before the real write."""

    def __init__(self, inner: CheckpointStorage, gate: Callable[[], Awaitable[None]]) -> None:
        super().__init__(inner)
        self._gate = gate

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        await self._gate()
        return await self._inner.save(checkpoint)


class _LatestOnlyStorage(_DelegatingStorage):
    """Keeps only the newest checkpoint: each save deletes the one it supersedes."""

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        checkpoint_id = await self._inner.save(checkpoint)
        if checkpoint.previous_checkpoint_id is not None:
            await self._inner.delete(checkpoint.previous_checkpoint_id)
        return checkpoint_id


async def _settle(limit: float) -> None:
    """Let the tasks a trial left behind finish (bounded), so the next trial starts clean."""
    others = asyncio.all_tasks() - {asyncio.current_task()}
    if others:
        await asyncio.wait(others, timeout=limit)


# -- the workflows -------------------------------------------------------------------------

ran = 0  # step bodies run (steps, parallel, resume, cancel)
fail_at_end = False  # resume: the first run raises after its last step


@step
async def noop(i: int) -> int:
    global ran
    ran += 1
    return i


@workflow
async def sequence(n: int) -> int:
    for i in range(n):
        await noop(i)
    if fail_at_end:
        raise RuntimeError("the run fails after its last step")
    return n


@workflow
async def fanout(n: int) -> int:
    await asyncio.gather(*(noop(i) for i in range(n)))
    return n


# -- 1. cancel -----------------------------------------------------------------------------


async def _time_to_hang(width: int) -> float:
    """Seconds from the run's start until all *width* steps wait in their saves (no deadline)."""
    hang = Hang(limit=60.0)
    entered = 0
    all_in = asyncio.Event()

    async def gate() -> None:
        nonlocal entered
        entered += 1
        if entered == width:
            all_in.set()
        await hang.wait_asyncio()

    run = fanout.build(checkpoint_storage=_GatedStorage(InMemoryCheckpointStorage(), gate))
    t0 = time.perf_counter()
    task = asyncio.ensure_future(run.run(width))
    async with asyncio.timeout(60.0):  # a driver bug, not a figure
        await all_in.wait()
    seconds = time.perf_counter() - t0
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    hang.release()
    return seconds


async def _cancel(cfg: CancelConfig) -> CancelResult:
    rec = CancelRecorder(cfg)
    for _ in rec.trials():
        with tempfile.TemporaryDirectory() as directory:
            hang = Hang(cfg.hang_limit)
            storage = _GatedStorage(FileCheckpointStorage(directory), hang.wait_asyncio)
            run = fanout.build(checkpoint_storage=storage)
            threads = ThreadCount()
            trial = await asyncio_deadline_trial(partial(run.run, cfg.width), cfg, rec.rng)
            rec.add(trial, hang, tasks=asyncio_leftover_tasks(), threads=threads.leftover())
            hang.release()
            await _settle(cfg.hang_limit)
        if rec.done():
            break
    ready = await _time_to_hang(cfg.width)
    return rec.finish(
        "CheckpointStorage.save awaits the hang before FileCheckpointStorage.save; "
        f"without a deadline, all {cfg.width} steps were waiting in their saves "
        f"{ready:.3f} s after the run started (the deadline is {cfg.deadline:g} s)"
    )


def scenario_cancel(cfg: CancelConfig) -> CancelResult:
    return asyncio.run(_cancel(cfg))


# -- 2. sibling ----------------------------------------------------------------------------

a_runs = 0
b_fails = True
b_raised = False
a_saving: asyncio.Event | None = None  # set when a checkpoint save begins


class SiblingFailure(Exception):
    """B's planned failure."""


@step
async def sibling_a() -> str:
    global a_runs
    a_runs += 1
    return "a"


@step
async def sibling_b() -> str:
    global b_raised
    if b_fails:
        assert a_saving is not None
        await a_saving.wait()  # fail while A's checkpoint save is in flight
        b_raised = True
        raise SiblingFailure("B fails while A's save is in flight")
    return "b"


@workflow
async def siblings(message: str) -> str:
    a, b = await asyncio.gather(sibling_a(), sibling_b())
    return message + a + b


async def _sibling(cfg: SiblingConfig) -> SiblingResult:
    global a_runs, b_fails, b_raised, a_saving
    a_runs, b_fails, b_raised = 0, True, False
    a_saving = asyncio.Event()

    async def slow_save() -> None:
        assert a_saving is not None
        a_saving.set()
        await asyncio.sleep(cfg.slow_save)

    with tempfile.TemporaryDirectory() as directory:
        storage = _GatedStorage(FileCheckpointStorage(directory), slow_save)
        first = siblings.build(checkpoint_storage=storage)
        with contextlib.suppress(SiblingFailure):
            await first.run("run:")
        b_fails = False
        latest = await storage.get_latest(workflow_name=first.name)
        again = siblings.build(checkpoint_storage=storage)
        if latest is None:
            result = await again.run("run:")
            how = "no checkpoint was left after the failure, so the re-run started afresh"
        else:
            result = await again.run(checkpoint_id=latest.checkpoint_id)
            how = "resumed from the latest checkpoint"
    return SiblingResult(
        a_executions=a_runs,
        b_failed=b_raised,
        completed=result.get_outputs() == ["run:ab"],
        notes=how,
    )


def scenario_sibling(cfg: SiblingConfig) -> SiblingResult:
    return asyncio.run(_sibling(cfg))


# -- 3. steps, 4. parallel -----------------------------------------------------------------


def _storage(durable: bool, directory: str) -> CheckpointStorage:
    return FileCheckpointStorage(directory) if durable else InMemoryCheckpointStorage()


async def _timed_run(definition: Any, n: int, durable: bool) -> float:
    global ran
    with tempfile.TemporaryDirectory() as directory:
        run = definition.build(checkpoint_storage=_storage(durable, directory))
        ran = 0
        t0 = time.perf_counter()
        await run.run(n)
        return time.perf_counter() - t0


def scenario_steps(cfg: StepsConfig) -> StepsResult:
    best = best_of(cfg.repeats, lambda: asyncio.run(_timed_run(sequence, cfg.n, cfg.durable)))
    steps_ran = ran
    # The same run at a tenth of the length shows how the cost per step depends on it.
    short = max(cfg.n // 10, 1)
    short_best = best_of(cfg.repeats, lambda: asyncio.run(_timed_run(sequence, short, cfg.durable)))
    store = "FileCheckpointStorage" if cfg.durable else "InMemoryCheckpointStorage"
    return StepsResult(
        us_per_step=best / cfg.n * 1e6,
        steps_ran=steps_ran,
        notes=f"{store}; in a run of {short} steps: {short_best / short * 1e6:.0f} us/step",
    )


def scenario_parallel(cfg: ParallelConfig) -> ParallelResult:
    best = best_of(cfg.repeats, lambda: asyncio.run(_timed_run(fanout, cfg.n, True)))
    return ParallelResult(
        seconds=best, steps_ran=ran, notes="asyncio.gather of @step calls; FileCheckpointStorage"
    )


# -- 5. resume -----------------------------------------------------------------------------


async def _resume(cfg: ResumeConfig) -> ResumeResult:
    global ran, fail_at_end
    with tempfile.TemporaryDirectory() as directory:
        storage = _LatestOnlyStorage(FileCheckpointStorage(directory))
        first = sequence.build(checkpoint_storage=storage)
        fail_at_end, ran = True, 0
        t0 = time.perf_counter()
        with contextlib.suppress(RuntimeError):
            await first.run(cfg.n)
        first_seconds = time.perf_counter() - t0
        stored = ran
        fail_at_end, ran = False, 0
        t0 = time.perf_counter()
        latest = await storage.get_latest(workflow_name=first.name)
        assert latest is not None, "the failed run left no checkpoint"
        result = await sequence.build(checkpoint_storage=storage).run(
            checkpoint_id=latest.checkpoint_id
        )
        seconds = time.perf_counter() - t0
    assert result.get_outputs() == [cfg.n], result.get_outputs()
    return ResumeResult(
        seconds=seconds,
        steps_reexecuted=ran,
        notes=(
            f"get_latest + run(checkpoint_id=...) on FileCheckpointStorage; the failed run of "
            f"{stored} steps that stored them took {first_seconds:.1f} s"
        ),
    )


def scenario_resume(cfg: ResumeConfig) -> ResumeResult:
    return asyncio.run(_resume(cfg))


# -- 6. memory -----------------------------------------------------------------------------

parked = 0
all_parked: asyncio.Event | None = None
gate: asyncio.Event | None = None
parked_target = 0


@step
async def first_step(i: int) -> int:
    return i


@step
async def waiting_step(i: int) -> int:
    global parked
    assert gate is not None and all_parked is not None
    parked += 1
    if parked == parked_target:
        all_parked.set()
    await gate.wait()
    return i


@workflow
async def two_steps(i: int) -> int:
    await first_step(i)
    return await waiting_step(i)


async def _memory(cfg: MemoryConfig) -> MemoryResult:
    global parked, all_parked, gate, parked_target
    parked, parked_target = 0, cfg.runs
    all_parked, gate = asyncio.Event(), asyncio.Event()
    meter = MemoryMeter()
    storage = InMemoryCheckpointStorage()
    runs = [
        asyncio.ensure_future(two_steps.build(checkpoint_storage=storage).run(i))
        for i in range(cfg.runs)
    ]
    await all_parked.wait()
    meter.stop()
    started = parked
    gate.set()
    await asyncio.gather(*runs)
    return MemoryResult(
        peak_bytes=meter.peak_bytes,
        runs_started=started,
        notes="one built workflow per run (an instance runs one run at a time); "
        "a shared InMemoryCheckpointStorage",
    )


def scenario_memory(cfg: MemoryConfig) -> MemoryResult:
    return asyncio.run(_memory(cfg))


if __name__ == "__main__":
    main(sys.modules[__name__])
