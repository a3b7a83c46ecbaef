"""Workflows for the ``tether run`` / ``resume`` / ``submit`` tests (``tests/test_cli_exec.py``).

They run in the test process and in ``python -m tether`` processes
(``--import tests._cli_flows``), so they depend on nothing but their module.
"""

from __future__ import annotations

import os

import attrs
import trio

import tether

#: The environment variable that lets :func:`gate` through: set to ``open``
#: in a process, the gate never closes there.
GATE = "TETHER_TEST_GATE"


@attrs.frozen
class Parcel:
    order_id: str
    weight_grams: int


@tether.step
async def add(a: int, b: int) -> int:
    return a + b


@tether.workflow(name="tests.cli.sum_then_confirm")
async def sum_then_confirm(a: int, b: int, label: str) -> str:
    total = await add(a, b)
    ok = await tether.ask({"total": total}, bool)
    return f"{label}: {total} {'confirmed' if ok else 'refused'}"


@tether.workflow(name="tests.cli.boom")
async def boom() -> None:
    raise ValueError("boom")


@tether.step
async def pack(order_id: str, grams: int) -> Parcel:
    return Parcel(order_id, grams)


@tether.workflow(name="tests.cli.packed")
async def packed(order_id: str, grams: int) -> Parcel:
    """A run whose result is not a string: an attrs instance."""
    return await pack(order_id, grams)


@tether.workflow(name="tests.cli.relabel")
async def relabel(parcel: Parcel, copies: int, note: str) -> list[Parcel]:
    """Arguments of three types, decoded from the command line by their annotations."""
    return [attrs.evolve(parcel, order_id=f"{parcel.order_id}/{note}")] * copies


@tether.step
async def gate(order_id: str) -> str:
    """Waits forever, unless ``$TETHER_TEST_GATE`` is ``open`` in this process."""
    if os.environ.get(GATE) != "open":
        await trio.sleep_forever()
    return f"through {order_id}"


@tether.workflow(name="tests.cli.waits")
async def waits(order_id: str) -> str:
    total = await add(1, 2)
    return f"{await gate(order_id)} ({total})"


not_a_workflow = 42
