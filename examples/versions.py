"""Workflow versions: new runs start on version 2 while version 1 finishes its own.

The code of the "Workflow versions" part of docs/how-to/change-a-workflow.md
and of docs/explanation/queue.md. Run it with ``python examples/versions.py``;
it prints::

    i-2: charged 1450
    stranded: [('i-1', 'shop.invoice', '1')]
    i-1: charged 1200
    stranded: []

A run stores the version of the workflow that started it. It resumes only
where that version is registered, and a worker claims only the runs of the
versions it serves: here a worker with version 2 only leaves the version 1
run queued, listed as stranded, until a worker with version 1 comes.
"""

from __future__ import annotations

import trio

import tether


@tether.step
async def quote_fee(cents: int) -> int:
    return 250


@tether.step
async def charge(cents: int) -> str:
    return f"charged {cents}"


# Version 1, kept registered while its runs finish.
@tether.workflow(name="shop.invoice", version="1")
async def invoice_v1(cents: int) -> str:
    return await charge(cents)


# Version 2: a fee quoted before the charge. New runs start here.
@tether.workflow(name="shop.invoice", version="2")
async def invoice_v2(cents: int) -> str:
    fee = await quote_fee(cents)
    return await charge(cents + fee)


async def main() -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        await engine.submit(invoice_v1, 1200, run_id="i-1")  # started before the release
        await engine.submit(invoice_v2, 1200, run_id="i-2")
        async with tether.open_worker(engine, workflows=[invoice_v2]):
            print("i-2:", await engine.wait("i-2"))
            stranded = await engine.list_runs(stranded=True)
            print("stranded:", [(r.run_id, r.workflow, r.version) for r in stranded])
        async with tether.open_worker(engine, workflows=[invoice_v1]):
            print("i-1:", await engine.wait("i-1"))
            print("stranded:", [r.run_id for r in await engine.list_runs(stranded=True)])


if __name__ == "__main__":
    trio.run(main)
