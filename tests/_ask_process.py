"""A separate process for tests/test_ask.py: pause a run, or resume it.

``python tests/_ask_process.py pause KIND LOCATION`` runs the approval
workflow until it pauses and prints the pending request keys;
``python tests/_ask_process.py resume KIND LOCATION`` resumes it with an
answer and prints the result. Each side effect is appended to
``LOCATION.effects``, so the test can see what ran in which process.
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

import tether
from tether._cli._main import StoreSpec
from tether.stores import Store


def open_store(kind: str, location: str) -> Store:
    return StoreSpec.parse(f"{kind}:{location}").open_for_writing()


def note(effect: str) -> None:
    with open(EFFECTS, "a", encoding="utf-8") as log:
        log.write(effect + "\n")


@tether.step
async def quote(order: str) -> int:
    note(f"quote {order}")
    return 42


@tether.step
async def ship(order: str) -> str:
    note(f"ship {order}")
    return f"shipped {order}"


async def confirm(order: str) -> bool:
    ok: bool = await tether.ask({"order": order}, bool)
    return ok


@tether.workflow(name="tests.ask_process")
async def approval(order: str) -> str:
    total = await quote(order)
    async with tether.parallel() as p:
        first = p.start_soon(confirm, order, key="first")
        second = p.start_soon(confirm, order, key="second")
    if first.result and second.result:
        return f"{await ship(order)} for {total}"
    return "rejected"


async def main(command: str, kind: str, location: str) -> None:
    async with tether.open_engine(open_store(kind, location)) as engine:
        if command == "pause":
            try:
                await engine.run(approval, "o-1", run_id="o-1")
            except tether.Paused as paused:
                print(" ".join(r.key for r in paused.requests))
        else:
            responses = {"first/ask#0": True, "second/ask#0": True}
            print(await engine.resume("o-1", responses=responses))


if __name__ == "__main__":
    EFFECTS = Path(sys.argv[3] + ".effects")
    trio.run(main, sys.argv[1], sys.argv[2], sys.argv[3])
