"""A shop's workflows: the example project the explorer and the pytest plugin are shown on.

Five shapes of workflow: sequential steps, a fan-out where one branch fails,
a human approval, a stream, and a delivery that waits for messages. Steps
only compute from their arguments, so every run of a workflow with the same
arguments has the same outcome: what the explorer needs to compare an
interrupted run with an uninterrupted one.
"""

from collections.abc import AsyncIterator

import attrs
import trio

import tether

PRICES = {"lamp": 2499, "desk": 18900, "chair": 7450}


class UnknownItemError(Exception):
    """An item the catalogue does not have."""


@attrs.frozen
class Order:
    order_id: str
    items: tuple[str, ...]


# -- sequential: one step after another --------------------------------------


@tether.step
async def load_order(order_id: str) -> Order:
    await trio.sleep(0.1)  # the order database
    return Order(order_id, items=("lamp", "chair"))


@tether.step
async def price(order: Order) -> int:
    return sum(PRICES[item] for item in order.items)


@tether.step
async def charge(order_id: str, cents: int) -> str:
    await trio.sleep(0.3)  # the payment provider
    return f"payment-{order_id}-{cents}"


@tether.workflow(name="shop.checkout")
async def checkout(order_id: str) -> str:
    order = await load_order(order_id)
    cents = await price(order)
    return await charge(order_id, cents)


# -- fan-out with a failure ----------------------------------------------------


@tether.step
async def reserve(item: str) -> str:
    await trio.sleep(0.05 * len(item))
    if item not in PRICES:
        raise UnknownItemError(f"no such item: {item}")
    return f"shelf-{item}"


@tether.workflow(name="shop.reserve_all")
async def reserve_all(items: list[str]) -> list[str]:
    async with tether.parallel() as p:
        handles = [p.start_soon(reserve, item) for item in items]
    return [h.result for h in handles]


# -- a human approval -------------------------------------------------------------


@attrs.frozen
class Decision:
    approved: bool
    note: str = ""


@tether.step
async def refund(order_id: str, cents: int) -> str:
    await trio.sleep(0.2)
    return f"refund-{order_id}-{cents}"


@tether.workflow(name="shop.refund")
async def approve_refund(order_id: str, cents: int) -> str:
    order = await load_order(order_id)
    decision = await tether.ask({"order": order.order_id, "cents": cents}, Decision)
    if not decision.approved:
        return f"refused: {decision.note}"
    return await refund(order_id, cents)


# -- a stream -----------------------------------------------------------------------


@tether.stream_step
async def sales(day: str) -> AsyncIterator[int]:
    for cents in (2499, 18900, 7450):
        await trio.sleep(0.1)  # the next row
        yield cents


@tether.step
async def report(day: str, total: int) -> str:
    return f"{day}: {total} cents"


@tether.workflow(name="shop.daily_report")
async def daily_report(day: str) -> str:
    total = 0
    async with tether.open_stream(sales, day) as rows:
        async for cents in rows:
            total += cents
    return await report(day, total)


# -- messages -------------------------------------------------------------------------


@tether.step
async def dispatch(order_id: str) -> str:
    await trio.sleep(0.1)  # the warehouse
    return f"parcel-{order_id}"


@tether.workflow(name="shop.deliver", messages={"scanned": str})
async def deliver(order_id: str) -> str:
    parcel = await dispatch(order_id)
    depot = await tether.receive("scanned", str)  # the courier's scans, in the order sent
    door = await tether.receive("scanned", str)
    return f"{parcel}: {depot}, then {door}"
