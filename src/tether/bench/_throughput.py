"""``bench_throughput``: durable parallel steps per second, with group commit and without.

Layer: the bench (``tether.bench``).

The approach of ``benchmarks/store_throughput.py`` (part 1), on any store: a
workflow runs rounds of a ``tether.parallel()`` block of *width* trivial
steps; every step's record is stored before the block exits. The figure is
committed steps per second of wall time for the whole ``engine.run`` (which
also pays the run's own writes), after a warm-up run on the same store. Two
ways of committing, alternated repeat by repeat, each on a fresh store:

- **group commit**, tether's normal path: the records that wait at the same
  moment go to the store in one ``append`` (and a store that batches, like
  SQLite's writer, may commit more at once);
- **one save per step**: :class:`OneCommitPerSave` splits every append into
  one append per record, one after the other, so no store can commit two
  saves together.
"""

from __future__ import annotations

import gc
import itertools
import time
import uuid
from collections.abc import Sequence
from typing import Any

from .._api._parallel import parallel
from .._api._workflow import step, workflow
from .._engine._engine import open_engine
from .._errors import UsageError
from ..stores import Entry, Store
from ..testing import StoreFactory
from ._probe import delete_quietly, make_store
from ._results import ThroughputResult

__all__ = ("OneCommitPerSave", "bench_throughput", "steps_per_second")


class OneCommitPerSave:
    """Forwards to *inner*, but writes each entry of an append in an append of its own.

    Every other method (and attribute) is *inner*'s, keyword arguments and all.
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"OneCommitPerSave({self.inner!r})"

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        """``inner.append`` of each entry alone, in order; cancellation as the inner store's."""
        stored: list[Entry] = []
        for entry in entries:
            stored += await self.inner.append(run_id, [entry])
        return stored


@step(name="tether.bench.work")
async def _work(i: int) -> int:
    return i


@workflow(name="tether.bench.fan_out")
async def _fan_out(width: int, rounds: int) -> int:
    total = 0
    for _ in range(rounds):
        async with parallel() as p:
            handles = [p.start_soon(_work, i) for i in range(width)]
        total += sum(h.result for h in handles)
    return total


_ids = itertools.count()


async def steps_per_second(
    factory: StoreFactory, *, width: int, steps: int, grouped: bool = True, keep_runs: bool = False
) -> float:
    """Committed steps per second of one run of *steps* steps, *width* at a time, on a fresh
    store from *factory* (``grouped=False``: through :class:`OneCommitPerSave`).

    A checkpoint; cancellation propagates (the store is closed).
    """
    inner = await make_store(factory)
    store: Store = inner if grouped else OneCommitPerSave(inner)
    rounds = max(1, steps // width)
    tag = f"bench-throughput-{uuid.uuid4().hex[:8]}-{next(_ids)}"
    async with open_engine(store) as engine:
        await engine.run(_fan_out, 1, 1, run_id=f"{tag}-warm-up")  # readers open, caches warm
        gc.collect()
        t0 = time.perf_counter()
        await engine.run(_fan_out, width, rounds, run_id=tag)
        elapsed = time.perf_counter() - t0
        if not keep_runs:
            for run_id in (f"{tag}-warm-up", tag):
                await delete_quietly(inner, run_id)
    return width * rounds / elapsed


async def bench_throughput(
    *,
    store: StoreFactory,
    width: int = 100,
    steps: int = 1000,
    repeats: int = 3,
    shown: str | None = None,
    keep_runs: bool = False,
) -> ThroughputResult:
    """Durable steps per second on stores from *store* (a factory, as for
    :func:`~tether.bench.bench_cancel`), with group commit and with one save per step.

    Each repeat measures both, on fresh stores, alternated (so drift hits both
    alike). Real time (``time.perf_counter``), whatever trio's clock. A
    checkpoint; cancellation propagates (the store in use is closed).

    Raises:
        UsageError: *width*, *steps* or *repeats* below 1.
        TetherError: the store failed.
    """
    for name, value in (("width", width), ("steps", steps), ("repeats", repeats)):
        if not isinstance(value, int) or value < 1:
            raise UsageError(f"{name} must be 1 or more, not {value!r}")
    grouped: list[float] = []
    alone: list[float] = []
    for _ in range(repeats):
        grouped.append(await steps_per_second(store, width=width, steps=steps, keep_runs=keep_runs))
        alone.append(
            await steps_per_second(
                store, width=width, steps=steps, grouped=False, keep_runs=keep_runs
            )
        )
    return ThroughputResult(
        store=shown if shown is not None else repr(await make_store(store)),
        width=width,
        steps=max(1, steps // width) * width,
        grouped=tuple(grouped),
        one_per_save=tuple(alone),
    )
