"""PostgresStore.submit_run on a real server: what the shared conformance checks do not see.

- the flow checks pass, with and without prepared statements;
- submits racing from two stores (two pools, as two processes), of every kind
  at once: one live run per dedupe id, never more than ``max_queued``
  pending, and no deadlock between the queue's and the dedupe id's locks;
- the SQL's live and pending runs are exactly the rules' (``live_dedupe``,
  ``pending``), for every status;
- the columns ``queue`` and ``dedupe`` copy the record, through every write;
- the submit's reads go through their partial indexes (also as generic plans);
- a schema of version 5 is migrated: its runs are in the default queue;
- a submit whose acknowledgement was lost returns its run when retried.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import attrs
import psycopg
import psycopg.sql
import pytest
import trio

import tether
from tether.stores import RunRecord, RunStatus, utcnow
from tether.stores._flow import DEFAULT_QUEUE, Submission, live_dedupe, pending
from tether.stores._postgres_sql import SCHEMA_VERSION, statements
from tether.testing import check_store
from tether.testing._conformance_flow import FLOW_CHECKS

from ._postgres import PostgresServer, as_schema_5
from .test_postgres import _lose_one_ack, opened


@pytest.fixture
def server(postgres_server: PostgresServer) -> Iterator[PostgresServer]:
    yield postgres_server
    postgres_server.cont()


def _new(run_id: str, **kw: Any) -> RunRecord:
    now = utcnow()
    fields: dict[str, Any] = {
        "run_id": run_id,
        "workflow": "wf",
        "args": "[]",
        "status": RunStatus.QUEUED,
        "queue": "q",
        "created_at": now,
        "updated_at": now,
    }
    fields.update(kw)
    return RunRecord(**fields)


def _columns(server: PostgresServer, store: tether.PostgresStore) -> dict[str, tuple[Any, ...]]:
    """Each run's columns ``queue``, ``key`` and ``dedupe``, by run id."""
    rows = server.sql(f'SELECT run_id, queue, key, dedupe FROM "{store.schema}".runs')
    return {run_id: tuple(copies) for run_id, *copies in rows}


@pytest.mark.parametrize("prepare", [True, False])
async def test_the_flow_checks_pass(server: PostgresServer, prepare: bool) -> None:
    result = await check_store(lambda: server.store(prepare=prepare), only=list(FLOW_CHECKS))
    assert sorted(result.passed) == sorted(FLOW_CHECKS), result.skipped


async def test_submits_of_every_kind_racing_from_two_stores(server: PostgresServer) -> None:
    """Submits to one queue, 48 at once on two pools: plain ones and ones with a dedupe id
    (a debounced one too) under its ``max_queued``, and ones with a dedupe id of their own
    without it (their locks overlap the others': no deadlock). One live run per dedupe
    id; the capped submits stored at most ``max_queued`` runs, and filled the queue."""
    first = server.store(pool_size=8)
    limit = 5
    async with opened(first), opened(server.reopen(first)) as second:
        refused: list[str] = []
        later = utcnow() + timedelta(hours=1)

        async def submit(n: int) -> None:
            kind = n % 4
            dedupe = (None, f"d{n % 3}", f"d{n % 3}", f"u{n % 2}")[kind]
            record = _new(f"r-{n}", dedupe=dedupe)
            if kind == 2:
                record = attrs.evolve(record, status=RunStatus.WAITING, wake_at=later)
            submission = Submission(
                record, max_queued=None if kind == 3 else limit, debounce=kind == 2
            )
            try:
                await (first, second)[n % 2].submit_run(submission)
            except tether.QueueFullError:
                refused.append(record.run_id)

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for n in range(48):
                    nursery.start_soon(submit, n)
        runs = await first.list_runs()
        dedupes = [r.dedupe for r in runs if r.dedupe is not None]
        assert sorted(dedupes) == sorted(set(dedupes)), f"two live runs of a dedupe id: {runs}"
        assert all(pending(r) for r in runs), runs
        capped = [r for r in runs if r.dedupe is None or r.dedupe.startswith("d")]
        assert len(capped) <= limit <= len(runs), [r.run_id for r in runs]
        assert refused and all(int(r[2:]) % 4 != 3 for r in refused), refused


async def test_sql_live_and_pending_runs_are_the_rules(server: PostgresServer) -> None:
    """For every status, with token 0 and 1: a submit's dedupe id finds exactly the runs
    live_dedupe() says, and its queue's depth counts exactly the runs pending() says."""
    later = utcnow() + timedelta(hours=1)
    stored = [
        _new(
            f"{status.value}-{token}",
            status=status,
            token=token,
            owner=None,
            dedupe=f"{status.value}-{token}",
            wake_at=later if status is RunStatus.WAITING else None,
        )
        for status in RunStatus
        for token in (0, 1)
    ]
    async with opened(server.store()) as store:
        for record in stored:
            await store.create_run(record)
        for record in stored:
            assert record.dedupe is not None
            got = await store.submit_run(Submission(_new("new", dedupe=record.dedupe)))
            live = live_dedupe(record, "q", record.dedupe)
            assert got == (record.run_id if live else "new"), (record.status, record.token, got)
            if got == "new":
                assert await store.delete_run("new")
        with pytest.raises(tether.QueueFullError) as full:
            await store.submit_run(Submission(_new("new"), max_queued=1))
        assert full.value.depth == sum(pending(r) for r in stored)


async def test_the_columns_copy_the_record_through_every_write(server: PostgresServer) -> None:
    """The columns queue, key and dedupe are the record's after a submit, a debounce, a
    create, a claim that creates, a batched claim, an update and a cancel; listings by
    queue and key filter on them."""
    later = utcnow() + timedelta(hours=1)
    async with opened(server.store()) as store:
        waiting = _new("s", dedupe="d", key="k", status=RunStatus.WAITING, wake_at=later)
        await store.submit_run(Submission(waiting, debounce=True))
        again = attrs.evolve(waiting, run_id="s2", key="k2", wake_at=utcnow())
        assert await store.submit_run(Submission(again, debounce=True)) == "s"
        await store.create_run(_new("c", workflow="other", queue="other", key="k", dedupe="x"))
        await store.claim("k", "host:1:a", ttl=60, create=_new("k", queue="z", dedupe="y"))
        claimed = await store.claim_next("host:1:a", ttl=60, workflows=["wf"], max_dispatches=3)
        assert claimed is not None
        await store.update_run(attrs.evolve(claimed, status=RunStatus.COMPLETED, result="1"))
        await store.cancel_run("c")
        records = {r.run_id: (r.queue, r.key, r.dedupe) for r in await store.list_runs()}
        expected = {"s": ("q", "k2", "d"), "c": ("other", "k", "x"), "k": ("z", None, "y")}
        assert _columns(server, store) == records == expected
        listed = {
            (queue, key): [r.run_id for r in await store.list_runs(queue=queue, key=key)]
            for queue, key in (("q", None), ("other", "k"), (None, "k"), ("z", "k2"))
        }
        assert listed == {
            ("q", None): ["s"],
            ("other", "k"): ["c"],
            (None, "k"): ["c"],
            ("z", "k2"): [],
        }


def _plan(server: PostgresServer, plans: str, query: bytes, *args: str) -> str:
    """The plan of *query* (``%s`` placeholders) prepared, executed with *args*."""
    for n in range(1, len(args) + 1):
        query = query.replace(b"%s", f"${n}".encode(), 1)
    types = ", ".join("text" for _ in args)
    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        conn.execute(f"SET plan_cache_mode = {plans}".encode())
        conn.execute(f"PREPARE q ({types}) AS ".encode() + query)
        values = psycopg.sql.SQL(", ").join(map(psycopg.sql.Literal, args))
        rows = conn.execute(psycopg.sql.SQL("EXPLAIN EXECUTE q ({})").format(values))
        return "\n".join(line for (line,) in rows.fetchall())


@pytest.mark.parametrize("plans", ["force_custom_plan", "force_generic_plan"])
async def test_the_submit_reads_use_their_partial_indexes(
    server: PostgresServer, plans: str
) -> None:
    """Among many finished runs and many queued runs of another queue, the dedupe id's run
    and the queue's depth are read through runs_dedupe and runs_pending, whether the
    prepared statement's plan is made for its parameters or generic."""
    store = server.store()
    async with opened(store):
        await store.submit_run(Submission(_new("mine", dedupe="d")))
    s = f'"{store.schema}"'
    for status, queue in (("completed", "q"), ("queued", "busy")):
        server.sql(
            f"INSERT INTO {s}.runs (run_id, data, status, workflow, queue, dedupe) "
            f"SELECT '{status}-' || i, '{{}}', '{status}', 'wf', '{queue}', 'd' || i % 7 "
            "FROM generate_series(1, 20000) AS i"
        )
    server.sql(f"ANALYZE {s}.runs")
    sql = statements(store.schema)
    dedupe = _plan(server, plans, sql.live_dedupe, "q", "d")
    assert "runs_dedupe" in dedupe, dedupe
    depth = _plan(server, plans, sql.pending, "q")
    assert "runs_pending" in depth, depth


async def test_a_schema_of_version_5_is_migrated(server: PostgresServer) -> None:
    store = server.store()
    async with opened(store):
        await store.create_run(_new("old", queue=DEFAULT_QUEUE))
    s = f'"{store.schema}"'
    as_schema_5(server, store.schema)
    async with opened(server.reopen(store)) as again:
        assert server.sql(f"SELECT version FROM {s}.tether_schema") == [(SCHEMA_VERSION,)]
        assert _columns(server, again) == {"old": (DEFAULT_QUEUE, None, None)}
        with pytest.raises(tether.QueueFullError) as full:
            await again.submit_run(Submission(_new("new", queue=DEFAULT_QUEUE), max_queued=1))
        assert full.value.depth == 1, "the migrated run does not count in its queue"
        assert await again.submit_run(Submission(_new("d1", dedupe="x"))) == "d1"
        assert await again.submit_run(Submission(_new("d2", dedupe="x"))) == "d1"
    indexes = server.sql("SELECT indexname FROM pg_indexes WHERE schemaname = %s", store.schema)
    assert {"runs_dedupe", "runs_pending"} <= {name for (name,) in indexes}


async def test_a_submit_whose_answer_was_lost_returns_its_run(server: PostgresServer) -> None:
    """Retried after its commit's acknowledgement was lost, a submit returns its run: not
    RunConflictError, nor QueueFullError for the place it took itself."""
    later = utcnow() + timedelta(hours=1)
    async with opened(server.store()) as store:
        submissions = [
            Submission(_new("plain", queue="p")),
            Submission(_new("capped", queue="solo"), max_queued=1),
            Submission(_new("deduped", dedupe="d"), max_queued=1),
            Submission(_new("other", dedupe="d", args="[2]"), max_queued=1),
            Submission(
                _new("b", dedupe="b", status=RunStatus.WAITING, wake_at=later), debounce=True
            ),
        ]
        expected = ["plain", "capped", "deduped", "deduped", "b"]
        for submission, run_id in zip(submissions, expected, strict=True):
            lost = _lose_one_ack(store, "_in_thread")
            assert await store.submit_run(submission) == run_id
            assert lost, "the acknowledgement was not lost"
        rebounced = attrs.evolve(submissions[-1].record, run_id="b2", args="[3]")
        lost = _lose_one_ack(store, "_in_thread")
        assert await store.submit_run(Submission(rebounced, debounce=True)) == "b"
        assert lost
        runs = {r.run_id: r for r in await store.list_runs()}
        assert sorted(runs) == ["b", "capped", "deduped", "plain"]
        assert runs["b"].args == "[3]" and runs["deduped"].args == "[]"
