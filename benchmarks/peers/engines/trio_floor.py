"""The trio floor: what the same workload costs in bare trio, with nothing saved.

*cancel*: a nursery of ``width`` tasks, each in ``trio.sleep_forever()`` (a
save that never returns), under ``trio.move_on_at``: the shape of
``benchmarks/cancel_latency.py``'s ``bare trio`` row. *steps*: a plain
``await`` of a no-op coroutine per step (``checkpoint_us``: the same with one
``trio.lowlevel.checkpoint()`` in it, one scheduler round trip); in memory
only. *parallel*: a nursery of ``n`` tasks each awaiting the no-op. *memory*:
``runs`` tasks that await the no-op, then wait on an event. There is nothing
to resume and no checkpoint to lose, so *sibling* and *resume* are
unsupported. The scenarios are ``engines/_floor.py``'s, shared with the
asyncio floor; this module gives them trio's primitives.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import trio
from _protocol import CancelRecorder, Hang, Trial, main

from engines._floor import Call, Floor, Loop

ENGINE = "bare trio (floor)"
DISTRIBUTION = None

T = TypeVar("T")


def version() -> str:
    return trio.__version__


calls = 0


async def noop_checkpoint(i: int) -> int:
    global calls
    calls += 1  # the floor's no-op counts its runs too: the same step, plus the checkpoint
    await trio.lowlevel.checkpoint()
    return i + 1


class _Trio(Loop):
    group = "nursery"
    waiting = "tasks in trio.sleep_forever(): no save, nothing to hang but the wait"
    yielding = "one trio.lowlevel.checkpoint()"

    def run(self, main: Callable[[], Coroutine[Any, Any, T]]) -> T:
        return trio.run(main)

    async def fan(
        self, step: Callable[[int], Coroutine[Any, Any, object]], n: int, then: Call | None = None
    ) -> None:
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(step, i)
            if then is not None:
                await then()

    def forever(self) -> Awaitable[object]:
        return trio.sleep_forever()  # noqa: ASYNC105 (the caller awaits it: no frame of ours)

    def event(self) -> trio.Event:
        return trio.Event()

    async def trial(self, rec: CancelRecorder, call: Call, hang: Hang) -> Trial:
        return await rec.trio_trial(call, hang)


_FLOOR = Floor(_Trio(), noop_checkpoint)
scenario_cancel = _FLOOR.scenario_cancel
scenario_sibling = _FLOOR.scenario_sibling
scenario_steps = _FLOOR.scenario_steps
scenario_parallel = _FLOOR.scenario_parallel
scenario_resume = _FLOOR.scenario_resume
scenario_memory = _FLOOR.scenario_memory


if __name__ == "__main__":
    main(sys.modules[__name__])
