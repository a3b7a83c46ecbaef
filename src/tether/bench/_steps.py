"""``bench_steps``: what one durable sequential step costs on a store.

Layer: the bench (``tether.bench``).

The approach of ``benchmarks/step_overhead.py``, on any store: a workflow of
K sequential trivial steps (each ``await`` of a step stores its record
before it returns), timed whole; a run of no step gives the fixed per-run
cost T(0) (creating and claiming the run, storing its final status). Each
repeat times a run of no step and then a run of K steps, so a step costs
the median of the paired ``(T(K) - T(0)) / K``, never below 0, with the
resolution the timings allow (:func:`~._stats.paired_cost`): noise cannot
flip its sign, and a cost within the noise is reported as such. In the same
loop, repeat by repeat: K plain ``await``s of the same no-op coroutine (what
a step would cost without tether), and K ``await
trio.lowlevel.checkpoint()``, trio's own unit, so the figure compares
across machines ("checkpoints per step").
"""

from __future__ import annotations

import gc
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

import trio

from .._api._workflow import step, workflow
from .._engine._engine import Engine, open_engine
from .._errors import UsageError
from ..testing import StoreFactory
from ._probe import delete_quietly, make_store
from ._results import StepsResult
from ._stats import paired_cost

__all__ = ("bench_steps",)


async def _noop(i: int) -> int:
    return i


_noop_step = step(name="tether.bench.noop")(_noop)


@workflow(name="tether.bench.sequential")
async def _sequential(k: int) -> int:
    total = 0
    for _ in range(k):
        total = await _noop_step(total)
    return total


async def _plain(k: int) -> None:
    total = 0
    for _ in range(k):
        total = await _noop(total)


async def _checkpoints(k: int) -> None:
    for _ in range(k):
        await trio.lowlevel.checkpoint()


async def _timed(afn: Callable[[], Awaitable[object]]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    await afn()
    return time.perf_counter() - t0


async def bench_steps(
    *,
    store: StoreFactory,
    steps: int = 100,
    repeats: int = 5,
    shown: str | None = None,
    keep_runs: bool = False,
) -> StepsResult:
    """The cost of one durable sequential step on a store from *store* (a factory, as for
    :func:`~tether.bench.bench_cancel`), against a plain await and a trio checkpoint.

    One engine on one store; a warm-up run, then three runs of no step, then
    *repeats* rounds of (plain awaits, checkpoints, a run of no step, a run of
    *steps* steps), each figure the median of the rounds; a step's cost is
    that of the paired runs, with its resolution. Real time
    (``time.perf_counter``). A checkpoint; cancellation propagates (the
    store is closed; the run in progress stays resumable).

    Raises:
        UsageError: *steps* or *repeats* below 1.
        TetherError: the store failed.
    """
    for name, value in (("steps", steps), ("repeats", repeats)):
        if not isinstance(value, int) or value < 1:
            raise UsageError(f"{name} must be 1 or more, not {value!r}")
    inner = await make_store(store)
    tag = f"bench-steps-{uuid.uuid4().hex[:8]}"
    made: list[str] = []

    def run(engine: Engine, k: int) -> Callable[[], Awaitable[int]]:
        made.append(f"{tag}-{len(made)}")
        run_id = made[-1]
        return lambda: engine.run(_sequential, k, run_id=run_id)

    rounds: list[tuple[float, float, float]] = []
    bases: list[float] = []
    fulls: list[float] = []
    async with open_engine(inner) as engine:
        await _timed(run(engine, min(steps, 10)))  # warm-up: readers, caches, type hints
        zeros = [await _timed(run(engine, 0)) for _ in range(3)]
        for _ in range(repeats):  # interleaved, so drift hits them alike
            plain = await _timed(lambda: _plain(steps))
            checkpoint = await _timed(lambda: _checkpoints(steps))
            bases.append(await _timed(run(engine, 0)))
            fulls.append(await _timed(run(engine, steps)))
            rounds.append(((fulls[-1] - bases[-1]) / steps, plain / steps, checkpoint / steps))
        if not keep_runs:
            for run_id in made:
                await delete_quietly(inner, run_id)
    per_step, resolution = paired_cost(bases, fulls, steps, more_base=zeros)
    return StepsResult(
        store=shown if shown is not None else repr(inner),
        steps=steps,
        repeats=repeats,
        per_step=per_step,
        resolution=resolution,
        per_run=statistics.median(zeros + bases),
        plain_await=statistics.median(r[1] for r in rounds),
        checkpoint=statistics.median(r[2] for r in rounds),
        repeats_measured=tuple(rounds),
    )
