"""Claim cost by table size: finished runs and queued runs, on PostgreSQL and on SQLite.

Run: ``python benchmarks/claim_cost.py [--quick]``

A worker's claim (``store.claim_next``) should cost the same whatever the
history in the table: a million finished runs, or a million queued ones,
must not make each claim slower. For each store and each size N
(1,000 / 10,000 / 100,000 / 1,000,000; ``--quick``: 1,000 and 10,000), on a
fresh store each time, in three shapes:

- ``finished``: N completed runs, then 100 queued runs (newer ids);
- ``queued``: N queued runs;
- ``drained``: N + 100 queued runs, the planner's statistics taken, then the
  oldest N made completed in one statement, with no statistics taken after:
  what a drain leaves before the next (auto)analyze, the case where a claim
  that relies on statistics walks past the finished runs.

Seeding. The rows are copies of two runs that tether itself stored through
the public API on that store (``engine.submit`` of a 1-step workflow, queued,
and ``engine.run`` of another, completed), read back from the live table
with every column it has (so a column added to the schema gets the value
tether wrote), and replicated in one ``INSERT ... SELECT`` over
``generate_series`` (PostgreSQL) or a recursive CTE (SQLite), in one
transaction, with distinct run ids: the run id appears once in a record's
JSON text and no checksum covers it (entries have checksums, run records do
not), so each copy's text is the template's with the id replaced; a copy is
checked to read back (``store.get_run``) as the template with its run id
changed. The two templates are deleted first. The table is then analyzed
(``VACUUM (ANALYZE)`` on PostgreSQL, ``ANALYZE`` on SQLite; ``drained``: a
plain ``VACUUM``, no statistics); on PostgreSQL autovacuum is turned off for
the table, so the planner's statistics stay those of that moment during the
measurement. Completed runs have no journal entries here: a claim never
reads them.

Measure. 20 warm-up claims (at most 5 s of them), then C = 200
(``--quick``: 50; at most 20 s of them, but at least 10) timed calls of
``store.claim_next(owner, ttl=30, workflows=[(name, None)],
max_dispatches=10, now=...)``, each checked to claim a run. After each claim,
untimed, the claimed run is made completed (its row set to the completed
template's columns) and one queued run is added at the tail, so the shape
stays the same all along (100 or N queued, N + k finished). The table gives
p50 and p90 per claim (the whole call, thread hop included) and the ratio of
p50 to N = 1,000's in the same shape; ``query ms`` is the claim statement
alone (PostgreSQL: the execution time ``EXPLAIN ANALYZE`` reports; SQLite:
the median of 20 executions). The claim statement's plan is printed at each
N: ``EXPLAIN (ANALYZE, BUFFERS)`` on PostgreSQL, with the parameters the
store passes, both as a one-off statement (a custom plan) and as a prepared
statement forced to its generic plan (what a pooled connection may use after
psycopg prepares it), each in a transaction rolled back; ``EXPLAIN QUERY
PLAN`` on SQLite.

Servers: PostgreSQL is the test suite's throwaway cluster
(``tests/_postgres.py``, with its fast settings: ``fsync`` and
``synchronous_commit`` off), SQLite a temporary file with
``synchronous="normal"`` (WAL: commits are not flushed either), so the
figures are the claim's own work, not a disk flush. Real time on a shared
machine; reported, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import trio

import tether
from _env import print_environment
from tether.stores import RunRecord, RunStatus, dumps_record

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repository root: tests/_postgres.py

from tests import _postgres as pg  # noqa: E402

SIZES = (1_000, 10_000, 100_000, 1_000_000)
QUICK_SIZES = (1_000, 10_000)
SHAPES = ("finished", "queued", "drained")
BEHIND = 100  # queued runs behind the N finished ones
CLAIMS, QUICK_CLAIMS = 200, 50
WARM_UP, WARM_UP_BUDGET = 20, 5.0  # claims, and seconds at most
BUDGET, MIN_CLAIMS = 20.0, 10  # seconds of timed claims at most, unless fewer than MIN_CLAIMS
OWNER = "claim-cost-worker"
TTL = 30.0
MAX_DISPATCHES = 10
TEMPLATE_QUEUED = "claim-cost-template-queued"
TEMPLATE_DONE = "claim-cost-template-done"

# The one place that names the claim's statement and its parameters, as the store
# passes them to it for claim_next. Two versions of tether are known: since the
# batched claims (commit dc63563) claim_next is claim_batch with limit 1, whose
# candidates come from PostgreSQL's ``claimable`` and SQLite's DISPATCHABLE with
# named parameters; before, from ``dispatchable`` and a positional DISPATCHABLE.


def pg_claim(
    store: tether.PostgresStore, now: datetime
) -> tuple[bytes, dict[str, Any] | tuple[Any, ...]]:
    """PostgreSQL: the claim's candidate statement (bytes) and its parameters."""
    sql = store._tables.sql
    if hasattr(sql, "claimable"):
        served = {"names": [job.name], "pairs": [f"{job.name}\x1f"]}
        return sql.claimable, {**served, "dead": [], "now": now, "seen": [], "limit": 1}
    return sql.dispatchable, ([job.name], [job.name], [""], [], now, [])


def sqlite_claim(now: datetime) -> tuple[str, dict[str, Any] | tuple[Any, ...]]:
    """SQLite: the claim's query, rendered, and its parameters."""
    from tether.stores import _sqlite_sql as q

    if "{served}" in q.DISPATCHABLE:

        def served(prefix: str) -> str:
            return q.SERVED.format(prefix=prefix, workflows=":w0", pairs="(:n0, :v0)")

        query = q.DISPATCHABLE.format(served=served(""), served_q=served("q."), gone="")
        params = {"w0": job.name, "n0": job.name, "v0": ""}
        return query, {**params, "limit": 1, "now": time.time(), "clock": now.timestamp()}
    query = q.DISPATCHABLE.format(workflows="?", pairs="(?, ?)", gone="")
    return query, (job.name, job.name, "", time.time(), now.timestamp())


@tether.step(name="bench_claim_cost.noop")
async def noop(i: int) -> int:
    return i


@tether.workflow(name="benchmarks.claim_cost.job")
async def job(i: int) -> int:
    """One no-op step: the run every row of the table is a copy of."""
    return await noop(i)


def pct(samples: Sequence[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


# -- the tables, through SQL ---------------------------------------------------------------


@attrs.define
class Template:
    """One run row tether stored: every column but the identity, by name."""

    run_id: str
    columns: dict[str, Any]
    types: dict[str, str]  # the column's SQL type (PostgreSQL casts), else ''

    def token(self) -> str:
        """The run id as its record's JSON text holds it (once)."""
        token = json.dumps(self.run_id, ensure_ascii=False)
        count = self.columns["data"].count(token)
        if count != 1:
            raise RuntimeError(f"{self.run_id}'s record text holds its id {count} times, not once")
        return token


class Backend:
    """What the benchmark does to one store's tables in SQL, outside the store."""

    name: str

    def template(self, run_id: str) -> Template:
        raise NotImplementedError

    def seed(self, template: Template, prefix: str, first: int, count: int) -> None:
        raise NotImplementedError

    def data(self, run_id: str) -> str:
        """The stored text of *run_id*'s record."""
        raise NotImplementedError

    def complete(self, run_id: str, done: Template) -> None:
        raise NotImplementedError

    def delete(self, run_ids: Sequence[str]) -> None:
        raise NotImplementedError

    def complete_oldest(self, count: int, done: Template) -> None:
        """Make the *count* oldest runs completed, in one statement (as a drain leaves them)."""
        raise NotImplementedError

    def analyze(self, statistics: bool = True) -> None:
        """Tidy the table (PostgreSQL: vacuum) and, with *statistics*, refresh the planner's."""
        raise NotImplementedError

    def explain(self, now: datetime) -> tuple[str, float]:
        """The claim statement's plan, and its execution time in ms."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class PostgresBackend(Backend):
    name = "PostgreSQL"

    def __init__(self, server: pg.PostgresServer, store: tether.PostgresStore) -> None:
        import psycopg

        self.store = store
        self.schema = store.schema
        self.conn = psycopg.connect(server.conninfo(), autocommit=True)
        rows = self.conn.execute(
            """SELECT a.attname, format_type(a.atttypid, a.atttypmod)
            FROM pg_attribute a WHERE a.attrelid = %s::regclass AND a.attnum > 0
            AND NOT a.attisdropped AND a.attidentity = '' AND a.attgenerated = ''
            ORDER BY a.attnum""",
            (f'"{self.schema}".runs',),
        ).fetchall()
        self.types = dict(rows)
        self.runs = f'"{self.schema}".runs'

    def template(self, run_id: str) -> Template:
        names = ", ".join(f'"{c}"' for c in self.types)
        row = self.conn.execute(
            f"SELECT {names} FROM {self.runs} WHERE run_id = %s", (run_id,)
        ).fetchone()
        assert row is not None, run_id
        return Template(run_id, dict(zip(self.types, row, strict=True)), dict(self.types))

    def seed(self, template: Template, prefix: str, first: int, count: int) -> None:
        exprs, params = [], []
        for column, value in template.columns.items():
            if column == "run_id":
                exprs.append("%s || g")
                params.append(prefix)
            elif column == "data":
                exprs.append("replace(%s, %s, '\"' || %s || g || '\"')")
                params += [value, template.token(), prefix]
            else:
                exprs.append(f"%s::{template.types[column]}")
                params.append(value)
        names = ", ".join(f'"{c}"' for c in template.columns)
        with self.conn.transaction():
            self.conn.execute(
                f"INSERT INTO {self.runs} ({names}) SELECT {', '.join(exprs)} "
                "FROM generate_series(%s::bigint, %s::bigint) AS g ORDER BY g",
                (*params, first, first + count - 1),
            )

    def data(self, run_id: str) -> str:
        row = self.conn.execute(f"SELECT data FROM {self.runs} WHERE run_id = %s", (run_id,))
        text: str = row.fetchone()[0]
        return text

    def complete(self, run_id: str, done: Template) -> None:
        sets, params = [], []
        for column, value in done.columns.items():
            if column == "run_id":
                continue
            if column == "data":
                value = value.replace(done.token(), json.dumps(run_id, ensure_ascii=False))
            sets.append(f'"{column}" = %s::{done.types[column]}')
            params.append(value)
        self.conn.execute(
            f"UPDATE {self.runs} SET {', '.join(sets)} WHERE run_id = %s", (*params, run_id)
        )

    def delete(self, run_ids: Sequence[str]) -> None:
        with self.conn.transaction():
            for table in ("entries", "messages", "runs"):
                self.conn.execute(
                    f'DELETE FROM "{self.schema}".{table} WHERE run_id = ANY(%s)', (list(run_ids),)
                )

    def complete_oldest(self, count: int, done: Template) -> None:
        sets, params = [], []
        for column, value in done.columns.items():
            if column == "data":
                sets.append("data = replace(%s, %s, '\"' || run_id || '\"')")
                params += [value, done.token()]
            elif column != "run_id":
                sets.append(f'"{column}" = %s::{done.types[column]}')
                params.append(value)
        self.conn.execute(
            f"UPDATE {self.runs} SET {', '.join(sets)} "
            f"WHERE id IN (SELECT id FROM {self.runs} ORDER BY id LIMIT %s)",
            (*params, count),
        )

    def analyze(self, statistics: bool = True) -> None:
        # Autovacuum is off for the table, so its statistics stay those of this moment.
        self.conn.execute(f"ALTER TABLE {self.runs} SET (autovacuum_enabled = off)")
        self.conn.execute(f"VACUUM {'(ANALYZE) ' if statistics else ''}{self.runs}")

    def explain(self, now: datetime) -> tuple[str, float]:
        import psycopg

        statement, params = pg_claim(self.store, now)
        lines = ["custom plan (the statement with its parameters):"]
        with contextlib.suppress(_RolledBack), self.conn.transaction():
            rows = self.conn.execute(b"EXPLAIN (ANALYZE, BUFFERS) " + statement, params)
            lines += [f"  {r[0]}" for r in rows.fetchall()]
            raise _RolledBack
        found = re.search(r"Execution Time: ([\d.]+) ms", "\n".join(lines))
        ms = float(found.group(1)) if found else float("nan")
        lines.append("generic plan (prepared; plan_cache_mode = force_generic_plan):")
        # The placeholders as $n, and the values in that order.
        names: list[str] = []

        def number(found: re.Match[bytes]) -> bytes:
            name = found.group(1).decode() if found.group(1) else str(len(names))
            if name not in names or not found.group(1):
                names.append(name)
            return f"${names.index(name) + 1}".encode()

        prepared = re.sub(rb"%(?:\(([a-z_]+)\))?[sb]", number, statement)
        values = [params[n] for n in names] if isinstance(params, dict) else list(params)
        client = psycopg.ClientCursor(self.conn)
        with contextlib.suppress(_RolledBack), self.conn.transaction():
            client.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            client.execute(b"PREPARE claim_cost_claim AS " + prepared)
            marks = ", ".join(["%s"] * len(values))
            client.execute(f"EXPLAIN (ANALYZE, BUFFERS) EXECUTE claim_cost_claim({marks})", values)
            lines += [f"  {r[0]}" for r in client.fetchall()]
            raise _RolledBack  # (a rollback deallocates nothing: do it by hand)
        client.execute("DEALLOCATE claim_cost_claim")
        return "\n".join(lines), ms

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.execute(f'DROP SCHEMA "{self.schema}" CASCADE')
        self.conn.close()


class _RolledBack(Exception):
    """Leaves a ``transaction()`` block by rolling it back."""


class SQLiteBackend(Backend):
    name = "SQLite"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn = sqlite3.connect(path, timeout=30, isolation_level=None)
        rows = self.conn.execute("PRAGMA table_info(runs)").fetchall()
        self.columns = [name for _, name, _, _, _, pk in rows if not pk]

    def template(self, run_id: str) -> Template:
        names = ", ".join(f'"{c}"' for c in self.columns)
        row = self.conn.execute(f"SELECT {names} FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        assert row is not None, run_id
        return Template(run_id, dict(zip(self.columns, row, strict=True)), {})

    def seed(self, template: Template, prefix: str, first: int, count: int) -> None:
        exprs, params = [], []
        for column, value in template.columns.items():
            if column == "run_id":
                exprs.append("? || i")
                params.append(prefix)
            elif column == "data":
                exprs.append("replace(?, ?, '\"' || ? || i || '\"')")
                params += [value, template.token(), prefix]
            else:
                exprs.append("?")
                params.append(value)
        names = ", ".join(f'"{c}"' for c in template.columns)
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(
            "WITH RECURSIVE g(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM g WHERE i < ?) "
            f"INSERT INTO runs ({names}) SELECT {', '.join(exprs)} FROM g",
            (first, first + count - 1, *params),
        )
        self.conn.execute("COMMIT")

    def data(self, run_id: str) -> str:
        row = self.conn.execute("SELECT data FROM runs WHERE run_id = ?", (run_id,))
        text: str = row.fetchone()[0]
        return text

    def complete(self, run_id: str, done: Template) -> None:
        sets, params = [], []
        for column, value in done.columns.items():
            if column == "run_id":
                continue
            if column == "data":
                value = value.replace(done.token(), json.dumps(run_id, ensure_ascii=False))
            sets.append(f'"{column}" = ?')
            params.append(value)
        self.conn.execute(f"UPDATE runs SET {', '.join(sets)} WHERE run_id = ?", (*params, run_id))

    def delete(self, run_ids: Sequence[str]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        for table in ("entries", "messages", "runs"):
            for run_id in run_ids:
                self.conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
        self.conn.execute("COMMIT")

    def complete_oldest(self, count: int, done: Template) -> None:
        sets, params = [], []
        for column, value in done.columns.items():
            if column == "data":
                sets.append("data = replace(?, ?, '\"' || run_id || '\"')")
                params += [value, done.token()]
            elif column != "run_id":
                sets.append(f'"{column}" = ?')
                params.append(value)
        self.conn.execute(
            f"UPDATE runs SET {', '.join(sets)} "
            "WHERE id IN (SELECT id FROM runs ORDER BY id LIMIT ?)",
            (*params, count),
        )

    def analyze(self, statistics: bool = True) -> None:
        if statistics:
            self.conn.execute("ANALYZE")

    def explain(self, now: datetime) -> tuple[str, float]:
        query, params = sqlite_claim(now)
        plan = self.conn.execute("EXPLAIN QUERY PLAN " + query, params).fetchall()
        depth: dict[int, int] = {0: 0}
        lines = ["EXPLAIN QUERY PLAN:"]
        for node, parent, _, detail in plan:
            depth[node] = depth.get(parent, 0) + 1
            lines.append("  " * depth[node] + detail)
        times = []
        for _ in range(20):
            began = time.perf_counter()
            self.conn.execute(query, params).fetchall()
            times.append((time.perf_counter() - began) * 1000)
        return "\n".join(lines), statistics.median(times)

    def close(self) -> None:
        self.conn.close()
        for suffix in ("", "-wal", "-shm"):  # a million rows take some room
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)


# -- one case ------------------------------------------------------------------------------


@attrs.frozen
class Case:
    shape: str
    size: int
    p50: float
    p90: float
    claims: int
    query_ms: float
    seed_s: float
    plan: str


async def make_templates(store: tether.stores.Store) -> tuple[RunRecord, RunRecord]:
    """Two runs stored by tether: one queued (a submit), one completed (a run)."""
    async with tether.open_engine(store) as engine:
        await engine.submit(job, 1, run_id=TEMPLATE_QUEUED)
        await engine.run(job, 2, run_id=TEMPLATE_DONE)
        queued, done = await store.get_run(TEMPLATE_QUEUED), await store.get_run(TEMPLATE_DONE)
    assert queued is not None and done is not None
    return queued, done


@contextlib.asynccontextmanager
async def opened(store: tether.stores.Store) -> AsyncIterator[tether.stores.Store]:
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def check_copies(
    store: tether.stores.Store, backend: Backend, copies: Sequence[tuple[RunRecord, str]]
) -> None:
    """Each seeded run id reads back as its template with the id changed, in tether's text."""
    async with opened(store):
        for template, run_id in copies:
            expected = attrs.evolve(template, run_id=run_id)
            got = await store.get_run(run_id)
            if got != expected:
                raise RuntimeError(f"seeded run {run_id} reads back as {got}, not {expected}")
            if backend.data(run_id) != dumps_record(expected.to_json()):
                raise RuntimeError(f"the seeded text of run {run_id} is not what tether writes")


async def claims(
    store: tether.stores.Store,
    backend: Backend,
    done: Template,
    top_up: Callable[[], None],
    count: int,
) -> list[float]:
    """*count* timed claims (after the warm-up), each claimed run then completed, untimed.

    Fewer when they are slow: the warm-up stops after :data:`WARM_UP_BUDGET`
    seconds, the timed claims after :data:`BUDGET` (at least :data:`MIN_CLAIMS`).
    """
    async with opened(store):
        times: list[float] = []
        warm, warm_until, until = 0, time.perf_counter() + WARM_UP_BUDGET, 0.0
        for i in itertools.count():
            if warm < WARM_UP and time.perf_counter() < warm_until:
                warm += 1
            elif not times:
                until = time.perf_counter() + BUDGET
            elif len(times) >= count or (len(times) >= MIN_CLAIMS and time.perf_counter() > until):
                break
            now = datetime.now(UTC)
            began = time.perf_counter()
            record = await store.claim_next(
                OWNER,
                ttl=TTL,
                workflows=[(job.name, None)],
                max_dispatches=MAX_DISPATCHES,
                now=now,
            )
            elapsed = time.perf_counter() - began
            if record is None or record.status is not RunStatus.RUNNING or record.owner != OWNER:
                raise RuntimeError(
                    f"claim {i} did not claim a queued run ({record}): does the store's claim "
                    "read something the seeding does not fill (a column without a value "
                    "copied from the template row, another table)?"
                )
            if i >= warm:
                times.append(elapsed * 1000)
            backend.complete(record.run_id, done)
            top_up()
    return times


def run_case(
    shape: str,
    size: int,
    count: int,
    open_store: Callable[[], tuple[tether.stores.Store, Callable[[], tether.stores.Store]]],
    open_backend: Callable[[tether.stores.Store], Backend],
) -> Case:
    """Seed a fresh store in *shape* with *size* runs, and time its claims."""
    store, reopen = open_store()
    queued_record, done_record = trio.run(make_templates, store)
    backend = open_backend(store)
    try:
        queued, done = backend.template(TEMPLATE_QUEUED), backend.template(TEMPLATE_DONE)
        began = time.perf_counter()
        backend.delete([TEMPLATE_QUEUED, TEMPLATE_DONE])
        if shape == "finished":
            backend.seed(done, "f", 1, size)
            backend.seed(queued, "q", 1, BEHIND)
            tail = BEHIND
            copies = [(done_record, "f1"), (done_record, f"f{size}")]
        elif shape == "queued":
            backend.seed(queued, "q", 1, size)
            tail = size
            copies = [(queued_record, "q1")]
        else:  # drained: the statistics are taken while every run is queued
            backend.seed(queued, "q", 1, size + BEHIND)
            backend.analyze()
            backend.complete_oldest(size, done)
            tail = size + BEHIND
            copies = [(done_record, "q1"), (done_record, f"q{size}")]
        backend.analyze(statistics=shape != "drained")
        seed_s = time.perf_counter() - began
        copies += [(queued_record, f"q{tail}")]
        trio.run(check_copies, reopen(), backend, copies)
        serial = [tail]

        def top_up() -> None:
            serial[0] += 1
            backend.seed(queued, "q", serial[0], 1)

        times = trio.run(claims, reopen(), backend, done, top_up, count)
        try:
            plan, query_ms = backend.explain(datetime.now(UTC))
        except Exception as exc:  # the claim's statement changed: say so, keep the timings
            plan, query_ms = (
                f"cannot explain the claim statement ({exc!r}): update pg_claim() / "
                "sqlite_claim() in benchmarks/claim_cost.py",
                float("nan"),
            )
    finally:
        backend.close()
    return Case(shape, size, pct(times, 50), pct(times, 90), len(times), query_ms, seed_s, plan)


# -- the stores ----------------------------------------------------------------------------


def report(store_name: str, cases: Sequence[Case], sizes: Sequence[int]) -> None:
    print(f"\n{store_name}: claim_next by table size (ms)")
    print(
        f"{'N':>10} {'shape':<9} {'p50':>8} {'p90':>8} {'p50/1k':>7} {'claims':>6} "
        f"{'query ms':>9} {'seed s':>7}"
    )
    for shape in SHAPES:
        base = next(c.p50 for c in cases if c.shape == shape and c.size == sizes[0])
        for c in cases:
            if c.shape == shape:
                print(
                    f"{c.size:>10,} {shape:<9} {c.p50:>8.2f} {c.p90:>8.2f} "
                    f"{c.p50 / base:>6.1f}x {c.claims:>6} {c.query_ms:>9.3f} {c.seed_s:>7.1f}"
                )
    print(
        f"shapes: finished = N completed runs + {BEHIND} queued behind them; "
        f"queued = N queued runs;\n        drained = N + {BEHIND} queued runs, the planner's "
        "statistics taken, then the oldest N completed\n        (as a drain leaves them, "
        "no statistics taken after);\np50/p90 = one claim_next call; p50/1k = p50 / "
        f"p50 at N={sizes[0]:,} (same shape); claims = timed claims (fewer when slow);\n"
        "query ms = the claim statement alone; seed s = seeding, analyze included"
    )


def cases_of(
    store_name: str,
    sizes: Sequence[int],
    count: int,
    open_store: Callable[[], tuple[tether.stores.Store, Callable[[], tether.stores.Store]]],
    open_backend: Callable[[tether.stores.Store], Backend],
) -> list[Case]:
    print(f"\n== {store_name} ==", flush=True)
    cases = []
    for shape in SHAPES:
        for size in sizes:
            case = run_case(shape, size, count, open_store, open_backend)
            cases.append(case)
            print(
                f"\n{store_name}, N={size:,}, shape {shape}: claim p50 {case.p50:.2f} ms, "
                f"p90 {case.p90:.2f} ms (seeded in {case.seed_s:.1f} s); the claim statement "
                f"after the claims:\n{case.plan}",
                flush=True,
            )
    report(store_name, cases, sizes)
    return cases


def postgres_cases(sizes: Sequence[int], count: int) -> list[Case] | None:
    if pg.find_bindir() is None:
        print("\nPostgreSQL: cannot run: no server binaries (initdb, pg_ctl) on this machine")
        return None
    try:
        server = pg.start_once()
    except pg.PostgresUnavailable as exc:
        print(f"\nPostgreSQL: cannot run: {exc}")
        return None
    try:
        version = server.sql("SHOW server_version")[0][0]
        print(
            f"\nserver:   PostgreSQL {version} (throwaway cluster of tests/_postgres.py, fsync off)"
        )

        def open_store() -> tuple[tether.stores.Store, Callable[[], tether.stores.Store]]:
            store = server.store(pool_size=2)
            return store, lambda: tether.PostgresStore(
                server.conninfo(), schema=store.schema, pool_size=2
            )

        def open_backend(store: tether.stores.Store) -> Backend:
            assert isinstance(store, tether.PostgresStore)
            return PostgresBackend(server, store)

        return cases_of("PostgreSQL", sizes, count, open_store, open_backend)
    finally:
        pg.stop()


def sqlite_cases(sizes: Sequence[int], count: int, folder: Path) -> list[Case]:
    files = iter(range(10**6))

    def open_store() -> tuple[tether.stores.Store, Callable[[], tether.stores.Store]]:
        path = folder / f"claims-{next(files)}.db"
        return tether.SQLiteStore(path, synchronous="normal"), lambda: tether.SQLiteStore(
            path, synchronous="normal"
        )

    def open_backend(store: tether.stores.Store) -> Backend:
        assert isinstance(store, tether.SQLiteStore)
        return SQLiteBackend(store.path)

    return cases_of("SQLite", sizes, count, open_store, open_backend)


@contextlib.contextmanager
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="tether-bench-claims-") as name:
        yield Path(name)


def verdict(cases: Sequence[Case] | None, store_name: str) -> str:
    if not cases:
        return f"{store_name}: not measured"
    parts = []
    for shape in SHAPES:
        ordered = sorted((c for c in cases if c.shape == shape), key=lambda c: c.size)
        ratio = ordered[-1].p50 / ordered[0].p50
        parts.append(
            f"{shape}: p50 {ordered[0].p50:.2f} ms at N={ordered[0].size:,}, "
            f"{ordered[-1].p50:.2f} ms at N={ordered[-1].size:,} ({ratio:.1f}x)"
        )
    return f"claim cost on {store_name}: " + "; ".join(parts)


def main(quick: bool) -> int:
    print("tether benchmark: claim cost by table size")
    print(
        "measures: store.claim_next p50/p90 with N finished runs (+100 queued), with N "
        "queued runs,\n          and after a drain of N runs (stale statistics), on PostgreSQL "
        "and SQLite,\n          and the claim statement's plan at each N"
    )
    print_environment(quick)
    print(
        "target:   flat: p50 at the largest N about p50 at N=1,000, in every shape, on both stores"
    )
    sizes = QUICK_SIZES if quick else SIZES
    count = QUICK_CLAIMS if quick else CLAIMS
    postgres = postgres_cases(sizes, count)
    with folder() as tmp:
        sqlite = sqlite_cases(sizes, count, tmp)
    print()
    print(verdict(postgres, "PostgreSQL"))
    print(verdict(sqlite, "SQLite"))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="N = 1,000 and 10,000 only")
    ns = parser.parse_args()
    sys.exit(main(ns.quick))
