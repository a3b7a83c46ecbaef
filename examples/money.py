"""Store your own types: exact money as Decimal, UUIDs, and a registered Money class.

The runnable companion of docs/how-to/store-your-own-types.md. Run it with
``python examples/money.py``.
"""

import contextlib
from decimal import Decimal
from typing import Any
from uuid import UUID

import attrs
import trio

import tether


@attrs.frozen
class Line:
    sku: str
    unit_price: Decimal  # built in: stored exactly, as the text "19.90"
    quantity: int


class Money:
    """An amount in a currency, as a money library might define it (not attrs)."""

    __slots__ = ("amount", "currency")

    def __init__(self, amount: Decimal | int | str, currency: str) -> None:
        self.amount = Decimal(amount)
        self.currency = currency

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Money):
            return NotImplemented
        return (self.amount, self.currency) == (other.amount, other.currency)

    def __hash__(self) -> int:
        return hash((self.amount, self.currency))

    def __sub__(self, other: "Money") -> "Money":
        assert other.currency == self.currency
        return Money(self.amount - other.amount, self.currency)

    def __str__(self) -> str:
        return f"{self.amount} {self.currency}"


def encode_money(money: Money) -> dict[str, str]:
    return {"amount": str(money.amount), "currency": money.currency}


def decode_money(data: Any) -> Money:
    amount, currency = data["amount"], data["currency"]
    if not isinstance(amount, str):  # a JSON number would not be exact
        raise TypeError(f"amount must be a decimal string, got {amount!r}")
    return Money(Decimal(amount), currency)


tether.register_type(Money, encode=encode_money, decode=decode_money)

charges: list[str] = []  # what the charge step really did


@tether.step
async def price_order(order_id: UUID) -> list[Line]:
    return [
        Line(sku="lamp", unit_price=Decimal("19.90"), quantity=2),
        Line(sku="bulb", unit_price=Decimal("2.45"), quantity=3),
    ]


@tether.step
async def charge(order_id: UUID, amount: Money) -> Money:
    charges.append(f"{order_id}: {amount}")
    return amount


@tether.workflow(name="shop.invoice")
async def invoice(order_id: UUID, budget: Money) -> Money:
    lines = await price_order(order_id)
    subtotal = Money(sum(line.unit_price * line.quantity for line in lines), budget.currency)
    discount = await tether.ask({"order": order_id, "subtotal": subtotal}, Money)
    total = subtotal - discount
    if total.amount > budget.amount:
        raise ValueError(f"{total} is over the budget of {budget}")
    return await charge(order_id, total)


class Temperature:
    """A type whose registration rounds: decode(encode(t)) != t."""

    def __init__(self, celsius: float) -> None:
        self.celsius = celsius

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Temperature) and other.celsius == self.celsius

    def __repr__(self) -> str:
        return f"Temperature({self.celsius})"


tether.register_type(
    Temperature, encode=lambda t: round(t.celsius, 1), decode=lambda c: Temperature(c)
)


@tether.step
async def read_sensor() -> Temperature:
    return Temperature(21.25)


@tether.workflow(name="greenhouse.check")
async def check() -> Temperature:
    return await read_sensor()


async def main() -> None:
    store = tether.MemoryStore()
    order_id = UUID("6f1c2a4e-8b3d-4c5e-9f60-7a8b9c0d1e2f")
    async with tether.open_engine(store) as engine:
        try:
            await engine.run(invoice, order_id, Money("100.00", "EUR"), run_id="inv-1")
        except tether.Paused as paused:
            [request] = paused.requests
            print(f"{request.key} asks for {request.response_type}: {request.payload}")

    # Another engine (in real life: another process, on a durable store) answers.
    async with tether.open_engine(store) as engine:
        total = await engine.resume("inv-1", responses={"ask#0": Money("5.00", "EUR")})
        print(f"charged {total} ({charges})")
        info = await engine.get_run("inv-1")
        assert info is not None
        for entry in info.entries:
            print(f"  {entry.key}: {entry.value}")

        # A response may come as JSON values (`tether resume --respond` sends
        # them): decode_money reads them, and refuses what it cannot read exactly.
        with contextlib.suppress(tether.Paused):
            await engine.run(invoice, order_id, Money("100.00", "EUR"), run_id="inv-2")
        answer = {"amount": 5, "currency": "EUR"}
        try:
            await engine.resume("inv-2", responses={"ask#0": answer})
        except tether.InvalidResponseError as exc:
            print(f"refused: {str(exc).rpartition('does not decode as Money: ')[2]}")

        try:
            await engine.run(check, run_id="sensor-1")
        except tether.CodecError as exc:
            print(exc)


if __name__ == "__main__":
    trio.run(main)
