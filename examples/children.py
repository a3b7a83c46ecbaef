"""Child runs with tether: an order that ships each parcel as a run of its own.

The runnable companion of docs/how-to/child-runs.md. Run it with
``python examples/children.py``.
"""

import trio

import tether
from tether.stores import EntryKind

handed_over: list[str] = []  # what the courier really received
out_of_paper = {"p-2"}  # the label printer fails once for this parcel


@tether.step
async def print_label(parcel: str) -> str:
    if parcel in out_of_paper:
        await trio.sleep(0.1)  # (the other parcel is on its way by then)
        out_of_paper.discard(parcel)
        raise OSError(f"printer out of paper for {parcel}")
    return f"label-{parcel}"


@tether.step
async def hand_to_courier(label: str) -> str:
    handed_over.append(label)
    return f"tracking-{label}"


@tether.workflow(name="shop.ship_parcel")
async def ship_parcel(parcel: str) -> str:
    label = await print_label(parcel)
    return await hand_to_courier(label)


@tether.step
async def charge(order_id: str) -> int:
    return 4200


@tether.workflow(name="shop.fulfil")
async def fulfil(order_id: str, parcels: list[str]) -> list[str]:
    await charge(order_id)
    async with tether.parallel() as p:
        shipments = [p.start_soon(tether.child, ship_parcel, parcel) for parcel in parcels]
    return [s.result for s in shipments]


@tether.step
async def wait_for_supplier(sku: str) -> int:
    await trio.sleep(3600)  # a supplier that answers within the hour
    return 10


@tether.workflow(name="shop.restock_item")
async def restock_item(sku: str) -> int:
    return await wait_for_supplier(sku)


@tether.workflow(name="shop.restock")
async def restock(skus: list[str]) -> int:
    total = 0
    for sku in skus:
        total += await tether.child(restock_item, sku)
    return total


async def show_runs(engine: tether.Engine, prefix: str) -> None:
    for run in sorted(await engine.list_runs(), key=lambda r: r.run_id):
        if run.run_id.startswith(prefix):
            print(f"{run.run_id:<12} {run.status:<10} {run.error or ''}".rstrip())


async def main() -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        try:
            await engine.run(fulfil, "o-1", ["p-1", "p-2"], run_id="o-1")
        except* OSError as failed:
            print(f"o-1 failed: {failed.exceptions[0]!r}")
        await show_runs(engine, "o-1")

        info = await engine.get_run("o-1")
        assert info is not None
        for entry in sorted(info.entries, key=lambda e: e.position or 0):
            if entry.kind is EntryKind.CHILD:
                print(f"{entry.key} at position {entry.position}: {entry.value}")

        print(await engine.resume("o-1"))
        print(f"handed to the courier: {handed_over}")
        await show_runs(engine, "o-1")

        with trio.move_on_after(1):  # the caller gives up after a second
            await engine.run(restock, ["sku-9"], run_id="r-1")
        await show_runs(engine, "r-1")
        await engine.cancel("r-1")
        await show_runs(engine, "r-1")


if __name__ == "__main__":
    trio.run(main)
