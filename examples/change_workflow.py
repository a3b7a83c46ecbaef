"""Changing a workflow that has runs in flight, with tether.

The runnable companion of docs/how-to/change-a-workflow.md. Run it with
``python examples/change_workflow.py``.

Each "deploy" below registers another version of ``shop.checkout``, as the
next release of a service would, and resumes the stored runs with a new
engine, as the next process would.
"""

import contextlib

import attrs
import trio

import tether


@attrs.frozen
class Order:
    order_id: str
    cents: int


@attrs.frozen
class Receipt:
    cents: int
    reference: str


@tether.step
async def load_order(order_id: str) -> Order:
    return Order(order_id=order_id, cents=1200)


@tether.step
async def check_stock(order: Order) -> bool:
    return True


@tether.step
async def quote_fee(order: Order) -> int:
    return 250


@tether.step
async def charge(cents: int) -> str:
    return f"charged {cents}"


@tether.step(name="charge")
async def charge_with_receipt(cents: int) -> Receipt:
    return Receipt(cents=cents, reference="r-1")


@tether.step
async def ship(order: Order) -> str:
    return f"shipped {order.order_id}"


# -- the first version: the runs started with it are the ones to keep working ---------


@tether.workflow(name="shop.checkout")
async def checkout(order_id: str) -> str:
    order = await load_order(order_id)
    await check_stock(order)
    receipt = await charge(order.cents)
    ok: bool = await tether.ask({"order": order_id, "receipt": receipt}, bool)
    return f"{await ship(order)} ({receipt})" if ok else "cancelled"


# -- changes that break the runs in flight ------------------------------------------------


@tether.workflow(name="shop.checkout")
async def checkout_inserted(order_id: str) -> str:
    order = await load_order(order_id)
    fee = await quote_fee(order)  # a step inserted before journaled ones
    await check_stock(order)
    receipt = await charge(order.cents + fee)
    ok: bool = await tether.ask({"order": order_id, "receipt": receipt}, bool)
    return f"{await ship(order)} ({receipt})" if ok else "cancelled"


@tether.workflow(name="shop.checkout")
async def checkout_removed(order_id: str) -> str:
    order = await load_order(order_id)
    receipt = await charge(order.cents)  # check_stock removed
    ok: bool = await tether.ask({"order": order_id, "receipt": receipt}, bool)
    return f"{await ship(order)} ({receipt})" if ok else "cancelled"


@tether.workflow(name="shop.checkout")
async def checkout_reordered(order_id: str) -> str:
    order = await load_order(order_id)
    receipt = await charge(order.cents)  # charged before the stock is checked
    await check_stock(order)
    ok: bool = await tether.ask({"order": order_id, "receipt": receipt}, bool)
    return f"{await ship(order)} ({receipt})" if ok else "cancelled"


@tether.workflow(name="shop.checkout")
async def checkout_receipt(order_id: str) -> str:
    order = await load_order(order_id)
    await check_stock(order)
    receipt = await charge_with_receipt(order.cents)  # returns a Receipt now, not a str
    ok: bool = await tether.ask({"order": order_id, "receipt": receipt.reference}, bool)
    return f"{await ship(order)} ({receipt.reference})" if ok else "cancelled"


@tether.workflow(name="shop.checkout")
async def checkout_other_arguments(order_id: str) -> str:
    order = await load_order(order_id)
    await check_stock(order)
    receipt = await charge(order.cents + 250)  # the fee added to the amount
    ok: bool = await tether.ask({"order": order_id, "receipt": receipt}, bool)
    return f"{await ship(order)} ({receipt})" if ok else "cancelled"


@tether.workflow(name="shop.checkout")
async def checkout_coupon(order_id: str, coupon: str) -> str:
    order = await load_order(order_id)
    await check_stock(order)
    receipt = await charge(order.cents if coupon != "FREE" else 0)
    ok: bool = await tether.ask({"order": order_id, "receipt": receipt}, bool)
    return f"{await ship(order)} ({receipt})" if ok else "cancelled"


# -- the safe way: both paths, chosen per run -----------------------------------------------


@tether.workflow(name="shop.checkout")
async def checkout_patched(order_id: str) -> str:
    order = await load_order(order_id)
    await check_stock(order)
    cents = order.cents
    if tether.patched("shipping-fee"):
        cents += await quote_fee(order)
    receipt = await charge(cents)
    ok: bool = await tether.ask({"order": order_id, "receipt": receipt}, bool)
    return f"{await ship(order)} ({receipt})" if ok else "cancelled"


@tether.workflow(name="shop.checkout")
async def checkout_deprecated(order_id: str) -> str:
    order = await load_order(order_id)
    await check_stock(order)
    tether.deprecate_patch("shipping-fee")
    receipt = await charge(order.cents + await quote_fee(order))
    ok: bool = await tether.ask({"order": order_id, "receipt": receipt}, bool)
    return f"{await ship(order)} ({receipt})" if ok else "cancelled"


def deploy(version: tether.Workflow[..., str]) -> None:
    """The next release: from now on, runs of shop.checkout resume with *version*."""
    tether.workflow(name=version.name)(version.fn)


def first_sentence(exc: Exception) -> str:
    """What differs: the message up to the advice every divergence ends with."""
    return str(exc).partition(" The code changed since the run started")[0]


async def main() -> None:
    store = tether.MemoryStore()
    deploy(checkout)
    async with tether.open_engine(store) as engine:
        try:
            await engine.run(checkout, "o-1", run_id="o-1")
        except tether.Paused:
            print("o-1 is waiting for approval")

    for version in (
        checkout_inserted,
        checkout_removed,
        checkout_reordered,
        checkout_receipt,
        checkout_other_arguments,
        checkout_coupon,
    ):
        deploy(version)
        async with tether.open_engine(store) as engine:
            try:
                await engine.resume("o-1", responses={"ask#0": True})
            except tether.NonDeterminismError as exc:
                if version is checkout_inserted:
                    print(f"NonDeterminismError: {exc}")
                else:
                    print(f"NonDeterminismError: {first_sentence(exc)}")
            info = await engine.get_run("o-1")
            assert info is not None
            print(f"o-1 is still {info.status}, waiting on {[r.key for r in info.requests]}")

    deploy(checkout_patched)
    async with tether.open_engine(store) as engine:
        with contextlib.suppress(tether.Paused):
            await engine.run(checkout_patched, "o-2", run_id="o-2")  # it pauses for approval
        print(await engine.resume("o-1", responses={"ask#0": True}))
        print(await engine.resume("o-2", responses={"ask#0": True}))
        info = await engine.get_run("o-2")
        assert info is not None
        print([(e.key, e.kind.value, e.position) for e in info.entries])
        with contextlib.suppress(tether.Paused):
            await engine.run(checkout_patched, "o-3", run_id="o-3")  # it pauses for approval

    deploy(checkout_deprecated)
    async with tether.open_engine(store) as engine:
        with contextlib.suppress(tether.Paused):
            await engine.run(checkout_deprecated, "o-4", run_id="o-4")  # it pauses for approval
        print(await engine.resume("o-3", responses={"ask#0": True}))  # recorded the marker
        print(await engine.resume("o-4", responses={"ask#0": True}))  # started after it
    deploy(checkout)  # (leave the first version registered, as at the start)


if __name__ == "__main__":
    trio.run(main)
