"""One owner per run, across real processes, on real time (docs/explanation/ownership.md).

Every test launches ``tests/_lease_process.py`` as separate OS processes on
one SQLite file or one FileStore folder:

- two processes resuming one failed run at the same instant: exactly one
  executes it, the other gets ``RunConflictError`` at once;
- a process paused (SIGSTOP) past its lease, whose run another process takes
  over and completes: once continued, it stops with ``LeaseLostError`` and
  nothing it wrote comes after the takeover;
- a SIGKILLed owner's run is taken over at once by a resume on this machine,
  not after its lease expires;
- ``engine.cancel`` from another process stops a run executing elsewhere
  within a renewal interval, and ends a paused, failed or interrupted run at
  once; a cancelled run never executes again;
- SQLite's write lock held by another process: a deadline around
  ``open_engine`` is prompt and leaves no thread, and a ``run`` that timed out
  with its claim queued is completed by a retry of the same call; without a
  retry, a claim that landed after its caller gave up is released, not held
  by a live engine that never executes the run.

The helper prints JSON lines with ``time.monotonic()`` stamps, and its steps
log ``KEY PHASE PID MONOTONIC`` lines; both clocks are the system-wide
``CLOCK_MONOTONIC``, so latencies are measured across processes. Nothing here
sleeps to wait for another process: it polls a condition with a deadline.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import IO, Any, NamedTuple

import pytest
import trio

import tether
from tether._cli._main import StoreSpec
from tether.stores import Entry, RunRecord, RunStatus, Store

from . import _lease_process as lease
from ._poll import PATIENCE

HELPER = Path(__file__).resolve().with_name("_lease_process.py")
KINDS = ["sqlite", "file"]

Line = dict[str, Any]


# -- helper processes ---------------------------------------------------------------


class Helper:
    """One ``_lease_process.py`` process; a thread reads its JSON lines into *sink*."""

    def __init__(
        self,
        folder: Path,
        name: str,
        args: tuple[str, ...],
        *,
        stdin: bool,
        sink: queue.Queue[tuple[Helper, Line | None]] | None,
    ) -> None:
        self.name = name
        self.started_at = time.monotonic()
        self._stderr_path = folder / f"{name}.stderr"
        self._stderr: IO[str] = open(self._stderr_path, "w", encoding="utf-8")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, str(HELPER), *args],
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self.sink: queue.Queue[tuple[Helper, Line | None]] = sink or queue.Queue()
        self.seen: list[Line] = []
        self.opened: Line | None = None
        self._reader = threading.Thread(target=self._read, name=f"read {name}", daemon=True)
        self._reader.start()

    def __repr__(self) -> str:
        return f"<helper {self.name} pid {self.pid}>"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for text in self.proc.stdout:
            self.sink.put((self, json.loads(text)))
        self.sink.put((self, None))

    def stderr(self) -> str:
        self._stderr.flush()
        return self._stderr_path.read_text(encoding="utf-8")

    def expect(self, event: str = "outcome", timeout: float = PATIENCE) -> Line:
        """The next line of *event* (earlier lines of other events are kept in ``seen``)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                helper, line = self.sink.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"{self.name}: no {event!r} line within {timeout} s; stderr:\n{self.stderr()}"
                ) from None
            assert helper is self, "expect() on a shared sink: use first_outcome()"
            if line is None:
                raise AssertionError(
                    f"{self.name} ended (rc {self.proc.wait()}) before a {event!r} line; "
                    f"stderr:\n{self.stderr()}"
                )
            self.seen.append(line)
            if line["event"] == "open":
                self.opened = line
            if line["event"] == event:
                return line

    @property
    def owner(self) -> str:
        assert self.opened is not None
        owner: str = self.opened["owner"]
        return owner

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = PATIENCE) -> None:
        """Close stdin and wait for a clean exit."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        rc = self.proc.wait(timeout=timeout)
        assert rc == 0, f"{self.name} exited with {rc}; stderr:\n{self.stderr()}"

    def kill(self) -> None:
        """SIGKILL it and reap it."""
        self.proc.kill()
        self.proc.wait(timeout=PATIENCE)

    def stop(self) -> None:
        """Teardown: kill it if it still runs; release everything."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(timeout=PATIENCE)
        self._reader.join(timeout=PATIENCE)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self._stderr.close()


Spawn = Callable[..., Helper]


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """``spawn(name, *args, stdin=False, sink=None)`` starts a helper; all are stopped after."""
    started: list[Helper] = []

    def start(
        name: str,
        *args: str,
        stdin: bool = False,
        sink: queue.Queue[tuple[Helper, Line | None]] | None = None,
    ) -> Helper:
        helper = Helper(tmp_path, name, args, stdin=stdin, sink=sink)
        started.append(helper)
        return helper

    yield start
    for helper in started:
        helper.stop()


def first_line(
    sink: queue.Queue[tuple[Helper, Line | None]], event: str, timeout: float
) -> tuple[Helper, Line] | None:
    """The next *event* line of any helper sharing *sink*, or ``None`` after *timeout*."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            helper, line = sink.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None
        if line is None:
            raise AssertionError(
                f"{helper.name} ended (rc {helper.proc.wait()}); stderr:\n{helper.stderr()}"
            )
        helper.seen.append(line)
        if line["event"] == "open":
            helper.opened = line
        if line["event"] == event:
            return helper, line


# -- stores, logs ------------------------------------------------------------------


def store_spec(kind: str, folder: Path) -> str:
    return f"sqlite:{folder / 'store.db'}" if kind == "sqlite" else f"file:{folder / 'store'}"


def open_store(spec: str) -> Store:
    return StoreSpec.parse(spec).open_for_writing()


def stored(spec: str, run_id: str) -> tuple[RunRecord, list[Entry]]:
    """The run's record and journal, read here on a store of our own."""

    async def read() -> tuple[RunRecord, list[Entry]]:
        store = open_store(spec)
        await store.open()
        try:
            record = await store.get_run(run_id)
            assert record is not None, f"run {run_id!r} is not stored"
            return record, list(await store.load_entries(run_id))
        finally:
            await store.close()

    return trio.run(read)


def info(spec: str, run_id: str) -> tether.RunInfo:
    """``engine.get_run(run_id)`` on a fresh engine of this process."""

    async def read() -> tether.RunInfo:
        async with tether.open_engine(open_store(spec)) as engine:
            got = await engine.get_run(run_id)
            assert got is not None
            return got

    return trio.run(read)


class LogLine(NamedTuple):
    key: str
    phase: str
    pid: int
    t: float


def read_log(path: Path) -> list[LogLine]:
    if not path.exists():
        return []
    lines = []
    for text in path.read_text(encoding="utf-8").splitlines():
        key, phase, pid, t = text.split()
        lines.append(LogLine(key, phase, int(pid), float(t)))
    return lines


def wait_for_log(path: Path, key: str, phase: str, pid: int, timeout: float = PATIENCE) -> LogLine:
    deadline = time.monotonic() + timeout
    while True:
        for line in read_log(path):
            if (line.key, line.phase, line.pid) == (key, phase, pid):
                return line
        assert time.monotonic() < deadline, f"{path} shows no {key} {phase} by {pid}"
        time.sleep(0.002)


def keys_of(entries: list[Entry]) -> list[str]:
    return [e.key for e in entries]


def assert_no_duplicates(entries: list[Entry]) -> None:
    repeated = [k for k, n in Counter(keys_of(entries)).items() if n > 1]
    assert not repeated, f"journaled more than once: {repeated}"
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))


def proc_state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 2 :].split()[0]


def write_locked(spec: str, run_id: str) -> bool:
    """Whether some process holds the lock a write about *run_id* needs now."""
    parsed = StoreSpec.parse(spec)
    if parsed.kind == "sqlite":
        conn = sqlite3.connect(parsed.path, timeout=0, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return False
        except sqlite3.OperationalError:
            return True
        finally:
            conn.close()
    fd = os.open(parsed.path / run_id / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def sigstop_between_writes(helper: Helper, spec: str, run_id: str) -> float:
    """SIGSTOP *helper* at a moment it holds no store lock; return when it stopped.

    A process stopped inside a write transaction holds SQLite's write lock
    (or the run's flock) and blocks every other writer: no lease can help
    that, so the test does not stop it there.
    """
    deadline = time.monotonic() + PATIENCE
    while True:
        os.kill(helper.pid, signal.SIGSTOP)
        while proc_state(helper.pid) != "T":
            assert time.monotonic() < deadline
            time.sleep(0.001)
        stopped = time.monotonic()
        if not write_locked(spec, run_id):
            return stopped
        os.kill(helper.pid, signal.SIGCONT)
        while write_locked(spec, run_id):  # let it finish that write
            assert time.monotonic() < deadline, "the helper always holds a store lock"
            time.sleep(0.001)


# -- 1. two processes resume one run at the same instant ----------------------------

RACES = 20
RACE_STEPS = 4
RACE_RESULT = sum(i * i for i in range(RACE_STEPS))


@pytest.mark.parametrize("kind", KINDS)
def test_two_processes_resuming_at_once_one_executes(
    kind: str, tmp_path: Path, spawn: Spawn
) -> None:
    spec = store_spec(kind, tmp_path)
    run_ids = [f"race-{i}" for i in range(RACES)]
    logs = {r: tmp_path / f"{r}.log" for r in run_ids}
    # Every run fails at its third step, work#2 (no flag file yet).
    maker = spawn(
        "maker", "run", *run_ids, "--store", spec, "--logs", str(tmp_path),
        "--n", str(RACE_STEPS), "--fail-at", "2", "--mode", "gated",
    )  # fmt: skip
    for _ in run_ids:
        assert maker.expect()["outcome"] == "StepFailed"
    maker.finish()
    for log in logs.values():
        Path(f"{log}.flag").touch()

    sink: queue.Queue[tuple[Helper, Line | None]] = queue.Queue()
    racers = [
        spawn(f"racer-{name}", "race", *run_ids, "--store", spec, stdin=True, sink=sink)
        for name in "xy"
    ]
    for _ in racers:  # both engines are open before the first race
        assert first_line(sink, "open", PATIENCE) is not None
    wins: Counter[str] = Counter()
    refused_after: list[float] = []
    for run_id in run_ids:
        for racer in racers:  # the start barrier: both are blocked reading "go"
            racer.send("go")
        # The winner waits inside work#2 until the gate file exists, so the
        # loser meets a live lease whichever of them claimed first.
        first = first_line(sink, "outcome", PATIENCE)
        Path(f"{logs[run_id]}.gate").touch()
        second = first_line(sink, "outcome", PATIENCE)
        outcomes = [o for o in (first, second) if o is not None]
        assert len(outcomes) == 2 and first is not None, f"{run_id}: {outcomes}"
        # Refused at once: while the winner still held the run, its gate shut.
        assert first[1]["outcome"] == "RunConflictError", f"{run_id}: {outcomes}"
        assert {h.name for h, _ in outcomes} == {r.name for r in racers}
        assert all(line["run_id"] == run_id for _, line in outcomes)
        by_outcome = {line["outcome"]: (h, line) for h, line in outcomes}
        assert sorted(by_outcome) == ["RunConflictError", "completed"], f"{run_id}: {outcomes}"
        winner, done = by_outcome["completed"]
        _, refusal = by_outcome["RunConflictError"]
        assert done["result"] == RACE_RESULT
        assert refusal["owner"] == winner.owner  # the conflict names the lease holder
        assert refusal["expires_at"] is not None
        refused_after.append(refusal["elapsed"])
        wins[winner.name] += 1
    for racer in racers:
        racer.finish()

    racer_pids = {r.pid for r in racers}
    for run_id in run_ids:
        effects = read_log(logs[run_id])
        ends = Counter(line.key for line in effects if line.phase == "end")
        starts = Counter(line.key for line in effects if line.phase == "start")
        assert ends == {f"work#{i}": 1 for i in range(RACE_STEPS)}, f"{run_id}: {effects}"
        # work#2 started twice: the failing attempt, and the winner's.
        assert starts == {"work#0": 1, "work#1": 1, "work#2": 2, "work#3": 1}, run_id
        resumers = {line.pid for line in effects if line.pid != maker.pid}
        assert len(resumers) == 1 and resumers <= racer_pids, f"{run_id}: {effects}"
        record, _ = stored(spec, run_id)
        # Created with token 1, claimed by the winner with token 2: the
        # refused claim wrote nothing.
        assert record.token == 2
        got = info(spec, run_id)
        assert got.status is RunStatus.COMPLETED and got.result == RACE_RESULT
        assert got.owner is None and not got.executing
        entries = list(got.entries)
        assert_no_duplicates(entries)
        assert sorted(keys_of(entries)) == [f"work#{i}" for i in range(RACE_STEPS)]
    print(
        f"\n{kind}: {RACES} races, wins {dict(wins)}; RunConflictError came back after "
        f"max {max(refused_after) * 1e3:.1f} ms, "
        f"mean {sum(refused_after) / len(refused_after) * 1e3:.1f} ms"
    )


# -- 2. fencing: a process paused past its lease ------------------------------------

FENCED_STEPS = 6


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["trio-sleep", "blocking"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_paused_owner_is_fenced_off_after_a_takeover(
    kind: str, mode: str, tmp_path: Path, spawn: Spawn
) -> None:
    """A is stopped inside a step's sleep: ``await trio.sleep(0.3)``, or (blocking)
    ``time.sleep(0.2)``, which holds up A's event loop, so once continued A
    finishes the step and saves it before its lease task can run: that stale
    write must be refused by the store itself."""
    spec = store_spec(kind, tmp_path)
    ttl = 1.0
    log = tmp_path / "fenced.log"
    a = spawn(
        "a", "run", "fenced", "--store", spec, "--logs", str(tmp_path), "--ttl", str(ttl),
        "--n", str(FENCED_STEPS), "--pause", "0.2" if mode == "blocking" else "0.3",
        "--mode", "blocking" if mode == "blocking" else "",
    )  # fmt: skip
    b = spawn(
        "b", "resume", "fenced", "--store", spec, "--ttl", str(ttl), "--go",
        "--retry-conflict", str(PATIENCE), stdin=True,
    )  # fmt: skip
    a.expect("open")
    b.expect("open")
    wait_for_log(log, "work#1", "start", a.pid)
    stopped = sigstop_between_writes(a, spec, "fenced")  # A is inside work#1's sleep
    a_ended = {line.key for line in read_log(log) if line.pid == a.pid and line.phase == "end"}
    b.send("go")
    done = b.expect("outcome", timeout=PATIENCE)
    assert done["outcome"] == "completed", done
    assert done["result"] == sum(i * i for i in range(FENCED_STEPS))
    conflicts = [line for line in b.seen if line["event"] == "conflict"]
    # A stopped process is alive: B waited for its lease to expire.
    assert conflicts, "B claimed the run of a live (stopped) owner at once"
    assert {c["owner"] for c in conflicts} == {a.owner}
    b_first = min(line.t for line in read_log(log) if line.pid == b.pid)
    takeover = b_first - stopped
    assert proc_state(a.pid) == "T", "A ran while B executed"
    b.finish()

    resumed = time.monotonic()
    os.kill(a.pid, signal.SIGCONT)
    lost = a.expect("outcome", timeout=PATIENCE)
    lost_after = lost["t"] - resumed
    assert lost["outcome"] == "LeaseLostError", lost
    a.finish()

    record, entries = stored(spec, "fenced")
    assert record.status is RunStatus.COMPLETED and record.owner is None
    assert record.result == json.dumps(done["result"])
    assert_no_duplicates(entries)
    assert sorted(keys_of(entries)) == [f"work#{i}" for i in range(FENCED_STEPS)]
    a_token, b_token = 1, record.token  # A created the run (token 1); B claimed it next
    assert b_token == 2
    assert {e.token for e in entries} <= {a_token, b_token}
    by_a = [e for e in entries if e.token == a_token]
    by_b = [e for e in entries if e.token == b_token]
    assert by_a and by_b
    assert max(e.seq or 0 for e in by_a) < min(e.seq or 0 for e in by_b)
    # A journaled only what it finished before it was stopped, nothing after.
    assert {e.key for e in by_a} <= a_ended
    assert "work#1" in {e.key for e in by_b}  # A's step in flight ran again, in B
    a_late = [line.key for line in read_log(log) if line.pid == a.pid and line.t > resumed]
    if mode == "blocking":
        # A finished work#1 after SIGCONT and tried to save it: refused.
        assert a_late == ["work#1"], a_late
    print(f"\n{kind}/{mode}: A after SIGCONT: {a_late or 'nothing'}", end="")
    print(
        f"; takeover {takeover:.2f} s after SIGSTOP ({len(conflicts)} refused "
        f"claims first); LeaseLostError {lost_after * 1e3:.1f} ms after SIGCONT: "
        f"{lost['message']}"
    )


# -- 3. SIGKILL, then an instant takeover -------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_killed_owner_is_taken_over_at_once(kind: str, tmp_path: Path, spawn: Spawn) -> None:
    spec = store_spec(kind, tmp_path)
    log = tmp_path / "killed.log"
    # A's lease would last longer than B may take (PATIENCE): B cannot have waited for
    # it to expire, so finishing at all, B took over at once.
    ttl = 10 * PATIENCE
    a = spawn(
        "a", "run", "killed", "--store", spec, "--logs", str(tmp_path), "--ttl", str(ttl),
        "--n", "4", "--pause", "0.3",
    )  # fmt: skip
    a_owner = a.expect("open")["owner"]
    wait_for_log(log, "work#1", "start", a.pid)
    a.kill()  # and reaped

    seen = info(spec, "killed")
    assert seen.status is RunStatus.RUNNING
    assert seen.owner == a_owner
    assert seen.executing is False and seen.lease_expires_at is None

    b = spawn("b", "resume", "killed", "--store", spec, "--ttl", "60")
    opened = b.expect("open")
    done = b.expect("outcome")
    assert done["outcome"] == "completed", done
    assert done["result"] == 0 + 1 + 4 + 9
    b.finish()
    b_first = min(line.t for line in read_log(log) if line.pid == b.pid)
    latency = b_first - opened["t_main"]

    record, entries = stored(spec, "killed")
    assert record.status is RunStatus.COMPLETED and record.token == 2
    assert_no_duplicates(entries)
    assert [(e.key, e.token) for e in entries] == [
        ("work#0", 1),
        ("work#1", 2),  # in flight in A: ran again in B, journaled once
        ("work#2", 2),
        ("work#3", 2),
    ]
    print(
        f"\n{kind}: B's first step {latency * 1e3:.0f} ms after B's main() started "
        f"({(b_first - b.started_at) * 1e3:.0f} ms after spawning it); A's lease_ttl was {ttl:g} s"
    )


# -- 4. engine.cancel from another process ------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_cancel_reaches_a_run_executing_in_another_process(
    kind: str, tmp_path: Path, spawn: Spawn
) -> None:
    spec = store_spec(kind, tmp_path)
    ttl = 1.5
    log = tmp_path / "doomed.log"
    args = (str(log), 30, 0.2, -1, "")
    a = spawn(
        "a", "run", "doomed", "--store", spec, "--logs", str(tmp_path), "--ttl", str(ttl),
        "--n", "30", "--pause", "0.2",
    )  # fmt: skip
    a.expect("open")
    wait_for_log(log, "work#2", "start", a.pid)

    async def cancel() -> tuple[float, RunRecord]:
        store = open_store(spec)
        async with tether.open_engine(store) as engine:
            await engine.cancel("doomed")
            recorded = time.monotonic()
            record = await store.get_run("doomed")
            assert record is not None
            return recorded, record

    recorded, record = trio.run(cancel)
    assert record.cancel_requested  # recorded; the owner stops the run itself
    outcome = a.expect("outcome", timeout=PATIENCE)
    latency = outcome["t"] - recorded
    # Stopped, not completed: 30 steps of 0.2 s would have run on without the cancel.
    assert outcome["outcome"] == "RunCancelledError", outcome
    a.finish()

    got = info(spec, "doomed")
    assert got.status is RunStatus.CANCELLED
    assert got.owner is None and got.executing is False and got.cancel_requested
    effects = read_log(log)
    finished = [line.key for line in effects if line.phase == "end"]
    assert finished, "no step finished before the cancel"
    # Every step that finished keeps its record; nothing else was journaled.
    assert keys_of(list(got.entries)) == finished
    assert_no_duplicates(list(got.entries))
    assert_never_runs_again(spec, "doomed", lease.chain, args, log)
    print(
        f"\n{kind}: RunCancelledError in the owner {latency * 1e3:.0f} ms after the cancel "
        f"was recorded (lease_ttl {ttl} s, renewal every {ttl / 3:.2f} s)"
    )


def assert_never_runs_again(
    spec: str,
    run_id: str,
    wf: tether.Workflow[..., Any],
    args: tuple[Any, ...],
    log: Path,
    responses: dict[str, Any] | None = None,
) -> None:
    """``run`` and ``resume`` of the cancelled run raise RunCancelledError; nothing executes."""
    before = read_log(log)

    async def again() -> None:
        async with tether.open_engine(open_store(spec)) as engine:
            with pytest.raises(tether.RunCancelledError):
                await engine.run(wf, *args, run_id=run_id)
            with pytest.raises(tether.RunCancelledError):
                await engine.resume(run_id, responses)
            await engine.cancel(run_id)  # cancelling again does nothing

    trio.run(again)
    assert read_log(log) == before
    record, _ = stored(spec, run_id)
    assert record.status is RunStatus.CANCELLED and record.owner is None


@pytest.mark.parametrize("state", ["paused", "failed", "interrupted"])
@pytest.mark.parametrize("kind", KINDS)
def test_cancel_from_another_process_ends_a_run_nobody_executes(
    kind: str, state: str, tmp_path: Path, spawn: Spawn
) -> None:
    spec = store_spec(kind, tmp_path)
    log = tmp_path / "idle.log"
    common = ("--store", spec, "--logs", str(tmp_path))
    responses: dict[str, Any] | None = None
    wf: tether.Workflow[..., Any]
    args: tuple[Any, ...]
    if state == "paused":
        wf, args = lease.asking, (str(log),)
        a = spawn("a", "run", "idle", *common, "--ask")
        assert a.expect()["outcome"] == "Paused"
        a.finish()
        responses = {"ask#0": True}
    elif state == "failed":
        wf, args = lease.chain, (str(log), 3, 0.0, 1, "")
        a = spawn("a", "run", "idle", *common, "--n", "3", "--fail-at", "1")
        assert a.expect()["outcome"] == "StepFailed"
        a.finish()
        Path(f"{log}.flag").touch()  # a resume would now succeed, if it were allowed
    else:
        wf, args = lease.chain, (str(log), 10, 0.3, -1, "")
        a = spawn("a", "run", "idle", *common, "--n", "10", "--pause", "0.3")
        a.expect("open")
        wait_for_log(log, "work#2", "start", a.pid)
        a.kill()
    before, entries_before = stored(spec, "idle")
    assert (
        before.status
        is {
            "paused": RunStatus.PAUSED,
            "failed": RunStatus.FAILED,
            "interrupted": RunStatus.RUNNING,
        }[state]
    )
    assert entries_before

    c = spawn("c", "cancel", "idle", "--store", spec)
    cancelled = c.expect()
    assert cancelled["outcome"] == "completed", cancelled  # engine.cancel returned
    c.finish()
    record, entries = stored(spec, "idle")
    assert record.status is RunStatus.CANCELLED  # at once: nobody had to see it
    assert record.owner is None and record.requests == ()
    assert entries == entries_before  # the journal is kept as it was
    assert info(spec, "idle").executing is False
    assert_never_runs_again(spec, "idle", wf, args, log, responses)
    print(f"\n{kind}/{state}: engine.cancel took {cancelled['elapsed'] * 1e3:.1f} ms")


# -- 5. SQLite's write lock held by another process ---------------------------------


@pytest.fixture
def locked_sqlite(tmp_path: Path, spawn: Spawn) -> tuple[Path, Helper]:
    """An SQLite store file, and a process that takes its write lock on command."""
    path = tmp_path / "store.db"

    async def create() -> None:
        async with tether.open_engine(tether.SQLiteStore(path)):
            pass

    trio.run(create)
    holder = spawn("holder", "hold", "--store", f"sqlite:{path}", stdin=True)
    holder.expect("open")
    return path, holder


def lock(holder: Helper) -> None:
    holder.send("lock")
    holder.expect("locked")


def unlock(holder: Helper) -> None:
    holder.send("unlock")
    holder.expect("unlocked")


def test_a_deadline_around_open_engine_is_prompt_while_sqlite_is_locked(
    locked_sqlite: tuple[Path, Helper],
) -> None:
    path, holder = locked_sqlite

    async def warm() -> None:
        # Trio keeps idle worker threads for a while: count them in "before".
        await trio.to_thread.run_sync(lambda: None)

    trio.run(warm)
    before = threading.active_count()
    lock(holder)

    async def attempt(how: str) -> float:
        began = trio.current_time()
        if how == "fail_after":
            with pytest.raises(trio.TooSlowError), trio.fail_after(0.2):
                async with tether.open_engine(tether.SQLiteStore(path)):
                    pytest.fail("opened a store whose write lock another process holds")
        else:
            with trio.move_on_after(0.2) as scope:
                async with tether.open_engine(tether.SQLiteStore(path)):
                    pytest.fail("opened a store whose write lock another process holds")
            assert scope.cancelled_caught
        return trio.current_time() - began

    # Each returned while the lock was held (until unlock below): a deadline that did not
    # reach the open would have ended in the store's busy error, not in the deadline's.
    elapsed = {how: trio.run(attempt, how) for how in ("fail_after", "move_on_after")}
    deadline = time.monotonic() + 2.0
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    names = [t.name for t in threading.enumerate()]
    assert threading.active_count() <= before, f"threads left behind: {names}"
    assert not [n for n in names if "tether" in n], names

    unlock(holder)

    async def reopen() -> None:
        with trio.fail_after(PATIENCE):
            async with tether.open_engine(tether.SQLiteStore(path)) as engine:
                assert await engine.list_runs() == []

    trio.run(reopen)
    print(
        "\nsqlite locked: open_engine gave up after "
        + ", ".join(f"{how} {took * 1e3:.0f} ms" for how, took in elapsed.items())
    )


def test_a_run_timed_out_behind_the_sqlite_lock_completes_on_retry(
    locked_sqlite: tuple[Path, Helper], tmp_path: Path
) -> None:
    path, holder = locked_sqlite
    timed_out: list[float] = []
    tokens: list[int] = []

    async def main() -> None:
        async with tether.open_engine(tether.SQLiteStore(path)) as engine:
            for i in range(5):
                run_id = f"r{i}"
                log = tmp_path / f"{run_id}.log"
                args = (str(log), 3, 0.0, -1, "")
                lock(holder)
                began = trio.current_time()
                with pytest.raises(trio.TooSlowError):
                    await engine.run(lease.chain, *args, run_id=run_id, timeout=0.3)
                # Raised while the lock was held (until unlock below): at its deadline.
                timed_out.append(trio.current_time() - began)
                # Reads pass the lock: the run is not stored, its claim is queued.
                assert await engine.get_run(run_id) is None
                assert not log.exists()
                unlock(holder)
                with trio.fail_after(PATIENCE):
                    assert await engine.run(lease.chain, *args, run_id=run_id) == 0 + 1 + 4
                got = await engine.get_run(run_id)
                assert got is not None and got.status is RunStatus.COMPLETED
                assert got.owner is None and not got.executing  # released
                record = await engine.store.get_run(run_id)
                assert record is not None
                # 2: the timed-out claim landed once the lock was released, and
                # the retry claimed the run after it (1: it was withdrawn).
                tokens.append(record.token)
                assert_no_duplicates(list(got.entries))
                assert keys_of(list(got.entries)) == ["work#0", "work#1", "work#2"]
                effects = read_log(log)
                assert Counter((line.key, line.phase) for line in effects) == {
                    (f"work#{k}", phase): 1 for k in range(3) for phase in ("start", "end")
                }, effects

    trio.run(main)
    print(
        f"\nsqlite locked: run(timeout=0.3) raised after max {max(timed_out) * 1e3:.0f} ms; "
        f"tokens after the retries {tokens}"
    )


def test_a_claim_landing_after_its_caller_gave_up_is_released(
    locked_sqlite: tuple[Path, Helper], tmp_path: Path, spawn: Spawn
) -> None:
    """The retry of 5(b) never comes: the late claim must not hold the run forever.

    The engine keeps executing another run, so its owner heartbeat stays
    fresh. The run whose claim landed after ``run(timeout=)`` gave up is
    executed by nobody: it must be released (``executing`` false) within a
    few ``lease_ttl`` (docs/explanation/ownership.md), so another process can resume
    it.
    """
    path, holder = locked_sqlite
    ttl = 1.0
    waited: list[float] = []

    async def landed(engine: tether.Engine, run_id: str) -> tether.RunInfo | None:
        for _ in range(100):  # 1 s
            got = await engine.get_run(run_id)
            if got is not None:
                return got
            await trio.sleep(0.01)
        return None  # withdrawn: it was still queued behind another write

    async def main() -> str:
        async with (
            tether.open_engine(tether.SQLiteStore(path), lease_ttl=ttl) as engine,
            trio.open_nursery() as nursery,
        ):
            # Another run (one long step, no writes) keeps the heartbeat renewed.
            busy = partial(
                engine.run, lease.chain, str(tmp_path / "busy.log"), 1, 60.0, -1, "",
                run_id="busy",
            )  # fmt: skip
            nursery.start_soon(busy)
            for attempt in range(5):
                run_id = f"late-{attempt}"
                log = tmp_path / f"{run_id}.log"
                await trio.to_thread.run_sync(lock, holder)
                with pytest.raises(trio.TooSlowError):
                    await engine.run(
                        lease.chain, str(log), 3, 0.0, -1, "", run_id=run_id, timeout=0.3
                    )
                await trio.to_thread.run_sync(unlock, holder)
                began = trio.current_time()
                got = await landed(engine, run_id)
                if got is not None:
                    break
            else:
                pytest.fail("no timed-out claim ever landed")
            while got is None or got.executing:
                waited.append(trio.current_time() - began)
                # Released, however long it takes: a claim held forever (renewed with the
                # busy run's lease) never is.
                assert waited[-1] < PATIENCE, (
                    f"run {run_id!r} is still 'executing' {waited[-1]:.1f} s after its claim "
                    f"landed, held by {got and got.owner} (this engine: {engine.owner}); "
                    "nothing executes it, and every other owner gets RunConflictError"
                )
                await trio.sleep(0.05)
                got = await engine.get_run(run_id)
            waited.append(trio.current_time() - began)
            b = spawn("b", "resume", run_id, "--store", f"sqlite:{path}", "--ttl", str(ttl))
            done = await trio.to_thread.run_sync(b.expect)
            assert done["outcome"] == "completed", done
            assert done["result"] == 0 + 1 + 4
            nursery.cancel_scope.cancel()
            return run_id

    run_id = trio.run(main)
    assert Counter(
        line.key for line in read_log(tmp_path / f"{run_id}.log") if line.phase == "end"
    ) == {f"work#{k}": 1 for k in range(3)}
    print(
        f"\nsqlite locked: the late claim was released {max(waited, default=0):.2f} s after unlock"
    )
