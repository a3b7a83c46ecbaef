"""The rows of a SQLite store's journal: multi-row inserts.

An append is encoded by the caller, before it is queued for the writer
thread (:func:`encode_append`, in :mod:`._rows`, shared with the PostgreSQL
store); the writer only numbers its rows (:func:`row_data`) and inserts them
a few statements at a time (:func:`insert_entries`).
"""

from __future__ import annotations

import functools
import sqlite3
from typing import Any

from ._rows import Appending, encode_append, encode_entry, generic_encode_entry, row_data

__all__ = (
    "Appending",
    "encode_append",
    "encode_entry",
    "generic_encode_entry",
    "insert_entries",
    "row_data",
)

# The most rows one INSERT takes (4 parameters each: within SQLite's
# smallest default limit of 999 parameters).
_MAX_ROWS = 128


@functools.cache
def _insert_rows_sql(n: int) -> str:
    return "INSERT INTO entries (run_id, seq, ikey, data) VALUES " + ",".join(["(?,?,?,?)"] * n)


def insert_entries(conn: sqlite3.Connection, rows: list[Any]) -> None:
    """Insert the flattened *rows* (run_id, seq, ikey, data, ...) in few statements.

    Chunks of a power-of-two number of rows, so the connection's statement
    cache holds every statement after a while (at most 8 distinct ones).
    """
    start, end = 0, len(rows)
    while start < end:
        n = min(_MAX_ROWS, 1 << ((end - start) // 4).bit_length() - 1)
        stop = start + 4 * n
        conn.execute(_insert_rows_sql(n), rows[start:stop])
        start = stop
