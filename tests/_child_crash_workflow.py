"""A parent whose child run executes four steps: ``_child_crash_workflow.py KIND PATH LOG [block]``.

Run as a script, it opens the store, prints ``ready``, runs (or resumes) run
``parent`` to completion and prints the result. Every step execution appends
a line with its key to LOG (fsynced before the step goes on), so a test can
count executions across a SIGKILL. With ``block``, the child's step
``work#2`` prints ``blocked`` and waits forever once it has logged: the test
kills the process there, while the child executes inside its parent.
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

import tether
from tests._scripts import append_synced
from tests._scripts import open_store as open_store

RUN_ID = "parent"
CHILD_ID = "parent:child#0"
STEPS = 4
EXPECTED = 1 + sum(i * i for i in range(STEPS)) + 1
log_path: list[Path] = []
blocking: list[bool] = []


@tether.step
async def work(i: int) -> int:
    append_synced(log_path[0], f"work#{i}")
    if i == 2 and blocking:
        print("blocked", flush=True)
        await trio.sleep_forever()
    return i * i


@tether.step
async def before() -> int:
    append_synced(log_path[0], "before#0")
    return 1


@tether.step
async def after(x: int) -> int:
    append_synced(log_path[0], "after#0")
    return x + 1


@tether.workflow(name="tests.children.crash.kid")
async def kid(steps: int) -> int:
    total = 0
    for i in range(steps):
        total += await work(i)
    return total


@tether.workflow(name="tests.children.crash.parent")
async def parent(steps: int) -> int:
    a = await before()
    b = await tether.child(kid, steps)
    return await after(a + b)


async def main(kind: str, location: str) -> None:
    async with tether.open_engine(open_store(kind, location)) as engine:
        print("ready", flush=True)
        print(await engine.run(parent, STEPS, run_id=RUN_ID), flush=True)


if __name__ == "__main__":
    kind, location, log, *flags = sys.argv[1:]
    log_path.append(Path(log))
    blocking.extend([True] if flags == ["block"] else [])
    trio.run(main, kind, location)
