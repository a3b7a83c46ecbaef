"""A 50-step fan-out workflow for the crash test: ``_crash_workflow.py KIND LOCATION LOG``.

Run as a script, it opens the store, prints ``ready``, runs (or resumes)
run ``crash`` to completion and prints the result (before closing the store). Every step execution
appends a line with its key to LOG (flushed and fsynced before the step
returns), so a test can count executions across a SIGKILL.
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

import tether
from tests._scripts import append_synced
from tests._scripts import open_store as open_store
from tether.stores import Store

GROUPS, WIDTH = 10, 5
RUN_ID = "crash"
EXPECTED = sum(i * i for i in range(GROUPS * WIDTH))
log_path: list[Path] = []


@tether.step
async def work(i: int) -> int:
    await trio.sleep(0.001 * (i % 3))
    # The i-th call of `work` in the workflow has the key work#i.
    append_synced(log_path[0], f"work#{i}")
    return i * i


@tether.workflow(name="tests.crash.fanout")
async def fanout(groups: int, width: int) -> int:
    total = 0
    for g in range(groups):
        async with tether.parallel() as p:
            handles = [p.start_soon(work, g * width + i) for i in range(width)]
        total += sum(h.result for h in handles)
    return total


async def run_to_completion(store: Store, *, announce: bool = False) -> int:
    async with tether.open_engine(store) as engine:
        if announce:
            print("ready", flush=True)
        result = await engine.run(fanout, GROUPS, WIDTH, run_id=RUN_ID)
        if announce:
            print(result, flush=True)
        return result


if __name__ == "__main__":
    kind, location, log = sys.argv[1:]
    log_path.append(Path(log))
    trio.run(lambda: run_to_completion(open_store(kind, location), announce=True))
