"""Memory per held run: tether's executing runs against bare trio tasks, now against before.

Run: ``python benchmarks/memory.py [--quick] [--before REV] [--where]``

R runs (10,000; 1,000 under ``--quick``) are held at once, each a workflow
that does one no-op step, then waits in a second step on one shared
``trio.Event`` (the shape of ``benchmarks/peers``' memory scenario, whose
``Parking`` and ``MemoryMeter`` this reuses). Every run is counted parked
before the figure is read, then the event is set and every run completes.
Kinds:

* ``tether memory``: ``engine.run`` of each, on ``MemoryStore`` (its records
  and journals count: they are what the store holds per run);
* ``tether sqlite``: the same on ``SQLiteStore`` (a fresh file, synchronous
  ``normal``);
* ``bare trio``, the floor: one trio task per run that awaits the same no-op
  coroutine, then the event;
* ``own state``: what the workflow itself holds, with no engine and no
  scheduler: the coroutines of the workflow and of its waiting step, with
  their arguments and locals, each driven to the wait by hand (a bare
  ``yield`` stands for the event's wait). It is subtracted from tether's
  figures (``- own``): what is left is the engine's cost per run.

Two figures per kind, each from a subprocess of its own: the traced bytes
(tracemalloc's peak above the memory traced once the engine was warm and
before the first run started) and the peak RSS (the kernel's high-water mark,
reset through ``/proc/self/clear_refs`` just before the runs start, minus the
RSS then; no tracemalloc in that process), both divided by R.

``before`` is the tree at commit BEFORE (the commit the memory work started
from; ``--before`` names another), extracted with ``git archive``; ``now`` is
this checkout's ``src/``. Each subprocess (``PYTHONPATH=<tree>/src``) reports
the tether it imported, so the baseline is known to be the old code. Rounds
alternate the trees in ABBA order; each figure is the median of its rounds.
The target: tether's traced bytes per run minus the workflow's own, now, at
most half of before's (issue 26). ``--where`` also prints, for ``now`` on
``MemoryStore``, the lines of tether (or of trio, the step, the benchmark)
that allocated what the held runs keep, per run. Memory is reported, never
asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import tracemalloc
from collections import Counter
from collections.abc import Generator
from functools import partial
from pathlib import Path
from typing import Any

import trio

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BEFORE = "6139b9e"  # the commit the memory work (issue 26) started from
LEASE_TTL = 600.0  # seconds: longer than holding the runs takes, so none loses its lease
TARGET = 0.5  # tether's bytes per run minus the workflow's own: now / before, at most
KINDS = ("own state", "bare trio", "tether memory", "tether sqlite")
#: kinds that import tether, measured per tree; the others once per round (no tether in them)
TETHER_KINDS = ("tether memory", "tether sqlite")


# -- the worker: one kind's figures, in a subprocess --------------------------------------


class RssMeter:
    """Peak RSS above the RSS when the meter started (the kernel's high-water mark)."""

    def __init__(self) -> None:
        gc.collect()
        self.reset = _clear_peak()
        self.baseline = _status_kb("VmRSS") * 1024
        self.peak_bytes = -1

    def stop(self) -> int:
        self.peak_bytes = _status_kb("VmHWM") * 1024 - self.baseline
        return self.peak_bytes


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _clear_peak() -> bool:
    """Reset the process's peak RSS to its RSS now (Linux >= 4.0); whether it could."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


def _meter(figure: str) -> Any:
    from _memory import MemoryMeter

    return MemoryMeter() if figure == "traced" else RssMeter()


class _Yield:
    """An awaitable that suspends its awaiter once, with no scheduler: the own state's wait."""

    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        yield


async def _own_noop(i: int) -> int:
    return i + 1


async def _own_park(i: int) -> int:
    await _Yield()
    return i


async def _own_two_steps(i: int) -> int:
    first = await _own_noop(i)
    return await _own_park(first)


def measure_own(runs: int, figure: str) -> dict[str, Any]:
    """The workflow's own state: its coroutines, driven to the wait by hand, held."""
    meter = _meter(figure)
    held = []
    for i in range(runs):
        coro = _own_two_steps(i)
        coro.send(None)
        held.append(coro)
    meter.stop()
    for coro in held:
        with contextlib.suppress(StopIteration):
            coro.send(None)
    return {"bytes": meter.peak_bytes, "parked": len(held)}


async def measure_floor(runs: int, figure: str) -> dict[str, Any]:
    """Bare trio: a task per run awaiting the no-op coroutine, then the event."""
    from _memory import Parking

    parking = Parking()
    parking.expect(runs, trio.Event)

    async def two_steps(i: int) -> None:
        await _own_noop(i)
        await parking.park()

    meter = _meter(figure)
    async with trio.open_nursery() as nursery:
        for i in range(runs):
            nursery.start_soon(two_steps, i)
        await parking.measure(meter)
    return {"bytes": meter.peak_bytes, "parked": parking.parked_when_measured}


def _workflows() -> tuple[Any, Any, Any]:
    """The tether workflows: a warm-up, and the two-step one whose second step parks."""
    from _memory import Parking

    import tether

    parking = Parking()

    @tether.step(name="memory.noop")
    async def noop(i: int) -> int:
        return i + 1

    @tether.step(name="memory.park")
    async def park(i: int) -> int:
        await parking.park()
        return i

    @tether.workflow(name="benchmarks.memory.warm_up")
    async def warm_up(i: int) -> int:
        return await noop(i)

    @tether.workflow(name="benchmarks.memory.two_steps")
    async def two_steps(i: int) -> int:
        first = await noop(i)
        return await park(first)

    return parking, warm_up, two_steps


async def measure_tether(runs: int, figure: str, store_kind: str, where: int = 0) -> dict[str, Any]:
    """*runs* tether runs held at once, parked in their second step.

    *where*: print the *where* lines that allocated most of what the runs hold.
    """
    import tether

    parking, warm_up, two_steps = _workflows()
    parking.expect(runs, trio.Event)
    with tempfile.TemporaryDirectory(prefix="tether-bench-memory-") as folder:
        store: Any = (
            tether.MemoryStore()
            if store_kind == "memory"
            else tether.SQLiteStore(Path(folder) / "runs.db", synchronous="normal")
        )
        # lease_ttl: on SQLite, starting 10,000 runs and finishing them outlasts the default
        # (see benchmarks/leases.py); a lease lost here would measure nothing
        async with tether.open_engine(store, lease_ttl=LEASE_TTL) as engine:
            for i in range(3):  # first-use caches (type hints, converters), outside the figure
                await engine.run(warm_up, i, run_id=f"warm-up-{i}")
            meter = _meter(figure) if not where else WhereMeter(runs, where)
            async with trio.open_nursery() as nursery:
                for i in range(runs):
                    nursery.start_soon(partial(engine.run, two_steps, i, run_id=f"run-{i}"))
                await parking.measure(meter)
    return {"bytes": meter.peak_bytes, "parked": parking.parked_when_measured}


class WhereMeter:
    """A meter that prints what the held runs keep, per run, by the innermost line of tether
    (else of whatever allocated it) that allocated it."""

    def __init__(self, runs: int, top: int) -> None:
        gc.collect()
        tracemalloc.start(30)
        self.runs, self.top = runs, top
        self.before = tracemalloc.take_snapshot()
        self.peak_bytes = -1

    def stop(self) -> int:
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        by_line: Counter[str] = Counter()
        for stat in after.compare_to(self.before, "traceback"):
            frames = list(reversed(stat.traceback))  # innermost first
            mine = [f for f in frames if "/tether/" in f.filename or f.filename == __file__]
            frame = (mine or frames)[0]
            name = frame.filename.split("/src/")[-1] if mine else Path(frame.filename).name
            by_line[f"{name}:{frame.lineno}"] += stat.size_diff
        self.peak_bytes = sum(by_line.values())
        print(f"held: {self.peak_bytes / self.runs:,.0f} bytes per run, by line")
        for line, size in by_line.most_common(self.top):
            print(f"  {size / self.runs:>8,.0f}  {line}")
        return self.peak_bytes


def worker_main(kind: str, figure: str, runs: int, where: int) -> None:
    # The subprocess reports on stdout; anything else printed goes to stderr.
    real_stdout, sys.stdout = sys.stdout, sys.stderr
    try:
        if kind == "own state":
            result = measure_own(runs, figure)
        elif kind == "bare trio":
            result = trio.run(measure_floor, runs, figure)
        else:
            result = trio.run(measure_tether, runs, figure, kind.removeprefix("tether "), where)
    finally:
        sys.stdout = real_stdout
    imported = sys.modules.get("tether")
    result["tether"] = getattr(imported, "__file__", None)
    print(json.dumps(result))


# -- the driver ----------------------------------------------------------------------------


def run_worker(tree_src: Path, kind: str, figure: str, runs: int, where: int = 0) -> int:
    """Bytes of *figure* held by *runs* runs of *kind*, measured by a subprocess on *tree_src*.

    *where*: the subprocess also prints the lines that hold the most (see ``--where``).
    """
    path = os.pathsep.join(map(str, (tree_src, HERE, HERE / "peers")))
    env = dict(os.environ, PYTHONPATH=path)
    args = [sys.executable, __file__, "--worker", kind, "--figure", figure, "--runs", str(runs)]
    proc = subprocess.run(
        [*args, "--where", str(where)], env=env, capture_output=True, text=True, timeout=1800
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the worker ({kind}, {figure}, {tree_src}) failed:\n{proc.stderr}")
    if where:
        print(proc.stderr)
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if result["parked"] != runs:
        raise RuntimeError(f"{kind}: {result['parked']} of {runs} runs parked when measured")
    if kind in TETHER_KINDS:
        imported = Path(result["tether"]).resolve()
        if not imported.is_relative_to(tree_src.resolve()):
            raise RuntimeError(f"the worker for {tree_src} imported tether from {imported}")
    return int(result["bytes"])


def main(quick: bool, before: str, where: int) -> None:
    sys.path[:0] = [str(HERE), str(HERE / "peers")]
    from _env import extract_src, print_environment

    runs = 1000 if quick else 10_000
    rounds = 1 if quick else 2
    print("tether benchmark: memory per held run, against bare trio tasks and before, in one run")
    print_environment(quick)
    print(
        f"measures: {runs:,} runs held at once: one no-op step done, the second waiting on an\n"
        "          event; traced = tracemalloc's peak, rss = peak RSS, above the start; per run"
    )
    print(f"target:   tether's traced bytes per run - own, now <= {TARGET:g}x before")
    with tempfile.TemporaryDirectory(prefix="tether-bench-before-") as name:
        before_src, why = extract_src(before, Path(name))
        now_src = REPO / "src"
        trees = {"now": now_src}
        if before_src is None:
            print(f"note:     no before: {why}")
        else:
            trees["before"] = before_src
            print(f"trees:    before = {before} ({why[:12]}) from git archive; now = {now_src}")
        print(f"rounds:   {rounds}, one subprocess per kind, tree and figure, trees in ABBA order")
        samples: dict[tuple[str, str, str], list[int]] = {}
        for r in range(rounds):
            order = sorted(trees, reverse=r % 4 in (1, 2))
            for figure in ("traced", "rss"):
                for kind in KINDS:
                    for tree in order if kind in TETHER_KINDS else ["now"]:
                        got = run_worker(trees[tree], kind, figure, runs)
                        samples.setdefault((kind, tree, figure), []).append(got)
            print(f"  round {r + 1} of {rounds} measured", flush=True)
    print()
    table(samples, runs, list(trees))
    if where:
        print()
        run_worker(REPO / "src", "tether memory", "traced", runs, where)


def table(samples: dict[tuple[str, str, str], list[int]], runs: int, trees: list[str]) -> None:
    def per_run(kind: str, tree: str, figure: str) -> float:
        return statistics.median(samples[kind, tree, figure]) / runs

    own = {figure: per_run("own state", "now", figure) for figure in ("traced", "rss")}
    floor = {figure: per_run("bare trio", "now", figure) for figure in ("traced", "rss")}
    cols = (
        f"{'kind':<22} {'traced B/run':>13} {'- own':>9} {'x floor':>8} {'rss B/run':>10} "
        f"{'- own':>9} {'x floor':>8}"
    )
    print(cols)
    print("-" * len(cols))

    def row(label: str, kind: str, tree: str) -> None:
        cells = []
        for figure in ("traced", "rss"):
            b = per_run(kind, tree, figure)
            cells.append(f"{b:>13,.0f} {b - own[figure]:>9,.0f} {b / floor[figure]:>7.2f}x")
        print(f"{label:<22} {cells[0]} {cells[1].strip():>29}")

    row("own state", "own state", "now")
    row("bare trio (floor)", "bare trio", "now")
    for kind in TETHER_KINDS:
        for tree in sorted(trees):
            row(f"{kind}, {tree}", kind, tree)
    print(
        "traced = tracemalloc's peak; rss = peak RSS (VmHWM, reset at the start); - own = minus\n"
        "the workflow's own state (its coroutines, args and locals); x floor = / bare trio;\n"
        f"medians of the rounds, divided by {runs:,} runs"
    )
    if "before" not in trees:
        return
    print()
    for kind in TETHER_KINDS:
        for figure in ("traced", "rss"):
            b = per_run(kind, "before", figure) - own[figure]
            n = per_run(kind, "now", figure) - own[figure]
            ok = "meets" if n / b <= TARGET else "does NOT meet"
            target = f" ({ok} <= {TARGET:g})" if figure == "traced" else ""
            print(
                f"{kind}, {figure}: engine's bytes per run (- own) now {n:,.0f}, before {b:,.0f}: "
                f"now/before = {n / b:.2f}{target}"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="1,000 runs, one round: a smoke run")
    parser.add_argument("--before", default=BEFORE, help=f"the baseline commit (default {BEFORE})")
    parser.add_argument(
        "--where", type=int, default=0, metavar="N", help="print the N lines that hold the most"
    )
    parser.add_argument("--worker", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--figure", choices=("traced", "rss"), help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=int, help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.worker:
        worker_main(ns.worker, ns.figure, ns.runs, ns.where)
    else:
        main(ns.quick, ns.before, ns.where)
