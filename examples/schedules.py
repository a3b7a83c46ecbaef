"""Run a workflow on a schedule: ``tether.schedule``, served by two workers.

The runnable companion of docs/how-to/schedules.md: each of its code blocks
appears here verbatim, and what the page shows is what this prints. It needs
croniter (``pip install -e '.[schedules]'``). Run it with ``python
examples/schedules.py``: it tells a quarter of an hour of a schedule's life
in virtual time (``trio.testing.MockClock``, the engines on
``tether.testing.TrioWallClock``), so it takes a moment.
"""

from __future__ import annotations

from datetime import UTC, datetime

import trio
import trio.testing

import tether
from tether.testing import TrioWallClock

#: Where the story starts, on the engines' clock: half a minute before 10:00 UTC.
START = datetime(2026, 12, 1, 9, 59, 30, tzinfo=UTC)


@tether.step
async def count_orders(region: str) -> int:
    return {"eu": 12, "us": 30}[region]


@tether.workflow(name="shop.report")
async def report(region: str) -> str:
    orders = await count_orders(region)
    return f"{region}: {orders} orders"


every_minute = tether.schedule(report, cron="* * * * *", args=("eu",), name="report-eu")
catching_up = tether.schedule(
    report, cron="* * * * *", args=("us",), name="report-us", catch_up="once"
)


async def serve(store: tether.stores.Store, clock: TrioWallClock, minutes: int) -> None:
    async with (
        tether.open_engine(store, clock=clock) as first,
        tether.open_engine(store, clock=clock) as second,
        tether.open_worker(first, schedules=(every_minute, catching_up)),
        tether.open_worker(second, schedules=(every_minute, catching_up)),
    ):
        await trio.sleep(minutes * 60)


async def show(store: tether.stores.Store, name: str) -> None:
    async with tether.open_engine(store) as engine:
        for run in await engine.list_runs(workflow="shop.report"):
            if run.run_id.startswith(f"sched:{name}:"):
                print(run.run_id, run.status.value, await engine.wait(run.run_id))


async def main() -> None:
    store = tether.MemoryStore()
    clock = TrioWallClock(START)
    await serve(store, clock, minutes=3)  # until 10:02:30
    print("two workers, three ticks:")
    await show(store, "report-eu")

    await trio.sleep(10 * 60)  # no worker is up from 10:02:30 to 10:12:30
    await serve(store, clock, minutes=1)  # until 10:13:30
    print("skip: the ticks 10:03 to 10:12 were missed")
    await show(store, "report-eu")
    print("once: the most recent missed tick ran when a worker came back")
    await show(store, "report-us")


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
