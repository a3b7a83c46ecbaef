"""The tether tutorial: an order checkout that fails half-way and resumes.

Run it with ``python examples/tutorial.py``; docs/tutorial.md explains each part.
"""

import dataclasses

import trio

import tether
from tether.stores import Store


@dataclasses.dataclass
class Order:
    order_id: str
    item: str
    quantity: int
    total_cents: int


@dataclasses.dataclass
class Receipt:
    order_id: str
    payment: str
    reservation: str


# The outside world, faked: a payment provider that records every charge it
# makes, and a warehouse that starts out of stock.
ORDERS = {"order-1": Order("order-1", item="lamp", quantity=2, total_cents=4998)}
charges: list[str] = []
stock = {"lamp": 0}


class OutOfStockError(Exception):
    """The warehouse cannot reserve the items."""


@tether.step
async def load_order(order_id: str) -> Order:
    return ORDERS[order_id]


@tether.step
async def charge(order: Order) -> str:
    await trio.sleep(0.01)  # the payment provider answers quickly
    charges.append(order.order_id)
    print(f"  charged {order.total_cents} cents for {order.order_id}")
    return f"payment-{len(charges)}"


@tether.step
async def reserve(order: Order) -> str:
    await trio.sleep(0.05)  # the warehouse is slower
    if stock[order.item] < order.quantity:
        raise OutOfStockError(f"{order.item}: {stock[order.item]} left, {order.quantity} wanted")
    stock[order.item] -= order.quantity
    print(f"  reserved {order.quantity} x {order.item}")
    return f"shelf-{order.item}"


@tether.workflow(name="shop.checkout")
async def checkout(order_id: str) -> Receipt:
    order = await load_order(order_id)
    async with tether.parallel() as p:
        payment = p.start_soon(charge, order)
        reservation = p.start_soon(reserve, order)
    return Receipt(order.order_id, payment=payment.result, reservation=reservation.result)


async def first_attempt(store: Store) -> None:
    async with tether.open_engine(store) as engine:
        try:
            await engine.run(checkout, "order-1", run_id="order-1")
        except* OutOfStockError as group:
            print(f"the run failed: {group.exceptions[0]}")

        info = await engine.get_run("order-1")
        assert info is not None
        print(f"status: {info.status}")
        assert info.error is not None
        print(f"error: {info.error.type} from step {info.error.key}")
        for entry in info.entries:
            print(f"journal #{entry.seq}: {entry.key} = {entry.value}")


async def after_restart(store: Store) -> None:
    async with tether.open_engine(store) as engine:
        receipt = await engine.resume("order-1")
        print(f"resumed: {receipt}")
        print(f"charges made: {len(charges)}")

        info = await engine.get_run("order-1")
        assert info is not None
        print(f"status: {info.status}, journal: {[e.key for e in info.entries]}")

        again = await engine.run(checkout, "order-1", run_id="order-1")
        print(f"same receipt: {again == receipt}, charges made: {len(charges)}")


async def main() -> None:
    store = tether.MemoryStore()
    print("first attempt:")
    await first_attempt(store)
    stock["lamp"] = 10  # the warehouse restocks
    print("after a restart:")
    await after_restart(store)


if __name__ == "__main__":
    trio.run(main)
