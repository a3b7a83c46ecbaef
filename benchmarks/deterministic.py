"""What deterministic testing costs: seeded schedules and explorer trials.

Run: ``python benchmarks/deterministic.py [--quick]``

The workload is a workflow of W parallel steps (each two checkpoints and a
virtual sleep) on a MemoryStore, run to completion in its own ``trio.run``
under an autojumping ``MockClock``. Measured, median wall time per run:

* ``trio.run`` (the baseline): trio's ordinary scheduler;
* ``run_deterministic``: the same, with the seeded schedule (each batch of
  runnable tasks sorted by spawn order, then shuffled by the seeded RNG);
* one explorer trial: ``Explorer.check`` of a single-fault plan (a crash at
  the middle step's save), which runs the faulted execution, a new engine's
  resume, and the invariant checks.

Then ``explore()`` over the whole workflow with one seed: trials per second.
Timing is reported, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable

import trio
import trio.testing

import tether
from _env import print_environment
from tether.testing import Explorer, FaultPlan, Injection, explore, run_deterministic


@tether.step
async def work(i: int) -> int:
    await trio.lowlevel.checkpoint()
    await trio.sleep(0.01 * (i % 7))
    await trio.lowlevel.checkpoint()
    return i * i


@tether.workflow(name="benchmarks.deterministic.fan_out")
async def fan_out(width: int) -> int:
    async with tether.parallel() as p:
        handles = [p.start_soon(work, i) for i in range(width)]
    return sum(h.result for h in handles)


async def one_run(width: int) -> int:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        return await engine.run(fan_out, width, run_id="bench")


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(quick: bool) -> None:
    widths = (5, 20) if quick else (5, 20, 100)
    repeats = 3 if quick else 15
    print("tether benchmark: deterministic testing, MemoryStore, against plain trio.run")
    print_environment(quick)
    print("target:   none set; seeded schedules should cost little next to the run itself")
    print()
    cols = (
        f"{'W':>5} {'trio.run ms':>12} {'seeded ms':>10} {'ratio':>6} {'trial ms':>9} {'ratio':>6}"
    )
    print(cols)
    print("-" * len(cols))
    for width in widths:

        def plain(width: int = width) -> None:
            trio.run(one_run, width, clock=trio.testing.MockClock(autojump_threshold=0))

        def seeded(width: int = width) -> None:
            run_deterministic(one_run, width, seed=1)

        explorer = Explorer(fan_out, width)
        plan = FaultPlan(0, (Injection("crash", f"save:work#{width // 2}"),))
        explorer.check(plan)  # learns the points once, outside the timing

        base = median_seconds(plain, repeats)
        det = median_seconds(seeded, repeats)
        trial = median_seconds(lambda e=explorer, p=plan: e.check(p), repeats)
        print(
            f"{width:>5} {base * 1e3:>12.2f} {det * 1e3:>10.2f} {det / base:>5.2f}x "
            f"{trial * 1e3:>9.2f} {trial / base:>5.2f}x"
        )
    print()
    width = 5 if quick else 20
    start = time.perf_counter()
    report = explore(fan_out, width, seeds=1)
    elapsed = time.perf_counter() - start
    print(
        f"explore(fan_out, {width}, seeds=1): {report.trials} trials in {elapsed:.2f} s, "
        f"{report.trials / elapsed:.0f} trials/s"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small widths, few repeats")
    main(parser.parse_args().quick)
