"""DNS rebinding: the dashboard answers no request whose ``Host`` is not its own.

A page of another site whose name is made to resolve to 127.0.0.1 (DNS
rebinding) sends its requests with that name as ``Host``. The dashboard, on
a loopback address, answers only to ``127.0.0.1``, ``localhost``,
``[::1]`` and the address it is bound to, at its port: pages, timelines and
writes alike. Real HTTP, to the server ``tether ui`` runs (Hypercorn), on a
free port.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

import tether
from tether._ui._app import open_dashboard, serve

from . import _hostile_flows as flows
from ._poll import PATIENCE

TOKEN = "test-token-0123456789"
SECRET = "the argument nobody else may read"


@asynccontextmanager
async def served(path: Path, host: str = "127.0.0.1") -> AsyncIterator[tuple[str, int]]:
    """The dashboard of the SQLite store at *path* on a free port of *host*; its base
    URL and port."""
    async with (
        open_dashboard(tether.SQLiteStore(path), shown="sqlite:runs.db", token=TOKEN) as dash,
        trio.open_nursery() as nursery,
    ):
        never = trio.Event()
        urls = await nursery.start(
            partial(serve, dash, host=host, port=0, shutdown_trigger=never.wait)
        )
        yield urls[0], int(urls[0].rsplit(":", 1)[1])
        nursery.cancel_scope.cancel()


async def test_a_foreign_host_reads_nothing_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with tether.open_engine(tether.SQLiteStore(path)) as engine:
        await engine.run(flows.one_step, SECRET, run_id="order-7")
        with pytest.raises(RuntimeError):
            await engine.run(flows.failing, "no stock", run_id="order-8")
    async with (
        served(path) as (url, port),
        httpx.AsyncClient(base_url=url, timeout=PATIENCE) as http,
    ):
        evil = {"Host": f"evil.example:{port}"}
        refused = [
            await http.get("/run", params={"id": "order-7"}, headers=evil),
            await http.get("/", headers=evil),
            await http.get("/run/timeline.svg", params={"id": "order-7"}, headers=evil),
            await http.get("/run", params={"id": "order-7"}, headers={"Host": "127.0.0.1:1"}),
            await http.post(
                "/run/cancel",
                data={"run_id": "order-8", "token": TOKEN},
                headers={**evil, "Origin": f"http://evil.example:{port}"},
            ),
        ]
        for response in refused:
            assert response.status_code == 403
            assert response.headers["content-type"].startswith("text/plain")
            assert "unexpected Host header" in response.text
            assert SECRET not in response.text and "order-" not in response.text
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
            page = await http.get("/run", params={"id": "order-7"}, headers={"Host": host})
            assert page.status_code == 200 and SECRET in page.text
    async with tether.open_engine(tether.SQLiteStore(path)) as engine:
        info = await engine.get_run("order-8")
    assert info is not None and info.status is tether.RunStatus.FAILED  # not cancelled


async def test_a_dashboard_on_another_loopback_address_answers_to_it(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with tether.open_engine(tether.SQLiteStore(path)) as engine:
        await engine.run(flows.one_step, SECRET, run_id="order-9")
    async with (
        served(path, host="127.0.0.2") as (url, port),
        httpx.AsyncClient(base_url=url, timeout=PATIENCE) as http,
    ):
        page = await http.get("/run", params={"id": "order-9"})  # Host: 127.0.0.2:PORT
        assert page.status_code == 200 and SECRET in page.text
        evil = await http.get("/", headers={"Host": f"evil.example:{port}"})
        assert evil.status_code == 403
