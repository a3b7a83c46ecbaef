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
import sys
import tempfile
import time
import warnings
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

from engines._common import (  # noqa: E402 (after the warning filter)
    Call,
    Gate,
    SiblingCase,
    SiblingFailure,
    Tally,
    all_hung_note,
    asyncio_scenario,
    resume_after_failure,
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

    def __init__(self, inner: CheckpointStorage, gate: Gate) -> None:
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


# -- the workflows -------------------------------------------------------------------------

S = Tally()


@step
async def noop(i: int) -> int:
    S.ran += 1
    return i


@workflow
async def sequence(n: int) -> int:
    for i in range(n):
        await noop(i)
    S.end_of_run()
    return n


@workflow
async def fanout(n: int) -> int:
    await asyncio.gather(*(noop(i) for i in range(n)))
    return n


# -- 1. cancel -----------------------------------------------------------------------------


async def _in_memory_fanout(width: int, gate: Gate) -> Call:
    run = fanout.build(checkpoint_storage=_GatedStorage(InMemoryCheckpointStorage(), gate))
    return partial(run.run, width)


@asyncio_scenario
async def scenario_cancel(cfg: CancelConfig) -> CancelResult:
    rec = CancelRecorder(cfg)
    for _, hang in rec.trials():
        with tempfile.TemporaryDirectory() as directory:
            storage = _GatedStorage(FileCheckpointStorage(directory), hang.wait_asyncio)
            run = fanout.build(checkpoint_storage=storage)
            await rec.asyncio_trial(partial(run.run, cfg.width), hang)
            await asyncio_settle(cfg.hang_limit)
    return rec.finish(
        "CheckpointStorage.save awaits the hang before FileCheckpointStorage.save",
        await all_hung_note(cfg, partial(_in_memory_fanout, cfg.width)),
    )


# -- 2. sibling ----------------------------------------------------------------------------


@step
async def sibling_a() -> str:
    S.sibling.a()
    return "a"


@step
async def sibling_b() -> str:
    await S.sibling.b(S.sibling.patience)  # fails once A's checkpoint save is in flight
    return "b"


@workflow
async def siblings(message: str) -> str:
    a, b = await asyncio.gather(sibling_a(), sibling_b())
    return message + a + b


@asyncio_scenario
async def scenario_sibling(cfg: SiblingConfig) -> SiblingResult:
    S.sibling = case = SiblingCase(cfg)
    with tempfile.TemporaryDirectory() as directory:
        storage = _GatedStorage(FileCheckpointStorage(directory), case.slow_save)
        first = siblings.build(checkpoint_storage=storage)
        try:
            await first.run("run:")
        except SiblingFailure:
            case.first_run_failed()
        case.fixed = True
        latest = await storage.get_latest(workflow_name=first.name)
        again = siblings.build(checkpoint_storage=storage)
        if latest is None:
            result = await again.run("run:")
            how = "no checkpoint was left after the failure, so the re-run started afresh"
        else:
            result = await again.run(checkpoint_id=latest.checkpoint_id)
            how = "resumed from the latest checkpoint"
    return case.result(result.get_outputs() == ["run:ab"], how)


# -- 3. steps, 4. parallel -----------------------------------------------------------------


def _storage(durable: bool, directory: str) -> CheckpointStorage:
    return FileCheckpointStorage(directory) if durable else InMemoryCheckpointStorage()


async def _timed_run(definition: Any, n: int, durable: bool) -> float:
    with tempfile.TemporaryDirectory() as directory:
        run = definition.build(checkpoint_storage=_storage(durable, directory))
        S.ran = 0
        t0 = time.perf_counter()
        await run.run(n)
        return time.perf_counter() - t0


def scenario_steps(cfg: StepsConfig) -> StepsResult:
    best = best_of(cfg.repeats, lambda: asyncio.run(_timed_run(sequence, cfg.n, cfg.durable)))
    steps_ran = S.ran
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
        seconds=best, steps_ran=S.ran, notes="asyncio.gather of @step calls; FileCheckpointStorage"
    )


# -- 5. resume -----------------------------------------------------------------------------


@asyncio_scenario
async def scenario_resume(cfg: ResumeConfig) -> ResumeResult:
    with tempfile.TemporaryDirectory() as directory:
        storage = _LatestOnlyStorage(FileCheckpointStorage(directory))
        first = sequence.build(checkpoint_storage=storage)

        async def resume() -> Any:
            latest = await storage.get_latest(workflow_name=first.name)
            assert latest is not None, "the failed run left no checkpoint"
            again = sequence.build(checkpoint_storage=storage)
            (output,) = (await again.run(checkpoint_id=latest.checkpoint_id)).get_outputs()
            return output

        r = await resume_after_failure(S, cfg.n, partial(first.run, cfg.n), resume)
    return r.result(
        f"get_latest + run(checkpoint_id=...) on FileCheckpointStorage; the failed run of "
        f"{r.stored} steps that stored them took {r.failed_seconds:.1f} s"
    )


# -- 6. memory -----------------------------------------------------------------------------


@step
async def first_step(i: int) -> int:
    return i


@step
async def waiting_step(i: int) -> int:
    await S.parking.park()
    return i


@workflow
async def two_steps(i: int) -> int:
    await first_step(i)
    return await waiting_step(i)


@asyncio_scenario
async def scenario_memory(cfg: MemoryConfig) -> MemoryResult:
    S.parking.expect(cfg.runs, asyncio.Event)
    meter = MemoryMeter()
    storage = InMemoryCheckpointStorage()
    runs = [
        asyncio.ensure_future(two_steps.build(checkpoint_storage=storage).run(i))
        for i in range(cfg.runs)
    ]
    await S.parking.measure(meter)
    await asyncio.gather(*runs)
    return S.parking.result(
        meter,
        notes="one built workflow per run (an instance runs one run at a time); "
        "a shared InMemoryCheckpointStorage",
    )


if __name__ == "__main__":
    main(sys.modules[__name__])
