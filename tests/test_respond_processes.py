"""Workers own execution: answers given elsewhere never execute the run there.

A ``tether worker`` process serves a workflow that asks, then sleeps for
minutes. This process answers one run with ``engine.respond`` and a second
through the dashboard's HTTP form; the steps after each answer record the pid
of a worker, never this process's. Each respond returns while the run still
has its minutes of sleep ahead (it is parked ``waiting``), on SQLite and on
PostgreSQL.
"""

from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

import tether
from tether._ui._app import open_dashboard, serve
from tether.stores import EntryKind, RunStatus

from . import _fleet, _respond_flows
from ._fleet import TetherProcess
from ._poll import apoll

TOKEN = "respond-token"


def step_pids(info: tether.RunInfo) -> dict[str, int]:
    """The pid each step of the run recorded, by its label's key."""
    return {e.key: json.loads(e.value or "0") for e in info.entries if e.kind is EntryKind.STEP}


async def status_of(engine: tether.Engine, run_id: str) -> RunStatus | None:
    info = await engine.get_run(run_id)
    return None if info is None else info.status


@pytest.mark.slow
async def test_answers_are_executed_by_the_worker_not_by_whoever_answered(
    tmp_path: Path, process_store_url: str
) -> None:
    spec = process_store_url
    logs = tmp_path / "logs"
    logs.mkdir()
    env = _fleet.process_env(spec, logs)
    args = ["worker", "--store", spec, "--import", "tests._respond_flows", "--poll-interval", "0.2"]
    worker = TetherProcess("worker", tmp_path, args, env)
    try:
        assert worker.started(60), worker.tail()
        store = tether.stores.from_url(spec)
        async with tether.open_engine(store) as engine:
            for run_id in ("r-api", "r-web"):
                await engine.submit(_respond_flows.approve_then_cool_off, run_id, run_id=run_id)
            for run_id in ("r-api", "r-web"):
                await apoll(
                    partial(_is, engine, run_id, RunStatus.PAUSED), f"{run_id} paused", worker
                )

            # Another process (this one) answers through the API: it returns at once.
            await engine.respond("r-api", {"approve": _respond_flows.Approval(True, "api")})
            assert await status_of(engine, "r-api") in (RunStatus.QUEUED, RunStatus.RUNNING)

            # The dashboard answers the second run through HTTP.
            async with (
                open_dashboard(
                    tether.stores.from_url(spec), shown=spec, token=TOKEN, modules=[_respond_flows]
                ) as dash,
                trio.open_nursery() as nursery,
            ):
                never = trio.Event()
                (base,) = await nursery.start(
                    partial(serve, dash, host="127.0.0.1", port=0, shutdown_trigger=never.wait)
                )
                async with httpx.AsyncClient(base_url=base) as http:
                    await http.get("/", params={"token": TOKEN})
                    posted = await http.post(
                        "/run/answer",
                        data={
                            "token": TOKEN,
                            "run_id": "r-web",
                            "key": "approve",
                            "answer.ok": "true",
                            "answer.by": "web",
                        },
                        headers={"Origin": base},
                    )
                    assert posted.status_code == 303, posted.text
                nursery.cancel_scope.cancel()

            for run_id in ("r-api", "r-web"):
                # Parked on its minutes of sleep, by the worker: the answer came back long ago.
                parked = partial(_is, engine, run_id, RunStatus.WAITING)
                await apoll(parked, f"{run_id} parked", worker)
                info = await engine.get_run(run_id)
                assert info is not None and info.wake_at is not None
                assert (info.wake_at - info.updated_at).total_seconds() > 60
                pids = step_pids(info)
                assert set(pids) == {"where#0", "where#1"}, pids
                assert pids["where#1"] == worker.pid != os.getpid(), (pids, worker.pid)
    finally:
        worker.stop()


async def _is(engine: tether.Engine, run_id: str, status: RunStatus) -> bool:
    return await status_of(engine, run_id) is status
