"""The store contract: JSON-ready records in, copies out.

A store never imports the engine. Everything a store receives and returns is
made of these frozen records, whose fields are JSON-ready (strings, numbers,
timezone-aware datetimes that serialize as ISO 8601), so a third-party store
can persist them with nothing but the standard library.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, final, runtime_checkable

import attrs

__all__ = (
    "FORMAT_VERSION",
    "Entry",
    "EntryKind",
    "EntryStatus",
    "ErrorInfo",
    "RunRecord",
    "RunStatus",
    "Store",
    "utcnow",
)

#: Version of the record format; stored with every run.
FORMAT_VERSION = 1


def utcnow() -> datetime:
    """The current wall-clock time, timezone-aware (UTC)."""
    return datetime.now(UTC)


class RunStatus(enum.StrEnum):
    """Where a run stands."""

    RUNNING = "running"  #: started, or interrupted (crash, caller cancellation): resumable
    PAUSED = "paused"  #: waiting for responses to its pending requests
    COMPLETED = "completed"  #: finished with a result; never executes again
    FAILED = "failed"  #: finished with an error; resumable


class EntryKind(enum.StrEnum):
    """What a journal entry records."""

    STEP = "step"
    STREAM = "stream"
    RESPONSE = "response"


class EntryStatus(enum.StrEnum):
    """How the journaled work ended."""

    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


@final
@attrs.frozen(kw_only=True)
class ErrorInfo:
    """A stored description of an exception (never the exception itself)."""

    type: str  #: qualified name of the exception class
    message: str  #: ``str(exc)``
    key: str | None = None  #: the step key the error came out of, if any

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "message": self.message, "key": self.key}

    def __str__(self) -> str:
        where = f" (step {self.key})" if self.key else ""
        return f"{self.type}: {self.message}{where}"


@final
@attrs.frozen(kw_only=True)
class Entry:
    """One journal record: the outcome of one step, stream or response.

    ``seq`` is assigned by the store on :meth:`Store.append` (per run,
    increasing); entries handed *to* ``append`` have ``seq=None``.
    """

    run_id: str
    key: str  #: the call's key, ``parent-path/step-name#n``, fixed at spawn time
    kind: EntryKind = EntryKind.STEP
    status: EntryStatus = EntryStatus.COMPLETED
    value: str | None = None  #: the encoded result, JSON text
    error: ErrorInfo | None = None
    args_digest: str = ""  #: digest of the encoded arguments, checked on replay
    started_at: datetime
    finished_at: datetime
    attempt: int = 1  #: which attempt of the step (1 + retries used) produced this record
    seq: int | None = None

    def stored_as(self, seq: int) -> Entry:
        """A copy of this entry with its ``seq`` assigned (for stores)."""
        return Entry(
            run_id=self.run_id,
            key=self.key,
            kind=self.kind,
            status=self.status,
            value=self.value,
            error=self.error,
            args_digest=self.args_digest,
            started_at=self.started_at,
            finished_at=self.finished_at,
            attempt=self.attempt,
            seq=seq,
        )

    def to_json(self) -> dict[str, Any]:
        """This entry as a JSON-ready dict."""
        return {
            "run_id": self.run_id,
            "seq": self.seq,
            "key": self.key,
            "kind": self.kind.value,
            "status": self.status.value,
            "value": self.value,
            "error": None if self.error is None else self.error.to_json(),
            "args_digest": self.args_digest,
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat(),
            "attempt": self.attempt,
        }


@final
@attrs.frozen(kw_only=True)
class RunRecord:
    """The stored state of one run (its journal is stored separately)."""

    run_id: str
    workflow: str  #: the registered workflow name
    args: str  #: encoded positional arguments, JSON text
    status: RunStatus = RunStatus.RUNNING
    result: str | None = None  #: encoded result, JSON text, when completed
    error: ErrorInfo | None = None  #: when failed
    requests: tuple[str, ...] = ()  #: pending requests, JSON text each
    created_at: datetime
    updated_at: datetime
    format_version: int = FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        """This record as a JSON-ready dict."""
        return {
            "run_id": self.run_id,
            "workflow": self.workflow,
            "args": self.args,
            "status": self.status.value,
            "result": self.result,
            "error": None if self.error is None else self.error.to_json(),
            "requests": list(self.requests),
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "format_version": self.format_version,
        }


@runtime_checkable
class Store(Protocol):
    """What the engine needs from storage.

    Every method is async and a Trio checkpoint unless its store documents
    otherwise; cancelling one leaves the store consistent (the write either
    happened whole or not at all). Reads are strict: a record that cannot be
    read or decoded raises :class:`~tether.CheckpointCorruptError` naming the run
    and location; nothing is skipped to return something older.

    The engine calls :meth:`open` once before use and :meth:`close` once after.
    """

    async def open(self) -> None:
        """Acquire resources (connections, threads, background tasks)."""

    async def close(self) -> None:
        """Release resources. Called once; pending writes are finished or failed."""

    async def create_run(self, record: RunRecord) -> None:
        """Store a new run record.

        Raises:
            RunConflictError: a run with this id exists.
        """

    async def update_run(self, record: RunRecord) -> None:
        """Replace an existing run record (status, result, error, requests).

        Raises:
            RunNotFoundError: no run with this id.
        """

    async def get_run(self, run_id: str) -> RunRecord | None:
        """The run record, or ``None`` for an unknown id."""

    async def list_runs(self) -> Sequence[RunRecord]:
        """All run records, oldest first."""

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        """Atomically append journal entries to a run; the one journal write.

        Assigns each entry the run's next ``seq`` (distinct and increasing,
        also under concurrent appends) and returns the stored entries. (The
        engine tolerates ``None`` from a store that does not report them:
        the write counts as done, with the seq unknown to hooks.)

        Raises:
            RunNotFoundError: no run with this id.
        """

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        """The run's journal in ``seq`` order (empty for an unknown run)."""
