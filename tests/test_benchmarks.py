"""The benchmarks keep running (their figures are reported, never asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

#: each benchmark, and lines of its --quick output that show it measured what it says
EXPECTED = {
    "cancel_latency.py": (
        "bare trio",
        "target",
        "part 1: latency of an explicit cancel()",
        "part 2: overshoot past a caller deadline",
        "bare asyncio TaskGroup",
        "part 2, N=100 : tether overshoot p50",
        "part 2, the same samples from the event loop's first wake-up",
        "from the wake-up at the deadline, p50: tether",
    ),
    "chaos.py": (
        "phases:",
        "phase      | before/s",
        "restart",
        "exhaustion",
        "dead tuples grown during the idle transaction",
        "kill storm: completions at 0 for more than 2 s:",
    ),
    "claim_cost.py": (
        "target",
        "PostgreSQL: claim_next by table size (ms)",
        "SQLite: claim_next by table size (ms)",
        "p50/1k",
        "    10,000 finished",
        "    10,000 queued",
        "    10,000 drained",
        "custom plan (the statement with its parameters):",
        "Buffers: shared hit=",
        "EXPLAIN QUERY PLAN:",
        "claim cost on PostgreSQL: finished:",
        "claim cost on SQLite: finished:",
    ),
    "deterministic.py": ("trio.run ms", "seeded ms", "trial ms", "trials/s"),
    "failover.py": (
        "target",
        "failover: SIGKILL of the primary",
        "1st takeover s",
        "after the promotion, all done: median",
    ),
    "leases.py": (
        "target",
        "part 1: per-step time, now against before leases",
        "part 2: renewal writes of one engine holding many runs",
        "renew/interval",
        "memory (mock)",
        "sqlite normal",
        "sqlite full",
    ),
    "memory.py": (
        "target",
        "own state",
        "bare trio (floor)",
        "tether memory, before",
        "tether memory, now",
        "tether sqlite, now",
        "tether memory, traced: engine's bytes per run (- own) now",
    ),
    "postgres.py": (
        "target",
        "server:   PostgreSQL",
        "part 1: durable steps/s by `tether worker` processes",
        "part 2: submit-to-start latency",
        "notifications (LISTEN)",
        "polling only (no watch)",
        "part 3: group commit",
        "one transaction per save",
        "part 4: latency of one durable sequential step",
        "SQLite FULL (baseline)",
        "group commit at W=100:",
    ),
    "step_overhead.py": (
        "plain",
        "target",
        "in trio checkpoints",
        "parallel x100",
        "unjournaled-await check (trivial",
        "on/off per step =",
    ),
    "store_throughput.py": (
        "target",
        "part 1: committed steps/s, group commit vs one commit per save",
        "part 2: latency of one durable sequential step",
        "append alone",
        "thread hop",
        "of which the thread hop alone",
        "group commit at W=100 on sqlite full:",
        "group commit at W=100 on file:",
        "durable sequential step on sqlite full:",
    ),
    "regression.py": ("target", "now/before", "resume memory", "throughput sqlite full"),
    "resume_scaling.py": (
        "target",
        "part 1: resume by journal size",
        "part 2: engine.get_run of a 100-entry run",
        "memory: resume costs",
        "sqlite: resume costs",
        "file: resume costs",
    ),
}


#: Arguments beyond ``--quick``: the chaos scorecard's smoke run leaves out the worker
#: kills (each restarts a worker process: slow on a busy machine; tests/test_chaos.py
#: runs them) and keeps a low, fixed load.
ARGS: dict[str, tuple[str, ...]] = {
    "chaos.py": ("--phases", "restart,storm,exhaustion,idle", "--rate", "40"),
}


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_benchmark_runs_in_quick_mode(script: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick", *ARGS.get(script, ())],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    for line in EXPECTED[script]:
        assert line in proc.stdout, f"{script} --quick did not print {line!r}:\n{proc.stdout}"
    assert "(--quick)" in proc.stdout


def test_every_benchmark_is_tested_and_in_the_bench_recipe() -> None:
    scripts = {p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_")}
    assert scripts == set(EXPECTED)
    justfile = (BENCHMARKS.parent / "justfile").read_text(encoding="utf-8")
    recipe = justfile.split("\nbench:", 1)[1].split("\n\n", 1)[0]
    for script in scripts:
        assert f"python benchmarks/{script}" in recipe, f"`just bench` does not run {script}"
