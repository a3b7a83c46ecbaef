"""A PostgreSQL failover under ``tether worker`` processes: the workflow, the scenario, what it saw.

Imported by the worker processes (``--import tests._failover_flows``), by
``tests/test_failover.py`` (which asserts on what :func:`failover` observed)
and by ``benchmarks/failover.py`` (which prints its figures).

:func:`chain` is the workflow: *steps* sequential steps, each one appending
``RUN I TOKEN PID TIME`` to ``steps.log`` in ``$TETHER_FLEET_LOG`` when its
body starts (``TOKEN`` is ``tether.fencing_token()``, ``TIME`` the wall
clock), sleeping *pause*, and returning ``RUN:I:TOKEN``: so the journal says
which execution stored each step.

:func:`failover` runs the scenario on a :class:`~tests._postgres_standby.Pair`:
submit the runs, start ``tether worker`` processes on the pair's multi-host
URL, and once a quarter of the runs completed (others in flight) read every
journal entry on the primary and SIGKILL it. The standby, once it has
replayed what it received, is read too (what survived). The pair stays
without a writable server for *outage* seconds (longer than the lease, as a
failover manager takes a while to decide: every lease held at the kill is
lost by then), then the standby is promoted; the scenario waits for the
first new journal entry (resumed) and for every run to complete, reads the
journal again, and stops the workers (SIGTERM: they drain).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

import tether
from tether.stores import from_url

from . import _fleet
from ._fleet import RawStore, TetherProcess
from ._poll import PATIENCE, poll

if TYPE_CHECKING:  # the workers import this module: not pytest, nor the servers
    from ._postgres_standby import Pair

STEPS_LOG: Final = "steps.log"
#: A journal entry as :meth:`tests._fleet.RawStore.entries` reads it: run id, seq, key, value.
Entry = tuple[str, int, str, str]


@tether.step
async def record(run_id: str, i: int, pause: float) -> str:
    """Step *i*: logs its start with the execution's fencing token, sleeps, returns
    ``RUN:I:TOKEN``."""
    token = tether.fencing_token()
    line = f"{run_id} {i} {token} {os.getpid()} {time.time():.6f}\n"
    fd = os.open(
        os.path.join(os.environ[_fleet.LOG_ENV], STEPS_LOG),
        os.O_WRONLY | os.O_APPEND | os.O_CREAT,
        0o644,
    )
    try:
        os.write(fd, line.encode())  # one write: whole lines, whatever the processes
    finally:
        os.close(fd)
    await trio.sleep(pause)
    return f"{run_id}:{i}:{token}"


@tether.workflow(name="tests.failover.chain")
async def chain(run_id: str, steps: int, pause: float) -> list[str]:
    """*steps* sequential steps; the list of their results."""
    return [await record(run_id, i, pause) for i in range(steps)]


@attrs.frozen
class Execution:
    """One start of a step's body, from ``steps.log``."""

    run_id: str
    step: int
    token: int
    pid: int
    at: float  # wall clock


@attrs.define
class Failover:
    """What the scenario saw (the test asserts on it), and its figures (the benchmark's)."""

    run_ids: list[str]
    steps: int
    #: every journal entry the primary showed just before it was killed
    seen_before_kill: set[Entry] = attrs.field(factory=set)
    #: the standby's journal after the kill, before its promotion
    at_kill: set[Entry] = attrs.field(factory=set)
    #: the journal once every run completed
    final: set[Entry] = attrs.field(factory=set)
    results: dict[str, Any] = attrs.field(factory=dict)
    entry_tokens: dict[str, list[int]] = attrs.field(factory=dict)  # by seq, per run
    executions: list[Execution] = attrs.field(factory=list)
    exit_codes: list[int | None] = attrs.field(factory=list)  # of the workers, after SIGTERM
    alive_at_end: int = 0  # workers still running when every run had completed
    in_flight: int = 0  # runs running at the kill
    killed_at: float = 0.0  # wall clock
    promote_started_at: float = 0.0  # wall clock
    promoted_at: float = 0.0  # wall clock
    promote_s: float = 0.0  # pg_ctl promote
    resume_s: float = 0.0  # promoted -> the first new journal entry
    finish_s: float = 0.0  # promoted -> every run completed
    log: str = ""  # the workers' output, for a failed assertion

    def figures(self) -> str:
        """One line of figures, for the test's output and the benchmark."""
        extra = len(self.executions) - len(self.run_ids) * self.steps
        return (
            f"in flight at the kill {self.in_flight} runs, {len(self.at_kill)} entries kept; "
            f"promote {self.promote_s:.2f} s; after it: first entry {self.resume_s:.2f} s, "
            f"first takeover {self.takeover_s():.2f} s, all done {self.finish_s:.2f} s; "
            f"steps executed again {extra}; runs taken over {len(self.taken_over())}"
        )

    def takeover_s(self) -> float:
        """Seconds from the promotion to the first step executed with a token larger than its
        run's at the kill (``nan`` if none)."""
        before: dict[str, int] = {}
        for e in self.executions:
            if e.at < self.killed_at:
                before[e.run_id] = max(before.get(e.run_id, 0), e.token)
        later = [
            e.at
            for e in self.executions
            if e.run_id in before and e.token > before[e.run_id] and e.at > self.promoted_at
        ]
        return min(later) - self.promoted_at if later else math.nan

    def taken_over(self) -> set[str]:
        """The runs with step executions both before the kill and after the promotion."""
        before = {e.run_id for e in self.executions if e.at < self.killed_at}
        after = {e.run_id for e in self.executions if e.at > self.promote_started_at}
        return before & after


def _submit(url: str, runs: dict[str, tuple[int, float]]) -> None:
    async def go() -> None:
        async with tether.open_engine(from_url(url)) as engine:
            for run_id, (steps, pause) in runs.items():
                await engine.submit(chain, run_id, steps, pause, run_id=run_id)

    trio.run(go)


def _collect(url: str, seen: Failover) -> None:
    """Wait for every run (its result), and read each journal's tokens."""

    async def go() -> None:
        async with tether.open_engine(from_url(url)) as engine:
            for run_id in seen.run_ids:
                seen.results[run_id] = await engine.wait(run_id, timeout=PATIENCE)
            for run_id in seen.run_ids:
                info = await engine.get_run(run_id)
                assert info is not None, run_id
                seen.entry_tokens[run_id] = [e.token for e in info.entries]

    trio.run(go)


def _count(raw: RawStore) -> int:
    return int(raw.query("SELECT count(*) FROM {s}.entries")[0][0])


def failover(
    pair: Pair,
    folder: Path,
    *,
    runs: int = 40,
    steps: int = 6,
    pause: float = 0.2,
    workers: int = 2,
    concurrency: int = 8,
    lease_ttl: float = 2.0,
    outage: float = 3.0,
) -> Failover:
    """The scenario (see the module doc) on *pair*, its logs in *folder*; what it saw."""
    url = pair.url()
    raw = RawStore(url)
    primary, standby = RawStore(pair.primary.conninfo()), RawStore(pair.standby.conninfo())
    seen = Failover(run_ids=[f"f{i:03d}" for i in range(runs)], steps=steps)
    _submit(url, {run_id: (steps, pause) for run_id in seen.run_ids})
    env = _fleet.process_env(url, folder)
    options = (
        "--import", "tests._failover_flows", "--concurrency", str(concurrency),
        "--lease-ttl", str(lease_ttl), "--poll-interval", "0.2", "--grace", "0",
    )  # fmt: skip
    procs: list[TetherProcess] = []
    try:
        for k in range(workers):
            procs.append(_fleet.worker(f"worker{k}", folder, url, env, *options))
        for p in procs:
            assert p.started(PATIENCE), p.tail()

        def mid_fleet() -> bool:
            statuses = primary.statuses()
            return statuses["completed"] >= runs // 4 and statuses["running"] > 0

        poll(mid_fleet, "a quarter of the runs to complete", *procs)
        seen.in_flight = primary.statuses()["running"]
        seen.seen_before_kill = primary.entries()
        seen.killed_at = time.time()
        pair.kill_primary()
        poll(pair.replayed, "the standby to replay what it received")
        seen.at_kill = standby.entries()
        time.sleep(outage)  # the outage itself: the point of the test, not a wait for something
        seen.promote_started_at = time.time()
        start = time.monotonic()
        pair.promote()
        promoted = time.monotonic()
        seen.promoted_at = time.time()
        seen.promote_s = promoted - start
        poll(lambda: _count(standby) > len(seen.at_kill), "a new journal entry", *procs)
        seen.resume_s = time.monotonic() - promoted
        _collect(url, seen)
        seen.finish_s = time.monotonic() - promoted
        seen.final = raw.entries()
        seen.alive_at_end = sum(p.proc.poll() is None for p in procs)
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                p.signal(signal.SIGTERM)
        seen.exit_codes = [p.proc.wait(timeout=PATIENCE) for p in procs]
    finally:
        seen.log = "\n".join(p.tail() for p in procs)
        for p in procs:
            p.stop()
    seen.executions = [
        Execution(run_id, int(i), int(token), int(pid), float(at))
        for run_id, i, token, pid, at in _fleet.read_log(folder, STEPS_LOG)
    ]
    return seen
