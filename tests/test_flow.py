"""Flow control at submit (issue 27, first part): queues, keys, dedupe ids, debounce,
``not_before`` and ``max_queued``, through the engine and its workers, on every store."""

from __future__ import annotations

import heapq
import math
import sqlite3
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import tether
from tether._core._changes import MAX_WAKES, push_wake
from tether.stores import (
    RunRecord,
    RunStatus,
    Store,
    Submission,
    decide_submit,
    live_dedupe,
    pending,
)
from tether.stores._record_json import dumps_record, loads_record
from tether.testing import StoreConformanceError, check_store

from ._json_store import JsonStore
from ._sqlite_schemas import back_to_6
from ._wall_clock import START, ModuleClock, fresh_test

#: what the workflow saw: (its argument, the engine clock's reading when it ran)
seen: list[tuple[int, datetime]] = []
#: the clock the workflow reads (fresh for each test)
clock = ModuleClock()

pytestmark = pytest.mark.usefixtures("tether_registry")


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    with fresh_test(clock, seen):
        yield


@tether.step
async def note(n: int) -> int:
    seen.append((n, clock().now()))
    return n


@tether.workflow(name="tests.flow.job")
async def job(n: int) -> int:
    return await note(n)


async def _runs(store: Store) -> list[Any]:
    return list(await store.list_runs())


async def test_a_dedupe_id_gives_one_run_while_it_is_live_and_a_new_one_after(
    tether_store: Store, autojump_clock: trio.testing.MockClock
) -> None:
    emails = tether.Queue("emails")
    async with tether.open_engine(tether_store, clock=clock()) as engine:
        first = await engine.submit(job, 1, queue=emails, key="t1", dedupe="welcome:1")
        again = await engine.submit(job, 2, queue=emails, key="t1", dedupe="welcome:1")
        assert again == first
        (stored,) = await _runs(tether_store)
        assert (stored.run_id, stored.queue, stored.key, stored.dedupe, stored.args) == (
            first,
            "emails",
            "t1",
            "welcome:1",
            "[1]",
        )
        # The same dedupe id in the default queue is another one.
        other = await engine.submit(job, 3, dedupe="welcome:1")
        assert other != first
        async with tether.open_worker(engine):
            assert await engine.wait(first) == 1
            assert await engine.wait(other) == 3
            after = await engine.submit(job, 4, queue=emails, dedupe="welcome:1")
            assert after not in (first, other)
            assert await engine.wait(after) == 4
    assert sorted(n for n, _ in seen) == [1, 3, 4]


async def test_three_debounced_submits_give_one_run_with_the_last_arguments(
    tether_store: Store, autojump_clock: trio.testing.MockClock
) -> None:
    async with (
        tether.open_engine(tether_store, clock=clock()) as engine,
        tether.open_worker(engine, poll_interval=600),
    ):
        ids = []
        for n in (1, 2, 3):
            ids.append(await engine.submit(job, n, dedupe="search", debounce=10.0))
            await trio.sleep(4)  # each submit comes before the last one's start
        assert len(set(ids)) == 1
        assert await engine.wait(ids[0]) == 3
        (stored,) = await _runs(tether_store)
    assert stored.status is RunStatus.COMPLETED
    # One execution, with the last arguments, at the last submit's time + 10 s.
    assert seen == [(3, START + timedelta(seconds=8 + 10))]


async def test_a_debounced_submit_after_the_start_gives_the_started_run(
    tether_store: Store, autojump_clock: trio.testing.MockClock
) -> None:
    async with tether.open_engine(tether_store, clock=clock()) as engine:
        run_id = await engine.submit(job, 1, dedupe="d", debounce=1.0)
        async with tether.open_worker(engine):
            assert await engine.wait(run_id) == 1
        # Finished: the dedupe id is free, so a new run, debounced in turn.
        later = await engine.submit(job, 2, dedupe="d", debounce=1.0)
        assert later != run_id
        record = await tether_store.get_run(later)
        assert record is not None and record.status is RunStatus.WAITING
        assert record.wake_at == clock().now() + timedelta(seconds=1)


async def test_not_before_starts_the_run_then_and_no_earlier(
    tether_store: Store, autojump_clock: trio.testing.MockClock
) -> None:
    at = START + timedelta(hours=2)
    async with (
        tether.open_engine(tether_store, clock=clock()) as engine,
        tether.open_worker(engine, poll_interval=600),
    ):
        run_id = await engine.submit(job, 7, not_before=at)
        record = await tether_store.get_run(run_id)
        assert record is not None and (record.status, record.wake_at) == (RunStatus.WAITING, at)
        past = await engine.submit(job, 8, not_before=START - timedelta(days=1))
        assert await engine.wait(past) == 8
        assert await engine.wait(run_id) == 7
    assert seen == [(8, START), (7, at)]


async def test_a_submit_past_max_queued_raises_and_stores_nothing(tether_store: Store) -> None:
    small = tether.Queue("small", max_queued=2)
    async with tether.open_engine(tether_store) as engine:
        await engine.submit(job, 1, queue=small)
        await engine.submit(job, 2, queue=small, not_before=START + timedelta(days=9000))
        await engine.submit(job, 3)  # the default queue: not counted
        before = await _runs(tether_store)
        with pytest.raises(tether.QueueFullError, match="'small' holds 2 runs") as caught:
            await engine.submit(job, 4, queue=small, run_id="refused")
        assert (caught.value.queue, caught.value.depth, caught.value.max_queued) == ("small", 2, 2)
        assert await _runs(tether_store) == before
        assert await tether_store.get_run("refused") is None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"queue": "emails"}, "takes a tether.Queue"),
        ({"key": ""}, "key '' is empty"),
        ({"dedupe": 5}, "dedupe id 5 is a int"),
        ({"dedupe": "a\0b"}, "NUL"),
        ({"debounce": 1.0}, "debounce= needs dedupe="),
        ({"dedupe": "d", "debounce": 0}, "positive seconds"),
        ({"dedupe": "d", "debounce": float("inf")}, "positive seconds"),
        ({"dedupe": "d", "debounce": True}, "positive seconds"),
        ({"dedupe": "d", "debounce": 1, "not_before": START}, "give one of them"),
        ({"not_before": datetime(2030, 1, 1)}, "timezone-aware"),
        ({"not_before": "2030-01-01"}, "timezone-aware"),
    ],
)
async def test_submit_refuses_bad_flow_arguments_and_stores_nothing(
    kwargs: dict[str, Any], match: str
) -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store) as engine:
        with pytest.raises(tether.UsageError, match=match):
            await engine.submit(job, 1, **kwargs)
    assert await _runs(store) == []


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: tether.Queue("default"), "queue of runs submitted without queue="),
        (lambda: tether.Queue(""), "queue name '' is empty"),
        (lambda: tether.Queue("q", max_queued=0), "max_queued must be a positive int"),
        (lambda: tether.Queue("q", aging=-1), "aging must be a positive"),
        (lambda: tether.Queue("q", rate=(1, 2)), "must be a tether.Rate"),  # type: ignore[arg-type]
        (lambda: tether.Rate(0, per=1.0), "limit must be a positive int"),
        (lambda: tether.Rate(1, per=math.nan), "per must be a positive, finite"),
        # Limits checked when a run is claimed are refused, not left unchecked.
        (lambda: tether.Queue("q", concurrency=2), "sets concurrency: limits that workers"),
        (lambda: tether.Queue("q", per_key=1, rate=tether.Rate(1, per=1)), "per_key, rate"),
    ],
)
def test_queue_and_rate_refuse_what_they_cannot_hold(make: Any, match: str) -> None:
    with pytest.raises(tether.UsageError, match=match):
        make()


async def test_a_store_without_submit_run_takes_queues_and_keys_but_refuses_dedupe() -> None:
    store = JsonStore()
    async with tether.open_engine(store) as engine:
        run_id = await engine.submit(job, 1, queue=tether.Queue("q"), key="k")
        record = await store.get_run(run_id)
        assert record is not None and (record.queue, record.key) == ("q", "k")
        with pytest.raises(tether.UsageError, match="does not keep queues' rules"):
            await engine.submit(job, 2, dedupe="d")
        with pytest.raises(tether.UsageError, match="does not keep queues' rules"):
            await engine.submit(job, 3, queue=tether.Queue("full", max_queued=5))
    assert [r.run_id for r in await _runs(store)] == [run_id]


async def test_a_resubmitted_run_id_is_idempotent_under_every_option(tether_store: Store) -> None:
    q = tether.Queue("q", max_queued=1)
    async with tether.open_engine(tether_store) as engine:
        assert await engine.submit(job, 1, queue=q, run_id="same") == "same"
        # The queue is full, but the run is the one asked for: the same id again.
        assert await engine.submit(job, 1, queue=q, run_id="same", dedupe=None) == "same"
        with pytest.raises(tether.RunConflictError, match="exists with workflow"):
            await engine.submit(job, 2, run_id="same")


# -- stored before queues: format 6 records, schema 6 files ------------------------------


def _v6_record(run_id: str) -> dict[str, Any]:
    now = START
    data = RunRecord(
        run_id=run_id,
        workflow="tests.flow.job",
        args="[5]",
        status=RunStatus.QUEUED,
        created_at=now,
        updated_at=now,
    ).to_json()
    for field in ("queue", "key", "dedupe"):
        del data[field]
    return {**data, "format_version": 6}


def test_a_format_6_record_is_in_the_default_queue_and_a_new_field_is_refused_there() -> None:
    record = loads_record(dumps_record(_v6_record("old")), RunRecord.from_json)
    assert (record.queue, record.key, record.dedupe) == ("default", None, None)
    with pytest.raises(ValueError, match="queue"):
        loads_record(dumps_record({**_v6_record("old"), "queue": "q"}), RunRecord.from_json)
    with pytest.raises(ValueError, match="key"):
        data = {**_v6_record("old"), "format_version": 7, "queue": "q", "dedupe": None}
        data["key"] = 5
        loads_record(dumps_record(data), RunRecord.from_json)


async def test_an_sqlite_file_of_schema_6_is_migrated_and_keeps_the_rules(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v6.db"
    store = tether.SQLiteStore(path)
    await store.open()
    await store.close()
    conn = sqlite3.connect(path)
    with conn:
        back_to_6(conn)
        conn.execute(
            "INSERT INTO runs (run_id, data, status, workflow) VALUES ('old', ?, 'queued', ?)",
            (dumps_record(_v6_record("old")), "tests.flow.job"),
        )
        conn.execute("PRAGMA user_version = 6")
    conn.close()
    store = tether.SQLiteStore(path)
    async with tether.open_engine(store) as engine:
        old = await store.get_run("old")
        assert old is not None and (old.queue, old.key, old.dedupe) == ("default", None, None)
        assert [r.run_id for r in await engine.list_runs(queue="default")] == ["old"]
        full = tether.Queue("default-ish", max_queued=1)
        first = await engine.submit(job, 1, queue=full, dedupe="x")
        assert await engine.submit(job, 2, queue=full, dedupe="x") == first
        with pytest.raises(tether.QueueFullError):
            await engine.submit(job, 3, queue=full)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (tether.stores.SCHEMA_VERSION,)
    indexes = {row[1] for row in conn.execute("PRAGMA index_list(runs)")}
    assert {"runs_dedupe", "runs_pending"} <= indexes
    conn.close()


# -- planted bugs are caught by the conformance checks -----------------------------------


class SplitSubmitStore(tether.MemoryStore):  # type: ignore[misc]  # final, but a test may
    """A ``submit_run`` that reads in one step and writes in another: the dedupe id's live
    run and the queue's depth are read, and only then, after other tasks ran, is the
    decision written (a check outside the submit's transaction)."""

    async def submit_run(self, submission: Submission) -> str:
        record = submission.record
        runs = await self.list_runs(queue=record.queue)
        live = None
        if record.dedupe is not None:
            live = next((r for r in runs if live_dedupe(r, record.queue, record.dedupe)), None)
        depth = sum(1 for r in runs if pending(r))
        exists = await self.get_run(record.run_id) is not None
        decision = decide_submit(submission, live=live, exists=exists, depth=depth)
        if decision.create is not None:
            await self.create_run(decision.create)
        return decision.run_id


@pytest.mark.parametrize("check", ["concurrent_dedupe", "concurrent_max_queued"])
async def test_the_submit_checks_catch_rules_kept_outside_the_submits_step(check: str) -> None:
    with pytest.raises(StoreConformanceError, match=check):
        await check_store(SplitSubmitStore, only=[check])
    await check_store(tether.MemoryStore, only=[check])


def test_a_heap_of_wake_times_keeps_the_earliest_and_stays_bounded() -> None:
    wakes: list[datetime] = []
    times = [START + timedelta(seconds=(i * 7919) % 5000) for i in range(5000)]
    for at in times:
        push_wake(wakes, at)
    assert MAX_WAKES <= len(wakes) <= 2 * MAX_WAKES
    popped = [heapq.heappop(wakes) for _ in range(MAX_WAKES)]
    assert popped == sorted(times)[:MAX_WAKES]  # the earliest, in order
