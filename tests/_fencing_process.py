"""A run whose workflow and step note their fencing token.

``python tests/_fencing_process.py LOG MODE KIND LOCATION [SCHEMA]``.

Run as a script, it opens the store (as :func:`tests._scripts.open_store`),
then runs run ``fenced`` with ``engine.run`` (a run that is stored and
interrupted is taken over: at once, when its owner's process is gone) and
prints the result. The workflow body and the step each append
``WHERE TOKEN PID`` to LOG (fsynced) with the token ``tether.fencing_token()``
gives them. In MODE ``block`` the step then waits forever (for a SIGKILL);
in MODE ``finish`` it returns its token.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import trio

import tether
from tests._scripts import append_synced, open_store

RUN_ID = "fenced"
_log: list[Path] = []
_block: list[bool] = []


def note(where: str) -> int:
    token = tether.fencing_token()
    append_synced(_log[0], f"{where} {token} {os.getpid()}")
    return token


@tether.step
async def fenced_write() -> int:
    token = note("step")
    if _block[0]:
        await trio.sleep_forever()
    return token


@tether.workflow(name="tests.fencing.process")
async def fenced() -> int:
    note("workflow")
    return await fenced_write()


async def main(kind: str, location: str, schema: str) -> None:
    async with tether.open_engine(open_store(kind, location, schema)) as engine:
        print(await engine.run(fenced, run_id=RUN_ID), flush=True)


if __name__ == "__main__":
    log, mode, kind, location, *rest = sys.argv[1:]
    _log.append(Path(log))
    _block.append(mode == "block")
    trio.run(main, kind, location, rest[0] if rest else "tether")
