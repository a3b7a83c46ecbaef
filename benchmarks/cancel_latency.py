"""Caller-cancellation latency while every journal save hangs.

Run: ``python benchmarks/cancel_latency.py [--quick]``

Each sample starts a workflow whose ``parallel()`` block runs N trivial
steps; every ``store.append`` hangs forever (``FaultyStore`` + ``Hang``), so
all N saves sit in their shielded scopes. Once all N are hanging, the
caller's cancel scope is cancelled (``t0``) and the time until that scope has
exited in the caller's task (``t1``) is the latency. The real clock is used
(no ``MockClock``).

Baselines measured in the same run, interleaved sample by sample:

* ``bare trio``: the floor. A cancel scope around a nursery of N tasks that
  each ``await trio.sleep_forever()``.
* ``trio shield+watcher``: the same nursery shape tether uses, without
  tether: a guard nursery whose waiting task is the watcher, a run nursery
  with N tasks each sleeping inside ``CancelScope(shield=True)``; on the
  caller's cancellation the watcher cancels every shield.

Timing is reported, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
import time
from typing import Protocol

import trio
import trio.testing

import tether
import tether.testing
from _env import print_environment

TARGET_MS = 0.5  # p99 within this many ms of bare trio
READY_TIMEOUT = 60.0  # seconds to wait for the N saves to hang before calling it a bug


@tether.step
async def trivial(i: int) -> int:
    return i


@tether.workflow(name="benchmarks.cancel_latency.fanout")
async def fanout(n: int) -> int:
    async with tether.parallel() as p:
        for i in range(n):
            p.start_soon(trivial, i)
    return n


# -- one sample ---------------------------------------------------------------


class Shape(Protocol):
    name: str

    def reset(self) -> None:
        """Forget the previous sample (called before the body starts)."""

    def ready(self) -> bool:
        """Every task of the body is now blocked where the benchmark wants it."""

    async def body(self) -> None:
        """What runs inside the caller's cancel scope."""


async def sample(shape: Shape) -> float:
    """Run the shape's body in the caller's cancel scope; once ready, cancel; seconds to exit."""
    shape.reset()
    body, ready = shape.body, shape.ready
    cs = trio.CancelScope()
    t1 = math.nan

    async def caller() -> None:
        nonlocal t1
        with cs:
            await body()
        t1 = time.perf_counter()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller)
        with trio.fail_after(READY_TIMEOUT):
            while not ready():
                await trio.testing.wait_all_tasks_blocked()
        t0 = time.perf_counter()
        cs.cancel()
    if not cs.cancelled_caught:
        raise RuntimeError("the body returned without being cancelled")
    return t1 - t0


# -- the three shapes -----------------------------------------------------------


class Bare:
    """N tasks sleeping forever in a nursery: the floor."""

    name = "bare trio (floor)"

    def __init__(self, n: int) -> None:
        self.n = n
        self.started = 0

    def reset(self) -> None:
        self.started = 0

    def ready(self) -> bool:
        return self.started >= self.n

    async def _task(self) -> None:
        self.started += 1
        await trio.sleep_forever()

    async def body(self) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(self.n):
                nursery.start_soon(self._task)


class ShieldWatcher:
    """tether's nursery shape in plain trio: guard nursery, watcher, shielded sleepers."""

    name = "trio shield+watcher"

    def __init__(self, n: int) -> None:
        self.n = n
        self.started = 0
        self.shields: set[trio.CancelScope] = set()
        self.caller_cancelled = False

    def reset(self) -> None:
        self.started = 0
        self.shields.clear()
        self.caller_cancelled = False

    def ready(self) -> bool:
        return self.started >= self.n

    async def _task(self) -> None:
        scope = trio.CancelScope(shield=True)
        if self.caller_cancelled:
            scope.cancel()
        self.shields.add(scope)
        try:
            with scope:
                self.started += 1
                await trio.sleep_forever()
        finally:
            self.shields.discard(scope)
        await trio.lowlevel.checkpoint()  # the caller's cancellation, outside the shield

    async def _runner(self, done: trio.Event) -> None:
        try:
            async with trio.open_nursery() as run_nursery:
                for _ in range(self.n):
                    run_nursery.start_soon(self._task)
        finally:
            done.set()

    async def body(self) -> None:
        done = trio.Event()
        async with trio.open_nursery() as guard:
            guard.start_soon(self._runner, done)
            try:
                await done.wait()
            except BaseException:
                self.caller_cancelled = True
                for scope in self.shields:
                    scope.cancel()
                guard.cancel_scope.cancel()
                raise


class Tether:
    """engine.run of the fan-out workflow; every save hangs."""

    name = "tether engine.run"

    def __init__(self, n: int, engine: tether.Engine, store: tether.testing.FaultyStore) -> None:
        self.n = n
        self.engine = engine
        self.store = store
        self.before = 0
        self.count = 0

    def reset(self) -> None:
        self.before = self.store.calls["append"]
        self.count += 1

    def ready(self) -> bool:
        return self.store.calls["append"] - self.before >= self.n

    async def body(self) -> None:
        await self.engine.run(fanout, self.n, run_id=f"cancel-latency-{self.n}-{self.count}")


# -- statistics and output ----------------------------------------------------------


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def header(quick: bool, plan: list[tuple[int, int]]) -> None:
    print("tether benchmark: caller-cancellation latency with every journal save hanging")
    print(
        "measures: time from cancelling the caller's cancel scope around engine.run() until\n"
        "          that scope has exited, with N parallel steps all hanging in store.append\n"
        "          (FaultyStore(MemoryStore()) + Hang); real clock, gc enabled, gc.collect()\n"
        "          before each sample"
    )
    print_environment(quick)
    print(f"target:   tether p99 within {TARGET_MS} ms of bare trio (the floor)")
    plan_text = ", ".join(f"N={n}: {iters}" for n, iters in plan)
    print(f"samples:  {plan_text}{' (--quick)' if quick else ''}; p99 is nearest-rank")
    print()


def ms_percentiles(values: list[float]) -> tuple[float, float]:
    v = sorted(x * 1e3 for x in values)
    return percentile(v, 50), percentile(v, 99)


def verdict(n: int, measured: list[tuple[str, list[float]]]) -> str:
    (_, bare), (_, shield), (_, teth) = measured
    _, b99 = ms_percentiles(bare)
    s50, s99 = ms_percentiles(shield)
    t50, t99 = ms_percentiles(teth)
    ok = "within" if t99 - b99 <= TARGET_MS else "NOT within"
    return (
        f"N={n:<4}: tether p99 {t99 - b99:+.3f} ms vs bare trio ({ok} {TARGET_MS} ms); "
        f"vs trio shield+watcher p50 {t50 - s50:+.3f} ms, p99 {t99 - s99:+.3f} ms "
        f"({(t99 - b99) / n * 1e3:.1f} us/step over bare at p99)"
    )


def row(n: int, name: str, iters: int, values: list[float], floor: list[float] | None) -> str:
    v = sorted(x * 1e3 for x in values)
    p50, p99, worst = percentile(v, 50), percentile(v, 99), v[-1]
    if floor is None:
        rest = f"{'-':>9} {'-':>9} {'-':>8} {'-':>8}"
    else:
        f = sorted(x * 1e3 for x in floor)
        f50, f99 = percentile(f, 50), percentile(f, 99)
        rest = f"{p50 - f50:>+9.3f} {p99 - f99:>+9.3f} {p50 / f50:>7.2f}x {p99 / f99:>7.2f}x"
    return f"{n:>5} {name:<22} {iters:>5} {p50:>8.3f} {p99:>8.3f} {worst:>8.3f} {rest}"


# -- main ------------------------------------------------------------------------


async def run_size(
    n: int, iters: int, engine: tether.Engine, store: tether.testing.FaultyStore
) -> list[tuple[str, list[float]]]:
    shapes: list[Shape] = [Bare(n), ShieldWatcher(n), Tether(n, engine, store)]
    results: list[list[float]] = [[] for _ in shapes]
    warmup = min(5, iters)
    for i in range(warmup + iters):
        for shape, out in zip(shapes, results, strict=True):
            gc.collect()
            latency = await sample(shape)
            if i >= warmup:
                out.append(latency)
    return [(shape.name, out) for shape, out in zip(shapes, results, strict=True)]


async def main(quick: bool) -> None:
    plan = [(1, 30), (100, 20), (1000, 5)] if quick else [(1, 300), (100, 200), (1000, 50)]
    header(quick, plan)
    store = tether.testing.FaultyStore(tether.MemoryStore())
    store.inject("append", tether.testing.Hang())
    print(
        f"{'N':>5} {'implementation':<22} {'iters':>5} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'max ms':>8} {'d p50 ms':>9} {'d p99 ms':>9} {'p50 x':>8} {'p99 x':>8}"
    )
    print("-" * 105)
    verdicts: list[str] = []
    async with tether.open_engine(store) as engine:
        for n, iters in plan:
            measured = await run_size(n, iters, engine, store)
            floor = measured[0][1]
            for name, values in measured:
                print(row(n, name, iters, values, None if values is floor else floor), flush=True)
            print()
            verdicts.append(verdict(n, measured))
    print("d = implementation - bare trio; x = implementation / bare trio")
    print()
    for line in verdicts:
        print(line)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="few samples: a smoke run")
    ns = parser.parse_args()
    if sys.flags.optimize:
        print("note: running with -O")
    trio.run(main, ns.quick)
