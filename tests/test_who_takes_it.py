"""What the command line and the dashboard say a run waits for, by what the live workers serve.

- an interrupted run (``running``, no live owner) that a live worker serves is
  taken over: nobody is told to resume it by hand; one that no worker serves
  still gets the ``tether resume`` hint;
- a run that answered requests but no live worker serves is stranded;
- a run whose executions could not store their outcome is backing off (not
  "parked on its timers"), until when.
"""

from __future__ import annotations

import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import trio

import tether
from tether._ui._app import dashboard_app, open_dashboard
from tether.stores import RunRecord, RunStatus

from ._cli import cli

NOW = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
WORKER = "host-w:1:w"
TOKEN = "who-token"
#: A run id from outside, with terminal control sequences in it.
HOSTILE = "evil-\x1b]0;pwned\x07\x1b[2J-id"


def seed(db: Path) -> None:
    async def main() -> None:
        store = tether.SQLiteStore(db)
        await store.open()
        try:

            def run(run_id: str, workflow: str, **kw: object) -> RunRecord:
                fields: dict[str, object] = {
                    "run_id": run_id,
                    "workflow": workflow,
                    "args": "[]",
                    "created_at": NOW,
                    "updated_at": NOW,
                }
                fields.update(kw)
                return RunRecord(**fields)  # type: ignore[arg-type]

            await store.create_run(run("served-1", "served.flow", status=RunStatus.RUNNING))
            await store.create_run(run("orphan-1", "orphan.flow", status=RunStatus.RUNNING))
            await store.create_run(run("queued-1", "orphan.flow", status=RunStatus.QUEUED))
            await store.create_run(run(HOSTILE, "orphan.flow", status=RunStatus.RUNNING))
            backing = NOW + timedelta(minutes=4)
            await store.create_run(
                run(
                    "backoff-1",
                    "served.flow",
                    status=RunStatus.WAITING,
                    wake_at=backing,
                    dispatches=3,
                )
            )
            await store.advertise(WORKER, serves={("served.flow", None)}, ttl=600)
        finally:
            await store.close()

    trio.run(main)


def test_the_cli_says_who_takes_a_run_up(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    seed(db)
    spec = f"sqlite:{db}"
    listed = cli("runs", "list", "--store", spec).out
    lines = {line.split()[0]: line for line in listed.splitlines()[1:] if line.strip()}
    assert "takes it over once its lease lapses" in lines["served-1"]
    assert "tether resume orphan-1" in lines["orphan-1"]
    assert "backing off until 2030-01-02 03:08:05 UTC" in lines["backoff-1"]
    served = cli("runs", "show", "served-1", "--store", spec).out
    assert "no need to resume it" in served and "tether resume" not in served
    orphan = cli("runs", "show", "orphan-1", "--store", spec).out
    assert "resume it with `tether resume orphan-1" in orphan
    queued = cli("runs", "show", "queued-1", "--store", spec).out
    assert "stranded: no live worker serves workflow 'orphan.flow'" in queued
    backoff = cli("runs", "show", "backoff-1", "--store", spec).out
    assert "backing off: 3 executions could not store an outcome" in backoff
    assert "parked on its timers" not in backoff


async def test_the_dashboard_says_who_takes_a_run_up(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    await trio.to_thread.run_sync(seed, db)
    async with open_dashboard(tether.SQLiteStore(db), shown="sqlite:runs.db", token=TOKEN) as dash:
        transport = httpx.ASGITransport(app=dashboard_app(dash))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8700") as http:

            async def page(run_id: str) -> str:
                return (await http.get("/run", params={"id": run_id})).text

            listed = (await http.get("/")).text
            row = re.search(r'<tr[^>]*data-run="served-1".*?</tr>', listed, re.S)
            assert row is not None and "takes it over once its lease lapses" in row[0]
            served = await page("served-1")
            assert "takes it over once its lease lapses" in served
            assert "tether resume" not in served
            assert "tether resume orphan-1" in await page("orphan-1")
            assert "stranded: no live worker serves workflow" in await page("queued-1")
            assert "backing off until 2030-01-02 03:08:05 UTC" in await page("backoff-1")


def test_a_hint_for_a_hostile_run_id_pastes_back_exactly(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    seed(db)
    shown = cli("runs", "show", HOSTILE, "--store", f"sqlite:{db}").out
    assert "\x1b" not in shown and "\x07" not in shown  # nothing raw reaches the terminal
    hint = re.search(r"`(tether resume [^`]*)`", shown)
    assert hint is not None, shown
    assert hint[1].startswith("tether resume $'evil-\\u001b]0;pwned\\u0007")
    # Pasted into a shell, the hint's run id is the stored one, byte for byte.
    argv = hint[1].removeprefix("tether resume ").split(" --")[0]
    echoed = subprocess.run(
        ["bash", "-c", f"printf %s {argv}"], capture_output=True, check=True
    ).stdout.decode("utf-8")
    assert echoed == HOSTILE
