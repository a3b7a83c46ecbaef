"""Flow control at submit with real OS processes (issue 27): the rules hold across processes.

Submitting processes (``tests/_flow_process.py``) share one store with this
process and with ``tether worker`` processes: one SQLite file, or a fresh
PostgreSQL database (``process_store_url``). A submitting process opens its
engine, then before each round of submits prints ``ready`` and waits for a
line on stdin, so that the test releases the processes together (a race)
or one after another.

- **Dedupe.** Four processes submit, together, ten times each at once, the
  same workflow with one dedupe id into one queue: one run is stored, and
  every submit returned its id. Three rounds: between two, this process
  cancels the run (a finished run frees its dedupe id), and the next round
  races for the id again. Two workers execute the last round's run once;
  after it completed, a submit with the dedupe id makes a new run.
- **Debounce.** Three processes, one after the other, each submit with one
  dedupe id and ``debounce=``: one run, whose arguments and start each
  submit replaced; it executes once, with the last submit's arguments.
- **max_queued.** Four processes race ten submits each into a queue with
  ``max_queued=5``, no worker running: five runs are stored, every other
  submit raised ``QueueFullError``, and a refused submit stored nothing.

No worker runs while the submits are made (nothing can finish a run and
free its dedupe id, or start a debounced run, meanwhile), so what is stored
depends on the submits alone, never on timing. Nothing sleeps to wait for a
process: the test polls a condition, or reads a pipe, with a generous deadline.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import pytest
import trio

import tether
from tether.stores import EntryKind, RunStatus

from . import _fleet
from . import _flow_process as flows
from ._fleet import TetherProcess, read_log
from ._poll import PATIENCE, apoll

HELPER: Final = Path(__file__).resolve().with_name("_flow_process.py")
#: How many processes race, and how many submits each makes at once in a round.
RACERS: Final = 4
EACH: Final = 10
#: How many times the processes race for one dedupe id (the run cancelled in between).
ROUNDS: Final = 3
#: The racing submitters' names: their runs' first argument.
NAMES: Final = [f"p{n}" for n in range(RACERS)]
#: The debounce of the debounced submits (no worker runs while they are made).
DEBOUNCE: Final = 1.0
WORKERS: Final = 2


class Submitter:
    """One process of ``tests/_flow_process.py``; its stderr goes to a file."""

    def __init__(self, name: str, process: trio.Process, stderr: Path) -> None:
        self.name = name
        self.process = process
        self._stderr = stderr
        self._out = b""  # all it printed so far
        self._read = 0  # how much of it the test has taken, line by line

    @classmethod
    async def start(
        cls, name: str, folder: Path, env: dict[str, str], spec: str, mode: str, *args: str
    ) -> Submitter:
        stderr = folder / f"{name}.stderr"
        with stderr.open("wb") as err:
            process = await trio.lowlevel.open_process(
                [sys.executable, str(HELPER), spec, name, mode, *args],
                cwd=_fleet.REPO,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        return cls(name, process, stderr)

    def tail(self, chars: int = 2500) -> str:
        """What a failed assertion shows of this process."""
        rc = self.process.returncode
        state = "running" if rc is None else f"exited {rc}"
        err = self._stderr.read_text(encoding="utf-8", errors="replace")
        return (
            f"--- {self.name} (pid {self.process.pid}, {state}) stdout:\n"
            f"{self._out.decode(errors='replace')[-chars:]}\n--- {self.name} stderr:\n"
            f"{err[-chars:]}"
        )

    async def _line(self, what: str) -> str:
        """The next line it prints; fails after PATIENCE seconds, or if it exits first."""
        assert self.process.stdout is not None
        with trio.move_on_after(PATIENCE):
            while b"\n" not in self._out[self._read :]:
                chunk = await self.process.stdout.receive_some()
                if not chunk:
                    raise AssertionError(f"{self.name} ended before {what}\n{self.tail()}")
                self._out += chunk
            end = self._out.index(b"\n", self._read) + 1
            line, self._read = self._out[self._read : end], end
            return line.decode().rstrip("\n")
        raise AssertionError(f"timed out after {PATIENCE} s waiting for {what}\n{self.tail()}")

    async def ready(self) -> None:
        """Wait until it is ready for a round of submits (its engine open)."""
        line = await self._line(f"{self.name} to be ready")
        assert line == "ready", self.tail()

    async def release(self) -> None:
        """Let it make a round of submits."""
        assert self.process.stdin is not None
        await self.process.stdin.send_all(b"go\n")

    async def report(self) -> Any:
        """What it printed once the submits of its round returned."""
        return json.loads(await self._line(f"{self.name} to report"))

    async def finish(self) -> None:
        """Wait until it exits (status 0) after its last round."""
        with trio.move_on_after(PATIENCE):
            await self.process.wait()
        assert self.process.returncode == 0, self.tail()

    async def stop(self) -> None:
        """Teardown: kill it if it still runs, and reap it."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        await self.process.wait()


@contextlib.asynccontextmanager
async def submitters(
    folder: Path, env: dict[str, str], spec: str, names: list[str], mode: str, *args: str
) -> AsyncIterator[list[Submitter]]:
    """A submitting process of *mode* for each of *names*; killed after, if still running."""
    started: list[Submitter] = []
    try:
        for name in names:
            started.append(await Submitter.start(name, folder, env, spec, mode, *args))
        yield started
    finally:
        with trio.CancelScope(shield=True):
            for submitter in started:
                await submitter.stop()


def workers(folder: Path, env: dict[str, str], spec: str) -> list[TetherProcess]:
    """:data:`WORKERS` ``tether worker`` processes serving ``tests._flow_process``."""
    args = ["worker", "--store", spec, "--import", "tests._flow_process", "--poll-interval", "0.2"]
    return [TetherProcess(f"w{k}", folder, args, env) for k in range(1, WORKERS + 1)]


async def completed(
    engine: tether.Engine, run_id: str, *processes: TetherProcess
) -> dict[str, Any]:
    """The result of *run_id*, once a worker completed it."""

    async def done() -> bool:
        info = await engine.get_run(run_id)
        assert info is not None, run_id
        unfinished = (RunStatus.QUEUED, RunStatus.WAITING, RunStatus.RUNNING)
        assert info.status in (*unfinished, RunStatus.COMPLETED), (
            f"{run_id} is {info.status.value}: {info.error}"
        )
        return info.status is RunStatus.COMPLETED

    await apoll(done, f"run {run_id} to complete", *processes)
    result: dict[str, Any] = await engine.wait(run_id, timeout=PATIENCE)
    return result


def executions(logs: Path) -> list[tuple[str, int, int]]:
    """Each execution of the step, in every process: (name, i, pid)."""
    return [(name, int(i), int(pid)) for name, i, pid in read_log(logs, "executions.log")]


async def one_step(engine: tether.Engine, run_id: str) -> dict[str, Any]:
    """The journaled result of the run's one step."""
    info = await engine.get_run(run_id)
    assert info is not None
    (step,) = [e for e in info.entries if e.kind is EntryKind.STEP]
    seen: dict[str, Any] = json.loads(step.value or "null")
    return seen


async def arguments(store: tether.stores.Store, run_id: str) -> list[Any]:
    """The arguments stored with *run_id*."""
    record = await store.get_run(run_id)
    assert record is not None, run_id
    args: list[Any] = json.loads(record.args)
    return args


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    folder = tmp_path / "logs"
    folder.mkdir()
    return folder


async def test_racing_submits_of_one_dedupe_id_from_processes_make_one_run(
    tmp_path: Path, logs: Path, process_store_url: str
) -> None:
    spec = process_store_url
    env = _fleet.process_env(spec, logs)
    store = tether.stores.from_url(spec)
    # This engine opens the store first: the processes find its tables made.
    async with tether.open_engine(store) as engine:
        finished: list[str] = []  # the runs of the rounds before, cancelled
        argv = ("dedupe", str(EACH), str(ROUNDS))
        async with submitters(tmp_path, env, spec, NAMES, *argv) as racing:
            for r in range(ROUNDS):
                for submitter in racing:
                    await submitter.ready()
                for submitter in racing:  # all are ready: released together
                    await submitter.release()
                returned = [run_id for s in racing for run_id in await s.report()]

                live = await engine.list_runs(queue=flows.QUEUE, status=RunStatus.QUEUED)
                assert len(live) == 1, (
                    f"round {r}: {RACERS * EACH} racing submits of one dedupe id stored {live}"
                )
                (run,) = live
                assert run.dedupe == flows.DEDUPE
                assert len(returned) == RACERS * EACH
                assert set(returned) == {run.run_id}, f"round {r}: the submits returned {returned}"
                everything = [info.run_id for info in await engine.list_runs()]
                assert sorted(everything) == sorted([*finished, run.run_id])
                name, i = await arguments(store, run.run_id)  # one submit's of this round
                assert name in NAMES and i // EACH == r, (name, i)
                if r < ROUNDS - 1:
                    # Finished: its dedupe id is free for the next round's race.
                    await engine.cancel(run.run_id)
                    finished.append(run.run_id)
            for submitter in racing:
                await submitter.finish()
        for run_id in finished:
            info = await engine.get_run(run_id)
            assert info is not None and info.status is RunStatus.CANCELLED

        fleet = workers(tmp_path, env, spec)
        try:
            for w in fleet:
                assert w.started(PATIENCE), w.tail()
            pids = {w.pid for w in fleet}
            result = await completed(engine, run.run_id, *fleet)
            assert (result["name"], result["i"]) == (name, i)
            assert result["pid"] in pids
            assert await one_step(engine, run.run_id) == result

            # Completed: the dedupe id is free, the next submit makes a new run.
            again = await engine.submit(
                flows.job, "again", 0, queue=tether.Queue(flows.QUEUE), dedupe=flows.DEDUPE
            )
            assert again not in (*finished, run.run_id)
            result_again = await completed(engine, again, *fleet)
            assert (result_again["name"], result_again["i"]) == ("again", 0)
            assert result_again["pid"] in pids
        finally:
            for w in fleet:
                w.stop()
        everything = [info.run_id for info in await engine.list_runs()]
        assert sorted(everything) == sorted([*finished, run.run_id, again])
    assert executions(logs) == [(name, i, result["pid"]), ("again", 0, result_again["pid"])]


async def test_debounced_submits_from_three_processes_run_once_with_the_last_arguments(
    tmp_path: Path, logs: Path, process_store_url: str
) -> None:
    spec = process_store_url
    env = _fleet.process_env(spec, logs)
    store = tether.stores.from_url(spec)
    names = ["d1", "d2", "d3"]
    async with tether.open_engine(store) as engine:
        returned: list[str] = []
        starts = []
        created = []
        argv = ("debounce", "1", "1", str(DEBOUNCE))
        async with submitters(tmp_path, env, spec, names, *argv) as three:
            for submitter in three:  # one after another: each once the previous returned
                await submitter.ready()
                await submitter.release()
                (run_id,) = await submitter.report()
                await submitter.finish()
                returned.append(run_id)
                record = await store.get_run(run_id)
                assert record is not None
                # This submit's arguments; not started, waiting for its (moved) start.
                assert json.loads(record.args) == [submitter.name, 0]
                assert (record.status, record.token, record.dedupe) == (
                    RunStatus.WAITING,
                    0,
                    flows.DEBOUNCE,
                )
                starts.append(record.wake_at)
                created.append(record.created_at)
        assert len(set(returned)) == 1, f"three debounced submits returned {returned}"
        (run_id,) = set(returned)
        assert len(set(starts)) == 3, f"each submit moves the start: {starts}"
        assert len(set(created)) == 1, f"one run, rewritten: {created}"
        assert [r.run_id for r in await engine.list_runs()] == [run_id]

        fleet = workers(tmp_path, env, spec)
        try:
            for w in fleet:
                assert w.started(PATIENCE), w.tail()
            result = await completed(engine, run_id, *fleet)
        finally:
            for w in fleet:
                w.stop()
        assert (result["name"], result["i"]) == ("d3", 0)
        assert result["pid"] in {w.pid for w in fleet}
        assert await one_step(engine, run_id) == result
        assert [r.run_id for r in await engine.list_runs()] == [run_id]
    assert executions(logs) == [("d3", 0, result["pid"])]


async def test_processes_racing_into_a_bounded_queue_store_max_queued_runs(
    tmp_path: Path, logs: Path, process_store_url: str
) -> None:
    spec = process_store_url
    env = _fleet.process_env(spec, logs)
    async with tether.open_engine(tether.stores.from_url(spec)) as engine:
        async with submitters(tmp_path, env, spec, NAMES, "fill", str(EACH), "1") as racing:
            for submitter in racing:
                await submitter.ready()
            for submitter in racing:  # all are ready: released together
                await submitter.release()
            reports = [await s.report() for s in racing]
            for submitter in racing:
                await submitter.finish()
        stored = sorted(run_id for r in reports for run_id in r["stored"])
        refused = sorted(run_id for r in reports for run_id in r["refused"])
        assert len(stored) + len(refused) == RACERS * EACH

        runs = await engine.list_runs(queue=flows.QUEUE)
        assert len(runs) == flows.MAX_QUEUED, (
            f"{RACERS * EACH} racing submits, max_queued {flows.MAX_QUEUED}: stored {runs}"
        )
        assert sorted(r.run_id for r in runs) == stored, f"stored {runs}, returned {stored}"
        assert all(r.status is RunStatus.QUEUED for r in runs), runs
        assert len(refused) == RACERS * EACH - flows.MAX_QUEUED
        # A refused submit stored nothing, in any queue.
        for run_id in refused:
            assert await engine.get_run(run_id) is None, run_id
        assert len(await engine.list_runs()) == flows.MAX_QUEUED
    assert not executions(logs)
