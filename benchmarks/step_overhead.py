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

The summary gives a step's cost in trio's own unit, measured in the same
process: the per-step figure divided by the time of one
``await trio.lowlevel.checkpoint()`` (K of them in a loop, timed with every
repeat of every variant, median). Timing is reported, never asserted.

Last, the cost of the unjournaled-await check (``tether.UnjournaledAwaitWarning``:
the engine drives the workflow body through a wrapper that looks at each
block): the ``trivial`` variant's per-step time with the check on and off,
measured in this run in pairs of runs back to back, as a ratio (the median
of the pairs'; target: under 5% per step).
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

try:
    from tether._core._unjournaled import enable as check_unjournaled_awaits
except ImportError:  # an older tree (benchmarks/leases.py times one): it has no such check
    check_unjournaled_awaits = None  # type: ignore[assignment]

TARGET_US = 25.0  # overhead per step, tether - plain await
#: a step's time in trio checkpoints, at most: (variant, target)
TARGET_CHECKPOINTS = {"trivial": 3.0, "parallel x100": 4.0}
PARALLEL_WIDTH = 100
#: the unjournaled-await check's cost per step, on / off, at most
TARGET_CHECK_RATIO = 1.05

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


async def time_checkpoints(k: int) -> float:
    """Seconds for *k* ``await trio.lowlevel.checkpoint()`` in a loop."""
    gc.collect()
    t0 = time.perf_counter()
    for _ in range(k):
        await trio.lowlevel.checkpoint()
    return time.perf_counter() - t0


async def time_check(engine: tether.Engine, k: int, pairs: int, zero_repeats: int) -> str:
    """The unjournaled-await check's cost per trivial step, on / off: a report.

    T(0) of each setting first, alternating; then *pairs* pairs of runs of K
    steps, one with the check on and one off, back to back (in alternating
    order), so that drift hits both alike. The figure is the median of the
    pairs' own ratios of per-step time.
    """
    if check_unjournaled_awaits is None:
        return "unjournaled-await check: not in this tree"
    variant = VARIANTS[0]
    zero: dict[bool, list[float]] = {True: [], False: []}
    full: dict[bool, list[float]] = {True: [], False: []}
    ratios: list[float] = []
    try:
        for _ in range(zero_repeats):
            for on in (True, False):
                check_unjournaled_awaits(on)
                zero[on] += await time_tether(engine, variant, 0, 1)
        fixed = {on: statistics.median(zero[on]) for on in (True, False)}
        for i in range(pairs):
            for on in (True, False) if i % 2 else (False, True):
                check_unjournaled_awaits(on)
                full[on] += await time_tether(engine, variant, k, 1)
            ratios.append((full[True][-1] - fixed[True]) / (full[False][-1] - fixed[False]))
    finally:
        check_unjournaled_awaits(True)
    per_step = {on: (statistics.median(full[on]) - fixed[on]) / k * 1e6 for on in (True, False)}
    ratio = statistics.median(ratios)
    ok = "within" if ratio <= TARGET_CHECK_RATIO else "NOT within"
    return (
        f"unjournaled-await check ({variant.name}, {pairs} pairs of runs of K={k}, one with "
        "the check on and one off, back to back):\n"
        f"  per step (medians): on {per_step[True]:.3f} us, off {per_step[False]:.3f} us\n"
        f"  on/off per step = {ratio:.3f} ({(ratio - 1) * 100:+.1f}%), median of the pairs' "
        f"ratios [quartiles {statistics.quantiles(ratios, n=4)[0]:.3f}-"
        f"{statistics.quantiles(ratios, n=4)[2]:.3f}] ({ok} {TARGET_CHECK_RATIO:g})"
    )


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
    targets = ", ".join(f"{name} <= {n:g}" for name, n in TARGET_CHECKPOINTS.items())
    print(f"target:   <= {TARGET_US:g} us overhead per step; in trio checkpoints: {targets}")
    print()


async def main(quick: bool) -> None:
    k = 200 if quick else 2000
    repeats = 3 if quick else 9
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
    marginals: dict[str, float] = {}  # variant -> median marginal, us per step
    checkpoints: list[float] = []  # seconds per checkpoint, one sample per timed repeat
    in_checkpoints: dict[str, list[float]] = {}  # variant -> per repeat: a step / a checkpoint
    async with tether.open_engine(tether.MemoryStore()) as engine:
        for variant in VARIANTS:
            # warm up both paths (type-hint resolution, converter hooks, caches)
            await time_tether(engine, variant, min(k, 2 * PARALLEL_WIDTH), 1)
            await time_plain(variant, min(k, 2 * PARALLEL_WIDTH), 1)
            zero = await time_tether(engine, variant, 0, zero_repeats)
            plain: list[float] = []
            full: list[float] = []
            ratios = in_checkpoints.setdefault(variant.name, [])
            for _ in range(repeats):  # interleaved, so drift hits both alike
                plain += await time_plain(variant, k, 1)
                full += await time_tether(engine, variant, k, 1)
                checkpoints.append(await time_checkpoints(k) / k)
                ratios.append((full[-1] - statistics.median(zero)) / k / checkpoints[-1])
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
                    marginals[variant.name] = marginal
                    ok = "within" if overhead <= TARGET_US else "NOT within"
                    summary.append(
                        f"{variant.name}: median overhead {overhead:.2f} us/step "
                        f"({ok} {TARGET_US:g} us)"
                    )
        # (short runs, many pairs: the median of their ratios is the steadiest figure)
        check = await time_check(engine, 200 if quick else 500, 21 if quick else 161, zero_repeats)
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
    checkpoint_us = statistics.median(checkpoints) * 1e6
    spread = f"{min(checkpoints) * 1e6:.2f}-{max(checkpoints) * 1e6:.2f}"
    print()
    print(
        f"in trio checkpoints: one `await trio.lowlevel.checkpoint()` costs {checkpoint_us:.2f} "
        f"us here (median of {len(checkpoints)} loops of {k}, each timed right after a tether "
        f"run;\nrange {spread} us); a step = median marginal / median checkpoint [lowest-highest "
        "of the repeats' own ratios]"
    )
    for name, target in TARGET_CHECKPOINTS.items():
        ratios = in_checkpoints[name]
        ratio = marginals[name] / checkpoint_us
        ok = "meets" if ratio <= target else "does NOT meet"
        print(
            f"  {name:<14} {marginals[name]:>7.2f} us per step = {ratio:.2f} checkpoints "
            f"[{min(ratios):.2f}-{max(ratios):.2f}] ({ok} <= {target:g})"
        )
    print()
    print(check)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small K, few repeats: a smoke run")
    ns = parser.parse_args()
    trio.run(main, ns.quick)
