"""The asyncio floor: the same workload in bare asyncio, with nothing saved.

*cancel*: an ``asyncio.TaskGroup`` of ``width`` tasks, each awaiting a future
that never completes (a save that never returns), under
``asyncio.timeout_at``: the shape of ``benchmarks/cancel_latency.py``'s
``bare asyncio TaskGroup`` row. *steps*: a plain ``await`` of a no-op
coroutine per step (``checkpoint_us``: the same with one
``asyncio.sleep(0)`` in it, one trip through the loop); in memory only.
*parallel*: a TaskGroup of ``n`` tasks each awaiting the no-op. *memory*:
``runs`` tasks that await the no-op, then wait on an event. *sibling* and
*resume* are unsupported: nothing is saved.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable

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
    best_of,
    main,
)

ENGINE = "bare asyncio (floor)"
DISTRIBUTION = None


def version() -> str:
    return sys.version.split()[0]


ran = 0


async def noop(i: int) -> int:
    global ran
    ran += 1
    return i + 1


async def noop_sleep0(i: int) -> int:
    global ran
    ran += 1
    await asyncio.sleep(0)
    return i + 1


async def _cancel(cfg: CancelConfig) -> CancelResult:
    rec = CancelRecorder(cfg)
    loop = asyncio.get_running_loop()
    hang = Hang(cfg.hang_limit)

    async def hung() -> None:
        hang.note_entered()
        await loop.create_future()  # never completes

    async def body() -> None:
        async with asyncio.TaskGroup() as group:
            for _ in range(cfg.width):
                group.create_task(hung())

    for _ in rec.trials():
        hang = Hang(cfg.hang_limit)
        threads = ThreadCount()
        trial = await asyncio_deadline_trial(body, cfg, rec.rng)
        rec.add(trial, hang, tasks=asyncio_leftover_tasks(), threads=threads.leftover())
        hang.release()
        if rec.done():
            break
    return rec.finish("tasks awaiting a future that never completes: no save")


def scenario_cancel(cfg: CancelConfig) -> CancelResult:
    return asyncio.run(_cancel(cfg))


def scenario_sibling(cfg: SiblingConfig) -> SiblingResult:
    raise Unsupported("a bare TaskGroup saves nothing, so there is no checkpoint to lose or resume")


async def _sequential(step: Callable[[int], Awaitable[int]], n: int) -> float:
    global ran
    ran = 0
    total = 0
    t0 = time.perf_counter()
    for _ in range(n):
        total = await step(total)
    return time.perf_counter() - t0


def scenario_steps(cfg: StepsConfig) -> StepsResult:
    if cfg.durable:
        raise Unsupported("a bare event loop has no durable store")
    best = best_of(cfg.repeats, lambda: asyncio.run(_sequential(noop, cfg.n)))
    steps_ran = ran
    sleep0 = best_of(cfg.repeats, lambda: asyncio.run(_sequential(noop_sleep0, cfg.n)))
    return StepsResult(
        us_per_step=best / cfg.n * 1e6,
        steps_ran=steps_ran,
        checkpoint_us=sleep0 / cfg.n * 1e6,
        notes="plain await of a no-op coroutine; checkpoint_us: one asyncio.sleep(0)",
    )


async def _parallel(n: int) -> float:
    global ran
    ran = 0
    t0 = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for i in range(n):
            group.create_task(noop(i))
    return time.perf_counter() - t0


def scenario_parallel(cfg: ParallelConfig) -> ParallelResult:
    best = best_of(cfg.repeats, lambda: asyncio.run(_parallel(cfg.n)))
    return ParallelResult(seconds=best, steps_ran=ran, notes="a TaskGroup of n tasks, in memory")


def scenario_resume(cfg: ResumeConfig) -> ResumeResult:
    raise Unsupported("a bare TaskGroup keeps no journal to resume from")


async def _memory(cfg: MemoryConfig) -> MemoryResult:
    parked = 0
    all_parked, release = asyncio.Event(), asyncio.Event()

    async def two_steps(i: int) -> None:
        nonlocal parked
        await noop(i)
        parked += 1
        if parked == cfg.runs:
            all_parked.set()
        await release.wait()

    meter = MemoryMeter()
    async with asyncio.TaskGroup() as group:
        for i in range(cfg.runs):
            group.create_task(two_steps(i))
        await all_parked.wait()
        peak = meter.stop()
        release.set()
    return MemoryResult(peak_bytes=peak, runs_started=parked, notes="one task per run")


def scenario_memory(cfg: MemoryConfig) -> MemoryResult:
    return asyncio.run(_memory(cfg))


if __name__ == "__main__":
    main(sys.modules[__name__])
