"""The SQL of the SQLite store: its layout, its schema, its migrations and its statements.

Layer: stores (``tether.stores``).

Layout (schema version 7, kept in ``PRAGMA user_version``)::

    runs(id INTEGER PRIMARY KEY AUTOINCREMENT,     -- creation order
         run_id TEXT NOT NULL UNIQUE,
         data TEXT NOT NULL,                       -- RunRecord.to_json(), JSON text
         owner TEXT, token INTEGER, cancel INTEGER,  -- copies of data's lease fields
         status TEXT, workflow TEXT,               -- copies for listing and workers,
                                                   -- indexed with id
         version TEXT,                             -- copy of the workflow version
         wake_at REAL,                             -- copy of a waiting run's wake_at,
                                                   -- Unix time, indexed
         queue TEXT NOT NULL, key TEXT,            -- copies for listings and
         dedupe TEXT)                              -- submits' rules
    entries(run_id TEXT NOT NULL, seq INTEGER NOT NULL,
            ikey TEXT NOT NULL,                    -- Entry.idempotency_key
            data TEXT NOT NULL,                    -- Entry.to_json(), JSON text
            PRIMARY KEY (run_id, seq), UNIQUE (run_id, ikey))
    messages(run_id TEXT NOT NULL, seq INTEGER NOT NULL,  -- a run's mailbox
             data TEXT NOT NULL,                   -- Message.to_json(), JSON text
             PRIMARY KEY (run_id, seq))
    owners(owner TEXT PRIMARY KEY,                 -- one row per lease holder:
           expires REAL NOT NULL)                  -- its leases' expiry, Unix time
    workers(owner TEXT PRIMARY KEY,                -- one row per live worker:
            serves TEXT NOT NULL,                  -- its (workflow, version) pairs, JSON
            expires REAL NOT NULL)                 -- until when, Unix time

A lease is per owner, not per run: renewing every run an engine holds is one
row's update. The lease columns of ``runs`` mirror the JSON so that fencing
checks and renewals are indexed queries; ``status`` and ``workflow`` do the
same for filtered listings and for workers' claims. Older files are
migrated on open (the columns, indexes and tables are added; older JSON stays
readable).

Plain text, kept apart so that the store's logic reads without it and the
whole schema history reads in one place; :meth:`._sqlite_tables.Tables.migrate`
runs the migrations.
"""

from __future__ import annotations

from typing import Final

__all__ = (
    "DEPTH",
    "DISPATCHABLE",
    "INSERT_ENTRY",
    "INSERT_RUN",
    "LAST_SEQ",
    "LIVE_DEDUPE",
    "MIGRATIONS",
    "PUT_RUN",
    "SCHEMA_VERSION",
    "SELECT_RUN",
    "SERVED",
    "SET_OWNER",
)

#: The schema version this tether writes and reads (``PRAGMA user_version``).
SCHEMA_VERSION: Final = 7

_SCHEMA = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL UNIQUE,
    data TEXT NOT NULL
);
CREATE TABLE entries (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    ikey TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (run_id, seq),
    UNIQUE (run_id, ikey)
);
"""
# Version 1 -> 2: the lease columns and the owners table.
_MIGRATE_2 = """
ALTER TABLE runs ADD COLUMN owner TEXT;
ALTER TABLE runs ADD COLUMN token INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN cancel INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_owner ON runs (owner) WHERE owner IS NOT NULL;
CREATE TABLE owners (owner TEXT PRIMARY KEY, expires REAL NOT NULL);
"""
# Version 2 -> 3: status and workflow columns, indexed for listing and for workers.
_MIGRATE_3 = """
ALTER TABLE runs ADD COLUMN status TEXT;
ALTER TABLE runs ADD COLUMN workflow TEXT;
UPDATE runs SET status = json_extract(data, '$.status'), workflow = json_extract(data, '$.workflow')
    WHERE json_valid(data);
CREATE INDEX runs_status ON runs (status, id);
CREATE INDEX runs_workflow ON runs (workflow, id);
"""
# Version 3 -> 4: the workflow version column (older records have none: NULL is
# right), and workers' advertisements, kept apart from leases. No index for the
# version: a workflow has few versions, and the (workflow, id) index narrows to it.
_MIGRATE_4 = """
ALTER TABLE runs ADD COLUMN version TEXT;
CREATE TABLE workers (owner TEXT PRIMARY KEY, serves TEXT NOT NULL, expires REAL NOT NULL);
"""
# Version 4 -> 5: when a waiting run (parked on a timer) is due, for workers'
# claims; only waiting runs have one, so the index holds only them.
_MIGRATE_5 = """
ALTER TABLE runs ADD COLUMN wake_at REAL;
CREATE INDEX runs_wake ON runs (wake_at) WHERE status = 'waiting';
"""
# Version 5 -> 6: runs' mailboxes (engine.send, tether.receive).
_MIGRATE_6 = """
CREATE TABLE messages (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
"""
# Version 6 -> 7: the queue, key and dedupe id of runs, for listings and for submits'
# rules (stores/_flow.py):
# an index of the unfinished runs holding a dedupe id, and one of the runs that count in
# their queue's depth (``pending``), so that neither lookup grows with the finished runs
# kept. Older runs are in the default queue, without a dedupe id.
_MIGRATE_7 = """
ALTER TABLE runs ADD COLUMN queue TEXT NOT NULL DEFAULT 'default';
ALTER TABLE runs ADD COLUMN key TEXT;
ALTER TABLE runs ADD COLUMN dedupe TEXT;
CREATE INDEX runs_dedupe ON runs (queue, dedupe, id) WHERE dedupe IS NOT NULL
    AND status NOT IN ('completed', 'failed', 'dead_letter', 'cancelled');
CREATE INDEX runs_pending ON runs (queue) WHERE status = 'queued'
    OR (status = 'waiting' AND token = 0);
"""
_STEPS: Final = (
    _SCHEMA,
    _MIGRATE_2,
    _MIGRATE_3,
    _MIGRATE_4,
    _MIGRATE_5,
    _MIGRATE_6,
    _MIGRATE_7,
)
#: What brings a file of each older version to :data:`SCHEMA_VERSION` (0: a new file).
MIGRATIONS: Final = {version: "".join(_STEPS[version:]) for version in range(SCHEMA_VERSION)}

INSERT_ENTRY: Final = "INSERT INTO entries (run_id, seq, ikey, data) VALUES (?, ?, ?, ?)"
#: The run's lease holder and token (for the fencing check) and its highest seq.
LAST_SEQ: Final = """
SELECT owner, token, (SELECT COALESCE(MAX(seq), 0) FROM entries WHERE run_id = ?1)
FROM runs WHERE run_id = ?1
"""
#: A run record with its owner's lease expiry.
SELECT_RUN: Final = """
SELECT r.id, r.run_id, r.data, o.expires FROM runs r LEFT JOIN owners o ON o.owner = r.owner
"""
PUT_RUN: Final = """
UPDATE runs SET data = ?, owner = ?, token = ?, cancel = ?, status = ?, workflow = ?, version = ?,
wake_at = ?, queue = ?, key = ?, dedupe = ? WHERE run_id = ?
"""
INSERT_RUN: Final = """
INSERT INTO runs (data, owner, token, cancel, status, workflow, version, wake_at, queue, key,
dedupe, run_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
#: The oldest unfinished run of a queue (``?1``) holding a dedupe id (``?2``).
LIVE_DEDUPE: Final = (
    SELECT_RUN
    + """
WHERE r.id = (SELECT id FROM runs INDEXED BY runs_dedupe WHERE queue = ?1 AND dedupe = ?2
    AND status NOT IN ('completed', 'failed', 'dead_letter', 'cancelled') ORDER BY id LIMIT 1)
"""
)
#: How many runs of a queue (``?``) count in its depth (``pending``).
DEPTH: Final = """
SELECT count(*) FROM runs INDEXED BY runs_pending
WHERE queue = ? AND (status = 'queued' OR (status = 'waiting' AND token = 0))
"""
#: Candidates for a worker's claim, oldest first (see dispatchable(), which
#: decides); ``{served}`` takes the served workflows' condition, ``{gone}`` the
#: gone owners' placeholders; the parameters: *now*, the claimer's clock, and
#: the limit of each part. Each kind of candidate is found by its own index
#: (queued and running runs by ``(status, id)``, due waiting runs by
#: ``runs_wake``), so the cost does not grow with the finished runs kept, nor
#: with the depth of the backlog. ``INDEXED BY`` says so to the planner, which
#: otherwise walks the rowid, or the whole table, once ANALYZE finds few
#: distinct statuses.
DISPATCHABLE: Final = (
    SELECT_RUN
    + """
WHERE r.id IN (
    SELECT id FROM (SELECT id FROM runs INDEXED BY runs_status
        WHERE status = 'queued' AND {served} ORDER BY id LIMIT :limit)
    UNION ALL
    SELECT id FROM (SELECT q.id FROM runs q INDEXED BY runs_status
        LEFT JOIN owners p ON p.owner = q.owner
        WHERE q.status = 'running' AND {served_q} AND (q.owner IS NULL OR p.expires IS NULL
            OR p.expires <= :now OR q.owner IN ({gone}))
        ORDER BY q.id LIMIT :limit)
    UNION ALL
    SELECT id FROM (SELECT id FROM runs INDEXED BY runs_wake
        WHERE status = 'waiting' AND wake_at <= :clock AND {served}
        ORDER BY wake_at LIMIT :limit))
ORDER BY r.id
"""
)
#: The served workflows' condition of :data:`DISPATCHABLE` (``{prefix}``: a
#: table alias and dot, or nothing; ``{workflows}`` and ``{pairs}``: placeholders).
SERVED: Final = (
    "{prefix}workflow IN ({workflows}) AND "
    "({prefix}workflow, COALESCE({prefix}version, '')) IN (VALUES {pairs})"
)
SET_OWNER: Final = """
INSERT INTO owners (owner, expires) VALUES (?, ?)
ON CONFLICT (owner) DO UPDATE SET expires = excluded.expires
"""
