"""``python -m tether demo``: a checkout workflow told as a terminal story."""

from __future__ import annotations

import sys
from collections import Counter
from typing import TextIO

import attrs
import trio

from . import _workflow as wfmod
from ._context import parallel
from ._engine import open_engine
from ._hooks import HookEvent
from .stores import MemoryStore, Store
from .testing import Delay, FaultyStore, Hang

__all__ = ("main",)


class OutOfStock(Exception):
    """The warehouse has none left."""


@attrs.frozen
class Order:
    order_id: str
    item: str
    cents: int


@attrs.frozen
class Receipt:
    order_id: str
    charged_cents: int
    tracking: str


executions: Counter[str] = Counter()
stock: dict[str, int] = {}


@wfmod.step
async def load_order(order_id: str) -> Order:
    executions["load_order"] += 1
    return Order(order_id, "teapot", 4200)


@wfmod.step
async def charge(order: Order) -> int:
    executions["charge"] += 1
    return order.cents


@wfmod.step
async def reserve(order: Order) -> str:
    executions["reserve"] += 1
    await trio.sleep(0.1)  # the warehouse answers after the charge is done
    if stock.get(order.item, 0) < 1:
        raise OutOfStock(f"no {order.item} in stock")
    stock[order.item] -= 1
    return f"shelf-{order.item}"


@wfmod.step
async def ship(order: Order, shelf: str) -> str:
    executions["ship"] += 1
    return f"TRACK-{order.order_id}-{shelf}"


@wfmod.workflow(name="demo.checkout")
async def checkout(order_id: str) -> Receipt:
    order = await load_order(order_id)
    async with parallel() as p:
        charged = p.start_soon(charge, order)
        shelf = p.start_soon(reserve, order)
    tracking = await ship(order, shelf.result)
    return Receipt(order_id, charged.result, tracking)


@attrs.define
class _Narrator:
    out: TextIO
    t0: float = 0.0

    def say(self, text: str) -> None:
        print(f"  {trio.current_time() - self.t0:6.3f}s  {text}", file=self.out, flush=True)

    async def on_step_end(self, event: HookEvent) -> None:
        if event.exception is None:
            self.say(f"{event.key} finished")
        else:
            self.say(f"{event.key} ended by {type(event.exception).__name__}: {event.exception}")

    async def on_checkpoint(self, event: HookEvent) -> None:
        assert event.entry is not None
        self.say(f"{event.key} checkpoint stored (seq {event.entry.seq})")


def _slow_charge_saves(store: FaultyStore) -> None:
    store.inject("append", Delay(0.3), when=lambda run_id, entries: entries[0].key == "charge#0")


async def _story(out: TextIO) -> None:
    def title(text: str) -> None:
        print(f"\n{text}", file=out, flush=True)

    narrator = _Narrator(out)
    faulty = FaultyStore(MemoryStore())
    store: Store = faulty
    print("tether demo: one order, run durably (store: in memory)", file=out)

    async with open_engine(store, hooks=[narrator], save_timeout=5.0) as engine:
        title("1. checkout o-1: charge and reserve in parallel; the warehouse is empty,")
        print("   and the store takes 0.3 s to save the charge's checkpoint.", file=out)
        _slow_charge_saves(faulty)
        narrator.t0 = trio.current_time()
        try:
            await engine.run(checkout, "o-1", run_id="o-1")
        except* OutOfStock as group:
            narrator.say(f"run failed: {group.exceptions[0]!r}")
        info = await engine.get_run("o-1")
        assert info is not None
        print(f"   status: {info.status.value}; journal: {[e.key for e in info.entries]}", file=out)
        print("   the charge's checkpoint survived its sibling's failure.", file=out)

        title("2. restock and resume o-1: the charge must not run again.")
        print(
            f"   replayed from the journal, not executed: {[e.key for e in info.entries]}", file=out
        )
        faulty.clear()
        stock["teapot"] = 1
        narrator.t0 = trio.current_time()
        receipt = await engine.resume("o-1")
        narrator.say(f"completed: {receipt}")
        print(f"   executions: {dict(sorted(executions.items()))}", file=out)
        if executions["charge"] != 1:  # pragma: no cover - the demo proves this
            raise AssertionError("the charge ran twice")

        title("3. checkout o-2 while the store hangs; the caller allows 0.2 s.")
        faulty.inject("append", Hang())
        stock["teapot"] = 1
        narrator.t0 = start = trio.current_time()
        try:
            await engine.run(checkout, "o-2", run_id="o-2", timeout=0.2)
        except trio.TooSlowError:
            narrator.say(f"TooSlowError after {trio.current_time() - start:.3f} s, on time")
        info = await engine.get_run("o-2")
        assert info is not None
        print(f"   status: {info.status.value} (resumable; nothing was written)", file=out)
        faulty.clear()
        narrator.t0 = trio.current_time()
        receipt = await engine.resume("o-2")
        narrator.say(f"resumed once the store recovered: {receipt}")
    print("\ndone.", file=out)


def main(out: TextIO | None = None) -> int:
    """Run the demo; returns the process exit code."""
    executions.clear()
    stock.clear()
    trio.run(_story, out or sys.stdout)
    return 0
