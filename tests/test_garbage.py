"""An ended run leaves no cyclic garbage: its objects are freed as it ends.

A worker executes thousands of runs; any cycle among a run's objects (its
execution, saver, nursery, tasks) would be left to the cyclic garbage
collector, whose collections cost the worker more the more it holds.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

import tether


@tether.step(name="garbage.noop")
async def noop(i: int) -> int:
    return i + 1


@tether.workflow(name="garbage.job")
async def job(i: int) -> int:
    return await noop(i)


@contextmanager
def collector_off(found: list[int]) -> Iterator[None]:
    """No automatic collection inside; *found* gets what one collection then frees."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        found.append(gc.collect())
        gc.enable()


async def test_runs_of_engine_run_leave_no_cyclic_garbage() -> None:
    found: list[int] = []
    async with tether.open_engine(tether.MemoryStore()) as engine:
        await engine.run(job, 0, run_id="warm-up")  # first-use caches
        with collector_off(found):
            for i in range(20):
                assert await engine.run(job, i, run_id=f"r{i}") == i + 1
    assert found == [0]


async def test_runs_a_worker_executes_leave_no_cyclic_garbage() -> None:
    found: list[int] = []
    async with (
        tether.open_engine(tether.MemoryStore()) as engine,
        tether.open_worker(engine, concurrency=4),
    ):
        await engine.submit(job, 0, run_id="warm-up")
        assert await engine.wait("warm-up") == 1
        with collector_off(found):
            for i in range(20):
                await engine.submit(job, i, run_id=f"r{i}")
            for i in range(20):
                assert await engine.wait(f"r{i}") == i + 1
    assert found == [0]
