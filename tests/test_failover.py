"""A PostgreSQL failover under a fleet of ``tether worker`` processes (issue 26).

A primary with a synchronous streaming standby (``tests/_postgres_standby.py``),
two ``tether worker`` processes on the multi-host URL
``postgresql://tether@P1,P2/tether?target_session_attrs=read-write``, runs of
six sequential steps in flight, each step logging its start with its fencing
token. Mid-fleet the primary is SIGKILLed (every process of it), the pair
stays without a writable server longer than a lease, then the standby is
promoted (``tests/_failover_flows.py`` runs the scenario). Then:

- every run completes, each step's result in its place, and no worker exited
  (each drains on SIGTERM, exit status 0);
- no committed step is lost: every journal entry the primary showed before the
  kill is on the standby, and still there at the end; a step whose next step
  started (its entry was acknowledged) is never executed again by a later
  execution (the stored result of step i never carries a larger token than an
  execution of step i + 1);
- fencing tokens only grow: along each run's steps and journal, and a run
  taken over after the failover executes with a larger token than before it.

The figures (runs in flight at the kill, time to resume after the promotion,
...) are printed, never asserted: ``pytest -s`` shows them, and
``benchmarks/failover.py`` prints them over repetitions.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pytest

from ._failover_flows import Failover, failover
from ._postgres_standby import pair_or_skip

STEPS = 6


def _token(value: str) -> int:
    return int(value.rsplit(":", 1)[1])


def check_completed(seen: Failover) -> None:
    """Every run completed with one result per step, in order; the workers survived."""
    for run_id in seen.run_ids:
        result = seen.results[run_id]
        assert [v.rsplit(":", 1)[0] for v in result] == [f"{run_id}:{i}" for i in range(STEPS)]
    assert seen.alive_at_end == len(seen.exit_codes), seen.log
    assert seen.exit_codes == [0] * len(seen.exit_codes), seen.log


def check_nothing_lost(seen: Failover) -> None:
    """What was committed before the kill is there at the end; no acknowledged step ran again."""
    assert seen.seen_before_kill, "the primary was killed before any step was stored"
    assert seen.seen_before_kill <= seen.at_kill, seen.seen_before_kill - seen.at_kill
    assert seen.at_kill <= seen.final, seen.at_kill - seen.final
    journals: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for run_id, seq, key, _ in seen.final:
        journals[run_id].append((seq, key))
    for run_id, journal in journals.items():
        assert sorted(seq for seq, _ in journal) == list(range(1, len(journal) + 1)), run_id
        twice = [k for k, n in Counter(key for _, key in journal).items() if n > 1]
        assert not twice, f"{run_id}: keys stored twice: {twice}"
    # Step i + 1 started under token t: step i's entry was acknowledged to the
    # execution t (stored by it or an earlier one). Lost, it would have been
    # executed again by a later execution, whose larger token its result shows.
    stored = {run_id: [_token(v) for v in result] for run_id, result in seen.results.items()}
    for e in seen.executions:
        if e.step > 0:
            assert stored[e.run_id][e.step - 1] <= e.token, (e, stored[e.run_id])


def check_tokens_grow(seen: Failover) -> None:
    """Tokens never go back, and a run taken over after the failover has a larger one."""
    for run_id, result in seen.results.items():
        tokens = [_token(v) for v in result]
        assert tokens == sorted(tokens), f"{run_id}: steps' tokens {tokens}"
        entries = seen.entry_tokens[run_id]
        assert entries == sorted(entries), f"{run_id}: a late write landed: {entries}"
    taken_over = seen.taken_over()
    assert taken_over, "no run had steps executed both before the kill and after the promotion"
    for run_id in taken_over:
        mine = [e for e in seen.executions if e.run_id == run_id]
        before = max(e.token for e in mine if e.at < seen.killed_at)
        after = min(e.token for e in mine if e.at > seen.promote_started_at)
        # The outage outlasted every lease: no execution holding one at the kill goes on.
        assert after > before, (run_id, mine)


@pytest.mark.slow
def test_a_failover_to_a_synchronous_standby_loses_no_committed_step(tmp_path: Path) -> None:
    with pair_or_skip() as pair:
        seen = failover(pair, tmp_path, steps=STEPS)
    print(f"failover: {seen.figures()}")
    # ``tether worker --store`` took the multi-host URL, and shows it as given (no password).
    assert f" from {pair.url()} (concurrency" in seen.log
    check_completed(seen)
    check_nothing_lost(seen)
    check_tokens_grow(seen)
