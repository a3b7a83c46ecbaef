"""An ended run leaves no cyclic garbage: its objects are freed as it ends.

A worker executes thousands of runs; any cycle among a run's objects (its
execution, saver, nursery, tasks) would be left to the cyclic garbage
collector, whose collections cost the worker more the more it holds.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import trio

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


@tether.workflow(name="garbage.slow")
async def slow(i: int) -> int:
    await noop(i)
    await tether.sleep(1000)
    return i


async def test_runs_whose_lease_was_lost_leave_no_cyclic_garbage(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = tether.MemoryStore()

    async def lose(engine: tether.Engine, run_id: str) -> None:
        async def thief() -> None:
            await trio.sleep(1)
            record = await store.get_run(run_id)
            assert record is not None
            await store.claim(run_id, "thief:1:x", ttl=30, takeover=record.token)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(thief)
            with pytest.raises(tether.LeaseLostError):
                await engine.run(slow, 0, run_id=run_id)

    found: list[int] = []
    async with tether.open_engine(store, lease_ttl=30) as engine:
        await lose(engine, "warm-up")
        with collector_off(found):
            for i in range(5):
                await lose(engine, f"r{i}")
    assert found == [0]
