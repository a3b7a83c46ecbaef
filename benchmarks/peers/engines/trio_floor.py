"""The trio floor: what the same workload costs in bare trio, with nothing saved.

*cancel*: a nursery of ``width`` tasks, each in ``trio.sleep_forever()`` (a
save that never returns), under ``trio.move_on_at``: the shape of
``benchmarks/cancel_latency.py``'s ``bare trio`` row. *steps*: a plain
``await`` of a no-op coroutine per step (``checkpoint_us``: the same with one
``trio.lowlevel.checkpoint()`` in it, one scheduler round trip); in memory
only. *parallel*: a nursery of ``n`` tasks each awaiting the no-op. *memory*:
``runs`` tasks that await the no-op, then wait on an event. There is nothing
to resume and no checkpoint to lose, so *sibling* and *resume* are
unsupported.
"""

from __future__ import annotations

import sys
import time

import trio
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
    best_of,
    main,
    trio_deadline_trial,
    trio_task_count,
)

ENGINE = "bare trio (floor)"
DISTRIBUTION = None


def version() -> str:
    return trio.__version__


ran = 0


async def noop(i: int) -> int:
    global ran
    ran += 1
    return i + 1


async def noop_checkpoint(i: int) -> int:
    global ran
    ran += 1
    await trio.lowlevel.checkpoint()
    return i + 1


async def _cancel(cfg: CancelConfig) -> CancelResult:
    rec = CancelRecorder(cfg)
    hang = Hang(cfg.hang_limit)

    async def hung() -> None:
        hang.note_entered()
        await trio.sleep_forever()

    async def body() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(cfg.width):
                nursery.start_soon(hung)

    for _ in rec.trials():
        hang = Hang(cfg.hang_limit)
        tasks, threads = trio_task_count(), ThreadCount()
        trial = await trio_deadline_trial(body, cfg, rec.rng)
        rec.add(trial, hang, tasks=trio_task_count() - tasks, threads=threads.leftover())
        hang.release()
        if rec.done():
            break
    return rec.finish("tasks in trio.sleep_forever(): no save, nothing to hang but the wait")


def scenario_cancel(cfg: CancelConfig) -> CancelResult:
    return trio.run(_cancel, cfg)


def scenario_sibling(cfg: SiblingConfig) -> SiblingResult:
    raise Unsupported("a bare nursery saves nothing, so there is no checkpoint to lose or resume")


async def _sequential(step: object, n: int) -> float:
    global ran
    assert callable(step)
    ran = 0
    total = 0
    t0 = time.perf_counter()
    for _ in range(n):
        total = await step(total)
    return time.perf_counter() - t0


def scenario_steps(cfg: StepsConfig) -> StepsResult:
    if cfg.durable:
        raise Unsupported("a bare event loop has no durable store")
    best = best_of(cfg.repeats, lambda: trio.run(_sequential, noop, cfg.n))
    steps_ran = ran
    checkpoint = best_of(cfg.repeats, lambda: trio.run(_sequential, noop_checkpoint, cfg.n))
    return StepsResult(
        us_per_step=best / cfg.n * 1e6,
        steps_ran=steps_ran,
        checkpoint_us=checkpoint / cfg.n * 1e6,
        notes="plain await of a no-op coroutine; checkpoint_us: one trio.lowlevel.checkpoint()",
    )


async def _parallel(n: int) -> float:
    global ran
    ran = 0
    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(noop, i)
    return time.perf_counter() - t0


def scenario_parallel(cfg: ParallelConfig) -> ParallelResult:
    best = best_of(cfg.repeats, lambda: trio.run(_parallel, cfg.n))
    return ParallelResult(seconds=best, steps_ran=ran, notes="a nursery of n tasks, in memory")


def scenario_resume(cfg: ResumeConfig) -> ResumeResult:
    raise Unsupported("a bare nursery keeps no journal to resume from")


async def _memory(cfg: MemoryConfig) -> MemoryResult:
    parked = 0
    all_parked, release = trio.Event(), trio.Event()

    async def two_steps(i: int) -> None:
        nonlocal parked
        await noop(i)
        parked += 1
        if parked == cfg.runs:
            all_parked.set()
        await release.wait()

    meter = MemoryMeter()
    async with trio.open_nursery() as nursery:
        for i in range(cfg.runs):
            nursery.start_soon(two_steps, i)
        await all_parked.wait()
        peak = meter.stop()
        release.set()
    return MemoryResult(peak_bytes=peak, runs_started=parked, notes="one task per run")


def scenario_memory(cfg: MemoryConfig) -> MemoryResult:
    return trio.run(_memory, cfg)


if __name__ == "__main__":
    main(sys.modules[__name__])
