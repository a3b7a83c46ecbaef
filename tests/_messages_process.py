"""A receiver process for tests/test_messages_processes.py.

``python tests/_messages_process.py LOG KIND LOCATION [SCHEMA] [--block-at I]`` opens
the store (``sqlite:LOCATION``, ``file:LOCATION``, or a PostgreSQL URL with
SCHEMA), runs (or resumes) run :data:`RUN_ID` of :func:`receiver` to
completion, and prints its result as JSON. The workflow loops
:data:`COUNT` times: ``await tether.receive("n", int)``, then the step
``took``. Every execution of ``took`` appends ``took#I VALUE`` to LOG
(fsynced before the step goes on), so the test can count executions across
a SIGKILL; with ``--block-at I``, ``took#I`` waits forever once it has
logged (the test kills the process there).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import trio

import tether
from tests._scripts import append_synced
from tests._scripts import open_store as open_store
from tether.stores import Store

RUN_ID = "messages"
COUNT = 10
log_path: list[Path] = []
block_at: list[int] = []


@tether.step
async def took(i: int, value: int) -> int:
    append_synced(log_path[0], f"took#{i} {value}")
    if block_at and i == block_at[0]:
        await trio.sleep_forever()
    return value


@tether.workflow(name="tests.messages.receiver", messages={"n": int})
async def receiver(count: int) -> list[int]:
    got = []
    for i in range(count):
        value = await tether.receive("n", int)
        got.append(await took(i, value))
    return got


async def main(store: Store) -> None:
    async with tether.open_engine(store) as engine:
        result = await engine.run(receiver, COUNT, run_id=RUN_ID)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    argv = sys.argv[1:]
    if "--block-at" in argv:
        i = argv.index("--block-at")
        block_at.append(int(argv[i + 1]))
        del argv[i : i + 2]
    log, kind, location, *schema = argv
    log_path.append(Path(log))
    trio.run(main, open_store(kind, location, *schema))
