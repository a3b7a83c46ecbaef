"""tether on many processes: a submitter, a queue, and two workers.

The runnable companion of docs/how-to/scale-out.md: each of its code blocks
appears here verbatim, and what the page shows is what this prints. Run it
with ``python examples/scale_out.py``; it takes a few seconds. It uses the
store named by ``$TETHER_STORE`` (for example a ``postgresql://`` URL, with
``pip install -e '.[postgres]'``; any URL ``tether.stores.from_url`` takes),
else a new SQLite file in a temporary directory. The workers are copies of
this file, started as ``python examples/scale_out.py worker STORE_URL``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import trio

import tether


@tether.step
async def charge(order_id: str) -> str:
    await trio.sleep(0.1)  # the payment provider
    return f"receipt {order_id}"


@tether.step
async def pack(order_id: str, item: str) -> str:
    await trio.sleep(0.1)
    return f"{item} of {order_id}"


@tether.workflow(name="shop.fulfil")
async def fulfil(order_id: str) -> list[str]:
    receipt = await charge(order_id)
    async with tether.parallel() as p:
        boxes = [p.start_soon(pack, order_id, item) for item in ("lamp", "shade")]
    return [receipt, *(box.result for box in boxes)]


async def serve(store: tether.stores.Store) -> None:
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with (
            tether.open_engine(store, lease_ttl=5.0) as engine,
            tether.open_worker(engine, concurrency=4),
        ):
            async for _ in signals:
                break  # leaving the block drains: claiming stops, held runs are released


async def submit_and_wait(store: tether.stores.Store, orders: list[str]) -> None:
    async with tether.open_engine(store) as engine:
        for order_id in orders:
            await engine.submit(fulfil, order_id, run_id=order_id)
        for order_id in orders:
            print(order_id, await engine.wait(order_id, timeout=60))


def start_workers(url: str, n: int) -> list[subprocess.Popen[bytes]]:
    here = Path(__file__).resolve()
    return [subprocess.Popen([sys.executable, str(here), "worker", url]) for _ in range(n)]


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = os.environ.get("TETHER_STORE") or f"sqlite:{tmp}/shop.db"
        workers = start_workers(url, 2)
        try:
            orders = [f"order-{n}" for n in range(1, 7)]
            await submit_and_wait(tether.stores.from_url(url), orders)
        finally:
            for worker in workers:
                worker.send_signal(signal.SIGTERM)  # each drains, then exits
            for worker in workers:
                worker.wait(timeout=30)
        print("both workers stopped")


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        trio.run(serve, tether.stores.from_url(sys.argv[2]))
    else:
        trio.run(main)
