"""Percentiles of a list of seconds, as every table of ``tether bench`` shows them; the
cost of one item from paired timings, with what the timings can resolve.

Layer: the bench (``tether.bench``).

Nearest-rank percentiles (the value at rank ``ceil(q / 100 * n)``): every
figure is one that was measured, never an interpolation between two, so a
p99 of ten samples is their maximum, as it honestly is.

:func:`paired_cost`: the cost of one item when a timing of *n* items and a
timing of none were taken one after the other, repeat by repeat. The
median of the paired differences, never below 0, and its *resolution*: how
far noise alone moves the figure (the median absolute deviation of the
differences, or that of the timings of none spread over the *n* items,
whichever is larger). A cost within its resolution is not resolved: the table says
"below resolution" instead of a figure that noise could flip.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import final

import attrs

__all__ = ("Percentiles", "paired_cost", "percentile", "percentiles")


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


def paired_cost(
    base: Sequence[float], full: Sequence[float], count: int, *, more_base: Iterable[float] = ()
) -> tuple[float, float]:
    """The cost of one of *count* items, and its resolution (seconds; see the module).

    ``base[i]`` (a timing of no item) and ``full[i]`` (of *count* items) were
    taken one after the other; *more_base* are other timings of no item, which
    tell the noise too. The cost is the median of ``(full[i] - base[i]) / count``,
    never below 0. At least one pair; *count* at least 1.
    """
    diffs = [(f - b) / count for b, f in zip(base, full, strict=True)]
    middle = statistics.median(diffs)
    return max(0.0, middle), max(_deviation(diffs), _deviation([*base, *more_base]) / count)


def _deviation(values: Sequence[float]) -> float:
    """The median absolute deviation of *values* from their median (one wild value moves
    it little, unlike the range)."""
    middle = statistics.median(values)
    return statistics.median(abs(v - middle) for v in values)
