"""A process that appends to a shared store: ``_store_worker.py KIND LOCATION RUN NAME N``.

Prints ``ready`` once the store is open, waits for a line on stdin, then
appends N entries keyed ``NAME#i`` one by one, and exits.
"""

from __future__ import annotations

import sys

import trio

from tether._cli._main import StoreSpec
from tether.stores import Entry, Store, utcnow


def open_store(kind: str, location: str) -> Store:
    return StoreSpec.parse(f"{kind}:{location}").open_for_writing()


async def main(kind: str, location: str, run_id: str, name: str, n: int) -> None:
    store = open_store(kind, location)
    await store.open()
    try:
        print("ready", flush=True)
        await trio.to_thread.run_sync(sys.stdin.readline)
        for i in range(n):
            now = utcnow()
            entry = Entry(run_id=run_id, key=f"{name}#{i}", started_at=now, finished_at=now)
            await store.append(run_id, [entry])
    finally:
        await store.close()


if __name__ == "__main__":
    kind, location, run_id, name, n = sys.argv[1:]
    trio.run(main, kind, location, run_id, name, int(n))
