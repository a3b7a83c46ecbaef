"""A PostgreSQL failover under `tether worker` processes: how long until work resumes.

Run: ``python benchmarks/failover.py [--quick]``

The scenario is tests/test_failover.py's (``tests/_failover_flows.py``):
a throwaway primary with a synchronous streaming standby made by
``pg_basebackup`` (``tests/_postgres_standby.py``: ``synchronous_commit =
on``, ``fsync`` off as in every test cluster), two ``tether worker``
processes (``--concurrency 8 --lease-ttl 2``) on the URL
``postgresql://tether@P1,P2/tether?target_session_attrs=read-write``, 40
runs of six sequential steps of 0.2 s each. Once a quarter of the runs
completed, the primary is SIGKILLed (every process of it); the pair stays
without a writable server for 3 s (1.5 leases: a failover manager deciding),
then ``pg_ctl promote`` makes the standby the primary. A fresh pair for each
repetition (5; 1 with ``--quick``).

Columns: runs in flight at the kill; journal entries the standby kept;
``pg_ctl promote``'s own time; after the promotion, the first new journal
entry (a worker writing again), the first step executed by a takeover (a
run held at the kill, executing again with a larger fencing token), and the
last run completed; steps executed a second time (at-least-once: the steps
in flight at the kill); runs taken over. Every run is checked to complete
(as the test checks it, more thoroughly). Without PostgreSQL server
binaries or ``pg_basebackup`` the benchmark prints so and exits 0.

Timing is reported, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from _env import print_environment

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repository root: tests/_postgres_standby.py

from tests._failover_flows import Failover, failover  # noqa: E402
from tests._postgres import PostgresUnavailable  # noqa: E402
from tests._postgres_standby import start_pair  # noqa: E402

HEADER = (
    f"{'rep':>3} {'in flight':>9} {'kept':>5} {'promote s':>9} {'1st entry s':>11} "
    f"{'1st takeover s':>14} {'all done s':>10} {'again':>5} {'taken over':>10}"
)


def row(rep: int, seen: Failover) -> str:
    again = len(seen.executions) - len(seen.run_ids) * seen.steps
    return (
        f"{rep:>3} {seen.in_flight:>9} {len(seen.at_kill):>5} {seen.promote_s:>9.2f} "
        f"{seen.resume_s:>11.2f} {seen.takeover_s():>14.2f} {seen.finish_s:>10.2f} "
        f"{again:>5} {len(seen.taken_over()):>10}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="one repetition")
    quick = parser.parse_args().quick
    print_environment(quick)
    print("target:   none (figures of a failover; the test asserts that nothing is lost)")
    print("failover: SIGKILL of the primary, 3 s without a writable server, pg_ctl promote")
    print(HEADER)
    seen_all: list[Failover] = []
    for rep in range(1 if quick else 5):
        try:
            pair = start_pair()
        except PostgresUnavailable as exc:
            print(f"skipped: {exc}")
            return
        try:
            with tempfile.TemporaryDirectory(prefix="tether-failover-") as folder:
                seen = failover(pair, Path(folder))
        finally:
            pair.stop()
        for run_id in seen.run_ids:
            assert len(seen.results[run_id]) == seen.steps, run_id
        seen_all.append(seen)
        print(row(rep + 1, seen), flush=True)
    for name, values in (
        ("first entry", [s.resume_s for s in seen_all]),
        ("first takeover", [s.takeover_s() for s in seen_all]),
        ("all done", [s.finish_s for s in seen_all]),
    ):
        print(
            f"after the promotion, {name}: median {statistics.median(values):.2f} s "
            f"({min(values):.2f}-{max(values):.2f})"
        )


if __name__ == "__main__":
    main()
