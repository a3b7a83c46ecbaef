"""The asyncio floor: the same workload in bare asyncio, with nothing saved.

*cancel*: an ``asyncio.TaskGroup`` of ``width`` tasks, each awaiting a future
that never completes (a save that never returns), under
``asyncio.timeout_at``: the shape of ``benchmarks/cancel_latency.py``'s
``bare asyncio TaskGroup`` row. *steps*: a plain ``await`` of a no-op
coroutine per step (``checkpoint_us``: the same with one
``asyncio.sleep(0)`` in it, one trip through the loop); in memory only.
*parallel*: a TaskGroup of ``n`` tasks each awaiting the no-op. *memory*:
``runs`` tasks that await the no-op, then wait on an event. *sibling* and
*resume* are unsupported: nothing is saved. The scenarios are
``engines/_floor.py``'s, shared with the trio floor; this module gives them
asyncio's primitives.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from _protocol import CancelRecorder, Hang, Trial, main

from engines._floor import Call, Floor, Loop

ENGINE = "bare asyncio (floor)"
DISTRIBUTION = None

T = TypeVar("T")


def version() -> str:
    return sys.version.split()[0]


calls = 0


async def noop_sleep0(i: int) -> int:
    global calls
    calls += 1  # the floor's no-op counts its runs too: the same step, plus the sleep(0)
    await asyncio.sleep(0)
    return i + 1


class _Asyncio(Loop):
    group = "TaskGroup"
    waiting = "tasks awaiting a future that never completes: no save"
    yielding = "one asyncio.sleep(0)"

    def run(self, main: Callable[[], Coroutine[Any, Any, T]]) -> T:
        return asyncio.run(main())

    async def fan(
        self, step: Callable[[int], Coroutine[Any, Any, object]], n: int, then: Call | None = None
    ) -> None:
        async with asyncio.TaskGroup() as group:
            for i in range(n):
                group.create_task(step(i))
            if then is not None:
                await then()

    def forever(self) -> Awaitable[object]:
        return asyncio.get_running_loop().create_future()  # never completes

    def event(self) -> asyncio.Event:
        return asyncio.Event()

    async def trial(self, rec: CancelRecorder, call: Call, hang: Hang) -> Trial:
        return await rec.asyncio_trial(call, hang)


_FLOOR = Floor(_Asyncio(), noop_sleep0)
scenario_cancel = _FLOOR.scenario_cancel
scenario_sibling = _FLOOR.scenario_sibling
scenario_steps = _FLOOR.scenario_steps
scenario_parallel = _FLOOR.scenario_parallel
scenario_resume = _FLOOR.scenario_resume
scenario_memory = _FLOOR.scenario_memory


if __name__ == "__main__":
    main(sys.modules[__name__])
