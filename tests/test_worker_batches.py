"""A worker's batched claims: no more runs than a claim may take, and a run's last chance
executes once the other runs of its batch are given back."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

import tether
from tether.stores import RunRecord, RunStatus, utcnow


@tether.workflow(name="tests.worker_batches.one")
async def one() -> int:
    return 1


async def test_a_worker_with_more_slots_than_a_claim_takes_still_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        await engine.submit(one, run_id="x")
        async with tether.open_worker(engine, concurrency=tether.stores.MAX_BATCH + 1):
            with trio.fail_after(30):
                assert await engine.wait("x") == 1


SEEN: list[str] = []
STORE: list[tether.SQLiteStore] = []


@tether.step
async def look(run_id: str) -> str:
    record = await STORE[0].get_run(run_id)
    assert record is not None
    SEEN.append(f"{run_id}: owner={record.owner} dispatches={record.dispatches}")
    return "ok"


@tether.workflow(name="tests.worker_batches.probe")
async def probe(other: str) -> str:
    return await look(other)


def _queued(run_id: str, args: str, dispatches: int) -> RunRecord:
    now = utcnow()
    return RunRecord(
        run_id=run_id,
        workflow=probe.name,
        args=args,
        status=RunStatus.QUEUED,
        created_at=now,
        updated_at=now,
        dispatches=dispatches,
    )


async def test_the_batch_of_a_last_chance_is_given_back_before_it_starts(tmp_path: Path) -> None:
    """Were it still held when the last chance runs, a crash would charge it a death."""
    SEEN.clear()
    STORE[:] = [tether.SQLiteStore(tmp_path / "runs.db")]
    async with tether.open_engine(STORE[0]) as engine:
        await STORE[0].create_run(_queued("p", '["i"]', 1))  # died once: its last chance next
        await STORE[0].create_run(_queued("i", '["p"]', 0))
        async with tether.open_worker(engine, max_dispatches=2, concurrency=4):
            assert await engine.wait("p", timeout=30) == "ok"
    assert SEEN[0] == "i: owner=None dispatches=0", SEEN
