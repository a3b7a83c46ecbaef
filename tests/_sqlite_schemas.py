"""Taking a fresh SQLite store file back to an older schema version, as an older tether
left it, for the migration tests: each version's additions undone, newest first."""

from __future__ import annotations

import sqlite3

#: What schema version 7 added (queue, key and dedupe id of runs), undone.
UNDO_7 = (
    "DROP INDEX runs_dedupe",
    "DROP INDEX runs_pending",
    "ALTER TABLE runs DROP COLUMN queue",
    "ALTER TABLE runs DROP COLUMN key",
    "ALTER TABLE runs DROP COLUMN dedupe",
)


def back_to_6(conn: sqlite3.Connection) -> None:
    """Undo schema version 7 on *conn* (its caller sets ``user_version``)."""
    for statement in UNDO_7:
        conn.execute(statement)
