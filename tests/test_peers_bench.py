"""The peers comparison measures what it claims (benchmarks/peers/, tether and the floors).

Every scenario runs in the tiny configuration of ``run.py --quick`` for tether
and the two floors, imported straight from ``benchmarks/peers`` with this
interpreter (the peers' own venv is not needed), and each result is checked:
the hung save really hung and nothing was left running, the failing sibling
really failed and A ran once, the steps really ran, the resume re-executed
nothing, the memory scenario parked its runs. Then the parts that could lie
without a run failing: the deadline trial refuses a call that did not hang,
the hang counts what it claims, a driver's process prints its result on its
last line, and the report's "ahead / behind" sentences follow the figures.
The queue scenario (7) needs the peers' venv and PostgreSQL: its smoke run is
a slow test, skipped without them; its plan, its exactly-once count and its
report are checked here without either. Real time (these are measurements),
with generous bounds.
"""

from __future__ import annotations

import importlib
import json
import math
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio
import trio.testing

from tether.testing.pytest_plugin import saved_registry

from ._postgres import find_bindir

PEERS = Path(__file__).resolve().parent.parent / "benchmarks" / "peers"
REPO = PEERS.parent.parent
DRIVERS = ("tether_engine", "trio_floor", "asyncio_floor")
FLOORS = ("trio_floor", "asyncio_floor")
N, RUNS, TRIALS = 20, 50, 3  # run.py --quick


@pytest.fixture(scope="module")
def peers() -> Iterator[dict[str, ModuleType]]:
    """``_protocol``, the three drivers, ``run`` and ``report``, by name."""
    sys.path.insert(0, str(PEERS))
    try:
        with saved_registry():  # tether_engine defines workflows
            names = (
                "_protocol",
                "_figures",
                "_venv",
                "run",
                "report",
                "engines._queue_common",
                *(f"engines.{d}" for d in DRIVERS),
            )
            yield {name.removeprefix("engines."): importlib.import_module(name) for name in names}
    finally:
        sys.path.remove(str(PEERS))
        # generic names ("run", "engines"): no other test should find these
        for name, module in list(sys.modules.items()):
            if str(getattr(module, "__file__", None) or "").startswith(str(PEERS)):
                del sys.modules[name]


def scenario(peers: dict[str, ModuleType], driver: str, name: str, **config: Any) -> Any:
    protocol = peers["_protocol"]
    return getattr(peers[driver], f"scenario_{name}")(protocol.BY_NAME[name].config(**config))


@pytest.mark.slow
@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("width", [1, 10])
def test_cancel_hangs_every_save_and_measures_the_overshoot(
    peers: dict[str, ModuleType], driver: str, width: int
) -> None:
    r = scenario(peers, driver, "cancel", width=width, trials=TRIALS, warmup=1)
    assert r.hung_saves_ok
    assert len(r.samples) == TRIALS and r.capped == 0
    assert r.outcomes == ["cancelled"] * TRIALS
    assert all(s >= 0 for s in r.samples), r.samples  # each measured from its deadline
    assert r.leftover_tasks == [0] * TRIALS and r.leftover_threads == [0] * TRIALS
    # tether group-commits the waiting saves into one append; a floor's tasks each wait
    assert all(e >= (1 if driver == "tether_engine" else width) for e in r.saves_entered)


def test_sibling_failure_keeps_the_completed_step(peers: dict[str, ModuleType]) -> None:
    r = scenario(peers, "tether_engine", "sibling")
    assert r.b_failed and r.completed
    assert r.a_executions == 1


@pytest.mark.parametrize("driver", DRIVERS)
def test_steps_parallel_and_memory_really_ran(peers: dict[str, ModuleType], driver: str) -> None:
    steps = scenario(peers, driver, "steps", n=N, durable=False, repeats=2)
    assert steps.steps_ran == N and steps.us_per_step > 0  # wall time over the steps
    assert (steps.checkpoint_us is not None) == (driver in FLOORS)
    parallel = scenario(peers, driver, "parallel", n=N)
    assert parallel.steps_ran == N and parallel.seconds > 0
    memory = scenario(peers, driver, "memory", runs=RUNS)
    assert memory.runs_started == RUNS and memory.peak_bytes > 0


def test_tether_durable_steps_and_resume(peers: dict[str, ModuleType]) -> None:
    steps = scenario(peers, "tether_engine", "steps", n=N, durable=True, repeats=2)
    assert steps.steps_ran == N
    resume = scenario(peers, "tether_engine", "resume", n=N)
    assert resume.steps_reexecuted == 0 and resume.seconds > 0


@pytest.mark.parametrize("driver", FLOORS)
@pytest.mark.parametrize(
    ("name", "config"),
    [("sibling", {}), ("resume", {"n": N}), ("steps", {"n": N, "durable": True})],
)
def test_floors_refuse_what_they_cannot_express(
    peers: dict[str, ModuleType], driver: str, name: str, config: dict[str, Any]
) -> None:
    with pytest.raises(peers["_protocol"].Unsupported):
        scenario(peers, driver, name, **config)


# -- the parts of the protocol that could lie ----------------------------------------------


async def test_a_call_that_does_not_hang_is_refused(peers: dict[str, ModuleType]) -> None:
    protocol = peers["_protocol"]
    cfg = protocol.CancelConfig(width=1, trials=1, deadline=0.05)
    with pytest.raises(protocol.ReturnedEarly):
        await protocol.trio_deadline_trial(trio.lowlevel.checkpoint, cfg, random.Random(0))


async def test_hang_counts_entries_releases_and_expiry(
    peers: dict[str, ModuleType], autojump_clock: trio.testing.MockClock
) -> None:
    protocol = peers["_protocol"]
    hang = protocol.Hang(limit=5.0)
    assert not hang.held()  # nothing entered: not a hang
    with pytest.raises(protocol.HangExpired):
        await hang.wait_trio()
    assert (hang.entered, hang.returned, hang.expired) == (1, 0, 1) and hang.held()

    released = protocol.Hang(limit=math.inf)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(released.wait_trio)
        await trio.testing.wait_all_tasks_blocked()
        assert released.held()
        released.release()
    assert released.returned == 1 and not released.held()


def test_a_driver_process_prints_its_result_last(peers: dict[str, ModuleType]) -> None:
    config = json.dumps({"n": N, "durable": False, "repeats": 1})
    proc = subprocess.run(
        [sys.executable, "-m", "engines.trio_floor", "steps", config],
        cwd=PEERS,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["status"] == "ok" and out["scenario"] == "steps"
    assert out["result"]["steps_ran"] == N and out["version"] == trio.__version__


def test_quick_plan_has_the_tiny_sizes(peers: dict[str, ModuleType]) -> None:
    run = peers["run"]
    cases = {c.label: c.config for c in run.plan(True, set(peers["_protocol"].BY_NAME))}
    assert [c["width"] for k, c in cases.items() if k.startswith("cancel")] == [1, 10]
    assert {c["trials"] for k, c in cases.items() if k.startswith("cancel")} == {TRIALS}
    assert cases["steps durable"]["n"] == cases["resume"]["n"] == N
    assert cases["memory"]["runs"] == RUNS
    assert peers["_venv"].distribution_of("Apache_Burr[sqlite]==0.40") == "apache-burr"
    queue = {k: c for k, c in cases.items() if k.startswith("queue")}
    assert {(c["steps"], c["workers"], c["jobs"], c["round"]) for c in queue.values()} == {
        (1, 1, 40, 1), (1, 2, 40, 1), (10, 1, 40, 1), (10, 2, 40, 1)
    }  # fmt: skip


def test_full_queue_plan_alternates_three_rounds_of_1500_jobs(
    peers: dict[str, ModuleType],
) -> None:
    cases = [c for c in peers["run"].plan(False, {"queue"})]
    assert len(cases) == 12 and {c.config["jobs"] for c in cases} == {1500}
    assert {c.config["concurrency"] for c in cases} == {16}
    # the rounds outermost: each configuration's three runs are spread over the scenario
    assert [c.config["round"] for c in cases] == [1] * 4 + [2] * 4 + [3] * 4
    engines = {e.key: e for e in peers["run"].discover()}
    queue = {k for k, e in engines.items() if e.queue}
    assert {"queue_tether", "queue_skip_locked", "queue_dbos"} <= queue
    assert {"queue_procrastinate", "queue_pgqueuer"} <= queue
    assert not {"tether", "trio", "dbos"} & queue


def test_the_exactly_once_check_counts_twice_and_lost(
    peers: dict[str, ModuleType], tmp_path: Path
) -> None:
    """Two workers' files: job 1's step 0 ran in both, job 2's step 1 never ran."""
    (tmp_path / "exec-1.log").write_text("0 0\n0 1\n1 0\n2 0\n")
    (tmp_path / "exec-2.log").write_text("1 0\n1 1\n")
    executions = peers["_queue_common"].executions
    assert executions(tmp_path, 3, 2) == (6, 1, 1)
    assert executions(tmp_path, 2, 2) == (6, 2, 0)  # job 2 was never queued: counted too


def test_the_report_says_where_tether_is_behind(peers: dict[str, ModuleType]) -> None:
    """A peer with a lower overshoot and a peer that lost A's checkpoint, told as such; a
    figure whose save did not hang is flagged and left out of the comparison."""

    def engine(name: str) -> dict[str, Any]:
        return {"name": name, "installed": True, "install_error": "", "version": "1"}

    def cancel(key: str, ms: float, hung: bool = True) -> dict[str, Any]:
        result = {"samples": [ms / 1e3] * 3, "hung_saves_ok": hung, "leftover_tasks": [0] * 3,
                  "leftover_threads": [0] * 3, "notes": ""}  # fmt: skip
        return {"engine": key, "case": "cancel width=100", "scenario": "cancel",
                "config": {"width": 100}, "status": "ok", "result": result}  # fmt: skip

    def sibling(key: str, runs: int) -> dict[str, Any]:
        result = {"a_executions": runs, "b_failed": True, "completed": True, "notes": ""}
        return {"engine": key, "case": "sibling", "scenario": "sibling", "config": {},
                "status": "ok", "result": result}  # fmt: skip

    raw = {
        "quick": False,
        "generated": "now",
        "machine": dict.fromkeys(("platform", "cpu", "cpus", "python", "load", "source"), "x"),
        "engines": {"tether": engine("tether"), "fast": engine("Fast"), "slow": engine("Slow"),
                    "broken": engine("Broken")},
        "entries": [cancel("tether", 2.0), cancel("fast", 1.0), cancel("slow", 50.0),
                    cancel("broken", 0.5, hung=False),
                    sibling("tether", 1), sibling("fast", 2), sibling("slow", 1)],
    }  # fmt: skip
    report = peers["report"].Report(peers["_figures"].Results(raw))
    page = report.page()
    assert "- overshoot p50, width 100: tether is ahead of Slow; **behind** Fast." in page
    assert "- sibling failure: A ran once: tether is ahead of Fast; level with Slow." in page
    assert "| Fast | 3 | 1.00 | 1.00 | 1.00 | 0.50x |" in page
    assert "- Broken, cancel width=100: a save did not hang" in page
    assert "| Broken | 3 | 0.50 | 0.50 | 0.50 | 0.25x | 0.25x | 0 / 0 | **no** |" in page


def test_the_queue_report_flags_a_job_that_ran_twice(
    peers: dict[str, ModuleType], tmp_path: Path
) -> None:
    """The queue table's medians and ratios; a system whose job ran twice is listed under
    the failed checks and left out of the comparison, and the plot is drawn."""

    def engine(name: str) -> dict[str, Any]:
        return {"name": name, "installed": True, "install_error": "", "version": "1",
                "queue": True}  # fmt: skip

    def drain(key: str, seconds: float, workers: int, r: int, dup: int = 0) -> dict[str, Any]:
        result = {"seconds": seconds, "submit_seconds": 1.0, "worker_cpu": 1.0,
                  "server_cpu": 0.5, "commits": 300, "write_xacts": 200, "statements": 400,
                  "executions": 100, "duplicates": dup, "lost": 0, "notes": ""}  # fmt: skip
        config = {"jobs": 100, "steps": 1, "workers": workers, "concurrency": 16, "round": r,
                  "timeout": 300.0}  # fmt: skip
        return {"engine": key, "case": f"queue 1-step x{workers} #{r}", "scenario": "queue",
                "config": config, "status": "ok", "result": result}  # fmt: skip

    entries = []
    for r, slow in ((1, 1.0), (2, 5.0), (3, 1.0)):  # the median drops the slow round
        for w in (1, 2):
            entries += [drain("queue_tether", slow, w, r), drain("queue_fast", 0.5, w, r),
                        drain("queue_twice", 0.1, w, r, dup=1 if r == 2 else 0)]  # fmt: skip
    raw = {
        "quick": False,
        "generated": "now",
        "machine": dict.fromkeys(("platform", "cpu", "cpus", "python", "load", "source"), "x"),
        "engines": {"queue_tether": engine("tether"), "queue_fast": engine("Fast"),
                    "queue_twice": engine("Twice")},
        "entries": entries,
    }  # fmt: skip
    results = peers["_figures"].Results(raw)
    page = peers["report"].Report(results).page()
    assert "| **tether** | 100 | 100 | 1.00x / 1.00x | 67 / 67 | 10.00 / 5.00 | 3.00 / 2.00 / " \
        "4.00 | yes (6 runs) |" in page  # fmt: skip
    assert "| Fast | 200 | 200 | 2.00x / 2.00x |" in page
    assert "| Twice | 1,000 | 1,000 | 10.00x / 10.00x |" in page
    assert "**no**: 2 twice, 0 lost |" in page
    assert "- Twice, queue 1-step x1: 1 (job, step) pairs ran twice or more, 0 never ran" in page
    assert "- time per 1-step job, 1 worker: tether is **behind** Fast." in page  # not Twice

    pytest.importorskip("matplotlib")  # tether's bench extra
    assert importlib.import_module("_plots").queue_bars(results, tmp_path / "queue.png")
    assert (tmp_path / "queue.png").stat().st_size > 0


def _peers_venv_has(*modules: str) -> str | None:
    """Why the queue smoke run cannot run here, or None."""
    python = PEERS / ".venv" / "bin" / "python"
    if not python.exists():
        return "no benchmarks/peers/.venv (run.py makes it; it needs PyPI)"
    probe = subprocess.run(
        [str(python), "-c", f"import {', '.join(modules)}"], capture_output=True, timeout=120
    )
    return None if probe.returncode == 0 else f"the peers' venv lacks one of {modules}"


@pytest.mark.slow
def test_the_queue_scenario_drains_tether_and_the_floor_exactly_once(tmp_path: Path) -> None:
    """run.py --quick for scenario 7, tether and the floor: a server of its own, every
    configuration drained, every step of every job run exactly once, counters read."""
    why = _peers_venv_has("psycopg", "psycopg_pool", "tether")
    if why:
        pytest.skip(why)
    if find_bindir() is None:
        pytest.skip("no PostgreSQL server binaries")
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, str(PEERS / "run.py"), "--quick", "--scenarios", "queue",
         "--only", "queue_tether,queue_skip_locked", "--output", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    entries = json.loads(out.read_text())["entries"]
    assert len(entries) == 8, [e["case"] for e in entries]
    for e in entries:
        assert e["status"] == "ok", (e["engine"], e["case"], e.get("traceback"))
        r, cfg = e["result"], e["config"]
        assert (r["executions"], r["duplicates"], r["lost"]) == (cfg["jobs"] * cfg["steps"], 0, 0)
        # counted (tether may group many jobs' writes in one transaction: no lower bound)
        assert r["seconds"] > 0 and r["write_xacts"] > 0 and r["worker_cpu"] >= 0
        assert r["statements"] is not None and r["statements"] > 0
