"""Run the peers comparison: every engine, every scenario, each call in a fresh process.

Run: ``python benchmarks/peers/run.py [--quick] [--only tether,dbos] [--scenarios 1,3]``
(then ``python benchmarks/peers/report.py``; ``just bench-peers`` does both).

1. A virtual environment ``benchmarks/peers/.venv`` made with this
   interpreter's ``-m venv``, so every engine runs under the same Python. Each
   line of ``requirements.txt`` is installed on its own (one that fails does not
   sink the others, and the engine it belongs to is reported as not installed,
   with pip's reason), then tether from this repository (editable). The venv
   remembers the hash of what it installed: with ``requirements.txt`` and
   ``pyproject.toml`` unchanged, nothing is installed again; a changed
   requirements line is installed anew (``--reinstall`` starts from an empty
   venv).
2. The plan: per scenario and configuration (scenario 1 at each width, scenario
   3 in memory and durable), every engine in turn, the order rotating from one
   configuration to the next, so that drift in the machine's speed hits every
   engine alike. Each call is ``VENV_PY -m engines.<module> SCENARIO CONFIG_JSON``
   with ``cwd=benchmarks/peers``, bounded by a timeout; its result is the JSON
   object on the last line of its stdout (see ``_protocol.py``).
3. Bounded time: each engine has a budget (``--engine-budget``, seconds for all
   its calls); a call's timeout is at most what is left of it, and calls past it
   are recorded as skipped, with the reason. Scenario 1 stops its trials early
   (and says so) after ``CANCEL_BUDGET`` seconds per width.
4. Scenario 7, the queue, has systems of its own (drivers with ``QUEUE = True``,
   ``engines/queue_*.py``), run in that scenario only: one throwaway PostgreSQL
   is started for it (``_drain.start_server``), and each call is ``_drain.py``
   under this interpreter, which starts the system's processes in the venv.
5. ``results.json`` (``--output``): the machine, each engine's version and
   install status, every call's configuration and outcome. A run limited with
   ``--only`` or ``--scenarios`` keeps the other entries of an existing file of
   the same mode (full or ``--quick``), unless ``--fresh``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import _protocol as P  # noqa: E402
from _venv import ensure_venv, install_status, venv_python  # noqa: E402

from _env import load_text, source_text  # noqa: E402

ENGINE_BUDGET = 150.0  #: seconds per engine for all its calls (full run)
QUICK_ENGINE_BUDGET = 90.0
QUEUE_BUDGET = 900.0  #: seconds per queue system for all its drains (scenario 7, full run)
QUICK_QUEUE_BUDGET = 150.0
CALL_TIMEOUT = 120.0  #: seconds per call at most (scenario 1: its budget plus this)
FIRST = ("tether", "trio", "asyncio")  # the report's first columns


# -- engines --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Engine:
    key: str  #: the name --only takes: the module's name without _engine / _floor
    module: str  #: engines.<module>
    name: str  #: its ENGINE
    distribution: str | None  #: its DISTRIBUTION (the requirements line it needs)
    queue: bool = False  #: a system of scenario 7 (QUEUE = True), which runs only that one


def _constant(tree: ast.Module, name: str) -> Any:
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value:
                return ast.literal_eval(node.value)
    return None


def discover() -> list[Engine]:
    """The driver modules in engines/, read without importing them (their peers may be
    missing from this interpreter)."""
    found = []
    for path in sorted((HERE / "engines").glob("*.py")):
        if path.stem.startswith("_"):
            continue
        tree = ast.parse(path.read_text(), str(path))
        key = re.sub(r"_(engine|floor)$", "", path.stem)
        name = _constant(tree, "ENGINE") or key
        distribution, queue = _constant(tree, "DISTRIBUTION"), bool(_constant(tree, "QUEUE"))
        found.append(Engine(key, f"engines.{path.stem}", name, distribution, queue))
    order = {k: i for i, k in enumerate(FIRST)}
    return sorted(found, key=lambda e: (order.get(e.key, len(order)), e.key))


# -- the plan -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    scenario: str
    label: str  #: e.g. "cancel width=100", unique within a run
    config: dict[str, Any]


def plan(quick: bool, scenarios: set[str]) -> list[Case]:
    widths = P.QUICK_CANCEL_WIDTHS if quick else P.CANCEL_WIDTHS
    trials = P.QUICK_CANCEL_TRIALS if quick else P.CANCEL_TRIALS
    n = P.QUICK_N if quick else None
    cases: list[Case] = []
    for width in widths:
        cfg = P.CancelConfig(width=width, trials=trials, **({"warmup": 1} if quick else {}))
        cases.append(Case("cancel", f"cancel width={width}", dataclasses.asdict(cfg)))
    cases.append(Case("sibling", "sibling", dataclasses.asdict(P.SiblingConfig())))
    for durable in (False, True):
        steps = P.StepsConfig(durable=durable, **({"n": n, "repeats": 3} if n else {}))
        where = "durable" if durable else "in memory"
        cases.append(Case("steps", f"steps {where}", dataclasses.asdict(steps)))
    cases.append(
        Case("parallel", "parallel", dataclasses.asdict(P.ParallelConfig(n=n or P.PARALLEL_N)))
    )
    cases.append(Case("resume", "resume", dataclasses.asdict(P.ResumeConfig(n=n or P.RESUME_N))))
    runs = P.QUICK_RUNS if quick else P.MEMORY_RUNS
    cases.append(Case("memory", "memory", dataclasses.asdict(P.MemoryConfig(runs=runs))))
    # The rounds outermost: the three runs of a configuration are spread over the scenario.
    jobs = P.QUICK_QUEUE_JOBS if quick else P.QUEUE_JOBS
    for r in range(1 if quick else P.QUEUE_ROUNDS):
        for steps in P.QUEUE_STEPS:
            for workers in P.QUEUE_WORKERS:
                cfg = P.QueueConfig(jobs=jobs, steps=steps, workers=workers, round=r + 1)
                label = f"queue {steps}-step x{workers} #{r + 1}"
                cases.append(Case("queue", label, dataclasses.asdict(cfg)))
    return [c for c in cases if c.scenario in scenarios]


def parse_scenarios(text: str | None) -> set[str]:
    if not text:
        return set(P.BY_NAME)
    chosen = set()
    by_number = {str(s.number): s.name for s in P.SCENARIOS}
    for item in text.split(","):
        item = item.strip()
        name = by_number.get(item, item)
        if name not in P.BY_NAME:
            raise SystemExit(
                f"--scenarios: unknown scenario {item!r} "
                f"(1-{len(P.SCENARIOS)} or {', '.join(P.BY_NAME)})"
            )
        chosen.add(name)
    return chosen


# -- one call -------------------------------------------------------------------------------------


def call(
    python: Path, engine: Engine, case: Case, timeout: float, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run one scenario of one engine in a fresh process; its JSON outcome.

    A queue system's call is ``_drain.py`` under this interpreter (which has
    tether's test helpers): it starts the system's own processes in the venv.
    """
    if engine.queue:
        cmd = [sys.executable, str(HERE / "_drain.py"), engine.module, json.dumps(case.config)]
    else:
        cmd = [str(python), "-m", engine.module, case.scenario, json.dumps(case.config)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        cwd=HERE,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # so a timeout ends the engine's own children too
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        return {
            "status": "timeout",
            "reason": f"timed out after {timeout:.0f} s",
            "process_seconds": time.perf_counter() - t0,
        }
    for line in reversed(stdout.strip().splitlines()):
        try:
            out = json.loads(line)
        except ValueError:
            continue
        if isinstance(out, dict) and out.get("scenario") == case.scenario:
            # the whole process (interpreter start, imports): what the budget counts
            out["process_seconds"] = time.perf_counter() - t0
            return out
    last = (stderr.strip() or stdout.strip() or "no output").splitlines()[-1][:300]
    return {
        "status": "error",
        "reason": f"exit code {proc.returncode}: {last}",
        "traceback": stderr[-4000:],
        "process_seconds": time.perf_counter() - t0,
    }


def short(out: dict[str, Any]) -> str:
    if out["status"] != "ok":
        return f"{out['status'].upper()}: {out.get('reason', '')}"[:140]
    r = out["result"]
    if "write_xacts" in r:
        jobs = out["config"]["jobs"]
        once = "exactly once" if not (r["duplicates"] or r["lost"]) else "NOT exactly once"
        return f"ok, {jobs / r['seconds']:,.0f} jobs/s, {once}"
    if r.get("samples"):
        s = sorted(r["samples"])
        return f"ok, p50 {s[len(s) // 2] * 1e3:.2f} ms over {len(s)} trials"
    for key, fmt in (
        ("us_per_step", "{:.1f} us/step"),
        ("seconds", "{:.3f} s"),
        ("peak_bytes", "{} bytes"),
        ("a_executions", "A ran {}x"),
    ):
        if key in r:
            return "ok, " + fmt.format(r[key])
    return "ok"


def queue_server(cases: list[Case], runnable: list[Engine]) -> tuple[dict[str, str], str]:
    """The throwaway PostgreSQL of scenario 7 (``_drain.start_server``), if it is planned:
    the environment naming it to the calls (and describing it), or why it did not start."""
    if not any(c.scenario == "queue" for c in cases) or not any(e.queue for e in runnable):
        return {}, ""
    try:
        import _drain

        env, described = _drain.start_server()
    except Exception as exc:  # no server binaries, no psycopg, a server that did not start
        return {}, f"no PostgreSQL for the queue scenario: {type(exc).__name__}: {exc}"[:300]
    print(f"queue scenario: {described}", flush=True)
    return {**env, "PEERS_PG_DESCRIBED": described}, ""


# -- main -----------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "load": load_text(),
        # the commit, not where this checkout happens to live
        "source": source_text().replace(str(REPO / "src"), "src/"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--only", help="engines, comma-separated (e.g. tether,trio,dbos)")
    parser.add_argument("--scenarios", help="scenario numbers or names, comma-separated")
    parser.add_argument("--output", type=Path, default=HERE / "results.json")
    parser.add_argument("--fresh", action="store_true", help="do not keep entries of --output")
    parser.add_argument("--reinstall", action="store_true", help="rebuild the venv from scratch")
    parser.add_argument("--engine-budget", type=float, help="seconds per engine for all its calls")
    ns = parser.parse_args()

    engines = discover()
    if ns.only:
        wanted = [k.strip() for k in ns.only.split(",") if k.strip()]
        unknown = set(wanted) - {e.key for e in engines}
        if unknown:
            raise SystemExit(
                f"--only: no driver for {', '.join(sorted(unknown))} "
                f"(have {', '.join(e.key for e in engines)})"
            )
        engines = [e for e in engines if e.key in wanted]
    cases = plan(ns.quick, parse_scenarios(ns.scenarios))
    budget = ns.engine_budget or (QUICK_ENGINE_BUDGET if ns.quick else ENGINE_BUDGET)
    queue_budget = QUICK_QUEUE_BUDGET if ns.quick else QUEUE_BUDGET

    started = time.perf_counter()
    measured_on = machine()  # the load before the run added its own
    stamp = ensure_venv(ns.reinstall)
    python = venv_python()
    if stamp.get("pip_check"):
        print(
            "peers venv: pip check reports conflicts:\n  "
            + stamp["pip_check"].replace("\n", "\n  ")
        )
    info: dict[str, dict[str, Any]] = {}
    runnable = []
    for e in engines:
        ok, why = install_status(e.distribution, stamp)
        info[e.key] = {
            "name": e.name,
            "distribution": e.distribution,
            "installed": ok,
            "install_error": why,
            "version": None,
            **({"queue": True} if e.queue else {}),
        }
        if ok:
            runnable.append(e)
        else:
            print(f"{e.name}: not installed, not run:\n  " + why.replace("\n", "\n  "))

    def runs_in(case: Case) -> list[Engine]:
        return [e for e in runnable if e.queue == (case.scenario == "queue")]

    def budget_of(e: Engine) -> float:
        return queue_budget if e.queue else budget

    total = sum(len(runs_in(c)) for c in cases)
    worst = sum(budget_of(e) for e in runnable if any(e in runs_in(c) for c in cases))
    print(
        f"plan: {len(cases)} configurations, {total} calls; at most {budget:.0f} s per engine "
        f"({queue_budget:.0f} s per queue system) (so under {worst / 60:.0f} min in all)",
        flush=True,
    )
    server_env, server_error = queue_server(cases, runnable)

    spent = {e.key: 0.0 for e in runnable}
    entries: list[dict[str, Any]] = []
    done = 0
    for i, case in enumerate(cases):
        these = runs_in(case)
        rotated = these[i % len(these) :] + these[: i % len(these)] if these else []
        for e in rotated:
            done += 1
            left = budget_of(e) - spent[e.key]
            head = f"[{done:>3}/{total}] {case.label:<20} {e.name:<24}"
            if e.queue and server_error:
                out: dict[str, Any] = {"status": "skipped", "reason": server_error}
            elif left <= 1.0:
                out = {
                    "status": "skipped",
                    "reason": f"the engine's time budget ({budget_of(e):.0f} s for all its "
                    "calls) was spent by the calls before",
                }
            else:
                # a drain's call: its setup, producer and teardown besides the drain
                limit = CALL_TIMEOUT + (
                    case.config.get("timeout") or case.config.get("budget") or 0.0
                )
                out = call(python, e, case, min(limit, left), server_env if e.queue else None)
                spent[e.key] += out["process_seconds"]
            if out.get("version") and not info[e.key]["version"]:
                info[e.key]["version"] = out["version"]
            entries.append(
                {
                    "engine": e.key,
                    "case": case.label,
                    "scenario": case.scenario,
                    "config": case.config,
                    "at": datetime.now(UTC).isoformat(timespec="seconds"),
                    **{k: v for k, v in out.items() if k not in ("engine", "scenario", "config")},
                }
            )
            elapsed = time.perf_counter() - started
            print(f"{head} {short(out)}  ({elapsed:.0f} s)", flush=True)

    results = {
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": ns.quick,
        "machine": measured_on,
        "engines": info,
        "pip_check": stamp.get("pip_check", ""),
        "entries": entries,
    }
    if server_env:
        results["postgres"] = server_env["PEERS_PG_DESCRIBED"]
    partial = bool(ns.only or ns.scenarios)
    if partial and not ns.fresh and ns.output.exists():
        old = json.loads(ns.output.read_text())
        if old.get("quick") == ns.quick:
            ran = {(x["engine"], x["case"]) for x in entries}
            keep = [x for x in old.get("entries", []) if (x["engine"], x["case"]) not in ran]
            results["entries"] = keep + entries
            before = old.get("engines", {})
            for key, now in info.items():  # an engine this run did not call keeps its version
                if now["version"] is None and key in before:
                    now["version"] = before[key].get("version")
            results["engines"] = {**before, **info}
    ns.output.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {ns.output} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
