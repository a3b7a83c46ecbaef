"""Durable timers and retry policies: a free trial that ends with a charge.

The runnable companion of docs/how-to/timers-and-retries.md: each of its
code blocks appears here verbatim, and what the page shows is what this
prints. Run it with ``python examples/timers.py``: it tells two weeks of a
trial in virtual time (``trio.testing.MockClock``, the engines on
``tether.testing.TrioWallClock``), so it takes a moment, not two weeks.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import trio
import trio.testing

import tether
from tether.testing import TrioWallClock

#: Where the story starts, on the engines' clock.
START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
CLOCK = TrioWallClock(START)
#: Leases renewed hourly: in virtual time, each renewal is still real work.
LEASE = 3600.0

sent: list[str] = []  # what the e-mail step really did
gateway_calls: list[datetime] = []  # when the payment gateway was called


def day(moment: datetime) -> str:
    """Which day of the trial *moment* is, and the time: ``day 3, 09:00``."""
    return f"day {(moment - START).days}, {moment:%H:%M}"


@tether.step
async def send_email(user: str, subject: str) -> str:
    sent.append(f"{day(CLOCK.now())}: {subject} to {user}")
    return subject


@tether.step(
    retry=tether.Retry(
        attempts=5, initial=60, backoff=2.0, maximum=600, jitter=False, on=(ConnectionError,)
    )
)
async def charge(user: str, cents: int) -> str:
    gateway_calls.append(CLOCK.now())
    if len(gateway_calls) < 3:
        raise ConnectionError("the payment gateway timed out")
    return f"charged {cents / 100:.2f} to {user}"


@tether.workflow(name="shop.trial")
async def trial(user: str, ends: datetime) -> str:
    await send_email(user, "welcome")
    await tether.sleep(3 * 24 * 3600)  # three days
    await send_email(user, "how is it going?")
    await tether.sleep_until(ends)
    return await charge(user, 1900)


async def part_one(store: tether.stores.Store) -> None:
    ends = START + timedelta(days=14)
    async with tether.open_engine(store, clock=CLOCK, lease_ttl=LEASE) as engine:
        with trio.move_on_after(24 * 3600):  # the process is stopped on day 1
            await engine.run(trial, "ada", ends, run_id="trial-ada")
        info = await engine.get_run("trial-ada")
        assert info is not None
        print(f"stopped on {day(CLOCK.now())}; status {info.status.value}")
        for entry in info.entries:
            print(f"  {entry.key}: {entry.kind.value} {entry.value}")


async def part_two(store: tether.stores.Store) -> None:
    async with tether.open_engine(store, clock=CLOCK, lease_ttl=LEASE) as engine:  # a new process
        result = await engine.resume("trial-ada")
        print(f"{result} on {day(CLOCK.now())}")
    for line in sent:
        print(" ", line)


async def part_three(store: tether.stores.Store) -> None:
    async with tether.open_engine(store, clock=CLOCK, lease_ttl=LEASE) as engine:
        info = await engine.get_run("trial-ada")
        assert info is not None
        for entry in info.entries:
            if entry.key == "charge#0":
                outcome = entry.error or entry.value
                print(f"  attempt {entry.attempt} {entry.status.value}: {outcome}")
                if entry.status is tether.stores.EntryStatus.FAILED:
                    print(f"    next: {entry.value}")


async def part_four(store: tether.stores.Store) -> None:
    ends = CLOCK.now() + timedelta(days=14)
    async with (
        tether.open_engine(store, clock=CLOCK, lease_ttl=LEASE) as engine,
        tether.open_worker(engine, park_after=60, poll_interval=3600) as worker,
    ):
        await engine.submit(trial, "grace", ends, run_id="trial-grace")
        await trio.sleep(10)
        info = await engine.get_run("trial-grace")
        assert info is not None and info.wake_at is not None
        print(f"{info.status.value} until {day(info.wake_at)}, owner {info.owner}")
        print(f"runs held by the worker: {len(worker.running)}")
        await trio.sleep(15 * 24 * 3600)  # two weeks go by
        result = await engine.wait("trial-grace")
        print(f"{result} on {day(gateway_calls[-1])}; the worker parked it", end=" ")
        print(f"{worker.outcomes['waiting']} times")


async def main() -> None:
    store = tether.MemoryStore()
    print("-- a sleep survives a restart")
    await part_one(store)
    await part_two(store)
    print("-- the charge was retried with backoff")
    await part_three(store)
    print("-- under a worker, a sleeping run parks")
    gateway_calls.clear()
    await part_four(store)


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
