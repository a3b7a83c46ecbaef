"""The SQL of the PostgreSQL store: its layout, its schema, its migrations and its statements.

Layer: stores (``tether.stores``).

Layout (schema version 6, kept in ``{schema}.tether_schema``), in a
PostgreSQL schema of its own (``schema=``, default ``tether``)::

    tether_schema(version integer)              -- one row: the schema version
    runs(id bigint IDENTITY UNIQUE,             -- creation order (and keyset pages)
         run_id text PRIMARY KEY,
         data text NOT NULL,                    -- RunRecord.to_json(), JSON text
         status text, workflow text,            -- copies for listings and workers,
                                                -- indexed with id
         owner text, token bigint, cancel boolean,  -- copies of data's lease fields
         version text,                          -- copy of the workflow version
         wake_at timestamptz,                   -- copy of a waiting run's wake_at, indexed
         claim text,                            -- the batched claim that took it (retries)
         queue text, key text, dedupe text)     -- copies for listings and submits' rules
                                                -- (runs_dedupe, runs_pending)
    entries(run_id text, seq integer,
            ikey text,                          -- Entry.idempotency_key
            data text,                          -- Entry.to_json(), JSON text
            PRIMARY KEY (run_id, seq), UNIQUE (run_id, ikey))
    messages(run_id text, seq integer,          -- runs' mailboxes
             data text,                         -- Message.to_json(), JSON text
             PRIMARY KEY (run_id, seq))
    owners(owner text PRIMARY KEY,              -- one row per lease holder:
           expires timestamptz)                 -- its leases' expiry, database clock
    workers(owner text PRIMARY KEY,             -- one row per live worker:
            serves text,                        -- its (workflow, version) pairs, JSON
            expires timestamptz)                -- until when, database clock

Records are stored as the exact JSON text every tether store writes (not
``jsonb``, which would normalize it), and read back with the same strict
decoders: a row that does not decode is :class:`~tether.CheckpointCorruptError`
naming the run, the table and the row. The schema is created, or migrated,
by :meth:`PostgresStore.open <tether.PostgresStore.open>` under a
transaction-scoped advisory lock, so many processes may open a fresh
database at once.

A submit that must see every other submit of its dedupe id, or of its queue
with ``max_queued``, takes a transaction-scoped advisory lock on it
(:data:`QUEUE_LOCK_CLASS`, :data:`DEDUPE_LOCK_CLASS`) before it reads: racing
submits decide one after the other, each on what the previous one committed.

A lease is per owner: renewing every run an engine holds is one row's
update. Lease expiry is measured on the database's clock
(``clock_timestamp()``), so the clocks of the machines never matter. Every
write about a run locks its row (``SELECT ... FOR UPDATE``), decides with the
shared rules of :mod:`._leases`, :mod:`._queue` and :mod:`._mailbox`, and
writes, in one short transaction; a write of a run record, and a message
sent to a run, also sends a notification (``pg_notify``, delivered at
commit) that :meth:`PostgresStore.watch <tether.PostgresStore.watch>` turns
into wake-ups.

Array parameters are sent in binary (``%b``, with the array's type cast in the
statement): psycopg dumps a text array element by element in Python, quoting
and escaping each one (a record's JSON text is full of quotes), about ten
times the cost of the binary form, which copies each element as it is.

The statements are plain text here, with ``{s}`` where the store's schema goes;
:func:`statements` renders them once per store, quoting the schema with
``psycopg.sql.Identifier`` (psycopg is imported only then, so that importing
tether does not need it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from psycopg import sql

__all__ = (
    "ADVISORY_LOCK_CLASS",
    "DEDUPE_LOCK_CLASS",
    "QUEUE_LOCK_CLASS",
    "SCHEMA_VERSION",
    "Statements",
    "statements",
)

#: The schema version this tether writes and reads (``{schema}.tether_schema``).
SCHEMA_VERSION: Final = 6

#: The first key of the advisory lock that serializes migrations; the second is
#: ``hashtext(schema)``, so stores in other schemas migrate independently.
ADVISORY_LOCK_CLASS: Final = 0x7E7E_7E01

#: The first keys of the advisory locks a submit takes, on its queue (when it
#: has ``max_queued``) and on its dedupe id; the second is ``hashtext`` of the
#: schema and the names (see ``Tables.submit_run``). A queue's lock is always
#: taken before a dedupe id's.
QUEUE_LOCK_CLASS: Final = 0x7E7E_7E02
DEDUPE_LOCK_CLASS: Final = 0x7E7E_7E03

# Queued and running runs by id, for workers' claims: each holds only those runs.
_QUEUED_INDEX: Final = "CREATE INDEX runs_queued ON {s}.runs (id) WHERE status = 'queued'"
_RUNNING_INDEX: Final = "CREATE INDEX runs_running ON {s}.runs (id) WHERE status = 'running'"

# When a waiting run (parked on a timer) is due, for workers' claims; only
# waiting runs have one, so the index holds only them.
_WAKE_INDEX: Final = "CREATE INDEX runs_wake ON {s}.runs (wake_at) WHERE status = 'waiting'"

# The unfinished runs of each (queue, dedupe id), oldest first, for submits
# with a dedupe id. Not unique: a run resumed by hand may make a second one
# live (a submit takes the oldest); submits keep one per dedupe id under its
# advisory lock. With id in the key, the oldest is the first entry: without
# it, a generic plan of "ORDER BY id LIMIT 1" walked the id index past every
# run. (The finished statuses are RunStatus.finished's.)
_LIVE: Final = "status NOT IN ('completed', 'failed', 'dead_letter', 'cancelled')"
_DEDUPE_INDEX: Final = (
    "CREATE INDEX runs_dedupe ON {s}.runs (queue, dedupe, id) WHERE dedupe IS NOT NULL AND " + _LIVE
)

# Each queue's runs waiting to start (_flow.pending: queued, or waiting and
# never claimed), counted by submits with max_queued.
_PENDING: Final = "(status = 'queued' OR (status = 'waiting' AND token = 0))"
_PENDING_INDEX: Final = "CREATE INDEX runs_pending ON {s}.runs (queue) WHERE " + _PENDING

_WORKERS: Final = """CREATE TABLE {s}.workers (
        owner text PRIMARY KEY,
        serves text NOT NULL,
        expires timestamptz NOT NULL
    )"""

# Runs' mailboxes: one row per message, Message.to_json() as JSON text.
_MESSAGES: Final = """CREATE TABLE {s}.messages (
        run_id text NOT NULL,
        seq integer NOT NULL,
        data text NOT NULL,
        PRIMARY KEY (run_id, seq)
    )"""

# Creates the current version in an empty schema, one statement at a time.
_CREATE: Final = (
    "CREATE TABLE {s}.tether_schema (version integer NOT NULL)",
    """CREATE TABLE {s}.runs (
        id bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
        run_id text PRIMARY KEY,
        data text NOT NULL,
        status text NOT NULL,
        workflow text NOT NULL,
        owner text,
        token bigint NOT NULL DEFAULT 0,
        cancel boolean NOT NULL DEFAULT false,
        version text,
        wake_at timestamptz,
        claim text,
        queue text NOT NULL DEFAULT 'default',
        key text,
        dedupe text
    )""",
    "CREATE INDEX runs_status ON {s}.runs (status, id)",
    "CREATE INDEX runs_workflow ON {s}.runs (workflow, id)",
    "CREATE INDEX runs_owner ON {s}.runs (owner) WHERE owner IS NOT NULL",
    _QUEUED_INDEX,
    _RUNNING_INDEX,
    _WAKE_INDEX,
    _DEDUPE_INDEX,
    _PENDING_INDEX,
    """CREATE TABLE {s}.entries (
        run_id text NOT NULL,
        seq integer NOT NULL,
        ikey text NOT NULL,
        data text NOT NULL,
        PRIMARY KEY (run_id, seq),
        UNIQUE (run_id, ikey)
    )""",
    _MESSAGES,
    """CREATE TABLE {s}.owners (
        owner text PRIMARY KEY,
        expires timestamptz NOT NULL
    )""",
    _WORKERS,
)

#: Migrations by the version they start from, run under the advisory lock.
_MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {
    # 1 -> 2: the workflow version column (older records have none: NULL is
    # right; adding a nullable column rewrites nothing), and workers'
    # advertisements, kept apart from leases. No index for the version: a
    # workflow has few versions, and the (workflow, id) index narrows to it.
    1: ("ALTER TABLE {s}.runs ADD COLUMN version text", _WORKERS),
    # 2 -> 3: the wake_at column of waiting runs (no other run has one: NULL
    # is right for every stored row), and its index.
    2: ("ALTER TABLE {s}.runs ADD COLUMN wake_at timestamptz", _WAKE_INDEX),
    # 3 -> 4: runs' mailboxes (engine.send, tether.receive).
    3: (_MESSAGES,),
    # 4 -> 5: batched claims. A claim's attempt is kept on the runs it took
    # (not on the owner's row, rewritten by every claim: a hot row), and
    # claims find each kind of candidate through an index of its own.
    4: (
        "ALTER TABLE {s}.runs ADD COLUMN claim text",
        "ALTER TABLE {s}.owners DROP COLUMN last_claim",
        "DROP INDEX {s}.runs_dispatchable",
        _QUEUED_INDEX,
        _RUNNING_INDEX,
    ),
    # 5 -> 6: queues, keys and dedupe ids, for listings and submits' rules.
    # Every stored run was submitted without them: the default queue
    # (DEFAULT_QUEUE; a constant default rewrites nothing), no key, no dedupe id.
    5: (
        "ALTER TABLE {s}.runs ADD COLUMN queue text NOT NULL DEFAULT 'default'",
        "ALTER TABLE {s}.runs ADD COLUMN key text",
        "ALTER TABLE {s}.runs ADD COLUMN dedupe text",
        _DEDUPE_INDEX,
        _PENDING_INDEX,
    ),
}

# A run row with its owner's lease expiry and whether it is live, on the database's clock.
_SELECT_RUN_COLUMNS: Final = (
    "SELECT r.id, r.run_id, r.data, o.expires, o.expires > clock_timestamp()"
)
_SELECT_RUN: Final = (
    _SELECT_RUN_COLUMNS + "\nFROM {s}.runs r LEFT JOIN {s}.owners o ON o.owner = r.owner\n"
)
_SET_OWNER: Final = """
INSERT INTO {s}.owners AS o (owner, expires)
VALUES (%s, clock_timestamp() + make_interval(secs => %s))
ON CONFLICT (owner) DO UPDATE SET expires = excluded.expires
RETURNING o.expires
"""

_TEXT: Final = {
    "lock": "SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
    "schema_exists": "SELECT 1 FROM pg_namespace WHERE nspname = %s",
    "tables": "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename",
    "create_schema": "CREATE SCHEMA {s}",
    "version": "SELECT version FROM {s}.tether_schema",
    "set_version": "INSERT INTO {s}.tether_schema (version) VALUES (%s)",
    "update_version": "UPDATE {s}.tether_schema SET version = %s",
    "get_run": _SELECT_RUN + " WHERE r.run_id = %s",
    # Locks a run row. The record is read by a later statement (get_run): a
    # statement that waited for the lock keeps the snapshot it started with,
    # in which the owners row of whoever held the lock may be stale.
    "lock_run": "SELECT 1 FROM {s}.runs WHERE run_id = %s FOR UPDATE",
    "run_id_of": "SELECT id FROM {s}.runs WHERE run_id = %s",
    "list_runs": _SELECT_RUN,
    "insert_run": """
        INSERT INTO {s}.runs (data, status, workflow, owner, token, cancel, version, wake_at,
            queue, key, dedupe, run_id)
        VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
        ON CONFLICT (run_id) DO NOTHING RETURNING id
    """,
    "put_run": """
        UPDATE {s}.runs SET data = %s, status = %s, workflow = %s, owner = %s, token = %s,
        cancel = %s, version = %s, wake_at = %s, queue = %s, key = %s, dedupe = %s
        WHERE run_id = %s
    """,
    "run_data": "SELECT data FROM {s}.runs WHERE run_id = %s",
    # A submit's reads, under its advisory locks (each in a statement of its
    # own, taken once the locks are held: it sees what the previous holder
    # committed). The oldest unfinished run of a dedupe id, its row locked so
    # that no claim starts it while a debounce rewrites it (runs_dedupe); the
    # record is read by a later statement (get_run), as lock_run's. The
    # queue's runs waiting to start (runs_pending).
    "live_dedupe": "SELECT run_id FROM {s}.runs WHERE queue = %s AND dedupe = %s AND "
    + _LIVE
    + " ORDER BY id LIMIT 1 FOR UPDATE",
    "pending": "SELECT count(*) FROM {s}.runs WHERE queue = %s AND " + _PENDING,
    "set_owner": _SET_OWNER,
    "drop_owner": "DELETE FROM {s}.owners WHERE owner = %s",
    "owned": "SELECT run_id, token, cancel FROM {s}.runs WHERE owner = %s",
    # Held runs that no owner holds (a renewal's second read, only when some
    # held run is not the owner's any more): released, or lost.
    "released": "SELECT run_id, token FROM {s}.runs WHERE run_id = ANY(%b::text[]) "
    "AND owner IS NULL",
    # A batched claim's lease: extended to now + ttl only when less than
    # ttl / 2 is left, so that claims between renewals do not rewrite the
    # owner's row (a hot row: dead tuples while a long transaction holds
    # vacuum back). The expiry, rewritten or not.
    "claim_owner": """
        WITH up AS (
            INSERT INTO {s}.owners AS o (owner, expires)
            VALUES (%s, clock_timestamp() + make_interval(secs => %s))
            ON CONFLICT (owner) DO UPDATE SET expires = excluded.expires
            WHERE o.expires < clock_timestamp() + make_interval(secs => %s / 2)
            RETURNING o.expires)
        SELECT expires FROM up UNION ALL SELECT expires FROM {s}.owners WHERE owner = %s
        LIMIT 1
    """,
    # The candidates of a worker's batched claim, locked: queued runs oldest
    # first, running runs whose owner's lease expired (or who is gone), and
    # due waiting runs, each found by its own index ((status, id) and
    # runs_wake), so the cost does not grow with the finished runs kept nor
    # with the backlog. Rows another claimer holds are skipped, not waited
    # for; the ids already looked at in this transaction (which SKIP LOCKED
    # does not skip: this transaction holds them) are excluded. The indexes
    # of queued and of running runs by id hold only those: the planner takes
    # them over the id index, which it walked past every finished run when
    # statistics taken before a drain said most runs were queued. The
    # served pairs are one text each (name, a unit separator, version: a
    # filter on the ordered index scan, where a join with the pairs made the
    # planner sort every queued run), decided exactly by decide_batch. The records
    # are read by a later statement (get_runs), whose snapshot sees what the
    # previous lock holders committed, and decide_batch() decides on that.
    "claimable": """
        WITH queued AS (
            SELECT id FROM {s}.runs
            WHERE status = 'queued' AND workflow = ANY(%(names)b::text[])
            AND workflow || chr(31) || COALESCE(version, '') = ANY(%(pairs)b::text[])
            AND id <> ALL(%(seen)b::bigint[])
            ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
        ), orphaned AS (
            SELECT r.id FROM {s}.runs r LEFT JOIN {s}.owners o ON o.owner = r.owner
            WHERE r.status = 'running' AND r.workflow = ANY(%(names)b::text[])
            AND r.workflow || chr(31) || COALESCE(r.version, '') = ANY(%(pairs)b::text[])
            AND (r.owner IS NULL OR o.expires IS NULL OR o.expires <= clock_timestamp()
                OR r.owner = ANY(%(dead)b::text[]))
            AND r.id <> ALL(%(seen)b::bigint[])
            ORDER BY r.id LIMIT %(limit)s FOR UPDATE OF r SKIP LOCKED
        ), due AS (
            SELECT id FROM {s}.runs
            WHERE status = 'waiting' AND wake_at <= %(now)s
            AND workflow = ANY(%(names)b::text[])
            AND workflow || chr(31) || COALESCE(version, '') = ANY(%(pairs)b::text[])
            AND id <> ALL(%(seen)b::bigint[])
            ORDER BY wake_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED
        )
        SELECT id FROM queued UNION ALL SELECT id FROM orphaned UNION ALL SELECT id FROM due
    """,
    "get_runs": _SELECT_RUN + " WHERE r.id = ANY(%b::bigint[]) ORDER BY r.id",
    # The runs an earlier attempt of a batched claim took and still holds.
    "claimed_by": _SELECT_RUN + " WHERE r.owner = %s AND r.claim = %s ORDER BY r.id",
    # Many run records' writes in one statement (their rows locked before), and the
    # notification of watchers (sent at commit): one round trip.
    "put_runs": """
        WITH put AS (
        UPDATE {s}.runs r SET data = u.data, status = u.status, workflow = u.workflow,
            owner = u.owner, token = u.token, cancel = u.cancel, version = u.version,
            wake_at = u.wake_at, queue = u.queue, key = u.key, dedupe = u.dedupe,
            claim = u.claim
        FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::bigint[],
            %b::boolean[], %b::text[], %b::timestamptz[], %b::text[], %b::text[], %b::text[],
            %b::text[], %b::text[])
            AS u(data, status, workflow, owner, token, cancel, version, wake_at, queue, key,
                dedupe, run_id, claim)
        WHERE r.run_id = u.run_id RETURNING 1)
        SELECT pg_notify(%s, '')
    """,
    "notify": "SELECT pg_notify(%s, '')",
    # A worker's advertisement, replacing its earlier one; expired ones are swept.
    "drop_workers": """
        DELETE FROM {s}.workers WHERE owner = %s OR expires <= clock_timestamp()
    """,
    "advertise": """
        INSERT INTO {s}.workers (owner, serves, expires)
        VALUES (%s, %s, clock_timestamp() + make_interval(secs => %s))
    """,
    "list_workers": """
        SELECT owner, serves, expires FROM {s}.workers WHERE expires > clock_timestamp()
        ORDER BY owner
    """,
    # Appends. The run rows are locked in run_id order (no deadlock between
    # batches); the highest seqs are read by a later statement, whose
    # snapshot sees what the previous lock holders committed.
    # A group commit's one read: the rows of its runs locked in run_id order
    # (no deadlock between batches), each with its record (the latest version:
    # FOR UPDATE returns the row as the previous lock holder left it) and its
    # highest seq. That seq is read in the statement's snapshot, taken before
    # any wait for a lock: after a wait (another process appended to the same
    # run meanwhile, which fencing makes rare) it may be stale, the insert then
    # collides with (run_id, seq), and the batch is redone job by job.
    "lock_batch": _SELECT_RUN_COLUMNS
    + """, r.owner, r.token, (SELECT max(e.seq) FROM {s}.entries e WHERE e.run_id = r.run_id)
        FROM {s}.runs r LEFT JOIN {s}.owners o ON o.owner = r.owner
        WHERE r.run_id = ANY(%b::text[]) ORDER BY r.run_id FOR UPDATE OF r
    """,
    "lock_fences": """
        SELECT run_id, owner, token FROM {s}.runs WHERE run_id = ANY(%b::text[])
        ORDER BY run_id FOR UPDATE
    """,
    "last_seqs": """
        SELECT u.run_id, (SELECT max(e.seq) FROM {s}.entries e WHERE e.run_id = u.run_id)
        FROM unnest(%b::text[]) AS u(run_id)
    """,
    "insert_entries": """
        INSERT INTO {s}.entries (run_id, seq, ikey, data)
        SELECT * FROM unnest(%b::text[], %b::integer[], %b::text[], %b::text[])
    """,
    "insert_entry": "INSERT INTO {s}.entries (run_id, seq, ikey, data) VALUES (%s, %s, %s, %s)",
    "twin": "SELECT seq, data FROM {s}.entries WHERE run_id = %s AND ikey = %s",
    "load_entries": "SELECT seq, data FROM {s}.entries WHERE run_id = %s ORDER BY seq",
    "load_journals": """
        SELECT run_id, seq, data FROM {s}.entries WHERE run_id = ANY(%b::text[])
        ORDER BY run_id, seq
    """,
    # Mailboxes. A send locks the run's row first (lock_run): sends to one run
    # take their seqs one at a time.
    "last_message": "SELECT COALESCE(max(seq), 0) FROM {s}.messages WHERE run_id = %s",
    "insert_message": "INSERT INTO {s}.messages (run_id, seq, data) VALUES (%s, %s, %s)",
    "message_data": "SELECT data FROM {s}.messages WHERE run_id = %s AND seq = %s",
    "load_messages": """
        SELECT seq, data FROM {s}.messages WHERE run_id = %s AND seq > %s ORDER BY seq
    """,
    # A run's deletion: its journal and mailbox, then its row (locked first, by lock_run).
    "delete_entries": "DELETE FROM {s}.entries WHERE run_id = %s",
    "delete_messages": "DELETE FROM {s}.messages WHERE run_id = %s",
    "delete_run": "DELETE FROM {s}.runs WHERE run_id = %s",
}


class Statements:
    """Every statement of one store, rendered for its schema (bytes, ready to execute)."""

    def __init__(self, schema: sql.Identifier) -> None:
        from psycopg import sql

        def render(text: str) -> bytes:
            return sql.SQL(text).format(s=schema).as_bytes(None)

        self.create: tuple[bytes, ...] = tuple(render(t) for t in _CREATE)
        self.migrations: dict[int, tuple[bytes, ...]] = {
            v: tuple(render(t) for t in ts) for v, ts in _MIGRATIONS.items()
        }
        q = {name: render(text) for name, text in _TEXT.items()}
        self.lock = q["lock"]
        self.schema_exists = q["schema_exists"]
        self.tables = q["tables"]
        self.create_schema = q["create_schema"]
        self.version = q["version"]
        self.set_version = q["set_version"]
        self.update_version = q["update_version"]
        self.get_run = q["get_run"]
        self.lock_run = q["lock_run"]
        self.run_id_of = q["run_id_of"]
        self.list_runs = q["list_runs"]
        self.insert_run = q["insert_run"]
        self.put_run = q["put_run"]
        self.run_data = q["run_data"]
        self.live_dedupe = q["live_dedupe"]
        self.pending = q["pending"]
        self.set_owner = q["set_owner"]
        self.claim_owner = q["claim_owner"]
        self.claimable = q["claimable"]
        self.get_runs = q["get_runs"]
        self.lock_batch = q["lock_batch"]
        self.claimed_by = q["claimed_by"]
        self.put_runs = q["put_runs"]
        self.drop_owner = q["drop_owner"]
        self.owned = q["owned"]
        self.released = q["released"]
        self.notify = q["notify"]
        self.drop_workers = q["drop_workers"]
        self.advertise = q["advertise"]
        self.list_workers = q["list_workers"]
        self.lock_fences = q["lock_fences"]
        self.last_seqs = q["last_seqs"]
        self.insert_entries = q["insert_entries"]
        self.insert_entry = q["insert_entry"]
        self.twin = q["twin"]
        self.load_entries = q["load_entries"]
        self.load_journals = q["load_journals"]
        self.delete_entries = q["delete_entries"]
        self.last_message = q["last_message"]
        self.insert_message = q["insert_message"]
        self.message_data = q["message_data"]
        self.load_messages = q["load_messages"]
        self.delete_messages = q["delete_messages"]
        self.delete_run = q["delete_run"]


def statements(schema: str) -> Statements:
    """The statements of a store in *schema* (a validated name)."""
    from psycopg import sql

    return Statements(sql.Identifier(schema))
