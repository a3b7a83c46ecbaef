"""How drivers measure memory: the meter, and the runs parked while it reads (see _protocol)."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Protocol

from _scenarios import MemoryResult


class MemoryMeter:
    """tracemalloc's peak above the memory traced when the meter started."""

    def __init__(self) -> None:
        gc.collect()
        tracemalloc.start()
        tracemalloc.reset_peak()
        self.baseline = tracemalloc.get_traced_memory()[0]
        self.peak_bytes = -1

    def stop(self) -> int:
        self.peak_bytes = tracemalloc.get_traced_memory()[1] - self.baseline
        tracemalloc.stop()
        return self.peak_bytes


class LoopEvent(Protocol):
    """An event of either loop (``trio.Event``, ``asyncio.Event``)."""

    def set(self) -> None: ...
    async def wait(self) -> object: ...


class Parking:
    """The memory scenario's runs, parked at their second step until the meter has read.

    :meth:`expect` before starting the runs; each run's second step awaits
    :meth:`park`; the driver awaits :meth:`measure` (every run parked, the
    meter stopped, the runs released), then builds :meth:`result`.
    """

    def __init__(self) -> None:
        self.target = 0
        self.parked = 0
        self.parked_when_measured = 0
        self._all_parked: LoopEvent | None = None
        self._release: LoopEvent | None = None

    def expect(self, runs: int, event: Callable[[], LoopEvent]) -> None:
        """Expect *runs* runs; *event* makes the loop's events (trio's or asyncio's)."""
        self.target, self.parked = runs, 0
        self._all_parked, self._release = event(), event()

    def park(self) -> Awaitable[object]:
        """Count a parked run; returns the wait for the release, for the step to await.

        Not a coroutine itself: an extra frame per parked run would count in the peak.
        """
        assert self._all_parked is not None and self._release is not None, "expect() first"
        self.parked += 1
        if self.parked == self.target:
            self._all_parked.set()
        return self._release.wait()

    async def measure(self, meter: MemoryMeter) -> None:
        """Wait until every run is parked, stop *meter*, then release the runs."""
        assert self._all_parked is not None and self._release is not None, "expect() first"
        await self._all_parked.wait()
        meter.stop()
        self.parked_when_measured = self.parked
        self._release.set()

    def result(self, meter: MemoryMeter, notes: str) -> MemoryResult:
        return MemoryResult(
            peak_bytes=meter.peak_bytes, runs_started=self.parked_when_measured, notes=notes
        )
