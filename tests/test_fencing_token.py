"""``tether.fencing_token()``: the execution's fencing token, wherever the run's code is.

- in a workflow body, a step, a ``parallel()`` branch and step, a task and a
  thread started by a step, it is the token stored on the run's record; a
  child run sees its own record's;
- a later execution (a resume after a failure) sees a greater one, the new
  stored token, and replayed steps are not executed again to see it;
- outside a run it raises ``NotInRunError``;
- real processes: a process executing a run is SIGKILLed in the middle of a
  step; another process takes the run over and its step sees a greater
  token, the one stored (SQLite and FileStore; PostgreSQL, slow).
"""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import trio

import tether
from tether.stores import RunStatus, Store

from . import _fencing_process as fencing
from ._cli import tether_env
from ._poll import PATIENCE, poll
from ._scripts import open_store

SEEN: defaultdict[str, list[int]] = defaultdict(list)
FAIL_ONCE: list[bool] = []


def seen(where: str) -> None:
    SEEN[where].append(tether.fencing_token())


async def _in_task(where: str) -> None:
    await trio.lowlevel.checkpoint()
    seen(where)


@tether.step
async def in_step(where: str) -> int:
    seen(where)
    async with trio.open_nursery() as nursery:  # a plain task of the step's own
        nursery.start_soon(_in_task, f"{where}: task")
    SEEN[f"{where}: thread"].append(await trio.to_thread.run_sync(tether.fencing_token))
    return tether.fencing_token()


async def branch() -> None:
    seen("branch")
    await in_step("branch's step")


@tether.workflow(name="tests.fencing.kid")
async def kid() -> int:
    seen("child")
    return await in_step("child's step")


@tether.workflow(name="tests.fencing.everywhere")
async def everywhere() -> int:
    seen("workflow")
    await in_step("step")
    async with tether.parallel() as p:
        p.start_soon(branch)
        p.start_soon(in_step, "parallel step")
    await tether.child(kid)
    if FAIL_ONCE:
        FAIL_ONCE.clear()
        raise RuntimeError("once")
    return await in_step("after")


async def _token(store: Store, run_id: str) -> int:
    record = await store.get_run(run_id)
    assert record is not None
    return record.token


async def test_every_part_of_a_run_sees_the_stored_token(tether_store: Store) -> None:
    SEEN.clear()
    FAIL_ONCE[:] = [True]
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(RuntimeError, match="once"):
            await engine.run(everywhere, run_id="f-1")
        first = await _token(tether_store, "f-1")
        child = await _token(tether_store, "f-1:child#0")
        assert first == 1 and child == 1  # each run's first claim
        ran_once = {
            "workflow": [first],
            **{
                f"{where}{part}": [first]
                for where in ("step", "branch's step", "parallel step")
                for part in ("", ": task", ": thread")
            },
            "branch": [first],
            "child": [child],
            **{f"child's step{part}": [child] for part in ("", ": task", ": thread")},
        }
        assert dict(SEEN) == ran_once

        SEEN.clear()
        assert await engine.resume("f-1") == 2
        second = await _token(tether_store, "f-1")
        assert second == 2 and second > first
        # The body and the branch's own code run again with the new token; the
        # steps and the completed child replay (nothing executes them again);
        # the step after the failure executes with it.
        assert dict(SEEN) == {
            "workflow": [second],
            "branch": [second],
            **{f"after{part}": [second] for part in ("", ": task", ": thread")},
        }
        info = await engine.get_run("f-1")
        assert info is not None and info.status is RunStatus.COMPLETED


async def test_outside_a_run_there_is_no_token() -> None:
    with pytest.raises(tether.NotInRunError, match=r"tether.fencing_token\(\) was used outside"):
        tether.fencing_token()
    with pytest.raises(tether.NotInRunError, match="outside a tether run"):
        await in_step.fn("alone")  # the step's function, called directly


# -- across processes: a takeover after SIGKILL ------------------------------------------------

SCRIPT = Path(fencing.__file__)


def _lines(log: Path) -> list[tuple[str, int, int]]:
    """The ``WHERE TOKEN PID`` lines the processes appended to *log*."""
    if not log.exists():
        return []
    found = []
    for line in log.read_text(encoding="utf-8").splitlines():
        where, token, pid = line.split()
        found.append((where, int(token), int(pid)))
    return found


def _stored_token(kind: str, where: list[str]) -> tuple[int, RunStatus]:
    async def read() -> tuple[int, RunStatus]:
        store = open_store(kind, *where)
        await store.open()
        try:
            record = await store.get_run(fencing.RUN_ID)
        finally:
            await store.close()
        assert record is not None
        return record.token, record.status

    return trio.run(read)


@pytest.mark.parametrize(
    "kind", ["sqlite", "file", pytest.param("postgres", marks=pytest.mark.slow)]
)
def test_the_token_grows_across_a_takeover_after_sigkill(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if kind == "postgres":
        server = request.getfixturevalue("postgres_server")
        where = [server.conninfo(), server.new_schema()]
    else:
        where = [str(tmp_path / ("store.db" if kind == "sqlite" else "store"))]
    log = tmp_path / "tokens.log"

    def argv(mode: str) -> list[str]:
        return [sys.executable, str(SCRIPT), str(log), mode, kind, *where]

    first = subprocess.Popen(argv("block"), stdout=subprocess.PIPE, text=True, env=tether_env())
    try:
        poll(lambda: any(w == "step" for w, _, _ in _lines(log)), "the first process's step")
    finally:
        first.kill()  # SIGKILL, in the middle of its step
        first.communicate(timeout=PATIENCE)
    assert _stored_token(kind, where) == (1, RunStatus.RUNNING)

    second = subprocess.Popen(
        argv("finish"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=tether_env()
    )
    out, err = second.communicate(timeout=PATIENCE)
    assert second.returncode == 0, err
    by_process: defaultdict[int, dict[str, int]] = defaultdict(dict)
    for place, token, pid in _lines(log):
        by_process[pid][place] = token
    assert set(by_process) == {first.pid, second.pid}
    old, new = by_process[first.pid], by_process[second.pid]
    assert old == {"workflow": 1, "step": 1}
    assert new["workflow"] == new["step"] > old["step"]
    assert int(out) == new["step"]  # what the step returned, and journaled
    assert _stored_token(kind, where) == (new["step"], RunStatus.COMPLETED)
