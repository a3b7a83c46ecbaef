"""A PostgreSQL store's work on its tables: migration, rows, one transaction per call.

Layer: stores (``tether.stores``).

:class:`Tables` holds, for one store, what each protocol call does once it
has a connection: the migration run by ``open``, the transaction of every
run record write, claim and submit (each one locks the run's row, or a
submit's advisory locks, decides with the shared rules of :mod:`._leases`,
:mod:`._queue` and :mod:`._flow`, and writes), the reads,
and the strict decoding of rows back into records. Each method is
synchronous and blocking, for a worker thread, and takes ``retrying``
where an earlier attempt may have committed. The statements are in
:mod:`._postgres_sql`, with the layout.

It is separate from :class:`~tether.PostgresStore` so that the store reads as
the async surface (validation, threads, cancellation, retries) and this as
the SQL logic, which knows nothing of threads or of Trio. Whole because it
is one class: its transactions share the row locking and decoding helpers,
and splitting them would split that class by size alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar, final

import attrs

from .._errors import CheckpointCorruptError, RunConflictError, RunNotFoundError, StoreError
from ._flow import Submission, decide_submit, live_dedupe
from ._leases import (
    ClaimDecision,
    check_delete,
    decide_cancel,
    decide_claim,
    fenced_update,
    renewal,
)
from ._mailbox import Message, decide_send, load_message, message_gap
from ._owners import Renewal, Served, WorkerAd, dumps_served, loads_served
from ._postgres_sql import (
    ADVISORY_LOCK_CLASS,
    DEDUPE_LOCK_CLASS,
    QUEUE_LOCK_CLASS,
    SCHEMA_VERSION,
    Statements,
)
from ._queue import Claimed, RunFilter, claimed_from, decide_batch
from ._record_json import RecordDecodeError, dumps_record, first_gap
from ._records import Entry, RunRecord, load_entry, load_run_record
from ._respond import decide_respond
from ._rows import Appending, row_data

__all__ = ("Tables",)

T = TypeVar("T")


class _Created(Exception):
    """A run was created by someone else between a claim's read and its insert."""


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


def _run_params(record: RunRecord) -> tuple[object, ...]:
    """The parameters of ``insert_run`` and ``put_run`` for *record*."""
    return (
        dumps_record(record.to_json()),
        record.status.value,
        record.workflow,
        record.owner,
        record.token,
        record.cancel_requested,
        record.version,
        record.wake_at,
        record.queue,
        record.key,
        record.dedupe,
        record.run_id,
    )


@final
@attrs.frozen(kw_only=True)
class Tables:
    """One store's tables: its statements, and how its messages name it.

    Attributes:
        sql: the store's statements (:func:`._postgres_sql.statements`).
        schema: the PostgreSQL schema that holds the tables.
        where: the database, ``postgresql://user@host:port/dbname``.
        label: the store's ``repr``, for messages (never the password).
        channel: the notification channel of run record writes.
    """

    sql: Statements
    schema: str
    where: str
    label: str
    channel: str

    # -- migrations ----------------------------------------------------------------------

    def migrate(self, conn: Any) -> None:
        """Create or migrate the schema, in one transaction under the advisory lock."""
        q = self.sql
        with conn.transaction():
            conn.execute(q.lock, (ADVISORY_LOCK_CLASS, self.schema))
            exists = conn.execute(q.schema_exists, (self.schema,)).fetchone() is not None
            tables = [t for (t,) in conn.execute(q.tables, (self.schema,)).fetchall()]
            if not exists:
                conn.execute(q.create_schema)
            if "tether_schema" not in tables:
                if tables:
                    raise StoreError(
                        f"{self.label}: schema {self.schema!r} holds tables that are not a "
                        f"tether store's ({', '.join(tables[:5])}) and no tether schema "
                        "version; choose another schema="
                    )
                for statement in q.create:
                    conn.execute(statement)
                conn.execute(q.set_version, (SCHEMA_VERSION,))
                return
            row = conn.execute(q.version).fetchone()
            version = None if row is None else row[0]
            if type(version) is int and version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.label} has tether store schema version {version}, newer than "
                    f"version {SCHEMA_VERSION} that this tether reads; upgrade tether"
                )
            while type(version) is int and version in q.migrations:
                for statement in q.migrations[version]:
                    conn.execute(statement)
                version += 1
                conn.execute(q.update_version, (version,))
            if version != SCHEMA_VERSION:
                raise StoreError(
                    f"{self.label} has unknown tether store schema version {version!r} "
                    f"(this tether reads version {SCHEMA_VERSION})"
                )

    # -- run records -----------------------------------------------------------------------

    def create_run(self, conn: Any, retrying: bool, record: RunRecord, data: str) -> None:
        """Insert *record* (its JSON text: *data*); notifies watchers."""
        with conn.transaction():
            if self._insert_run(conn, retrying, record, data):
                self.notify(conn)

    def _insert_run(self, conn: Any, retrying: bool, record: RunRecord, data: str) -> bool:
        """Insert the new run *record* (its JSON text: *data*); whether it did.

        ``False``: a retry found the run stored exactly as *data*, its
        earlier attempt's write (it committed: this is our run).

        Raises:
            RunConflictError: a run with this id exists (another one).
        """
        if conn.execute(self.sql.insert_run, _run_params(record)).fetchone() is not None:
            return True
        if retrying and self._stored_as(conn, record.run_id, data):
            return False
        raise RunConflictError(f"run {record.run_id!r} already exists in {self.label}")

    def _stored_as(self, conn: Any, run_id: str, data: str) -> bool:
        """Whether the run *run_id* is stored, its record's text exactly *data*."""
        row = conn.execute(self.sql.run_data, (run_id,)).fetchone()
        return row is not None and row[0] == data

    def submit_run(self, conn: Any, retrying: bool, submission: Submission, data: str) -> str:
        """Keep *submission* (its record's JSON text: *data*) in one transaction: the id of
        the run that holds it. Notifies watchers when it wrote.

        The submit's advisory locks come first (its queue's when it has
        ``max_queued``, then its dedupe id's: always in that order, so
        submits never deadlock), so that racing submits read one after the
        other; then the dedupe id's live run, its row locked, and the
        queue's depth, and whether its run id is taken; :func:`._flow.decide_submit`
        decides, and its run is
        inserted (as :meth:`create_run`) or its live run rewritten.

        A retry that finds the run stored as *data* returns its id: the
        earlier attempt committed (a retry's own run would count in its
        queue's depth). A retried dedupe submit finds its run as the live one.

        Raises:
            QueueFullError, RunConflictError: see ``QueueingStore.submit_run``.
            CheckpointCorruptError: the live run's row does not decode, or is
                not what its columns say.
        """
        record = submission.record
        with conn.transaction():
            if retrying and self._stored_as(conn, record.run_id, data):
                return record.run_id
            # The second key is a hash of the schema and the names (stores in
            # other schemas do not contend). Names may hold \x1f, so two
            # pairs of names may share a lock: that only serializes them.
            prefix = f"{self.schema}\x1f{record.queue}"
            if submission.max_queued is not None:
                conn.execute(self.sql.lock, (QUEUE_LOCK_CLASS, prefix))
            live = None
            if record.dedupe is not None:
                conn.execute(self.sql.lock, (DEDUPE_LOCK_CLASS, f"{prefix}\x1f{record.dedupe}"))
                live = self._live_dedupe(conn, record.queue, record.dedupe)
            exists = depth = None
            if live is None:
                # (A submit that finds its dedupe id's run is decided without them.)
                exists = conn.execute(self.sql.run_data, (record.run_id,)).fetchone() is not None
                if submission.max_queued is not None:
                    (depth,) = conn.execute(self.sql.pending, (record.queue,)).fetchone()
            decision = decide_submit(submission, live=live, exists=bool(exists), depth=depth)
            wrote = False
            if decision.replace is not None:
                conn.execute(self.sql.put_run, _run_params(decision.replace))
                wrote = True
            elif decision.create is not None:
                wrote = self._insert_run(conn, retrying, decision.create, data)
            if wrote:
                self.notify(conn)
            return decision.run_id

    def _live_dedupe(self, conn: Any, queue: str, dedupe: str) -> RunRecord | None:
        """The oldest unfinished run of *queue* with *dedupe*, its row locked, or ``None``."""
        row = conn.execute(self.sql.live_dedupe, (queue, dedupe)).fetchone()
        if row is None:
            return None
        (run_id,) = row
        # A later statement, whose snapshot sees the run as the lock's previous holder left it.
        live = self.read_run(conn, run_id)
        assert live is not None, "a row this transaction locked is gone"
        if not live_dedupe(live, queue, dedupe):
            raise self.corrupt(
                run_id,
                "table runs",
                f"its columns say it is an unfinished run of queue {queue!r} with dedupe id "
                f"{dedupe!r}, its record does not",
            )
        return live

    def update_run(
        self, conn: Any, retrying: bool, record: RunRecord, attempted: list[str]
    ) -> RunRecord:
        """Replace the run's record, fenced; notifies watchers.

        *attempted* collects the text each attempt of this update writes, so
        that a retry recognizes its own committed write.
        """
        with conn.transaction():
            current, data = self.lock_run(conn, record.run_id)
            if current is None:
                raise RunNotFoundError(f"run {record.run_id!r} is not stored in {self.label}")
            if retrying and data in attempted:
                return current  # the earlier attempt committed
            stored = fenced_update(current, record)
            params = _run_params(stored)
            attempted.append(str(params[0]))
            conn.execute(self.sql.put_run, params)
            self.notify(conn)
            return stored

    def claim(
        self,
        conn: Any,
        run_id: str,
        owner: str,
        ttl: float,
        create: RunRecord | None,
        takeover: int | None,
    ) -> RunRecord:
        """Take the run's lease, or raise what the decision refuses with."""
        while True:
            try:
                decision, expires = self._claim(conn, run_id, owner, ttl, create, takeover)
            except _Created:
                continue  # the run exists now: decide again, on its locked row
            # Outside the transaction: what it stored (a recorded cancel
            # made final) is committed even when the decision refuses.
            return decision.outcome(None if expires is None else _utc(expires))

    def _claim(
        self,
        conn: Any,
        run_id: str,
        owner: str,
        ttl: float,
        create: RunRecord | None,
        takeover: int | None,
    ) -> tuple[ClaimDecision, datetime | None]:
        """One claim transaction: the decision, and the lease expiry if it claimed."""
        with conn.transaction():
            current, _ = self.lock_run(conn, run_id)
            decision = decide_claim(
                current, run_id=run_id, owner=owner, create=create, takeover=takeover
            )
            expires = None
            if decision.store is not None:
                if decision.created:
                    inserted = conn.execute(
                        self.sql.insert_run, _run_params(decision.store)
                    ).fetchone()
                    if inserted is None:  # created since the lock found no row
                        raise _Created
                else:
                    conn.execute(self.sql.put_run, _run_params(decision.store))
                if decision.claimed:
                    (expires,) = conn.execute(self.sql.set_owner, (owner, ttl)).fetchone()
                self.notify(conn)
        return decision, expires

    def claim_batch(
        self,
        conn: Any,
        retrying: bool,
        *,
        owner: str,
        ttl: float,
        served: frozenset[Served],
        dead: list[str],
        max_dispatches: int,
        limit: int,
        attempt: str,
        now: datetime,
    ) -> list[Claimed]:
        """A worker's claim of up to *limit* of the oldest dispatchable runs, recorded as
        *attempt*'s on the runs it takes: a few statements for the whole batch."""
        params: dict[str, object] = {
            "names": sorted({name for name, _ in served}),
            # A version is never empty: '' stands for NULL (unversioned) in the pairs.
            "pairs": [f"{name}\x1f{version or ''}" for name, version in served],
            "dead": dead,
            "now": now,
        }
        seen: list[int] = []
        claimed: list[Claimed] = []
        with conn.transaction():
            if retrying:
                rows = conn.execute(self.sql.claimed_by, (owner, attempt)).fetchall()
                held = [self.decode_run(row) for row in rows]
                if held:  # the earlier attempt committed (whom it took them from is lost)
                    return [Claimed(r, None) for r in held if r.lease_expires_at is not None]
            while len(claimed) < limit:
                params.update(seen=seen, limit=limit - len(claimed))
                ids = [i for (i,) in conn.execute(self.sql.claimable, params).fetchall()]
                if not ids:
                    break
                seen.extend(ids)
                rows = conn.execute(self.sql.get_runs, (ids,)).fetchall()
                decided = decide_batch(
                    [self.decode_run(row) for row in rows],
                    owner=owner,
                    limit=limit - len(claimed),
                    max_dispatches=max_dispatches,
                    workflows=served,
                    gone=dead,
                    now=now,
                )
                if not decided:
                    continue
                self.put_runs(
                    conn,
                    [d.store for _, d in decided],
                    claims=[attempt if d.claimed else None for _, d in decided],
                )
                if any(d.claimed for _, d in decided):
                    expires = self._claim_owner(conn, owner, ttl)
                    claimed.extend(
                        claimed_from(current, d, _utc(expires))
                        for current, d in decided
                        if d.claimed
                    )
            if claimed:
                # Their journals, in the same step: their executors need not load them.
                journals = self.load_journals(conn, [c.record.run_id for c in claimed])
                claimed = [attrs.evolve(c, entries=journals[c.record.run_id]) for c in claimed]
        return claimed

    def _claim_owner(self, conn: Any, owner: str, ttl: float) -> datetime:
        """The owner's lease expiry after a batched claim (see ``claim_owner``)."""
        row = conn.execute(self.sql.claim_owner, (owner, ttl, ttl, owner)).fetchone()
        if row is None:
            # The owner's row was inserted by another transaction after this
            # statement's snapshot (its first claim racing another): a new
            # statement, with a new snapshot, finds it.
            row = conn.execute(self.sql.claim_owner, (owner, ttl, ttl, owner)).fetchone()
        if row is None:
            raise StoreError(f"{self.label}: the lease row of {owner} could not be read")
        expires: datetime = row[0]
        return expires

    def renew(self, conn: Any, owner: str, ttl: float, held: Mapping[str, int]) -> Renewal:
        """Extend (or, with a zero *ttl*, drop) *owner*'s leases: one row's update."""
        with conn.transaction():
            if ttl:
                conn.execute(self.sql.set_owner, (owner, ttl))
            else:
                conn.execute(self.sql.drop_owner, (owner,))
            rows = conn.execute(self.sql.owned, (owner,)).fetchall()
            mine = {r: (t, bool(c)) for r, t, c in rows}
            missing = [run_id for run_id in held if run_id not in mine]
            released = conn.execute(self.sql.released, (missing,)).fetchall() if missing else []
        return renewal(mine, held, dict(released))

    def cancel_run(self, conn: Any, run_id: str, takeover: int | None) -> RunRecord:
        """Record a cancel, unless one is recorded; notifies watchers."""
        with conn.transaction():
            current, _ = self.lock_run(conn, run_id)
            record = decide_cancel(current, run_id=run_id, takeover=takeover)
            if record is None:
                assert current is not None
                return current
            conn.execute(self.sql.put_run, _run_params(record))
            self.notify(conn)
            return record

    def advertise(self, conn: Any, owner: str, serves: frozenset[Served], ttl: float) -> None:
        """Replace (or, with a zero *ttl*, drop) worker *owner*'s advertisement."""
        with conn.transaction():
            conn.execute(self.sql.drop_workers, (owner,))
            if ttl:
                conn.execute(self.sql.advertise, (owner, dumps_served(serves), ttl))

    def list_workers(self, conn: Any) -> list[WorkerAd]:
        """The advertisements live on the database's clock, by owner."""
        ads = []
        for owner, serves, expires in conn.execute(self.sql.list_workers).fetchall():
            try:
                if type(serves) is not str:
                    raise RecordDecodeError("column serves is not text")
                pairs = loads_served(serves)
            except RecordDecodeError as exc:
                raise CheckpointCorruptError(
                    f"{self.where}, schema {self.schema!r}, table workers, owner {owner!r}: {exc}"
                ) from None
            ads.append(WorkerAd(owner=owner, serves=pairs, expires_at=_utc(expires)))
        return ads

    def delete_run(self, conn: Any, retrying: bool, run_id: str, attempted: list[bool]) -> bool:
        """Delete the run's row and its journal in one transaction; notifies watchers.

        *attempted* records that an attempt sent the delete, so that a retry
        that finds no run knows the earlier attempt most likely deleted it.
        """
        with conn.transaction():
            current, _ = self.lock_run(conn, run_id)
            if not check_delete(current, run_id=run_id):
                return retrying and bool(attempted)
            attempted.append(True)
            conn.execute(self.sql.delete_entries, (run_id,))
            conn.execute(self.sql.delete_messages, (run_id,))
            conn.execute(self.sql.delete_run, (run_id,))
            self.notify(conn)
            return True

    def send_message(
        self, conn: Any, retrying: bool, message: Message, attempted: list[tuple[int, str]]
    ) -> Message:
        """Store *message* with the run's next seq (its own is ignored); notifies watchers.

        The run's row is locked (sends to one run take their seqs in turn), the
        send decided with :func:`._mailbox.decide_send`, and a waiting run made
        due, in one transaction. *attempted* collects each attempt's seq and
        text, so that a retry recognizes its own committed message instead of
        storing it twice.
        """
        run_id = message.run_id
        with conn.transaction():
            current, _ = self.lock_run(conn, run_id)
            if retrying:
                for seq, data in attempted:
                    row = conn.execute(self.sql.message_data, (run_id, seq)).fetchone()
                    if row is not None and row[0] == data:
                        return self.decode_message(run_id, seq, data)  # it committed
            record = decide_send(current, run_id=run_id, now=message.sent_at)
            (last,) = conn.execute(self.sql.last_message, (run_id,)).fetchone()
            stored = attrs.evolve(message, seq=last + 1)
            data = dumps_record(stored.to_json())
            attempted.append((stored.seq, data))
            conn.execute(self.sql.insert_message, (run_id, stored.seq, data))
            if record is not None:
                conn.execute(self.sql.put_run, _run_params(record))
            self.notify(conn)
            return stored

    def insert_entries(self, conn: Any, appending: Appending) -> list[int | Entry]:
        """Insert decided entries (fenced, or a respond) with the run's next seqs, its row
        locked by the caller: an entry already stored (same ``ikey``) is returned instead.

        Each item is the new entry's seq, or the stored entry it equals.
        """
        run_id = appending.run_id
        ((_, last),) = conn.execute(self.sql.last_seqs, ([run_id],)).fetchall()
        last = last or 0
        stored: list[int | Entry] = []
        for i, ikey in enumerate(appending.ikeys):
            twin = conn.execute(self.sql.twin, (run_id, ikey)).fetchone()
            if twin is not None:
                stored.append(self.decode_entry(run_id, *twin))
                continue
            last += 1
            conn.execute(self.sql.insert_entry, (run_id, last, ikey, row_data(appending, i, last)))
            stored.append(last)
        return stored

    def respond(self, conn: Any, retrying: bool, appending: Appending, now: datetime) -> RunRecord:
        """Journal responses and queue the run in one transaction; notifies watchers.

        The run's row is locked, the respond decided with
        :func:`._respond.decide_respond`, the entries inserted with the run's
        next seqs and the record stored. A retry after an unclear outcome
        that finds every response stored returns the run as it is: its earlier
        attempt committed.
        """
        run_id = appending.run_id
        with conn.transaction():
            current, _ = self.lock_run(conn, run_id)
            if (
                retrying
                and current is not None
                and all(
                    conn.execute(self.sql.twin, (run_id, k)).fetchone() for k in appending.ikeys
                )
            ):
                return current
            record = decide_respond(
                current, run_id=run_id, keys=[e.key for e in appending.entries], now=now
            )
            self.insert_entries(conn, appending)
            conn.execute(self.sql.put_run, _run_params(record))
            self.notify(conn)
            return record

    def load_messages(self, conn: Any, run_id: str, after: int) -> list[Message]:
        """The run's messages after seq *after*, in order, with no seq missing below the highest."""
        rows = conn.execute(self.sql.load_messages, (run_id, after)).fetchall()
        messages = [self.decode_message(run_id, seq, data) for seq, data in rows]
        gap = message_gap([m.seq for m in messages], after=after)
        if gap is not None:
            raise self.corrupt(
                run_id, f"table messages, seq {gap}", "missing (a later seq is stored)"
            )
        return messages

    def notify(self, conn: Any) -> None:
        conn.execute(self.sql.notify, (self.channel,))

    # -- reads ---------------------------------------------------------------------------

    def list_runs(self, conn: Any, selected: RunFilter) -> list[RunRecord]:
        """The records *selected* picks, in creation order (indexed queries)."""
        where: list[bytes] = []
        args: list[object] = []
        if selected.status is not None:
            where.append(b"r.status = ANY(%b::text[])")
            args.append(sorted(s.value for s in selected.status))
        if selected.workflow is not None:
            where.append(b"r.workflow = %s")
            args.append(selected.workflow)
        for column in ("version", "queue", "key"):
            value = getattr(selected, column)
            if value is not None:
                where.append(f"r.{column} = %s".encode())
                args.append(value)
        if selected.after is not None:
            where.append(b"r.id > %s")
        query = self.sql.list_runs
        if where:
            query += b" WHERE " + b" AND ".join(where)
        query += b" ORDER BY r.id"
        if selected.limit is not None:
            query += b" LIMIT %s"
        if selected.after is not None:
            row = conn.execute(self.sql.run_id_of, (selected.after,)).fetchone()
            if row is None:
                raise RunNotFoundError(f"list_runs(after={selected.after!r}): no such run")
            args.append(row[0])
        if selected.limit is not None:
            args.append(selected.limit)
        rows = conn.execute(query, args).fetchall()
        return [self.decode_run(row) for row in rows]

    def load_entries(self, conn: Any, run_id: str) -> list[Entry]:
        """The run's journal in ``seq`` order, with no seq missing below the highest."""
        return self.journal(run_id, conn.execute(self.sql.load_entries, (run_id,)).fetchall())

    def load_journals(self, conn: Any, run_ids: Sequence[str]) -> dict[str, list[Entry]]:
        """The journals of *run_ids* (each as :meth:`load_entries` reads it), in one statement."""
        rows: dict[str, list[tuple[Any, Any]]] = {run_id: [] for run_id in run_ids}
        for run_id, seq, data in conn.execute(self.sql.load_journals, (list(run_ids),)):
            rows[run_id].append((seq, data))
        return {run_id: self.journal(run_id, found) for run_id, found in rows.items()}

    def journal(self, run_id: str, rows: Sequence[tuple[Any, Any]]) -> list[Entry]:
        """Rows ``(seq, data)`` of the run's journal, decoded, with no seq missing."""
        entries = [self.decode_entry(run_id, seq, data) for seq, data in rows]
        gap = first_gap([e.seq for e in entries if e.seq is not None])
        if gap is not None:
            raise self.corrupt(
                run_id, f"table entries, seq {gap}", "missing (a later seq is stored)"
            )
        return entries

    # -- rows and records ----------------------------------------------------------------

    def lock_run(self, conn: Any, run_id: str) -> tuple[RunRecord | None, str | None]:
        """The run's record (its row locked until the transaction ends) and its stored text.

        Two statements: the second one's snapshot is taken once the lock is
        held, so it sees the lease of whoever held the row before.
        """
        if conn.execute(self.sql.lock_run, (run_id,)).fetchone() is None:
            return None, None
        row = conn.execute(self.sql.get_run, (run_id,)).fetchone()
        return self.decode_run(row), row[2]

    def put_runs(
        self, conn: Any, records: Sequence[RunRecord], *, claims: Sequence[str | None]
    ) -> list[str]:
        """Write many run records (their rows locked by the caller) in one statement; each
        with the batched claim that took it (*claims*, ``None``: none). Their texts.
        Notifies watchers (in the same statement)."""
        params = [_run_params(r) for r in records]
        columns = [list(c) for c in zip(*params, strict=True)]
        conn.execute(self.sql.put_runs, (*columns, list(claims), self.channel))
        return [str(p[0]) for p in params]

    def read_run(self, conn: Any, run_id: str) -> RunRecord | None:
        row = conn.execute(self.sql.get_run, (run_id,)).fetchone()
        return None if row is None else self.decode_run(row)

    def corrupt(self, run_id: object, where: str, problem: str) -> CheckpointCorruptError:
        return CheckpointCorruptError(
            f"run {run_id!r}: {self.where}, schema {self.schema!r}, {where}: {problem}"
        )

    def decode_run(self, row: Sequence[Any]) -> RunRecord:
        """A runs row (with its owner's expiry) as a record, its lease filled while live."""
        rowid, run_id, data, expires, live = row
        where = f"table runs, id {rowid}"
        if type(data) is not str:
            raise self.corrupt(run_id, where, f"column data holds {type(data).__name__}, not text")
        try:
            record = load_run_record(data, run_id)
        except RecordDecodeError as exc:
            raise self.corrupt(run_id, where, str(exc)) from None
        if record.owner is not None and live:
            record = attrs.evolve(record, lease_expires_at=_utc(expires))
        return record

    def decode_entry(self, run_id: str, seq: object, data: object) -> Entry:
        entry: Entry = self._decode_seq_row(run_id, "entries", seq, data, load_entry)
        return entry

    def decode_message(self, run_id: str, seq: object, data: object) -> Message:
        message: Message = self._decode_seq_row(run_id, "messages", seq, data, load_message)
        return message

    def _decode_seq_row(
        self, run_id: str, table: str, seq: object, data: object, load: Callable[[str, str, int], T]
    ) -> T:
        """A row ``(seq, data)`` of *table*, decoded strictly by *load*."""
        where = f"table {table}, seq {seq!r}"
        if type(seq) is not int:
            raise self.corrupt(run_id, where, f"column seq holds {type(seq).__name__}")
        if type(data) is not str:
            raise self.corrupt(run_id, where, f"column data holds {type(data).__name__}, not text")
        try:
            return load(data, run_id, seq)
        except RecordDecodeError as exc:
            raise self.corrupt(run_id, where, str(exc)) from None
