"""A submitting process for tests/test_flow_processes.py, and the workflow its runs execute.

``python tests/_flow_process.py SPEC NAME MODE COUNT ROUNDS [SECONDS]`` opens
the store SPEC (``sqlite:PATH`` or a ``postgresql://`` URL, as ``--store``
takes it) and its engine. Then, ROUNDS times: it prints ``ready``, waits for
a line on stdin (so that the test releases its processes together, or one
after another), makes COUNT submits of :func:`job` at once (trio tasks),
and prints one line of JSON. Submit *i* of round *r* submits
``job(NAME, r * COUNT + i)``:

- ``dedupe``: into :data:`QUEUE` with the dedupe id :data:`DEDUPE`; prints
  the run ids the submits returned;
- ``debounce``: in the default queue with the dedupe id :data:`DEBOUNCE`
  and ``debounce=SECONDS``; prints the run ids the submits returned;
- ``fill``: into :data:`QUEUE` with ``max_queued`` :data:`MAX_QUEUED`, as
  run ``NAME-I``; prints ``{"stored": [...], "refused": [...]}``, the run
  ids of the submits that returned and of those that raised
  ``tether.QueueFullError``.

Worker processes serve :func:`job` with ``--import tests._flow_process``.
Its step :func:`saw` appends ``NAME I PID`` to ``$TETHER_FLEET_LOG/executions.log``
(fsynced) each time it executes, and returns what it saw.
"""

from __future__ import annotations

import json
import os
import sys
from functools import partial
from pathlib import Path
from typing import Any, Final

import trio

import tether
from tests._fleet import LOG_ENV
from tests._scripts import append_synced
from tether._cli._main import StoreSpec

#: The queue of the ``dedupe`` and ``fill`` submits.
QUEUE: Final = "q"
#: The ``max_queued`` of the ``fill`` submits.
MAX_QUEUED: Final = 5
#: The dedupe ids of the ``dedupe`` and ``debounce`` submits.
DEDUPE: Final = "welcome:ada"
DEBOUNCE: Final = "reindex:acme"


@tether.step
async def saw(name: str, i: int) -> dict[str, Any]:
    append_synced(Path(os.environ[LOG_ENV]) / "executions.log", f"{name} {i} {os.getpid()}")
    return {"name": name, "i": i, "pid": os.getpid()}


@tether.workflow(name="tests.flow_process.job")
async def job(name: str, i: int) -> dict[str, Any]:
    """One step: what it saw (its arguments, the pid of the process executing it)."""
    return await saw(name, i)


async def submit(
    engine: tether.Engine, name: str, mode: str, i: int, seconds: float | None
) -> tuple[str, bool]:
    """One submit of *mode*: the run id it returned (or was refused), and whether stored."""
    if mode == "dedupe":
        return await engine.submit(job, name, i, queue=tether.Queue(QUEUE), dedupe=DEDUPE), True
    if mode == "debounce":
        return await engine.submit(job, name, i, dedupe=DEBOUNCE, debounce=seconds), True
    assert mode == "fill", mode
    queue = tether.Queue(QUEUE, max_queued=MAX_QUEUED)
    run_id = f"{name}-{i}"
    try:
        assert await engine.submit(job, name, i, run_id=run_id, queue=queue) == run_id
    except tether.QueueFullError:
        return run_id, False
    return run_id, True


async def one_round(
    engine: tether.Engine, name: str, mode: str, first: int, count: int, seconds: float | None
) -> Any:
    """*count* submits at once, from *first* on; what the round prints."""
    got: list[tuple[str, bool]] = []

    async def one(i: int) -> None:
        got.append(await submit(engine, name, mode, i, seconds))

    async with trio.open_nursery() as nursery:
        for i in range(first, first + count):
            nursery.start_soon(one, i)
    if mode == "fill":
        return {
            "stored": [run_id for run_id, stored in got if stored],
            "refused": [run_id for run_id, stored in got if not stored],
        }
    return [run_id for run_id, _ in got]


async def main(
    spec: str, name: str, mode: str, count: int, rounds: int, seconds: float | None
) -> None:
    async with tether.open_engine(StoreSpec.parse(spec).open_for_writing()) as engine:
        # Reads at once, as many as the submits to come: a PostgreSQL store opens its pool's
        # connections now, so that the submits, released together, race from the start.
        async with trio.open_nursery() as nursery:
            for _ in range(count):
                nursery.start_soon(partial(engine.list_runs, limit=1))
        for r in range(rounds):
            print("ready", flush=True)
            await trio.to_thread.run_sync(sys.stdin.readline)
            report = await one_round(engine, name, mode, r * count, count, seconds)
            print(json.dumps(report), flush=True)


if __name__ == "__main__":
    spec, name, mode, count, rounds, *rest = sys.argv[1:]
    seconds = float(rest[0]) if rest else None
    trio.run(main, spec, name, mode, int(count), int(rounds), seconds)
