"""The chaos scorecard's phases as tests: under each fault, nothing is lost or run twice.

Each test runs one phase of ``benchmarks/chaos.py`` (:func:`scorecard`) with
shortened durations on the session's PostgreSQL server: two ``tether
worker`` processes serving a producer's steady 1-step jobs, as a role that
is not a superuser, then the fault. Every submitted run completes, and no
step whose record was stored runs again (each step looks for its own record
before it works); after a SIGKILL, each run whose step ran in two
processes was taken over, and the worker that took it over logged so,
naming the run and its previous owner (each step sleeps a moment, so that
runs are in flight when a worker dies). The kill storm begins with logins
refused for a few seconds, so that the workers wait for connections: a
worker's log says so.
The timings (recovery, time back to 95%, stalls) are the benchmark's table,
not asserted here.
"""

from __future__ import annotations

import io
from collections import defaultdict
from pathlib import Path

import pytest
import trio
from benchmarks import chaos

from ._fleet import read_log
from ._postgres import PostgresServer

#: Seconds, not minutes: every phase together stays within a few minutes.
DURATIONS = chaos.Durations(
    before=2,
    after=2,
    storm=6,
    exhaustion=3,
    kill_restart=1,
    kills_every=2,
    kills_for=6,
    idle=4,
    clean_runs=0,
    drain=120,
    storm_blocked=4,
    step_pause=0.3,
)
RATE = 20.0  # jobs/s: well below what two workers do on any machine


@pytest.mark.slow
@pytest.mark.parametrize("phase", chaos.PHASES)
def test_a_fault_loses_nothing_and_runs_no_stored_step_again(
    phase: str, postgres_server: PostgresServer, tmp_path: Path
) -> None:
    out = io.StringIO()
    done, fleet = trio.run(
        chaos.scorecard, postgres_server, [phase], DURATIONS, RATE, tmp_path, out
    )
    (p,) = done
    logs = "\n".join(w.tail() for w in fleet.all_workers())
    explain = f"\n{out.getvalue()}\n{p}\n{logs}"
    assert p.submitted > 0, explain
    assert p.lost == 0, explain  # every run submitted in the phase completed
    assert p.stored_again == 0, explain
    assert p.unchecked == 0, explain  # every step's check ran
    if phase == "storm":
        said = [w.name for w in fleet.all_workers() if "waiting for a connection" in w.stderr()]
        assert said, explain
    if phase in ("kill", "kills"):
        # A run whose step ran in two processes was taken over: the taker logged it.
        pids: defaultdict[str, set[str]] = defaultdict(set)
        for run_id, _, pid in read_log(tmp_path, "executions.log"):
            pids[run_id].add(pid)
        logged = "".join(w.stderr() for w in fleet.all_workers())
        moved = sorted(r for r, ps in pids.items() if len(ps) > 1)
        silent = [r for r in moved if f"took over run {r} from " not in logged]
        assert not silent, f"takeovers not logged: {silent}{explain}"
