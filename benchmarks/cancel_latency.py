"""Caller-cancellation latency while every journal save hangs.

Run: ``python benchmarks/cancel_latency.py [--quick]``

Each tether sample starts a workflow whose ``parallel()`` block runs N
trivial steps; every ``store.append`` hangs forever (``FaultyStore`` +
``Hang``), so every completed step waits for a save that never ends. The
real clock is used (no ``MockClock``); gc is enabled, with ``gc.collect()``
before each sample.

Part 1, explicit cancellation. Once every task is blocked, the caller's
cancel scope is cancelled (``t0``); the latency is the time until that scope
has exited in the caller's task (``t1``). Baselines, interleaved sample by
sample:

* ``bare trio``: the floor. A cancel scope around a nursery of N tasks that
  each ``await trio.sleep_forever()``.
* ``trio shield+watcher``: tether's first shape in plain trio: a guard
  nursery whose waiting task is the watcher, a run nursery with N tasks each
  sleeping inside ``CancelScope(shield=True)``; on the caller's cancellation
  the watcher cancels every shield.

Part 2, a caller deadline, measured as the peers measure it: the body runs
under ``trio.move_on_at(start + D)``; the overshoot is the time from the
deadline until the scope has exited. Against:

* ``bare trio``: the same nursery of N ``sleep_forever`` tasks under the
  same deadline (interleaved with tether, sample by sample);
* ``bare asyncio``: ``asyncio.timeout_at(start + D)`` around an
  ``asyncio.TaskGroup`` of N tasks each awaiting a future that never
  completes, in a subprocess of its own (same interpreter, same machine),
  run in chunks alternated with the trio chunks.

Both event loops sleep in ``epoll`` with millisecond resolution, so each
overshoot includes up to a millisecond of timer rounding, which depends on
where the deadline falls on the millisecond grid of the sleep that ends at
it. Each deadline gets a random jitter of up to a millisecond, so every
implementation sees the same spread of rounding, whatever its setup costs.
That rounding is most of each overshoot, and it makes a p50 of a few dozen
samples move by tens of microseconds from run to run: part 2 also reports,
per sample, the time from the event loop's first wake-up from ``epoll`` at or
after the deadline until the scope has exited, which is the implementation's
own cost without the kernel timer's rounding (trio: an instrument's
``after_io_wait``; asyncio: a wrapper around the loop's selector).

What tether's part is made of, at any N: by the time the caller cancels,
every step task has ended (a ``parallel()`` step hands its record to the
saver and returns), so three tasks unwind where a bare nursery unwinds N:
the caller's own (the watcher, up through ``engine.run``), the runner
(parked in the block's wait for its children's records) and the saver task
(inside the hung append: here ``FaultyStore``'s frames). That cost is flat
in N, and at N=1 it is three tasks against bare trio's one.
Timing is reported, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import random
import subprocess
import sys
import time
from typing import Any, Protocol

import trio
import trio.testing

import tether
import tether.testing
from _env import print_environment

TARGET_MS = 0.5  # part 1 and part 2 at N=1: p99 within this many ms of bare trio
TARGET_RATIO = 1.3  # part 2 at N=100 and N=1000: p50 overshoot at most this x bare trio
READY_TIMEOUT = 60.0  # seconds to wait for the N saves to hang before calling it a bug
DEADLINE = 0.1  # part 2: seconds from a sample's start to the caller's deadline...
JITTER = 1e-3  # ...plus up to this much, at random (see the module doc)

completed = 0  # steps of the fan-out that returned (their saves then hang)
_jitter = random.Random(13)  # a deadline's place on the millisecond grid


@tether.step
async def trivial(i: int) -> int:
    global completed
    completed += 1
    return i


@tether.workflow(name="benchmarks.cancel_latency.fanout")
async def fanout(n: int) -> int:
    async with tether.parallel() as p:
        for i in range(n):
            p.start_soon(trivial, i)
    return n


# -- the shapes -------------------------------------------------------------------


class Shape(Protocol):
    name: str

    def reset(self) -> None:
        """Forget the previous sample (called before the body starts)."""

    def ready(self) -> bool:
        """Every task of the body has reached the point where the benchmark wants it."""

    async def body(self) -> None:
        """What runs inside the caller's cancel scope."""


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
    """tether's first nursery shape in plain trio: guard nursery, watcher, shielded sleepers."""

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

    def __init__(self, n: int, engine: tether.Engine) -> None:
        self.n = n
        self.engine = engine
        self.count = 0

    def reset(self) -> None:
        global completed
        completed = 0
        self.count += 1

    def ready(self) -> bool:
        return completed >= self.n

    async def body(self) -> None:
        await self.engine.run(fanout, self.n, run_id=f"cancel-latency-{self.n}-{self.count}")


def hanging_store() -> tether.testing.FaultyStore:
    store = tether.testing.FaultyStore(tether.MemoryStore())
    store.inject("append", tether.testing.Hang())
    return store


# -- part 1: explicit cancellation --------------------------------------------------


async def cancel_sample(shape: Shape) -> float:
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
            while True:
                # Blocked *and* ready: the last task has parked, not only started.
                await trio.testing.wait_all_tasks_blocked()
                if ready():
                    break
        t0 = time.perf_counter()
        cs.cancel()
    if not cs.cancelled_caught:
        raise RuntimeError("the body returned without being cancelled")
    return t1 - t0


async def part1_size(n: int, iters: int, engine: tether.Engine) -> list[tuple[str, list[float]]]:
    shapes: list[Shape] = [Bare(n), ShieldWatcher(n), Tether(n, engine)]
    results: list[list[float]] = [[] for _ in shapes]
    warmup = min(5, iters)
    for i in range(warmup + iters):
        for shape, out in zip(shapes, results, strict=True):
            gc.collect()
            latency = await cancel_sample(shape)
            if i >= warmup:
                out.append(latency)
    return [(shape.name, out) for shape, out in zip(shapes, results, strict=True)]


# -- part 2: a caller deadline --------------------------------------------------------


class WakeUps(trio.abc.Instrument):
    """Remembers when the run first woke up from its I/O wait (``epoll``) after *since*."""

    def __init__(self) -> None:
        self.since = math.inf
        self.first = math.inf

    def after_io_wait(self, timeout: float) -> None:
        if self.first == math.inf and (now := trio.current_time()) >= self.since:
            self.first = now


async def deadline_sample(shape: Shape, woke: WakeUps) -> tuple[float, float]:
    """Seconds from the caller's deadline (start + DEADLINE) until its scope has exited,
    and from the run's first wake-up at or after the deadline until then."""
    shape.reset()
    deadline = trio.current_time() + DEADLINE + _jitter.random() * JITTER
    woke.since, woke.first = deadline, math.inf
    with trio.move_on_at(deadline) as cs:
        await shape.body()
    t1 = trio.current_time()
    if not cs.cancelled_caught:
        raise RuntimeError("the body returned without being cancelled")
    if not shape.ready():
        raise RuntimeError(f"{shape.name}: a task was not waiting by the deadline; raise DEADLINE")
    return t1 - deadline, t1 - min(woke.first, t1)


async def trio_chunk(
    n: int, samples: int, engine: tether.Engine, out: dict[str, list[tuple[float, float]]]
) -> None:
    shapes: list[Shape] = [Bare(n), Tether(n, engine)]
    woke = WakeUps()
    trio.lowlevel.add_instrument(woke)
    try:
        for _ in range(samples):
            for shape in shapes:
                gc.collect()
                out.setdefault(shape.name, []).append(await deadline_sample(shape, woke))
    finally:
        trio.lowlevel.remove_instrument(woke)


async def asyncio_sample(n: int, woke: list[float]) -> tuple[float, float]:
    """One bare asyncio sample: seconds from the deadline until the timeout block exited,
    and from the loop's first wake-up at or after it (``woke[1]``) until then."""
    loop = asyncio.get_running_loop()

    async def hang() -> None:
        await loop.create_future()  # never completes: a hung call

    deadline = loop.time() + DEADLINE + _jitter.random() * JITTER
    woke[:] = [deadline, math.inf]
    try:
        async with asyncio.timeout_at(deadline), asyncio.TaskGroup() as group:
            for _ in range(n):
                group.create_task(hang())
    except TimeoutError:
        pass
    else:
        raise RuntimeError("the task group returned without being cancelled")
    t1 = loop.time()
    return t1 - deadline, t1 - min(woke[1], t1)


async def asyncio_worker(n: int, samples: int, warmup: int) -> list[tuple[float, float]]:
    loop = asyncio.get_running_loop()
    # The selector's select() is where the loop sleeps (a private attribute of
    # the selector event loops: a benchmark's look inside, as trio's instrument).
    selector = getattr(loop, "_selector")  # noqa: B009
    select = selector.select
    woke = [math.inf, math.inf]  # since when, the first wake-up since then

    def timed_select(timeout: float | None = None) -> Any:
        events = select(timeout)
        if woke[1] == math.inf and (now := loop.time()) >= woke[0]:
            woke[1] = now
        return events

    selector.select = timed_select
    out = []
    for i in range(warmup + samples):
        gc.collect()
        sample = await asyncio_sample(n, woke)
        if i >= warmup:
            out.append(sample)
    return out


def run_asyncio(n: int, samples: int, warmup: int) -> list[tuple[float, float]]:
    """Bare asyncio samples from a subprocess of this interpreter (its own event loop)."""
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--asyncio-worker", f"{n},{samples},{warmup}"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the asyncio worker failed:\n{proc.stderr}")
    result: list[list[float]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return [(overshoot, after) for overshoot, after in result]


async def part2_size(
    n: int, samples: int, chunks: int, engine: tether.Engine
) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {}
    await trio_chunk(n, min(3, samples), engine, {})  # warm up
    per_chunk = [samples // chunks + (1 if i < samples % chunks else 0) for i in range(chunks)]
    for size in per_chunk:  # alternated chunks: drift hits every implementation alike
        asyncio_samples = await trio.to_thread.run_sync(run_asyncio, n, size, 2)
        out.setdefault("bare asyncio TaskGroup", []).extend(asyncio_samples)
        await trio_chunk(n, size, engine, out)
    return out


# -- statistics and output ------------------------------------------------------------


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def ms_percentiles(values: list[float]) -> tuple[float, float]:
    v = sorted(x * 1e3 for x in values)
    return percentile(v, 50), percentile(v, 99)


def row(n: int, name: str, values: list[float], floor: list[float] | None) -> str:
    v = sorted(x * 1e3 for x in values)
    p50, p99, worst = percentile(v, 50), percentile(v, 99), v[-1]
    if floor is None:
        rest = f"{'-':>9} {'-':>9} {'-':>8} {'-':>8}"
    else:
        f50, f99 = ms_percentiles(floor)
        rest = f"{p50 - f50:>+9.3f} {p99 - f99:>+9.3f} {p50 / f50:>7.2f}x {p99 / f99:>7.2f}x"
    return f"{n:>5} {name:<23} {len(v):>5} {p50:>8.3f} {p99:>8.3f} {worst:>8.3f} {rest}"


COLUMNS = (
    f"{'N':>5} {'implementation':<23} {'iters':>5} {'p50 ms':>8} {'p99 ms':>8} "
    f"{'max ms':>8} {'d p50 ms':>9} {'d p99 ms':>9} {'p50 x':>8} {'p99 x':>8}"
)


def part1_verdict(n: int, measured: list[tuple[str, list[float]]]) -> str:
    (_, bare), (_, shield), (_, teth) = measured
    _, b99 = ms_percentiles(bare)
    s50, s99 = ms_percentiles(shield)
    t50, t99 = ms_percentiles(teth)
    ok = "within" if t99 - b99 <= TARGET_MS else "NOT within"
    return (
        f"part 1, N={n:<4}: tether p99 {t99 - b99:+.3f} ms vs bare trio ({ok} {TARGET_MS} ms); "
        f"vs trio shield+watcher p50 {t50 - s50:+.3f} ms, p99 {t99 - s99:+.3f} ms"
    )


def part2_verdict(n: int, measured: dict[str, list[float]]) -> str:
    b50, b99 = ms_percentiles(measured[Bare.name])
    t50, t99 = ms_percentiles(measured[Tether.name])
    a50, _ = ms_percentiles(measured["bare asyncio TaskGroup"])
    if n == 1:
        ok = "within" if t99 - b99 <= TARGET_MS else "NOT within"
        return (
            f"part 2, N={n:<4}: tether overshoot p99 {t99 - b99:+.3f} ms vs bare trio "
            f"({ok} {TARGET_MS} ms); p50 {t50 / b50:.2f}x bare trio, {t50 / a50:.2f}x bare asyncio"
        )
    ok = "meets" if t50 / b50 <= TARGET_RATIO else "does NOT meet"
    line = (
        f"part 2, N={n:<4}: tether overshoot p50 {t50:.3f} ms = {t50 / b50:.2f}x bare trio "
        f"({ok} <= {TARGET_RATIO}x)"
    )
    if n == 100:
        below = "below" if t50 < a50 else "NOT below"
        line += f"; {t50 / a50:.2f}x bare asyncio TaskGroup ({below} it)"
    else:
        line += f"; {t50 / a50:.2f}x bare asyncio TaskGroup"
    return line


def part2_after_wake_up(n: int, after: dict[str, list[float]]) -> str:
    """The p50s of the implementations' own cost (from the last wake-up), side by side."""
    b50, _ = ms_percentiles(after[Bare.name])
    t50, _ = ms_percentiles(after[Tether.name])
    a50, _ = ms_percentiles(after["bare asyncio TaskGroup"])
    return (
        f"  from the wake-up at the deadline, p50: tether {t50:.3f} ms, bare trio {b50:.3f} ms, "
        f"bare asyncio {a50:.3f} ms (tether {t50 / a50:.2f}x asyncio)"
    )


def header(quick: bool, plan1: list[tuple[int, int]], plan2: list[tuple[int, int]]) -> None:
    print("tether benchmark: caller-cancellation latency with every journal save hanging")
    print(
        "measures: time from the caller's cancellation (part 1: cancel(); part 2: a deadline)\n"
        "          until its scope around engine.run() has exited, with N parallel steps all\n"
        "          waiting for a save that hangs (FaultyStore(MemoryStore()) + Hang); real\n"
        "          clock, gc enabled, gc.collect() before each sample"
    )
    print_environment(quick)
    print(
        f"target:   part 1 and part 2 at N=1: tether p99 within {TARGET_MS} ms of bare trio;\n"
        f"          part 2 at N=100 and N=1000: p50 overshoot <= {TARGET_RATIO}x bare trio, and "
        "below bare asyncio at N=100"
    )
    text1 = ", ".join(f"N={n}: {iters}" for n, iters in plan1)
    text2 = ", ".join(f"N={n}: {iters}" for n, iters in plan2)
    print(f"samples:  part 1 {text1}; part 2 {text2}{' (--quick)' if quick else ''}")
    print("          p99 is nearest-rank")
    print()


# -- main ----------------------------------------------------------------------------------


async def main(quick: bool) -> None:
    plan1 = [(1, 30), (100, 20), (1000, 5)] if quick else [(1, 300), (100, 200), (1000, 50)]
    plan2 = [(1, 20), (100, 10), (1000, 5)] if quick else [(1, 200), (100, 200), (1000, 30)]
    chunks = 1 if quick else 4
    header(quick, plan1, plan2)
    verdicts: list[str] = []
    async with tether.open_engine(hanging_store()) as engine:
        print("part 1: latency of an explicit cancel(), every task blocked")
        print(COLUMNS)
        print("-" * len(COLUMNS))
        for n, iters in plan1:
            measured = await part1_size(n, iters, engine)
            floor = measured[0][1]
            for name, values in measured:
                print(row(n, name, values, None if values is floor else floor), flush=True)
            print()
            verdicts.append(part1_verdict(n, measured))
        print(f"part 2: overshoot past a caller deadline {DEADLINE:g} s after the start")
        print(COLUMNS)
        print("-" * len(COLUMNS))
        names = (Bare.name, Tether.name, "bare asyncio TaskGroup")
        after_wake_up: list[tuple[int, dict[str, list[float]]]] = []
        for n, samples in plan2:
            measured2 = await part2_size(n, samples, chunks, engine)
            overshoots = {name: [o for o, _ in measured2[name]] for name in names}
            after_wake_up.append((n, {name: [a for _, a in measured2[name]] for name in names}))
            floor = overshoots[Bare.name]
            for name in names:
                values = overshoots[name]
                print(row(n, name, values, None if values is floor else floor), flush=True)
            print()
            verdicts.append(part2_verdict(n, overshoots))
            verdicts.append(part2_after_wake_up(n, after_wake_up[-1][1]))
        print(
            "part 2, the same samples from the event loop's first wake-up at or after the\n"
            "deadline until the scope exited: the implementation's own cost, without the\n"
            "kernel timer's rounding"
        )
        print(COLUMNS)
        print("-" * len(COLUMNS))
        for n, after in after_wake_up:
            floor = after[Bare.name]
            for name in names:
                values = after[name]
                print(row(n, name, values, None if values is floor else floor), flush=True)
            print()
    print(
        "d = implementation - bare trio; x = implementation / bare trio; part 2: asyncio in a\n"
        f"subprocess, {chunks} chunk(s) alternated with the trio samples"
    )
    print()
    for line in verdicts:
        print(line)


def worker_main(spec: str) -> None:
    n, samples, warmup = (int(x) for x in spec.split(","))
    print(json.dumps(asyncio.run(asyncio_worker(n, samples, warmup))))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="few samples: a smoke run")
    parser.add_argument("--asyncio-worker", help=argparse.SUPPRESS)  # part 2's subprocess
    ns = parser.parse_args()
    if ns.asyncio_worker is not None:
        worker_main(ns.asyncio_worker)
    else:
        if sys.flags.optimize:
            print("note: running with -O")
        trio.run(main, ns.quick)
