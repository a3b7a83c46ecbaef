"""The rows of a SQLite store: records to rows, and rows back to records.

Layer: stores (``tether.stores``).

An append is encoded by the caller, before it is queued for the writer
thread (:func:`encode_append`, in :mod:`._rows`, shared with the PostgreSQL
store); the writer only numbers its rows (:func:`row_data`) and inserts them
a few statements at a time (:func:`insert_entries`). A run record's row is
:func:`run_row`.

Reads are strict: :func:`decode_run`, :func:`decode_entry` and
:func:`decode_message` raise :class:`~tether.CheckpointCorruptError` naming
the run, the file, the table and the row for a row that does not decode.
"""

from __future__ import annotations

import functools
import sqlite3
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import attrs

from .._errors import CheckpointCorruptError
from ._mailbox import Message, load_message
from ._record_json import RecordDecodeError, dumps_record
from ._records import Entry, RunRecord, load_entry, load_run_record
from ._rows import Appending, encode_append, encode_entry, generic_encode_entry, row_data

__all__ = (
    "Appending",
    "corrupt",
    "decode_entry",
    "decode_message",
    "decode_run",
    "encode_append",
    "encode_entry",
    "generic_encode_entry",
    "insert_entries",
    "row_data",
    "run_row",
    "time_of",
)

T = TypeVar("T")

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


def run_row(record: RunRecord) -> tuple[object, ...]:
    """The parameters of ``INSERT_RUN`` and ``PUT_RUN`` (:mod:`._sqlite_sql`) for *record*."""
    return (
        dumps_record(record.to_json()),
        record.owner,
        record.token,
        record.cancel_requested,
        record.status.value,
        record.workflow,
        record.version,
        None if record.wake_at is None else record.wake_at.timestamp(),
        record.queue,
        record.key,
        record.dedupe,
        record.run_id,
    )


def time_of(unix: float) -> datetime:
    """The aware UTC datetime of a Unix time read from a row."""
    return datetime.fromtimestamp(unix, UTC)


def corrupt(path: Path, run_id: object, where: str, problem: str) -> CheckpointCorruptError:
    """The error for a bad row of run *run_id* in the file *path*, at *where*."""
    return CheckpointCorruptError(f"run {run_id!r}: {path}, {where}: {problem}")


def decode_run(path: Path, row: tuple[Any, ...], now: float | None = None) -> RunRecord:
    """A runs row (with its owner's expiry) as a record, its lease filled while live."""
    rowid, run_id, data, expires = row
    where = f"table runs, rowid {rowid}"
    if type(data) is not str:
        raise corrupt(path, run_id, where, f"column data holds {type(data).__name__}, not text")
    try:
        record = load_run_record(data, run_id)
    except RecordDecodeError as exc:
        raise corrupt(path, run_id, where, str(exc)) from None
    live = isinstance(expires, float | int) and expires > (time.time() if now is None else now)
    if record.owner is not None and live:
        record = attrs.evolve(record, lease_expires_at=time_of(expires))
    return record


def decode_entry(path: Path, run_id: str, row: tuple[Any, ...]) -> Entry:
    """A row ``(rowid, seq, data)`` of ``entries``, decoded strictly."""
    entry: Entry = _decode_seq_row(path, run_id, "entries", row, load_entry)
    return entry


def decode_message(path: Path, run_id: str, row: tuple[Any, ...]) -> Message:
    """A row ``(rowid, seq, data)`` of ``messages``, decoded strictly."""
    message: Message = _decode_seq_row(path, run_id, "messages", row, load_message)
    return message


def _decode_seq_row(
    path: Path, run_id: str, table: str, row: tuple[Any, ...], load: Callable[[str, str, int], T]
) -> T:
    """A row ``(rowid, seq, data)`` of *table*, decoded strictly by *load*."""
    rowid, seq, data = row
    where = f"table {table}, seq {seq!r} (rowid {rowid})"
    if type(seq) is not int:
        raise corrupt(path, run_id, where, f"column seq holds {type(seq).__name__}")
    if type(data) is not str:
        raise corrupt(path, run_id, where, f"column data holds {type(data).__name__}, not text")
    try:
        return load(data, run_id, seq)
    except RecordDecodeError as exc:
        raise corrupt(path, run_id, where, str(exc)) from None
