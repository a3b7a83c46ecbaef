"""Benchmark the cancellation latency of a workflow and its store with tether.bench.

The runnable companion of docs/how-to/benchmark-your-workflow.md. Run it with
``python examples/bench.py``: it benches in virtual time, so it takes about a
second (the stores' threads sleep in real time).
"""

import threading
import time
from collections.abc import Sequence
from typing import Any

import trio
import trio.testing

import tether
from tether.bench import bench_cancel
from tether.stores import Entry
from tether.testing import Delay


@tether.step
async def reserve(order_id: str) -> str:
    await trio.sleep(0.1)  # the warehouse
    return f"shelf-{order_id}"


@tether.step
async def charge(order_id: str) -> str:
    await trio.sleep(0.3)  # the payment provider
    return f"payment-{order_id}"


@tether.workflow(name="example.checkout")
async def checkout(order_id: str) -> str:
    await reserve(order_id)
    return await charge(order_id)


class SlowDisk:
    """A third-party store whose appends wait for a slow disk in a worker thread.

    It keeps its records in a MemoryStore, standing in for a real database; the
    disk is a 50 ms sleep.
    """

    def __init__(self) -> None:
        self.inner = tether.MemoryStore()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # every other method: the MemoryStore's

    def _write(self) -> None:
        time.sleep(0.05)  # the disk

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        await trio.to_thread.run_sync(self._write)  # the mistake: never abandoned
        return await self.inner.append(run_id, entries)


class AbandoningDisk(SlowDisk):
    """The same store, fixed: a cancelled caller leaves the write to its thread."""

    def __init__(self) -> None:
        super().__init__()
        self.writing = 0  # writes in worker threads, abandoned ones included
        self.idle = threading.Condition()

    def _write(self) -> None:
        try:
            time.sleep(0.05)  # the disk
        finally:
            with self.idle:
                self.writing -= 1
                self.idle.notify_all()

    def _drain(self) -> None:
        with self.idle:
            self.idle.wait_for(lambda: self.writing == 0)

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        with self.idle:
            self.writing += 1
        await trio.to_thread.run_sync(self._write, abandon_on_cancel=True)
        return await self.inner.append(run_id, entries)

    async def close(self) -> None:
        await trio.to_thread.run_sync(self._drain)  # no write outlives the store
        await self.inner.close()


async def main() -> None:
    slow = await bench_cancel(checkout, "o-1", store=SlowDisk, fault=Delay(0.05), samples=3)
    finding = next(f for f in slow.bugs if f.code == "overshoot")
    print(f"{finding.severity} ({finding.culprit}): {finding.hint}")

    fixed = await bench_cancel(checkout, "o-1", store=AbandoningDisk, fault=Delay(0.05), samples=3)
    print(f"overshoot: max {fixed.overshoot.max:.3f} s, floor max {fixed.floor.max:.3f} s")
    resumed = sum(s.resumable for s in fixed.samples)
    print(f"bugs: {len(fixed.bugs)}; resumed as undisturbed: {resumed} of {len(fixed.samples)}")


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
