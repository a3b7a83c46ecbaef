"""The 20-step fan-out that tests/test_deterministic.py traces.

Imported by the tests and by tests/_trace_worker.py, which runs it in a fresh
process, always as ``tests._trace_workflow``: trio names a task after its
function's module, and the trace holds task names.
"""

from __future__ import annotations

import trio
import trio.lowlevel

import tether
from tether.testing._deterministic import ScheduleTrace, run_deterministic

WIDTH = 20
RUN_ID = "trace"  # engine.run's default run id is random, and tasks are named after it
EXPECTED = sum(i * i for i in range(WIDTH))


@tether.step
async def hop(i: int) -> int:
    # Checkpoints and short virtual sleeps of a few lengths, so that the
    # twenty steps are runnable together again and again and interleave.
    for _ in range(3):
        await trio.lowlevel.checkpoint()
    await trio.sleep(0.001 * (i % 4))
    await trio.lowlevel.checkpoint()
    return i * i


@tether.workflow(name="tests.trace.fanout")
async def fanout(width: int) -> int:
    async with tether.parallel() as p:
        handles = [p.start_soon(hop, i) for i in range(width)]
    return sum(h.result for h in handles)


async def run_fanout() -> int:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        return await engine.run(fanout, WIDTH, run_id=RUN_ID)


def traced(seed: int) -> tuple[int, ScheduleTrace]:
    """Run the fan-out under *seed*; its result and its schedule."""
    trace = ScheduleTrace()
    result = run_deterministic(run_fanout, seed=seed, instruments=[trace])
    return result, trace
