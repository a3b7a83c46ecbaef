"""README's first example: two steps in parallel, journaled in a SQLite file.

Run it with ``python examples/readme.py``: it prints the checkout's result,
``(1250, 'shelf-o-1')``, and leaves ``runs.db`` in the current directory. Run
it again: the run ``o-1`` is finished, so its stored result comes back without
executing anything.
"""

import trio

import tether


@tether.step
async def charge(order_id: str) -> int:
    return 1250  # call the payment provider here: the result is journaled


@tether.step
async def reserve(order_id: str) -> str:
    return f"shelf-{order_id}"


@tether.workflow(name="shop.checkout")
async def checkout(order_id: str) -> tuple[int, str]:
    async with tether.parallel() as p:
        receipt = p.start_soon(charge, order_id)
        shelf = p.start_soon(reserve, order_id)
    return receipt.result, shelf.result


async def main() -> None:
    async with tether.open_engine(tether.SQLiteStore("runs.db")) as engine:
        print(await engine.run(checkout, "o-1", run_id="o-1", timeout=5.0))


trio.run(main)
