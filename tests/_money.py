"""A user type the codec does not know by itself, registered with ``tether.register_type``.

Shared by the codec tests (the Hypothesis round trip, runs, ``ask``, the CLI).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, final

import tether


@final
class Price:
    """An amount of money: a plain class, as a third-party library would define it."""

    __slots__ = ("amount", "currency")

    def __init__(self, amount: Decimal, currency: str) -> None:
        self.amount = amount
        self.currency = currency

    def __eq__(self, other: object) -> bool:
        if type(other) is not Price:
            return NotImplemented
        # The exponent too: 1.50 EUR is not written as 1.5 EUR.
        return (str(self.amount), self.currency) == (str(other.amount), other.currency)

    def __hash__(self) -> int:
        return hash((str(self.amount), self.currency))

    def __repr__(self) -> str:
        return f"Price({self.amount!r}, {self.currency!r})"


def encode_price(price: Price) -> dict[str, Any]:
    return {"amount": str(price.amount), "currency": price.currency}


def decode_price(data: Any) -> Price:
    return Price(Decimal(data["amount"]), data["currency"])


tether.register_type(Price, encode=encode_price, decode=decode_price)
