"""A SQLite store's work on its tables: migration, and what each call does in SQL.

Layer: stores (``tether.stores``).

:class:`Tables` holds, for one store, what each protocol call does once it
has a connection: the migration run by ``open``, the body of every write
(run inside the writer's transaction: it reads the run, decides with the
shared rules of :mod:`._leases`, :mod:`._queue` and :mod:`._mailbox`, and
writes), the reads, and the journal lookups of an append redone entry by
entry. Each method is synchronous and blocking, for the writer thread or a
reader's worker thread. The layout and the statements are in
:mod:`._sqlite_sql`, the encoding and strict decoding of rows in
:mod:`._sqlite_rows`.

It is separate from :class:`~tether.SQLiteStore` so that the store reads as
the async surface (validation, lifetime, which call is a queued write) and
this as the SQL logic, which knows nothing of threads or of Trio.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import final

import attrs

from .._errors import CheckpointCorruptError, RunConflictError, RunNotFoundError, StoreError
from ._flow import Submission, decide_submit
from ._leases import (
    ClaimDecision,
    check_append,
    check_delete,
    decide_cancel,
    decide_claim,
    fenced_update,
    renewal,
)
from ._mailbox import Message, decide_send, message_gap
from ._owners import Renewal, Served, WorkerAd, loads_served
from ._queue import Claimed, RunFilter, claimed_from, decide_batch
from ._record_json import RecordDecodeError, dumps_record, first_gap
from ._records import Entry, RunRecord
from ._respond import decide_respond
from ._sqlite_rows import (
    Appending,
    corrupt,
    decode_entry,
    decode_message,
    decode_run,
    row_data,
    run_row,
    time_of,
)
from ._sqlite_sql import (
    DEPTH,
    DISPATCHABLE,
    INSERT_ENTRY,
    INSERT_RUN,
    LAST_SEQ,
    LIVE_DEDUPE,
    MIGRATIONS,
    PUT_RUN,
    SCHEMA_VERSION,
    SELECT_RUN,
    SERVED,
    SET_OWNER,
)

__all__ = ("Tables",)


def _execute_script(conn: sqlite3.Connection, script: str) -> None:
    # One statement at a time: executescript() would COMMIT first.
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


@final
@attrs.frozen(kw_only=True)
class Tables:
    """One store's tables, and how its messages name it.

    Attributes:
        path: the database file (named by corruption and schema errors).
        label: the store's ``repr`` (named by conflicts and missing runs).
    """

    path: Path
    label: str

    # -- the schema ----------------------------------------------------------------------

    def migrate(self, conn: sqlite3.Connection) -> None:
        """Create the schema in a new file, or bring an older one up to date.

        Inside the opener's write transaction. Raises :class:`~tether.StoreError`
        for a file that is not a tether store or has a schema this tether
        does not read.
        """
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version == 0:
            (tables,) = conn.execute(
                "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
            ).fetchone()
            if tables:
                raise StoreError(
                    f"{self.path} is an SQLite database but not a tether store "
                    f"(it has {tables} tables and no tether schema version)"
                )
        if version in MIGRATIONS:
            _execute_script(conn, MIGRATIONS[version])
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        elif version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has tether store schema version {version}, newer than "
                f"version {SCHEMA_VERSION} that this tether reads; upgrade tether"
            )
        elif version != SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has unknown tether store schema version {version} "
                f"(this tether reads version {SCHEMA_VERSION})"
            )

    # -- runs and leases (writes) ----------------------------------------------------------

    def create_run(self, conn: sqlite3.Connection, record: RunRecord) -> None:
        if self._exists(conn, record.run_id):
            raise RunConflictError(f"run {record.run_id!r} already exists in {self.label}")
        self.insert_run(conn, record)

    @staticmethod
    def _exists(conn: sqlite3.Connection, run_id: str) -> bool:
        return conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is not None

    def submit_run(self, conn: sqlite3.Connection, submission: Submission) -> str:
        """Decide and write *submission* (the writer's transaction is the atomic step: it
        holds SQLite's write lock, so no other process submits in between)."""
        record = submission.record
        live = None
        if record.dedupe is not None:
            row = conn.execute(LIVE_DEDUPE, (record.queue, record.dedupe)).fetchone()
            live = None if row is None else decode_run(self.path, row)
        depth = None
        if submission.max_queued is not None:
            (depth,) = conn.execute(DEPTH, (record.queue,)).fetchone()
        exists = self._exists(conn, record.run_id)
        decision = decide_submit(submission, live=live, exists=exists, depth=depth)
        if decision.replace is not None:
            self.put_run(conn, decision.replace)
        elif decision.create is not None:
            self.insert_run(conn, decision.create)
        return decision.run_id

    def update_run(self, conn: sqlite3.Connection, record: RunRecord) -> RunRecord:
        current = self.select_run(conn, record.run_id)
        if current is None:
            raise RunNotFoundError(f"run {record.run_id!r} is not stored in {self.label}")
        stored = fenced_update(current, record)
        self.put_run(conn, stored)
        return stored

    def claim(
        self,
        conn: sqlite3.Connection,
        run_id: str,
        owner: str,
        ttl: float,
        create: RunRecord | None,
        takeover: int | None,
    ) -> tuple[ClaimDecision, float]:
        """The claim's decision (applied) and the lease's expiry, as Unix time."""
        now = time.time()
        decision = decide_claim(
            self.select_run(conn, run_id, now),
            run_id=run_id,
            owner=owner,
            create=create,
            takeover=takeover,
        )
        if decision.store is not None:
            if decision.created:
                self.insert_run(conn, decision.store)
            else:
                self.put_run(conn, decision.store)
            if decision.claimed:
                conn.execute(SET_OWNER, (owner, now + ttl))
        return decision, now + ttl

    def renew(
        self, conn: sqlite3.Connection, owner: str, ttl: float, held: Mapping[str, int]
    ) -> Renewal:
        if ttl:
            conn.execute(SET_OWNER, (owner, time.time() + ttl))
        else:
            conn.execute("DELETE FROM owners WHERE owner = ?", (owner,))
        rows = conn.execute(
            "SELECT run_id, token, cancel FROM runs WHERE owner = ?", (owner,)
        ).fetchall()
        mine = {r: (t, bool(c)) for r, t, c in rows}
        missing = [run_id for run_id in held if run_id not in mine]
        released = (
            conn.execute(
                "SELECT run_id, token FROM runs WHERE owner IS NULL "
                "AND run_id IN (SELECT value FROM json_each(?))",
                (json.dumps(missing),),
            ).fetchall()
            if missing
            else []
        )
        return renewal(mine, held, dict(released))

    def cancel_run(self, conn: sqlite3.Connection, run_id: str, takeover: int | None) -> RunRecord:
        current = self.select_run(conn, run_id)
        record = decide_cancel(current, run_id=run_id, takeover=takeover)
        if record is None:
            assert current is not None
            return current
        self.put_run(conn, record)
        return record

    def delete_run(self, conn: sqlite3.Connection, run_id: str) -> bool:
        if not check_delete(self.select_run(conn, run_id, time.time()), run_id=run_id):
            return False
        conn.execute("DELETE FROM entries WHERE run_id = ?", (run_id,))
        conn.execute("DELETE FROM messages WHERE run_id = ?", (run_id,))
        conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
        return True

    # -- the queue and workers -------------------------------------------------------------

    def claim_batch(
        self,
        conn: sqlite3.Connection,
        *,
        owner: str,
        ttl: float,
        served: frozenset[Served],
        dead: list[str],
        max_dispatches: int,
        limit: int,
        clock: datetime,
    ) -> list[Claimed]:
        """Claim up to *limit* of the oldest dispatchable runs of *served* (a waiting
        one is due by *clock*), in the caller's transaction."""
        params: dict[str, object] = {"limit": limit, "clock": clock.timestamp()}
        workflows = sorted({name for name, _ in served})
        params.update({f"w{i}": name for i, name in enumerate(workflows)})
        pairs = sorted(served, key=str)
        for i, (name, version) in enumerate(pairs):
            # A version is never empty: '' stands for NULL (unversioned) in the pairs.
            params[f"n{i}"], params[f"v{i}"] = name, version or ""
        params.update({f"g{i}": name for i, name in enumerate(dead)})

        def condition(prefix: str) -> str:
            return SERVED.format(
                prefix=prefix,
                workflows=", ".join(f":w{i}" for i in range(len(workflows))),
                pairs=", ".join(f"(:n{i}, :v{i})" for i in range(len(pairs))),
            )

        query = DISPATCHABLE.format(
            served=condition(""),
            served_q=condition("q."),
            gone=", ".join(f":g{i}" for i in range(len(dead))),
        )
        claimed: list[Claimed] = []
        while len(claimed) < limit:
            now = params["now"] = time.time()
            decided = decide_batch(
                (decode_run(self.path, row, now) for row in conn.execute(query, params)),
                owner=owner,
                limit=limit - len(claimed),
                max_dispatches=max_dispatches,
                workflows=served,
                gone=dead,
                now=clock,
            )
            expires = now + ttl
            for current, decision in decided:
                self.put_run(conn, decision.store)
                if decision.claimed:
                    claimed.append(claimed_from(current, decision, time_of(expires)))
            if claimed:
                conn.execute(SET_OWNER, (owner, expires))
            if not decided or all(d.claimed for _, d in decided):
                # Nothing more to find, or as many found as there were: a run
                # stored cancelled or dead_letter instead leaves room to look again.
                break
        return claimed

    def advertise(self, conn: sqlite3.Connection, owner: str, serves: str, ttl: float) -> None:
        """Write *owner*'s row (its *serves* as JSON text), deleting expired ones."""
        now = time.time()
        conn.execute("DELETE FROM workers WHERE expires <= ? OR owner = ?", (now, owner))
        if ttl:
            conn.execute("INSERT INTO workers VALUES (?, ?, ?)", (owner, serves, now + ttl))

    def list_workers(self, conn: sqlite3.Connection) -> list[WorkerAd]:
        rows = conn.execute(
            "SELECT rowid, owner, serves, expires FROM workers WHERE expires > ? ORDER BY owner",
            (time.time(),),
        ).fetchall()
        ads = []
        for rowid, owner, serves, expires in rows:
            try:
                if type(owner) is not str or type(serves) is not str:
                    raise RecordDecodeError("its owner or serves column is not text")
                if type(expires) not in (float, int):
                    raise RecordDecodeError("its expires column is not a number")
                pairs = loads_served(serves)
            except RecordDecodeError as exc:
                raise CheckpointCorruptError(
                    f"{self.path}, table workers, rowid {rowid}: {exc}"
                ) from None
            ads.append(WorkerAd(owner=owner, serves=pairs, expires_at=time_of(expires)))
        return ads

    # -- the mailbox -----------------------------------------------------------------------

    def send_message(
        self, conn: sqlite3.Connection, run_id: str, name: str, value: str, sent_at: datetime
    ) -> Message:
        record = decide_send(self.select_run(conn, run_id), run_id=run_id, now=sent_at)
        (last,) = conn.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE run_id = ?", (run_id,)
        ).fetchone()
        if type(last) is not int:
            raise corrupt(self.path, run_id, "table messages", f"the highest seq is {last!r}")
        message = Message(run_id=run_id, seq=last + 1, name=name, value=value, sent_at=sent_at)
        conn.execute(
            "INSERT INTO messages (run_id, seq, data) VALUES (?, ?, ?)",
            (run_id, message.seq, dumps_record(message.to_json())),
        )
        if record is not None:
            self.put_run(conn, record)
        return message

    def load_messages(self, conn: sqlite3.Connection, run_id: str, after: int) -> list[Message]:
        rows = conn.execute(
            "SELECT rowid, seq, data FROM messages WHERE run_id = ? AND seq > ? ORDER BY seq",
            (run_id, after),
        ).fetchall()
        messages = [decode_message(self.path, run_id, row) for row in rows]
        gap = message_gap([m.seq for m in messages], after=after)
        if gap is not None:
            raise corrupt(
                self.path, run_id, f"table messages, seq {gap}", "missing (a later seq is stored)"
            )
        return messages

    # -- reads of runs ---------------------------------------------------------------------

    def list_runs(self, conn: sqlite3.Connection, selected: RunFilter) -> list[RunRecord]:
        """The records *selected* picks, in creation order (indexed queries)."""
        where: list[str] = []
        params: list[object] = []
        if selected.status is not None:
            where.append(f"r.status IN ({', '.join('?' * len(selected.status))})")
            params.extend(sorted(s.value for s in selected.status))
        if selected.workflow is not None:
            where.append("r.workflow = ?")
            params.append(selected.workflow)
        for column in ("version", "queue", "key"):
            value = getattr(selected, column)
            if value is not None:
                where.append(f"r.{column} = ?")
                params.append(value)
        if selected.after is not None:
            where.append("r.id > (SELECT id FROM runs WHERE run_id = ?)")
            params.append(selected.after)
        query = SELECT_RUN + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY r.id"
        if selected.limit is not None:
            query += f" LIMIT {selected.limit}"
        if (
            selected.after is not None
            and not conn.execute(
                "SELECT 1 FROM runs WHERE run_id = ?", (selected.after,)
            ).fetchone()
        ):
            raise RunNotFoundError(f"list_runs(after={selected.after!r}): no such run")
        rows = conn.execute(query, params).fetchall()
        now = time.time()
        return [decode_run(self.path, row, now) for row in rows]

    def insert_run(self, conn: sqlite3.Connection, record: RunRecord) -> None:
        conn.execute(INSERT_RUN, run_row(record))

    def put_run(self, conn: sqlite3.Connection, record: RunRecord) -> None:
        conn.execute(PUT_RUN, run_row(record))

    def select_run(
        self, conn: sqlite3.Connection, run_id: str, now: float | None = None
    ) -> RunRecord | None:
        row = conn.execute(SELECT_RUN + " WHERE r.run_id = ?", (run_id,)).fetchone()
        return None if row is None else decode_run(self.path, row, now)

    # -- the journal -----------------------------------------------------------------------

    def load_entries(self, conn: sqlite3.Connection, run_id: str) -> list[Entry]:
        rows = conn.execute(
            "SELECT rowid, seq, data FROM entries WHERE run_id = ? ORDER BY seq", (run_id,)
        ).fetchall()
        entries = [decode_entry(self.path, run_id, row) for row in rows]
        gap = first_gap([e.seq for e in entries if e.seq is not None])
        if gap is not None:
            raise corrupt(
                self.path, run_id, f"table entries, seq {gap}", "missing (a later seq is stored)"
            )
        return entries

    def append_one(self, conn: sqlite3.Connection, appending: Appending) -> list[int | Entry]:
        """One append, entry by entry, looking each up first (an index search)."""
        run_id = appending.run_id
        fence = self.last_seq(conn, run_id)
        if fence is None:
            raise self.no_run(run_id)
        owner, token, last = fence
        check_append(run_id, appending.entries, token=token, owner=owner)
        return self.insert_entries(conn, appending, last)

    def respond(self, conn: sqlite3.Connection, appending: Appending, now: datetime) -> RunRecord:
        """``respond``: decide on the run read here, journal the responses, store the record."""
        run_id = appending.run_id
        record = decide_respond(
            self.select_run(conn, run_id, time.time()),
            run_id=run_id,
            keys=[e.key for e in appending.entries],
            now=now,
        )
        fence = self.last_seq(conn, run_id)
        assert fence is not None  # the run was just read, in this transaction
        self.insert_entries(conn, appending, fence[2])
        self.put_run(conn, record)
        return record

    def insert_entries(
        self, conn: sqlite3.Connection, appending: Appending, last: int
    ) -> list[int | Entry]:
        """Insert the decided entries after seq *last*, each looked up first (an index search)."""
        run_id = appending.run_id
        stored: list[int | Entry] = []
        for i, ikey in enumerate(appending.ikeys):
            row = conn.execute(
                "SELECT rowid, seq, data FROM entries WHERE run_id = ? AND ikey = ?",
                (run_id, ikey),
            ).fetchone()
            if row is not None:
                stored.append(decode_entry(self.path, run_id, row))
                continue
            last += 1
            conn.execute(INSERT_ENTRY, (run_id, last, ikey, row_data(appending, i, last)))
            stored.append(last)
        return stored

    def last_seq(self, conn: sqlite3.Connection, run_id: str) -> tuple[str | None, int, int] | None:
        """The run's lease holder, token and highest seq (0 for none); ``None``: no such run."""
        row = conn.execute(LAST_SEQ, (run_id,)).fetchone()
        if row is None:
            return None
        owner, token, last = row
        if type(last) is not int or type(token) is not int:
            where = "tables runs and entries, the token and the highest seq"
            raise corrupt(self.path, run_id, where, f"are {token!r} and {last!r}, not integers")
        return owner, token, last

    def no_run(self, run_id: str) -> RunNotFoundError:
        return RunNotFoundError(
            f"cannot append to run {run_id!r}: it is not stored in {self.label}"
        )
