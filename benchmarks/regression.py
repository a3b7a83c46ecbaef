"""Nothing slower than before: resume_scaling's and store_throughput's figures, now / before.

Run: ``python benchmarks/regression.py [--quick] [--before REV]``

``before`` is the tree at commit BEFORE (the commit the save path's rework
started from; ``--before`` names another), extracted with ``git archive``
into a temporary directory; ``now`` is this checkout's ``src/``. Each tree is
measured in subprocesses of its own (``PYTHONPATH=<tree>/src``, this
interpreter), alternated in ABBA order for a few rounds so drift hits both
alike. A subprocess runs the measurements of this folder's own
``resume_scaling.py`` and ``store_throughput.py`` (the same code for both
trees), and reports the tether it imported, so the baseline is known to be
the old code:

* resume: ``engine.resume`` of a run whose N entries all replay, per entry
  (``(T(N) - T(0)) / N``), on MemoryStore, SQLiteStore and FileStore;
* crowd: ``engine.get_run`` of a 100-entry run among other runs;
* throughput: committed steps/s of W parallel steps on SQLite (FULL) and
  FileStore, with group commit (the engine as it is);
* step: p50 latency of one durable sequential step, MemoryStore and SQLite.

Each figure is the median over every round's samples; ``now/before`` is the
ratio of times (for steps/s, of before / now, so that above 1 always means
slower now). A ratio above SLOWER is flagged. Skipped, with a note, when git
or the commit is not available. Timing is reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

BEFORE = "af85281"  # the commit the save path's rework (issue 13) started from
REPO = Path(__file__).resolve().parent.parent
SLOWER = 1.05  # a ratio now/before above this is flagged


# -- the worker: one tree's figures -----------------------------------------------------


async def measure(quick: bool) -> dict[str, float]:
    """The figures of the tether this process imported (a subprocess per tree)."""
    import resume_scaling as rs
    import store_throughput as st

    sizes = (1000,) if quick else (1000, 10_000)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="tether-bench-regression-") as name:
        tmp = Path(name)
        for kind in rs.KINDS:
            folder = tmp / f"sizes-{kind.name}"
            folder.mkdir()
            kind_sizes = sizes if kind.name != "file" else sizes[:1]
            rows = {row.n: row for row in await rs.measure_sizes(kind, folder, kind_sizes)}
            for n in kind_sizes:
                per_entry = (rows[n].resume - rows[0].resume) / n
                out[f"resume {kind.name} N={n:,}, us/entry"] = per_entry * 1e6
            folder = tmp / f"crowd-{kind.name}"
            folder.mkdir()
            others = 200 if quick else 1000
            _, among = await rs.measure_crowd(kind, folder, others, 5 if quick else 11)
            out[f"get_run {kind.name} among {others:,}, ms"] = among * 1e3
        for store, width, count in (("sqlite full", 100, 1000), ("file", 100, 300)):
            if quick:
                count = 200 if store != "file" else 100
            rates = [await st.throughput(store, tmp, width, count, True) for _ in range(3)]
            out[f"throughput {store} W={width}, us/step"] = 1e6 / statistics.median(rates)
        for store in ("memory", "sqlite full", "sqlite normal"):
            latencies, _ = await st.latency(store, tmp, 50 if quick else 300)
            out[f"step {store} p50, us"] = st.pct(latencies, 50) * 1e6
    return out


def worker_main(quick: bool) -> None:
    import tether

    # The subprocess reports on stdout; the measurements' progress lines go to stderr.
    real_stdout = sys.stdout
    sys.stdout = sys.stderr
    try:
        figures = trio.run(measure, quick)
    finally:
        sys.stdout = real_stdout
    print(json.dumps({"tether": tether.__file__, "figures": figures}))


# -- the driver ------------------------------------------------------------------------------


def run_worker(tree_src: Path, quick: bool) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=f"{tree_src}{os.pathsep}{Path(__file__).resolve().parent}")
    args = [sys.executable, str(Path(__file__).resolve()), "--worker"]
    proc = subprocess.run(
        [*args, "--quick"] if quick else args, env=env, capture_output=True, text=True, timeout=1800
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the worker for {tree_src} failed:\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    imported = Path(result["tether"]).resolve()
    if not imported.is_relative_to(tree_src.resolve()):
        raise RuntimeError(f"the worker for {tree_src} imported tether from {imported}")
    return result


def main(quick: bool, before: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _env import extract_src, print_environment

    print("tether benchmark: resume and store figures now against before, in one run")
    print_environment(quick)
    print(f"target:   every figure now/before <= 1 (above {SLOWER:g}x flagged)")
    rounds = 2 if quick else 6
    with tempfile.TemporaryDirectory(prefix="tether-bench-before-") as name:
        before_src, why = extract_src(before, Path(name))
        if before_src is None:
            print(f"note:     skipped: {why}")
            return
        now_src = REPO / "src"
        print(
            f"trees:    before = {before} ({why[:12]}) from git archive; now = {now_src}\n"
            f"rounds:   {rounds} of one subprocess per tree, in ABBA order"
        )
        samples: dict[str, dict[str, list[float]]] = {"before": {}, "now": {}}
        imported: dict[str, str] = {}
        for r in range(rounds):
            order = ("before", "now") if r % 4 in (0, 3) else ("now", "before")
            for tree in order:
                result = run_worker(before_src if tree == "before" else now_src, quick)
                imported[tree] = result["tether"]
                for figure, value in result["figures"].items():
                    samples[tree].setdefault(figure, []).append(value)
                print(f"  round {r + 1}: measured {tree}", flush=True)
    print(f"imported: before {imported['before']}\n          now    {imported['now']}")
    print()
    cols = f"{'figure':<44} {'before':>10} {'now':>10} {'now/before':>11}  rounds before..now"
    print(cols)
    print("-" * len(cols))
    flagged = []
    for figure, values in samples["before"].items():
        b = statistics.median(values)
        n = statistics.median(samples["now"][figure])
        ratio = n / b
        spread = "  ".join(
            f"{min(samples[tree][figure]):.1f}-{max(samples[tree][figure]):.1f}"
            for tree in ("before", "now")
        )
        mark = "  SLOWER" if ratio > SLOWER else ""
        if ratio > SLOWER:
            flagged.append(figure)
        print(f"{figure:<44} {b:>10.2f} {n:>10.2f} {ratio:>10.3f}x  {spread}{mark}", flush=True)
    print(
        "figures are times (us per entry, ms per get_run, us per committed step, p50 us per\n"
        "step): lower is faster; now/before > 1 means slower now; median over the rounds"
    )
    print()
    if flagged:
        print(f"slower than before (> {SLOWER:g}x): {', '.join(flagged)}")
    else:
        print(f"nothing slower than before beyond {SLOWER:g}x ({len(samples['before'])} figures)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes, few rounds: a smoke run")
    parser.add_argument("--before", default=BEFORE, help=f"the baseline commit (default {BEFORE})")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.worker:
        worker_main(ns.quick)
    else:
        main(ns.quick, ns.before)
