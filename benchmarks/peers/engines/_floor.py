"""The floors' scenarios, written once over one event loop's primitives (:class:`Loop`).

``trio_floor`` and ``asyncio_floor`` each give a :class:`Loop` (how to run,
fan out tasks, wait forever, make an event, run a deadline trial) and their
no-op step with one yield to the loop in it; :class:`Floor` is the workload:

* *cancel*: ``width`` tasks, each waiting forever (a save that never returns,
  counted by the trial's :class:`~_protocol.Hang`), fanned out in a nursery or
  TaskGroup, under the trial's deadline.
* *steps*: a plain ``await`` of :func:`noop` per step, in memory only; and, as
  ``checkpoint_us``, the same with the loop's yield in the step.
* *parallel*: ``n`` tasks each awaiting :func:`noop`, fanned out.
* *memory*: ``runs`` tasks that await :func:`noop`, then park.
* *sibling* and *resume*: :class:`~_protocol.Unsupported`, nothing is saved.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from _protocol import (
    CancelConfig,
    CancelRecorder,
    CancelResult,
    Hang,
    LoopEvent,
    MemoryConfig,
    MemoryMeter,
    MemoryResult,
    ParallelConfig,
    ParallelResult,
    Parking,
    ResumeConfig,
    ResumeResult,
    SiblingConfig,
    SiblingResult,
    StepsConfig,
    StepsResult,
    Trial,
    Unsupported,
    best_of,
)

T = TypeVar("T")
Step = Callable[[int], Awaitable[int]]
Call = Callable[[], Awaitable[object]]

ran = 0  # a global, not an attribute: the floor's step is as cheap as a step can be


async def noop(i: int) -> int:
    global ran
    ran += 1
    return i + 1


class Loop(ABC):
    """One event loop's primitives, as the floors use them, and the words for the notes."""

    group: str  #: what fans out tasks ("nursery", "TaskGroup")
    waiting: str  #: the notes' words on what a cancel trial's tasks wait in
    yielding: str  #: the notes' words on the yield in ``noop_checkpoint``

    @abstractmethod
    def run(self, main: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run ``main()`` in a fresh event loop."""

    @abstractmethod
    async def fan(
        self, step: Callable[[int], Coroutine[Any, Any, object]], n: int, then: Call | None = None
    ) -> None:
        """``step(0)``, ..., ``step(n - 1)`` as tasks of one nursery/TaskGroup; ``await
        then()`` in the block after starting them."""

    @abstractmethod
    def forever(self) -> Awaitable[object]:
        """What to await to wait until cancelled (the loop's own: no frame of ours)."""

    @abstractmethod
    def event(self) -> LoopEvent:
        """A new event of this loop."""

    @abstractmethod
    async def trial(self, rec: CancelRecorder, call: Call, hang: Hang) -> Trial:
        """The recorder's trial for this loop."""


class Floor:
    """The six scenarios on *loop*; *noop_checkpoint* is :func:`noop` with the loop's yield."""

    def __init__(self, loop: Loop, noop_checkpoint: Step) -> None:
        self.loop = loop
        self.noop_checkpoint = noop_checkpoint

    async def _cancel(self, cfg: CancelConfig) -> CancelResult:
        rec = CancelRecorder(cfg)

        async def hung(_: int) -> None:
            rec.hang.note_entered()
            await self.loop.forever()

        async def body() -> None:
            await self.loop.fan(hung, cfg.width)

        for _, hang in rec.trials():
            await self.loop.trial(rec, body, hang)
        return rec.finish(self.loop.waiting)

    def scenario_cancel(self, cfg: CancelConfig) -> CancelResult:
        return self.loop.run(lambda: self._cancel(cfg))

    def scenario_sibling(self, cfg: SiblingConfig) -> SiblingResult:
        raise Unsupported(
            f"a bare {self.loop.group} saves nothing, so there is no checkpoint to lose or resume"
        )

    def scenario_steps(self, cfg: StepsConfig) -> StepsResult:
        if cfg.durable:
            raise Unsupported("a bare event loop has no durable store")
        best = best_of(cfg.repeats, lambda: self.loop.run(lambda: _sequential(noop, cfg.n)))
        steps_ran = ran
        step = self.noop_checkpoint
        checkpoint = best_of(cfg.repeats, lambda: self.loop.run(lambda: _sequential(step, cfg.n)))
        return StepsResult(
            us_per_step=best / cfg.n * 1e6,
            steps_ran=steps_ran,
            checkpoint_us=checkpoint / cfg.n * 1e6,
            notes=f"plain await of a no-op coroutine; checkpoint_us: {self.loop.yielding}",
        )

    async def _parallel(self, n: int) -> float:
        global ran
        ran = 0
        t0 = time.perf_counter()
        await self.loop.fan(noop, n)
        return time.perf_counter() - t0

    def scenario_parallel(self, cfg: ParallelConfig) -> ParallelResult:
        best = best_of(cfg.repeats, lambda: self.loop.run(lambda: self._parallel(cfg.n)))
        return ParallelResult(
            seconds=best, steps_ran=ran, notes=f"a {self.loop.group} of n tasks, in memory"
        )

    def scenario_resume(self, cfg: ResumeConfig) -> ResumeResult:
        raise Unsupported(f"a bare {self.loop.group} keeps no journal to resume from")

    async def _memory(self, cfg: MemoryConfig) -> MemoryResult:
        parking = Parking()
        parking.expect(cfg.runs, self.loop.event)

        async def two_steps(i: int) -> None:
            await noop(i)
            await parking.park()

        meter = MemoryMeter()
        await self.loop.fan(two_steps, cfg.runs, then=lambda: parking.measure(meter))
        return parking.result(meter, notes="one task per run")

    def scenario_memory(self, cfg: MemoryConfig) -> MemoryResult:
        return self.loop.run(lambda: self._memory(cfg))


async def _sequential(step: Step, n: int) -> float:
    global ran
    ran = 0
    total = 0
    t0 = time.perf_counter()
    for _ in range(n):
        total = await step(total)
    return time.perf_counter() - t0
