"""Queues, keys, dedupe ids, debounce, start times and a bounded queue.

The runnable companion of docs/how-to/tenants.md: each of its code blocks
appears here verbatim, and what the page shows is what this prints. Run it
with ``python examples/tenants.py``: it tells a day of a newsletter service
in virtual time (``trio.testing.MockClock``, the engine on
``tether.testing.TrioWallClock``), so it takes a moment.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import trio
import trio.testing

import tether
from tether.testing import TrioWallClock

#: Where the story starts, on the engine's clock.
START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
CLOCK = TrioWallClock(START)

done: list[tuple[datetime, str]] = []  # what the steps really did, and when


@tether.step
async def deliver(tenant: str, what: str) -> str:
    done.append((CLOCK.now(), f"{tenant}: {what}"))
    return what


@tether.workflow(name="news.welcome")
async def welcome(tenant: str, user: str) -> str:
    return await deliver(tenant, f"welcome mail to {user}")


@tether.workflow(name="news.reindex")
async def reindex(tenant: str, edits: int) -> str:
    return await deliver(tenant, f"search index rebuilt after {edits} edits")


emails = tether.Queue("emails", max_queued=3)


async def submit_welcomes(engine: tether.Engine) -> None:
    first = await engine.submit(
        welcome, "acme", "ada", queue=emails, key="acme", dedupe="welcome:ada"
    )
    again = await engine.submit(
        welcome, "acme", "ada", queue=emails, key="acme", dedupe="welcome:ada"
    )
    print(f"welcome ada twice: one run ({first == again})")


async def fill_the_queue(engine: tether.Engine) -> None:
    for user in ("bob", "cy", "dee"):
        try:
            await engine.submit(welcome, "globex", user, queue=emails, key="globex")
        except tether.QueueFullError as full:
            print(f"{user}: refused, {full.queue} holds {full.depth} runs waiting to start")


async def edits(engine: tether.Engine) -> str:
    run_id = ""
    for n in (1, 2, 3):  # three edits, two seconds apart
        run_id = await engine.submit(
            reindex, "acme", n, key="acme", dedupe="reindex:acme", debounce=5.0
        )
        await trio.sleep(2)
    return run_id


async def main() -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store, clock=CLOCK) as engine:
        await submit_welcomes(engine)
        await fill_the_queue(engine)
        tomorrow = START + timedelta(days=1)
        later = await engine.submit(welcome, "initech", "eve", not_before=tomorrow)
        acme = await engine.list_runs(queue="emails", key="acme")
        print(f"queue emails, key acme: {len(acme)} run")
        async with tether.open_worker(engine):
            rebuilt = await edits(engine)
            await engine.wait(rebuilt)
            await engine.wait(later)
    for when, what in sorted(done):  # (runs started together may take any order)
        print(f"{when:%a %H:%M:%S} {what}")


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
