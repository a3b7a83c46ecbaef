"""What leases cost: per-step time against the tree before them, and renewal writes.

Run: ``python benchmarks/leases.py [--quick]``

Part 1, per-step time now against before leases. ``before`` is commit
8423b95 (the parent of the lease work), extracted with ``git archive`` into
a temporary directory; ``now`` is this checkout's ``src/``. Each is measured
in its own subprocess (``PYTHONPATH=<tree>/src``, this interpreter) running
step_overhead.py's own measurement of its ``trivial`` workflow (N sequential
``await add(total, 1)`` steps): on MemoryStore (N=2000) and on SQLiteStore
with ``synchronous="normal"`` and ``"full"`` (N=300, a fresh file in a
temporary directory). The subprocesses alternate, before and now, for a few
rounds in ABBA order so drift hits both alike. Per step is
``(T(N) - T(0)) / N``, best and median over every round's runs, as in
step_overhead.py; T(0), a run with no step, is the fixed per-run cost. Each
subprocess reports the tether it imported, so the baseline is known to be the
old code. Skipped, with a note, when git or the commit is not available.

Part 2, renewal writes. One engine (``lease_ttl=1.5``: a renewal every
0.5 s) holds 10,000 concurrent runs, each awaiting a step that waits on one
shared ``trio.Event``; its store is wrapped in a counter of every call.
Once every run waits, the calls are counted over K whole renewal intervals
(starting half an interval after a renewal, so each interval holds exactly
one renewal when the cadence is right). MemoryStore runs on trio's
``MockClock`` (virtual time, instant); SQLiteStore in real time. ``renew ms``
is the wall time of one ``renew`` call holding every run. Then the event is
set, and the runs that complete and those that lose their lease (all 10,000
steps end at once: the renewal may come late, and on SQLite it queues behind
their writes) are counted.

Timing is reported, never asserted.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio
import trio.testing

import step_overhead
import tether
from _env import extract_src, print_environment

if TYPE_CHECKING:
    from tether.stores import Store

BEFORE = "8423b95"  # the parent of the lease work (a7e8726)
REPO = Path(__file__).resolve().parent.parent
SLOWER = 1.05  # a per-step ratio now/before above this is flagged
LEASE_TTL = 1.5  # seconds; a renewal every LEASE_TTL / 3

# -- part 1: per-step time, in a subprocess per tree ------------------------------------


@attrs.frozen
class StepConfig:
    name: str  # "memory", "sqlite normal", "sqlite full"
    steps: int
    repeats: int
    zero_repeats: int


def step_configs(quick: bool) -> list[StepConfig]:
    if quick:
        return [
            StepConfig("memory", 200, 2, 5),
            StepConfig("sqlite normal", 50, 2, 3),
            StepConfig("sqlite full", 50, 2, 3),
        ]
    return [
        StepConfig("memory", 2000, 5, 20),
        StepConfig("sqlite normal", 300, 5, 10),
        StepConfig("sqlite full", 300, 5, 10),
    ]


def make_step_store(name: str, folder: Path) -> Any:
    if name == "memory":
        return tether.MemoryStore()
    return tether.SQLiteStore(folder / f"{name.replace(' ', '-')}.db", synchronous=name.split()[1])


async def measure_steps(configs: list[StepConfig]) -> dict[str, Any]:
    """step_overhead.py's measurement of its trivial workflow, on each store (the worker)."""
    variant = step_overhead.VARIANTS[0]  # trivial: sequential awaits of add(total, 1)
    out: dict[str, Any] = {"tether": tether.__file__}
    with tempfile.TemporaryDirectory(prefix="tether-bench-leases-") as name:
        for config in configs:
            async with tether.open_engine(make_step_store(config.name, Path(name))) as engine:
                # warm up (type-hint resolution, converter hooks, caches, the file)
                await step_overhead.time_tether(engine, variant, min(config.steps, 200), 1)
                zero = await step_overhead.time_tether(engine, variant, 0, config.zero_repeats)
                full = await step_overhead.time_tether(
                    engine, variant, config.steps, config.repeats
                )
            out[config.name] = {"zero": zero, "full": full}
    return out


def run_worker(tree_src: Path, configs: list[StepConfig]) -> dict[str, Any]:
    """One subprocess measuring the tether in *tree_src* (a ``src`` directory)."""
    env = dict(os.environ, PYTHONPATH=str(tree_src))
    proc = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            json.dumps([attrs.asdict(c) for c in configs]),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the worker for {tree_src} failed:\n{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    imported = Path(result["tether"]).resolve()
    if not imported.is_relative_to(tree_src.resolve()):
        raise RuntimeError(f"the worker for {tree_src} imported tether from {imported}")
    return result


def per_step_us(
    result: Mapping[str, Any],
    name: str,
    steps: int,
    stat: Callable[[list[float]], float] = statistics.median,
) -> tuple[float, float]:
    """(per step, T(0)) in us, from one tree's samples: ``(stat(T(N)) - stat(T(0))) / N``."""
    zero = stat(result[name]["zero"])
    full = stat(result[name]["full"])
    return (full - zero) / steps * 1e6, zero * 1e6


def part1(quick: bool) -> list[str]:
    configs = step_configs(quick)
    rounds = 1 if quick else 6
    print(f"part 1: per-step time, now against before leases ({BEFORE})")
    summary: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tether-bench-before-") as name:
        before_src, why = extract_src(BEFORE, Path(name))
        if before_src is None:
            print(f"note:     skipped: {why}")
            print()
            return summary
        now_src = REPO / "src"
        print(
            f"trees:    before = {BEFORE} ({why[:12]}) from git archive; now = {now_src}\n"
            f"rounds:   {rounds} of one subprocess per tree, in ABBA order; per round and "
            "store: 1 warm-up run,\n"
            "          T(0) runs with N=0 and T(N) runs as below; per step = "
            "(T(N) - T(0)) / N, best and median"
        )
        pooled: dict[str, dict[str, dict[str, list[float]]]] = {"before": {}, "now": {}}
        rounds_us: dict[str, dict[str, list[float]]] = {"before": {}, "now": {}}
        imported: dict[str, str] = {}
        for r in range(rounds):
            order = ("before", "now") if r % 4 in (0, 3) else ("now", "before")
            for tree in order:
                result = run_worker(before_src if tree == "before" else now_src, configs)
                imported[tree] = result["tether"]
                for config in configs:
                    samples = pooled[tree].setdefault(config.name, {"zero": [], "full": []})
                    samples["zero"] += result[config.name]["zero"]
                    samples["full"] += result[config.name]["full"]
                    us, _ = per_step_us(result, config.name, config.steps)
                    rounds_us[tree].setdefault(config.name, []).append(us)
        print(f"imported: before {imported['before']}\n          now    {imported['now']}")
        print()
        cols = (
            f"{'store':<14} {'N':>5} {'runs':>5} {'stat':<6} {'before us':>10} {'now us':>10} "
            f"{'now/before':>10} {'before T(0)':>12} {'now T(0)':>10} {'ratio':>7}  "
            f"{'rounds before..now, us/step'}"
        )
        print(cols)
        print("-" * len(cols))
        stats: list[tuple[str, Callable[[list[float]], float]]] = [
            ("best", min),
            ("median", statistics.median),
        ]
        for config in configs:
            spread = "  ".join(
                f"{min(rounds_us[t][config.name]):.1f}-{max(rounds_us[t][config.name]):.1f}"
                for t in ("before", "now")
            )
            for stat, f in stats:
                b_us, b_zero = per_step_us(pooled["before"], config.name, config.steps, f)
                n_us, n_zero = per_step_us(pooled["now"], config.name, config.steps, f)
                print(
                    f"{config.name:<14} {config.steps:>5} {config.repeats * rounds:>5} "
                    f"{stat:<6} {b_us:>10.2f} {n_us:>10.2f} {n_us / b_us:>9.3f}x "
                    f"{b_zero:>12.1f} {n_zero:>10.1f} {n_zero / b_zero:>6.2f}x  "
                    f"{spread if stat == 'median' else ''}".rstrip(),
                    flush=True,
                )
            verdict = "within" if n_us / b_us <= SLOWER else "ABOVE"
            summary.append(
                f"{config.name}: median {n_us - b_us:+.2f} us/step with leases "
                f"({n_us / b_us:.3f}x, {verdict} {SLOWER:g}x); per run {n_zero - b_zero:+.1f} us"
            )
    print()
    print(
        "us = us per step, (stat T(N) - stat T(0)) / N over every round's runs; T(0) = us of a\n"
        "run with no step (the fixed per-run cost); ratio = now / before; runs = timed T(N) runs\n"
        "per tree; rounds = the lowest and highest per-round median, before then now"
    )
    print()
    return summary


# -- part 2: renewal writes of many held runs -------------------------------------------

WRITES = ("create_run", "update_run", "append", "claim", "renew", "cancel_run")
READS = ("get_run", "list_runs", "load_entries")


@attrs.define(eq=False)
class Counts:
    """The store calls of one measurement, recorded by FaultyStore hooks (``counting``)."""

    #: (trio time, method) of every call, at the call
    calls: list[tuple[float, str]] = attrs.field(factory=list)
    #: (trio time at the call, runs named, wall seconds) of every renew call
    renews: list[tuple[float, int, float]] = attrs.field(factory=list)
    _renewing: dict[int, tuple[float, float]] = attrs.field(factory=dict)


def counting(store: Store) -> tuple[Store, Counts]:
    """*store* in a FaultyStore whose hooks count and time every call (no fault)."""
    # Imported here: part 1's workers import this module under the tree before leases.
    from tether.stores import STORE_METHODS
    from tether.testing import Call, Do, FaultyStore

    faulty, counts = FaultyStore(store), Counts()

    async def called(call: Call) -> None:
        counts.calls.append((trio.current_time(), call.method))
        if call.method == "renew":
            counts._renewing[call.n] = (trio.current_time(), time.perf_counter())

    async def renewed(call: Call) -> None:
        at, t0 = counts._renewing.pop(call.n)
        counts.renews.append((at, len(call.kwargs["held"]), time.perf_counter() - t0))

    for method in STORE_METHODS:
        if method not in ("open", "close"):
            faulty.inject(method, Do(called))
    faulty.inject("renew", Do(renewed), after=True)
    return faulty, counts


@attrs.define
class Gate:
    """The shared event the held runs' steps wait on, and how many wait."""

    runs: int
    release: trio.Event = attrs.field(factory=trio.Event)
    all_waiting: trio.Event = attrs.field(factory=trio.Event)
    waiting: int = 0


_gate = Gate(0)


@tether.step(name="wait_for_release")
async def wait_for_release() -> int:
    gate = _gate
    gate.waiting += 1
    if gate.waiting == gate.runs:
        gate.all_waiting.set()
    await gate.release.wait()
    return 1


@tether.workflow(name="benchmarks.leases.held")
async def held() -> int:
    return await wait_for_release()


@attrs.frozen
class HoldRow:
    store: str
    runs: int
    start_s: float  # wall time until every run waits
    start_writes: float  # store writes per run until then
    intervals: float
    renews: int
    writes: int
    reads: int
    renew_ms: float  # median wall time of one renew call in the window
    held_per_renew: int
    completed: int  # runs completed after the event was set
    lost: int  # runs that raised LeaseLostError after the event was set
    engine_renewals: int  # engine._leases.renewals after every run waited


async def hold_many(label: str, store: Store, runs: int, intervals: int) -> HoldRow:
    global _gate
    _gate = gate = Gate(runs)
    wrapped, seen = counting(store)
    interval = LEASE_TTL / 3
    completed = lost = 0

    async def one(i: int) -> None:
        nonlocal completed, lost
        try:
            await engine.run(held, run_id=f"held-{i}")
        except tether.LeaseLostError:
            lost += 1  # reported, not raised: see the module doc
        else:
            completed += 1

    async with tether.open_engine(wrapped, lease_ttl=LEASE_TTL) as engine:
        leases = engine._leases
        async with trio.open_nursery() as nursery:
            t0 = time.perf_counter()
            for i in range(runs):
                nursery.start_soon(partial(one, i))
            await gate.all_waiting.wait()  # each run is held from before its step starts
            assert len(leases.held) == runs
            start_s = time.perf_counter() - t0
            start_calls = len(seen.calls)
            ready, renewals_before = trio.current_time(), leases.renewals
            await trio.sleep_until(ready + (intervals + 2) * interval)
            # engine._leases.renewals and the store's renew calls over the same span
            engine_renewals = leases.renewals - renewals_before
            store_renews = sum(1 for t, m in seen.calls if m == "renew" and t >= ready)
            gate.release.set()
    # The window: K whole intervals from half an interval after the first renewal
    # once every run waited, so each interval holds one renewal at the right cadence.
    after = [t for t, m in seen.calls if m == "renew" and t >= ready]
    if not after:
        raise RuntimeError(f"{label}: no renewal in {(intervals + 2) * interval:.1f} s")
    w0 = after[0] + interval / 2
    w1 = w0 + intervals * interval
    counts = collections.Counter(m for t, m in seen.calls if w0 <= t < w1)
    renew_seconds = [s for t, _, s in seen.renews if w0 <= t < w1]
    if engine_renewals != store_renews:
        raise RuntimeError(
            f"{label}: engine._leases.renewals grew by {engine_renewals}, "
            f"the store saw {store_renews} renew calls"
        )
    return HoldRow(
        store=label,
        runs=runs,
        start_s=start_s,
        start_writes=sum(1 for _, m in seen.calls[:start_calls] if m in WRITES) / runs,
        intervals=(w1 - w0) / interval,
        renews=counts["renew"],
        writes=sum(counts[m] for m in WRITES),
        reads=sum(counts[m] for m in READS),
        renew_ms=statistics.median(renew_seconds) * 1e3 if renew_seconds else math.nan,
        held_per_renew=max((n for t, n, _ in seen.renews if w0 <= t < w1), default=0),
        completed=completed,
        lost=lost,
        engine_renewals=engine_renewals,
    )


async def part2_memory(runs: int, intervals: int) -> HoldRow:
    return await hold_many("memory (mock)", tether.MemoryStore(), runs, intervals)


async def part2_sqlite(runs: int, intervals: int, synchronous: str) -> HoldRow:
    with tempfile.TemporaryDirectory(prefix="tether-bench-leases-") as name:
        store = tether.SQLiteStore(Path(name) / "held.db", synchronous=synchronous)
        return await hold_many(f"sqlite {synchronous}", store, runs, intervals)


def part2(quick: bool) -> list[str]:
    runs = 500 if quick else 10_000
    mock_intervals = 4 if quick else 20
    real_intervals = 2 if quick else 6
    interval = LEASE_TTL / 3
    print("part 2: renewal writes of one engine holding many runs")
    print(
        f"measures: {runs} runs awaiting one trio.Event, lease_ttl={LEASE_TTL:g} s (renewal "
        f"every {interval:g} s);\n"
        f"          calls counted over {mock_intervals} intervals (MemoryStore, MockClock) "
        f"and {real_intervals} intervals\n"
        "          (SQLiteStore, real time) from half an interval after a renewal"
    )
    print()
    rows: list[HoldRow] = []
    clock = trio.testing.MockClock(autojump_threshold=0)
    rows.append(trio.run(part2_memory, runs, mock_intervals, clock=clock))
    for synchronous in ("normal", "full"):
        rows.append(trio.run(part2_sqlite, runs, real_intervals, synchronous))
    cols = (
        f"{'store':<14} {'runs held':>9} {'start s':>8} {'writes/run':>10} {'intervals':>9} "
        f"{'renew calls':>11} {'renew/interval':>14} {'writes/interval':>15} "
        f"{'reads':>5} {'renew ms':>9} {'done':>6} {'lost':>6}"
    )
    print(cols)
    print("-" * len(cols))
    summary = []
    for row in rows:
        print(
            f"{row.store:<14} {row.held_per_renew:>9} {row.start_s:>8.2f} "
            f"{row.start_writes:>10.2f} {row.intervals:>9.1f} {row.renews:>11} "
            f"{row.renews / row.intervals:>14.2f} {row.writes / row.intervals:>15.2f} "
            f"{row.reads:>5} {row.renew_ms:>9.2f} {row.completed:>6} {row.lost:>6}",
            flush=True,
        )
        summary.append(
            f"{row.store}: {row.writes / row.intervals:.2f} store writes per renewal interval "
            f"holding {row.held_per_renew} runs (target 1); one renew takes {row.renew_ms:.2f} ms"
        )
        if row.lost:
            summary.append(
                f"{row.store}: {row.lost} of {row.runs} runs lost their lease when the event "
                f"released them all at once (lease_ttl={LEASE_TTL:g} s): finishing them kept "
                "the event loop busy past lease_ttl, so no renewal succeeded in time (the "
                "rule working as specified); size lease_ttl above such bursts (default 15 s)"
            )
    print()
    print(
        "runs held = runs named in the largest renew call; start s = wall time until every run\n"
        "waits; writes/run = store writes per run until then (claim, ...); renew ms = median\n"
        "wall time of one renew call in the window; reads = store reads in the window;\n"
        "done, lost = runs completed, and runs that raised LeaseLostError, after the event was set"
    )
    print()
    return summary


def main(quick: bool) -> None:
    print("tether benchmark: what leases cost, per step and in renewal writes")
    print_environment(quick)
    print(
        f"target:   1 store write per renewal interval however many runs are held "
        f"(docs/explanation/ownership.md);\n          per-step time now/before is reported, "
        f"above {SLOWER:g}x flagged"
    )
    print()
    summary = part1(quick)
    summary += part2(quick)
    for line in summary:
        print(line)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small N, few runs: a smoke run")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # part 1's subprocess
    ns = parser.parse_args()
    if ns.worker is not None:
        worker_configs = [StepConfig(**c) for c in json.loads(ns.worker)]
        print(json.dumps(trio.run(measure_steps, worker_configs)))
    else:
        main(ns.quick)
