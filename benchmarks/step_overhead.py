"""Per-step overhead of tether (MemoryStore) against plain ``await``.

Run: ``python benchmarks/step_overhead.py [--quick]``

Variants, each measured as a tether workflow and as the same code with the
undecorated function awaited directly inside ``trio.run`` (the baseline):

* ``trivial``: K sequential awaits of ``async def add(a, b): return a + b``;
* ``checkpoint``: the same with one ``await trio.lowlevel.checkpoint()`` in
  the function, so the baseline pays one scheduler round trip per call;
* ``parallel``: K/100 ``parallel()`` blocks of 100 steps each, against K/100
  plain nurseries of 100 tasks each.

Every ``engine.run`` also pays a fixed per-run cost (creating the run, the
guard and run nurseries, storing the final status). It is measured with K=0
and reported separately; the per-step figure is ``(T(K) - T(0)) / K``.
Timing is reported, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import time
from collections.abc import Awaitable, Callable

import attrs
import trio

import tether
from _env import print_environment

TARGET_US = 25.0  # overhead per step, tether - plain await
PARALLEL_WIDTH = 100

# -- the functions and workflows ------------------------------------------------------


async def add(a: int, b: int) -> int:
    return a + b


async def add_cp(a: int, b: int) -> int:
    await trio.lowlevel.checkpoint()
    return a + b


add_step = tether.step(name="add")(add)
add_cp_step = tether.step(name="add_cp")(add_cp)


@tether.workflow(name="benchmarks.step_overhead.sequential")
async def sequential(k: int) -> int:
    total = 0
    for _ in range(k):
        total = await add_step(total, 1)
    return total


@tether.workflow(name="benchmarks.step_overhead.sequential_checkpoint")
async def sequential_checkpoint(k: int) -> int:
    total = 0
    for _ in range(k):
        total = await add_cp_step(total, 1)
    return total


@tether.workflow(name="benchmarks.step_overhead.fan_out")
async def fan_out(k: int) -> int:
    total = 0
    for _ in range(k // PARALLEL_WIDTH):
        async with tether.parallel() as p:
            handles = [p.start_soon(add_step, i, 1) for i in range(PARALLEL_WIDTH)]
        total += sum(h.result for h in handles)
    return total


async def plain_sequential(k: int) -> int:
    total = 0
    for _ in range(k):
        total = await add(total, 1)
    return total


async def plain_sequential_checkpoint(k: int) -> int:
    total = 0
    for _ in range(k):
        total = await add_cp(total, 1)
    return total


async def plain_fan_out(k: int) -> int:
    total = 0
    results = [0] * PARALLEL_WIDTH

    async def child(i: int) -> None:
        results[i] = await add(i, 1)

    for _ in range(k // PARALLEL_WIDTH):
        async with trio.open_nursery() as nursery:
            for i in range(PARALLEL_WIDTH):
                nursery.start_soon(child, i)
        total += sum(results)
    return total


@attrs.frozen
class Variant:
    name: str
    workflow: tether.Workflow[[int], int]
    plain: Callable[[int], Awaitable[int]]


VARIANTS = (
    Variant("trivial", sequential, plain_sequential),
    Variant("checkpoint", sequential_checkpoint, plain_sequential_checkpoint),
    Variant(f"parallel x{PARALLEL_WIDTH}", fan_out, plain_fan_out),
)

# -- measuring ----------------------------------------------------------------------

_ids = itertools.count()


async def time_tether(engine: tether.Engine, variant: Variant, k: int, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        run_id = f"step-overhead-{next(_ids)}"
        gc.collect()
        t0 = time.perf_counter()
        await engine.run(variant.workflow, k, run_id=run_id)
        out.append(time.perf_counter() - t0)
    return out


async def time_plain(variant: Variant, k: int, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        await variant.plain(k)
        out.append(time.perf_counter() - t0)
    return out


def header(quick: bool, k: int, repeats: int, zero_repeats: int) -> None:
    print("tether benchmark: per-step overhead, MemoryStore, against plain `await`")
    print(
        f"measures: K={k} steps per run, {repeats} repeats (best and median), fixed per-run\n"
        f"          cost T(0) from {zero_repeats} runs with K=0; per step = (T(K) - T(0)) / K;\n"
        "          overhead = tether per step - plain per step; gc enabled, gc.collect()\n"
        "          before each timed run; no hooks"
    )
    print_environment(quick)
    print(f"target:   <= {TARGET_US:g} us overhead per step")
    print()


async def main(quick: bool) -> None:
    k = 200 if quick else 2000
    repeats = 2 if quick else 5
    zero_repeats = 10 if quick else 50
    header(quick, k, repeats, zero_repeats)
    cols = (
        f"{'variant':<13} {'stat':<6} {'plain us':>9} {'T(0) us':>9} {'T(K)/K us':>10} "
        f"{'marginal us':>12} {'overhead us':>12} {'ratio':>8}"
    )
    print(cols)
    print("-" * len(cols))
    summary: list[str] = []
    medians: dict[str, tuple[float, float]] = {}  # variant -> (plain, overhead), us per step
    async with tether.open_engine(tether.MemoryStore()) as engine:
        for variant in VARIANTS:
            # warm up both paths (type-hint resolution, converter hooks, caches)
            await time_tether(engine, variant, min(k, 2 * PARALLEL_WIDTH), 1)
            await time_plain(variant, min(k, 2 * PARALLEL_WIDTH), 1)
            zero = await time_tether(engine, variant, 0, zero_repeats)
            plain: list[float] = []
            full: list[float] = []
            for _ in range(repeats):  # interleaved, so drift hits both alike
                plain += await time_plain(variant, k, 1)
                full += await time_tether(engine, variant, k, 1)
            stats: list[tuple[str, Callable[[list[float]], float]]] = [
                ("best", min),
                ("median", statistics.median),
            ]
            for stat, f in stats:
                p = f(plain) / k * 1e6
                t0 = f(zero) * 1e6
                per_run = f(full) / k * 1e6
                marginal = (f(full) - f(zero)) / k * 1e6
                overhead = marginal - p
                print(
                    f"{variant.name:<13} {stat:<6} {p:>9.3f} {t0:>9.1f} {per_run:>10.3f} "
                    f"{marginal:>12.3f} {overhead:>12.3f} {marginal / p:>7.1f}x",
                    flush=True,
                )
                if stat == "median":
                    medians[variant.name] = (p, overhead)
                    ok = "within" if overhead <= TARGET_US else "NOT within"
                    summary.append(
                        f"{variant.name}: median overhead {overhead:.2f} us/step "
                        f"({ok} {TARGET_US:g} us)"
                    )
    print()
    print(
        "plain = plain await, us per call; T(0) = tether run with K=0, us per run;\n"
        "T(K)/K = tether total / K; marginal = (T(K) - T(0)) / K; overhead = marginal - plain;\n"
        "ratio = marginal / plain"
    )
    print()
    for line in summary:
        print(line)
    # The machine's speed in trio's own unit, so figures compare across machines.
    checkpoint_us = medians["checkpoint"][0] - medians["trivial"][0]
    if checkpoint_us > 0:
        print(
            f"scale: one trio checkpoint costs {checkpoint_us:.2f} us here (plain checkpoint "
            f"- plain trivial); trivial overhead = {medians['trivial'][1] / checkpoint_us:.1f} "
            "checkpoints per step"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small K, few repeats: a smoke run")
    ns = parser.parse_args()
    trio.run(main, ns.quick)
