"""Workflows that receive messages, for the ``tether send`` tests (``tests/test_cli_send.py``).

They run in the test process and in ``python -m tether`` processes
(``--import tests._message_flows``), so they depend on nothing but their module.
"""

from __future__ import annotations

import attrs

import tether


@attrs.frozen
class Item:
    sku: str
    quantity: int


@tether.workflow(name="tests.messages.cart", messages={"item": Item, "note": str})
async def cart(user: str) -> str:
    """Asks first (so the run pauses at once), then takes an item and a note."""
    await tether.ask({"user": user}, bool)
    item = await tether.receive("item", Item)
    note = await tether.receive("note", str)
    return f"{user}: {item.quantity} x {item.sku} ({note})"


@tether.workflow(name="tests.messages.plain")
async def plain() -> int:
    """Declares no messages."""
    return 1
