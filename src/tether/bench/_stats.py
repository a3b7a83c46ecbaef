"""Percentiles of a list of seconds, as every table of ``tether bench`` shows them.

Layer: the bench (``tether.bench``).

Nearest-rank percentiles (the value at rank ``ceil(q / 100 * n)``): every
figure is one that was measured, never an interpolation between two, so a
p99 of ten samples is their maximum, as it honestly is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import final

import attrs

__all__ = ("Percentiles", "percentile", "percentiles")


def percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank *q* percentile of *ordered* (sorted, not empty)."""
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@final
@attrs.frozen(kw_only=True)
class Percentiles:
    """p50, p90, p99 and the maximum of *n* values (seconds); all ``nan`` when *n* is 0."""

    n: int
    p50: float
    p90: float
    p99: float
    max: float

    def ratio(self, floor: Percentiles) -> float:
        """``self.p50 / floor.p50``: ``inf`` over a zero floor, ``nan`` without values."""
        if self.n == 0 or floor.n == 0:
            return math.nan
        if floor.p50 == 0:
            return 1.0 if self.p50 == 0 else math.inf
        return self.p50 / floor.p50


def percentiles(values: Iterable[float]) -> Percentiles:
    """The :class:`Percentiles` of *values* (in any order)."""
    ordered = sorted(values)
    if not ordered:
        return Percentiles(n=0, p50=math.nan, p90=math.nan, p99=math.nan, max=math.nan)
    return Percentiles(
        n=len(ordered),
        p50=percentile(ordered, 50),
        p90=percentile(ordered, 90),
        p99=percentile(ordered, 99),
        max=ordered[-1],
    )
