"""A workflow changed with ``tether.patched()``, and a process that runs it.

tests/test_patched.py uses :func:`checkout` in its own process, and runs this
file as a separate one::

    python tests/_patch_process.py CODE COMMAND RUN_ID EFFECTS KIND LOCATION [SCHEMA]

CODE is the version of the code the process has (``old``: before the change,
``new``: with ``patched("fee")``, ``deprecated``: with ``deprecate_patch("fee")``).
COMMAND ``start`` starts the run (it pauses; the pending keys are printed),
``resume`` answers it and prints the result. Each step that executes appends
a line to EFFECTS, so the test sees what ran in which process. KIND is
``sqlite``, ``file`` or ``postgres`` (LOCATION a URL, SCHEMA its schema).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import trio

import tether
from tether.stores import Store

#: the code this process has now
CODE = {"code": "old"}
#: steps that executed here (and, when set, appended to EFFECTS_FILE)
effects: Counter[str] = Counter()
EFFECTS_FILE: list[Path] = []


def note(effect: str) -> None:
    effects[effect] += 1
    for path in EFFECTS_FILE:
        with path.open("a", encoding="utf-8") as log:
            log.write(effect + "\n")


@tether.step
async def quote(order: str) -> int:
    note(f"quote {order}")
    return 42


@tether.step
async def fee(order: str) -> int:
    note(f"fee {order}")
    return 5


@tether.step
async def reserve(order: str) -> str:
    note(f"reserve {order}")
    return f"reserved {order}"


@tether.workflow(name="tests.patch_process.checkout")
async def checkout(order: str) -> str:
    total = await quote(order)
    code = CODE["code"]
    if code == "new":
        if tether.patched("fee"):  # the change: a fee on every order
            total += await fee(order)
    elif code == "deprecated":
        tether.deprecate_patch("fee")  # no run is on the old path any more
        total += await fee(order)
    elif code == "final":
        total += await fee(order)  # no run with the marker is unfinished either
    await reserve(order)
    ok: bool = await tether.ask({"order": order, "total": total}, bool)
    return f"{order}: {total}" if ok else "rejected"


def open_store(kind: str, location: str, schema: str | None) -> Store:
    if kind == "sqlite":
        return tether.SQLiteStore(location)
    if kind == "file":
        return tether.FileStore(location)
    assert kind == "postgres" and schema is not None
    return tether.PostgresStore(location, schema=schema, pool_size=2)


async def main(command: str, run_id: str, store: Store) -> None:
    async with tether.open_engine(store) as engine:
        if command == "start":
            try:
                await engine.run(checkout, run_id, run_id=run_id)
            except tether.Paused as paused:
                print(" ".join(r.key for r in paused.requests))
        else:
            print(await engine.resume(run_id, responses={"ask#0": True}))


if __name__ == "__main__":
    code, command, run_id, effects_path, kind, location, *schema = sys.argv[1:]
    CODE["code"] = code
    EFFECTS_FILE.append(Path(effects_path))
    trio.run(main, command, run_id, open_store(kind, location, schema[0] if schema else None))
