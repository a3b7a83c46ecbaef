"""Workflows and a store with runs of every status, for the dashboard's tests.

:func:`seed` fills a store with one run per status (``RUNS`` names them);
:func:`open_live_run` keeps one more executing, with a live owner, for as long
as its block lasts. Stored values carry ``<script>`` to check they stay text.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from datetime import timedelta

import attrs
import trio

import tether
from tether.stores import DEAD_LETTER_ERROR, ErrorInfo, RunStatus, Store

SCRIPT = "<script>alert('xss')</script>"


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


@attrs.frozen
class Approval:
    approved: bool
    amount: int
    note: str
    priority: Priority = Priority.LOW


_attempts: dict[str, int] = {}


@tether.step
async def fetch(order: str) -> dict[str, str]:
    await trio.sleep(0.01)
    return {"order": order, "comment": SCRIPT}


@tether.step(retries=2)
async def charge(order: str) -> int:
    """Fails twice per order in a process, then charges."""
    _attempts[order] = _attempts.get(order, 0) + 1
    await trio.sleep(0.005)
    if _attempts[order] < 3:
        raise ConnectionError(f"card service timed out for {order}")
    return 4200


@tether.step
async def reserve(order: str) -> str:
    await trio.sleep(0.02)
    return f"shelf-7 for {order}"


@tether.step
async def ship(order: str, amount: int) -> str:
    await trio.sleep(0.005)
    return f"shipped {order} ({amount} cents) {SCRIPT}"


@tether.step
async def explode(order: str) -> str:
    raise ValueError(f"address of {order} is invalid: {SCRIPT}")


@tether.step
async def hold(order: str) -> str:
    await trio.sleep_forever()
    raise AssertionError("unreachable")  # pragma: no cover


@tether.workflow(name="dash.checkout")
async def checkout(order: str) -> str:
    await fetch(order)
    async with tether.parallel() as p:
        charged = p.start_soon(charge, order)
        p.start_soon(reserve, order)
    approval = await tether.ask(
        {"order": order, "cents": charged.result, "comment": SCRIPT}, Approval
    )
    if not approval.approved:
        return f"refused: {approval.note}"
    return await ship(order, approval.amount)


@tether.workflow(name="dash.broken")
async def broken(order: str) -> str:
    await fetch(order)
    return await explode(order)


@tether.workflow(name="dash.stuck")
async def stuck(order: str) -> str:
    await fetch(order)
    return await hold(order)


#: the seeded runs, by status
RUNS = {
    "completed": "o-done",
    "paused": "o-ask",
    "failed": "o-bad",
    "cancelled": "o-off",
    "queued": "o-later",
    "interrupted": "o-cut",
    "dead_letter": "o-dead",
    "waiting": "o-nap",
}
#: the run :func:`open_live_run` executes
LIVE = "o-live"
GOOD = Approval(approved=True, amount=4200, note="ok", priority=Priority.HIGH)


async def seed(store: Store) -> None:
    """One run of every status in *store* (which it opens and closes)."""
    _attempts.clear()  # each run's charge needs its two retries again
    async with tether.open_engine(store) as engine:
        for run_id in (RUNS["completed"], RUNS["paused"], RUNS["cancelled"]):
            with suppress(tether.Paused):
                await engine.run(checkout, run_id, run_id=run_id)
        await engine.resume(RUNS["completed"], {"ask#0": attrs.asdict(GOOD)})
        await engine.cancel(RUNS["cancelled"])
        with suppress(ValueError):
            await engine.run(broken, RUNS["failed"], run_id=RUNS["failed"])
        await engine.submit(checkout, RUNS["queued"], run_id=RUNS["queued"])
        # The caller's deadline cuts it short: running, with no owner.
        with trio.move_on_after(0.2):
            await engine.run(stuck, RUNS["interrupted"], run_id=RUNS["interrupted"])
        await engine.submit(checkout, RUNS["dead_letter"], run_id=RUNS["dead_letter"])
        # As a worker fleet leaves a run whose workers kept dying.
        record = await store.get_run(RUNS["dead_letter"])
        assert record is not None
        dead = attrs.evolve(
            record,
            status=RunStatus.DEAD_LETTER,
            dispatches=5,
            error=ErrorInfo(type=DEAD_LETTER_ERROR, message="its workers died 5 times"),
        )
        await store.update_run(dead)
        await engine.submit(checkout, RUNS["waiting"], run_id=RUNS["waiting"])
        # As a worker leaves a run it parked on its timers.
        record = await store.get_run(RUNS["waiting"])
        assert record is not None
        parked = attrs.evolve(
            record, status=RunStatus.WAITING, wake_at=record.created_at + timedelta(days=3)
        )
        await store.update_run(parked)


@asynccontextmanager
async def open_live_run(store: Store) -> AsyncIterator[tether.Engine]:
    """Execute :data:`LIVE` (it never finishes) in the background of the block.

    Yields once its first step is journaled. Its engine renews leases every
    0.5 s, so a cancel reaches it within that. Leaving the block cancels it
    (as a caller cancellation).
    """
    async with (
        tether.open_engine(store, lease_ttl=1.5) as engine,
        engine.open_run(stuck, LIVE, run_id=LIVE) as run,
    ):
        async for event in run.events():
            if isinstance(event, tether.CheckpointStored):
                break
        yield engine
