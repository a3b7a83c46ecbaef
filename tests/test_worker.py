"""The queue and workers in one process: submit, wait, open_worker, dead letters.

Every test runs on every store kind (the ``store`` fixture), in virtual time.
Real processes, SIGKILL and SIGSTOP are in ``test_fleet.py``.
"""

from __future__ import annotations

import io
import json
import logging
import os
import socket
from pathlib import Path
from typing import Any, cast

import pytest
import trio
import trio.testing

import tether
from tether._cli._main import main
from tether.stores import DEAD_LETTER_ERROR, RunStatus, Store, WorkerStore
from tether.testing._clock import ClockHoldingStore, hold_clock

from .conftest import reopen_store

#: run id -> how many times its body started (at-least-once is allowed)
started: dict[str, int] = {}
gates: dict[str, trio.Event] = {}
#: set when a gated step starts (pop it to wait for the next start)
entered: dict[str, trio.Event] = {}


@tether.step
async def double(n: int) -> int:
    return n * 2


@tether.workflow(name="tests.worker.sum")
async def summing(n: int) -> int:
    a, b = await double(n), await double(n + 1)
    return a + b


class Boom(Exception):
    pass


@tether.step
async def explode(n: int) -> int:
    raise Boom(f"boom {n}")


@tether.workflow(name="tests.worker.fails")
async def failing(n: int) -> int:
    return await explode(n)


@tether.step
async def gate(name: str) -> str:
    started[name] = started.get(name, 0) + 1
    entered.setdefault(name, trio.Event()).set()
    await gates.setdefault(name, trio.Event()).wait()
    return name


@tether.workflow(name="tests.worker.gated")
async def gated(name: str) -> str:
    return await gate(name)


@tether.workflow(name="tests.worker.asks")
async def asking() -> bool:
    return await tether.ask("ok?", bool)


def _another(store: Store) -> Store:
    """Another store object on the same place as *store* (memory: itself), wrapped alike."""
    if isinstance(store, ClockHoldingStore):
        return hold_clock(reopen_store(store.inner))
    return reopen_store(store)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    started.clear()
    gates.clear()
    entered.clear()


async def test_submit_queues_and_is_idempotent(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        run_id = await engine.submit(summing, 3, run_id="s-1")
        assert run_id == "s-1"
        info = await engine.get_run("s-1")
        assert info is not None and info.status is RunStatus.QUEUED and not info.executing
        assert await engine.submit(summing, 3, run_id="s-1") == "s-1"
        assert [r.run_id for r in await engine.list_runs()] == ["s-1"]
        with pytest.raises(tether.RunConflictError, match=r"s-1.*arguments"):
            await engine.submit(summing, 4, run_id="s-1")
        with pytest.raises(tether.RunConflictError):
            await engine.submit(failing, 3, run_id="s-1")
        fresh = await engine.submit(summing, 1)
        assert fresh != "s-1" and len(fresh) == 32


async def test_a_worker_executes_submitted_runs_and_wait_returns_them(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        ids = [await engine.submit(summing, n, run_id=f"w-{n}") for n in range(5)]
        async with tether.open_worker(engine, concurrency=2) as worker:
            results = [await engine.wait(run_id, timeout=30) for run_id in ids]
        assert results == [4 * n + 2 for n in range(5)]
        # Each claimed once. (The last run's execution may still be returning
        # from its status write when wait() sees it, and leaving the block
        # cuts that short: its outcome then counts as interrupted.)
        assert worker.claimed == 5
        assert worker.outcomes.get("completed", 0) >= 4
        for run_id in ids:
            info = await engine.get_run(run_id)
            assert info is not None and info.status is RunStatus.COMPLETED
            assert [e.key for e in info.entries] == ["double#0", "double#1"]


async def test_wait_reports_every_outcome(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.RunNotFoundError, match="nope"):
            await engine.wait("nope")
        await engine.submit(failing, 7, run_id="f")
        await engine.submit(asking, run_id="p")
        await engine.submit(gated, "slow", run_id="c")
        async with tether.open_worker(engine):
            with pytest.raises(tether.RunFailedError) as failed:
                await engine.wait("f", timeout=30)
            assert failed.value.error.type == f"{__name__}.Boom"
            assert failed.value.error.key == "explode#0" and "boom 7" in str(failed.value)
            with pytest.raises(tether.Paused) as paused:
                await engine.wait("p", timeout=30)
            assert [r.key for r in paused.value.requests] == ["ask#0"]
            with pytest.raises(trio.TooSlowError):
                await engine.wait("c", timeout=5)
            await engine.cancel("c")
            with pytest.raises(tether.RunCancelledError):
                await engine.wait("c", timeout=30)


async def test_concurrency_bounds_the_runs_held(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        for i in range(5):
            await engine.submit(gated, f"g{i}", run_id=f"g{i}")
        async with tether.open_worker(engine, concurrency=2) as worker:
            await trio.testing.wait_all_tasks_blocked()
            await trio.sleep(3)  # several poll intervals: still two at most
            assert len(worker.running) == 2 and sum(started.values()) == 2
            for i in range(5):
                gates.setdefault(f"g{i}", trio.Event()).set()
            assert [await engine.wait(f"g{i}", timeout=30) for i in range(5)] == [
                f"g{i}" for i in range(5)
            ]
        assert started == {f"g{i}": 1 for i in range(5)}


async def test_leaving_the_block_releases_runs_for_another_worker(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    other = _another(tether_store)
    async with tether.open_engine(tether_store) as first, tether.open_engine(other) as second:
        await first.submit(gated, "held", run_id="held")
        async with tether.open_worker(first):
            await entered.setdefault("held", trio.Event()).wait()
            info = await first.get_run("held")
            assert info is not None and info.owner == first.owner and info.executing
        info = await first.get_run("held")
        assert info is not None and info.status is RunStatus.RUNNING and info.owner is None, (
            "a worker that leaves cancels its runs as a caller cancellation and releases them"
        )
        gates["held"] = trio.Event()
        gates["held"].set()
        with trio.fail_after(5):  # far below lease_ttl=15: no waiting for expiry
            async with tether.open_worker(second):
                assert await second.wait("held") == "held"
        assert started["held"] == 2


async def test_a_drain_grace_lets_held_runs_finish(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        await engine.submit(gated, "graceful", run_id="graceful")
        async with tether.open_worker(engine, grace=10):
            await entered.setdefault("graceful", trio.Event()).wait()
            gates.setdefault("graceful", trio.Event()).set()
        info = await engine.get_run("graceful")
        assert info is not None and info.status is RunStatus.COMPLETED


async def test_runs_of_unknown_workflows_stay_queued(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    now = tether.stores.utcnow()
    record = tether.stores.RunRecord(
        run_id="alien",
        workflow="elsewhere.only",
        args="[]",
        status=RunStatus.QUEUED,
        created_at=now,
        updated_at=now,
    )
    async with tether.open_engine(tether_store) as engine:
        await tether_store.create_run(record)
        await engine.submit(summing, 1, run_id="mine")
        async with tether.open_worker(engine):
            assert await engine.wait("mine", timeout=30) == 6
            await trio.sleep(3)
        info = await engine.get_run("alien")
        assert info is not None and info.status is RunStatus.QUEUED


async def test_a_run_that_keeps_losing_its_worker_is_dead_lettered(
    tether_store: Store, caplog: pytest.LogCaptureFixture, autojump_clock: trio.abc.Clock
) -> None:
    caplog.set_level(logging.INFO, "tether")
    async with tether.open_engine(tether_store, lease_ttl=1.0) as engine:
        await engine.submit(summing, 2, run_id="poison")
        # Two workers that vanished mid-run (no release): each claim counts.
        for n in range(2):
            claimed: Any = await cast(WorkerStore, tether_store).claim_next(
                f"ghost-{n}:1:x", ttl=1.0, workflows=["tests.worker.sum"], max_dispatches=2
            )
            assert claimed is not None and claimed.dispatches == n + 1
            await tether_store.renew(f"ghost-{n}:1:x", ttl=0, held={})  # its lease ends
        await engine.submit(summing, 3, run_id="fine")
        async with tether.open_worker(engine, max_dispatches=2):
            assert await engine.wait("fine", timeout=30) == 14
            with pytest.raises(tether.RunFailedError) as dead:
                await engine.wait("poison", timeout=30)
        assert dead.value.error.type == DEAD_LETTER_ERROR
        assert "dead-letter" in str(dead.value) and "resume" in str(dead.value)
        info = await engine.get_run("poison")
        assert info is not None and info.status is RunStatus.DEAD_LETTER
        assert await engine.resume("poison") == 10  # by hand: it runs again
        assert [r.run_id for r in await engine.list_runs(status="dead_letter")] == []


async def test_a_drain_gives_its_dispatch_back(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        await engine.submit(gated, "drained", run_id="drained")
        for _ in range(3):
            entered.pop("drained", None)
            async with tether.open_worker(engine, max_dispatches=1):
                await entered.setdefault("drained", trio.Event()).wait()
        info = await engine.get_run("drained")
        assert info is not None and info.status is RunStatus.RUNNING
        assert started["drained"] == 3, "each drained claim counted as a vanished worker"


async def test_run_and_cancel_of_a_queued_run(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        await engine.submit(summing, 5, run_id="here")
        assert await engine.run(summing, 5, run_id="here") == 22
        await engine.submit(summing, 6, run_id="never")
        await engine.cancel("never")
        info = await engine.get_run("never")
        assert info is not None and info.status is RunStatus.CANCELLED
        async with tether.open_worker(engine):
            with pytest.raises(tether.RunCancelledError):
                await engine.wait("never", timeout=30)


async def test_list_runs_filters_and_pages(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        for i in range(5):
            await engine.submit(summing if i % 2 else failing, i, run_id=f"l{i}")
        assert [r.run_id for r in await engine.list_runs(workflow="tests.worker.sum")] == [
            "l1",
            "l3",
        ]
        page = await engine.list_runs(limit=2)
        assert [r.run_id for r in page] == ["l0", "l1"]
        rest = await engine.list_runs(after=page[-1].run_id, status=[RunStatus.QUEUED])
        assert [r.run_id for r in rest] == ["l2", "l3", "l4"]
        with pytest.raises(tether.UsageError, match="status"):
            await engine.list_runs(status="nonsense")
        with pytest.raises(tether.RunNotFoundError):
            await engine.list_runs(after="missing")


async def test_open_worker_refuses_bad_arguments_and_stores_without_claim_next() -> None:
    from ._stores import InlineSlowStore

    async with tether.open_engine(tether.MemoryStore()) as engine:
        bad: list[dict[str, Any]] = [
            {"concurrency": 0},
            {"max_dispatches": 0},
            {"poll_interval": 0},
            {"workflows": [42]},
        ]
        for kwargs in bad:
            with pytest.raises(tether.UsageError):
                async with tether.open_worker(engine, **kwargs):
                    pass
    async with tether.open_engine(InlineSlowStore()) as engine:
        with pytest.raises(tether.UsageError, match="claim_next"):
            async with tether.open_worker(engine):
                pass


async def test_a_run_of_an_owner_gone_from_this_machine_is_taken_over_at_once(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    # An owner of this process whose engine is closed: gone, as a dead pid would be.
    ghost = f"{socket.gethostname()}:{os.getpid()}:1-ghost"
    async with tether.open_engine(tether_store) as engine:
        await engine.submit(summing, 4, run_id="orphan")
        claimed = await cast(WorkerStore, tether_store).claim_next(
            ghost, ttl=600.0, workflows=["tests.worker.sum"], max_dispatches=5
        )
        assert claimed is not None and claimed.owner == ghost
        with trio.fail_after(5):  # far below the ghost's 600 s lease
            async with tether.open_worker(engine, poll_interval=0.5):
                assert await engine.wait("orphan") == 18


async def test_a_run_whose_arguments_do_not_decode_fails_instead_of_looping(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    now = tether.stores.utcnow()
    bad = tether.stores.RunRecord(
        run_id="bad-args",
        workflow="tests.worker.sum",
        args='["not a number"]',
        status=RunStatus.QUEUED,
        created_at=now,
        updated_at=now,
    )
    async with tether.open_engine(tether_store) as engine:
        await tether_store.create_run(bad)
        async with tether.open_worker(engine) as worker:
            with pytest.raises(tether.RunFailedError) as failed:
                await engine.wait("bad-args", timeout=30)
            await trio.sleep(5)  # several polls: it is not claimed again
        # (the workflow's parameter type changed under the stored argument)
        assert failed.value.error.type == "tether.NonDeterminismError"
        assert "parameter 'n'" in failed.value.error.message
        assert worker.claimed == 1


def test_the_command_line_shows_queued_and_dead_letter_runs(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"

    async def populate() -> None:
        store = tether.SQLiteStore(path)
        async with tether.open_engine(store) as engine:
            await engine.submit(summing, 1, run_id="waiting")
            await engine.submit(summing, 2, run_id="poison")
            claimed = await store.claim_next(
                "ghost:1:x", ttl=60.0, workflows=["tests.worker.sum"], max_dispatches=1
            )
            assert claimed is not None and claimed.run_id == "waiting"
            await store.renew("ghost:1:x", ttl=0, held={})  # that worker died
            # "waiting" dispatched once, its worker gone: the next claim sets it aside.
            nxt = await store.claim_next(
                "ghost:2:x", ttl=60.0, workflows=["tests.worker.sum"], max_dispatches=1
            )
            assert nxt is not None and nxt.run_id == "poison"

    trio.run(populate)
    out, err = io.StringIO(), io.StringIO()
    spec = f"sqlite:{path}"
    assert main(["runs", "list", "--store", spec], out=out, err=err) == 0, err.getvalue()
    lines = {line.split()[0]: line for line in out.getvalue().splitlines() if line}
    assert "dead_letter" in lines["waiting"] and "set aside after 1 dispatches" in lines["waiting"]
    assert "tether resume waiting" in lines["waiting"]
    out = io.StringIO()
    assert (
        main(["runs", "list", "--status", "dead_letter", "--json", "--store", spec], out=out) == 0
    )
    listed = json.loads(out.getvalue())
    assert [r["run_id"] for r in listed] == ["waiting"]
    assert listed[0]["error"]["type"] == DEAD_LETTER_ERROR
    out = io.StringIO()
    assert main(["runs", "show", "waiting", "--store", spec], out=out) == 0
    assert "dead_letter — dispatched 1 time without an outcome" in out.getvalue()


async def test_workflows_limits_what_a_worker_claims_and_runs_those_objects(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async def impostor_body(n: int) -> int:
        return -1

    # Another workflow defined later under the same name: by name, the
    # registry now finds it; a worker given the real one runs that.
    impostor = tether.workflow(name="tests.worker.sum")(impostor_body)
    try:
        async with tether.open_engine(tether_store) as submitter:
            await submitter.submit(summing, 1, run_id="named")
            await submitter.submit(failing, 1, run_id="other")
        async with tether.open_engine(_another(tether_store)) as engine:
            async with tether.open_worker(engine, workflows=[summing]) as worker:
                assert await engine.wait("named", timeout=30) == 6
                await trio.sleep(3)
            assert worker.claimed == 1
            info = await engine.get_run("other")
            assert info is not None and info.status is RunStatus.QUEUED
            with pytest.raises(tether.UsageError, match="workflows="):
                async with tether.open_worker(engine, workflows=[]):
                    pass
    finally:
        tether.workflow(name="tests.worker.sum")(summing.fn)
    assert impostor is not summing
