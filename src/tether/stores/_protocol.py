"""The store contract: JSON-ready records in, copies out.

A store never imports the engine. Everything a store receives and returns is
made of these frozen records, whose fields are JSON-ready (strings, numbers,
timezone-aware datetimes that serialize as ISO 8601), so a third-party store
can persist them with nothing but the standard library.

This module holds the records of runs: :class:`RunRecord` and the journal's
:class:`Entry`, their status enums and :class:`ErrorInfo`. The rest of the
contract lives beside it, and every name is importable from here as well:
the records' JSON (format versions, strict reading, digests) in
:mod:`._record_json`, the records about lease holders and workers in
:mod:`._owners`, and the :class:`Store` protocols in :mod:`._store`.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any, final

import attrs

from ._owners import (
    Renewal,
    Served,
    WorkerAd,
    dumps_served,
    loads_served,
    served_from_json,
    served_to_json,
)
from ._record_json import (
    _ENTRY_FIELDS,
    _ENTRY_FIELDS_V1,
    _ENTRY_FIELDS_V3,
    _RUN_FIELDS_BY_VERSION,
    FORMAT_VERSION,
    RecordDecodeError,
    dumps_record,
    entry_checksum,
    first_gap,
    loads_record,
)
from ._record_json import _count as _count
from ._record_json import _enum as _enum
from ._record_json import _exact_fields as _exact_fields
from ._record_json import _idempotency_digest as _idempotency_digest
from ._record_json import _opt_str as _opt_str
from ._record_json import _str as _str
from ._record_json import _time as _time
from ._store import (
    ADVERTISE_METHODS,
    DELETE_METHODS,
    STORE_METHODS,
    WORKER_METHODS,
    AdvertisingStore,
    DeletableStore,
    Store,
    WatchableStore,
    WorkerStore,
)

__all__ = (
    "ADVERTISE_METHODS",
    "AdvertisingStore",
    "DELETE_METHODS",
    "DeletableStore",
    "FORMAT_VERSION",
    "Entry",
    "EntryKind",
    "EntryStatus",
    "ErrorInfo",
    "RecordDecodeError",
    "Renewal",
    "RunRecord",
    "RunStatus",
    "STORE_METHODS",
    "Served",
    "Store",
    "WORKER_METHODS",
    "WatchableStore",
    "WorkerAd",
    "WorkerStore",
    "dumps_record",
    "dumps_served",
    "entry_checksum",
    "first_gap",
    "loads_record",
    "loads_served",
    "served_from_json",
    "served_to_json",
    "utcnow",
)


def utcnow() -> datetime:
    """The current wall-clock time, timezone-aware (UTC)."""
    return datetime.now(UTC)


class RunStatus(enum.StrEnum):
    """Where a run stands."""

    QUEUED = "queued"  #: submitted (``engine.submit``); waits for a worker to claim it
    RUNNING = "running"  #: started, or interrupted (crash, caller cancellation): resumable
    PAUSED = "paused"  #: waiting for responses to its pending requests
    COMPLETED = "completed"  #: finished with a result; never executes again
    FAILED = "failed"  #: finished with an error; resumable
    CANCELLED = "cancelled"  #: cancelled by ``engine.cancel``; final, never executes again
    #: claimed by workers ``max_dispatches`` times without an outcome (each
    #: time its worker died): set aside so it cannot crash-loop the fleet;
    #: ``engine.resume`` executes it again
    DEAD_LETTER = "dead_letter"
    #: parked by a worker while its tasks wait on durable timers (``tether.sleep``,
    #: a retry's backoff) or messages (``tether.receive``): no lease, no worker
    #: slot; any worker claims it once ``wake_at`` has come (without one, once a
    #: message is sent to it); ``engine.run``/``resume`` continue it at once
    WAITING = "waiting"


class EntryKind(enum.StrEnum):
    """What a journal entry records."""

    STEP = "step"
    STREAM = "stream"
    RESPONSE = "response"
    #: a ``tether.patched()`` marker: the run took the new path of a change
    MARKER = "marker"
    #: a ``tether.child()`` call: the child run it started (its id, workflow and
    #: version, JSON), journaled before the child run is created
    CHILD = "child"
    #: a durable timer (``tether.sleep``): its value is the due time, journaled
    #: when the timer starts
    TIMER = "timer"
    #: a message a ``tether.receive()`` took from the run's mailbox: its value is
    #: ``{"seq": n, "name": ..., "value": <the message's JSON>}``
    MESSAGE = "message"


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
        """This error as a JSON-ready dict."""
        return {"type": self.type, "message": self.message, "key": self.key}

    @classmethod
    def from_json(cls, data: object) -> ErrorInfo:
        """Decode what :meth:`to_json` made, strictly.

        Raises:
            RecordDecodeError: anything else (see :func:`loads_record`).
        """
        d = _exact_fields(data, ("type", "message", "key"), "error")
        return cls(
            type=_str(d, "type", "error"),
            message=_str(d, "message", "error"),
            key=_opt_str(d, "key", "error"),
        )

    def __str__(self) -> str:
        where = f" (step {self.key})" if self.key else ""
        return f"{self.type}: {self.message}{where}"


@final
@attrs.frozen(kw_only=True)
class Entry:
    """One journal record: the outcome of one step, stream or response, or a patch marker.

    ``seq`` is assigned by the store on :meth:`Store.append` (per run,
    increasing); entries handed *to* ``append`` have ``seq=None``.

    ``position`` is the call's index among the calls of its parent (the
    workflow, a step or a branch), counted in program order when it is
    called or started, like its key; replay matches calls by it too. Entries
    of older formats have none (``None``: matched by key only); an entry
    without one is stored in that older format, so its checksum is as before.
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
    #: the fencing token of the execution that wrote it (0: written without a
    #: lease); a store refuses an entry whose token is not the run's current one
    token: int = 0
    seq: int | None = None
    #: the call's index among its parent's calls (``None``: an older entry format)
    position: int | None = None

    def stored_as(self, seq: int) -> Entry:
        """A copy of this entry with its ``seq`` assigned (for stores)."""
        # Spelled out: on every append, and several times cheaper than attrs.evolve.
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
            token=self.token,
            seq=seq,
            position=self.position,
        )

    def _content(self) -> dict[str, Any]:
        # Every field but seq (and the checksum derived from them all);
        # position only when there is one: without, the older format, as stored.
        content: dict[str, Any] = {
            "run_id": self.run_id,
            "key": self.key,
            "kind": self.kind.value,
            "status": self.status.value,
            "value": self.value,
            "error": None if self.error is None else self.error.to_json(),
            "args_digest": self.args_digest,
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat(),
            "attempt": self.attempt,
            "token": self.token,
        }
        if self.position is not None:
            content["position"] = self.position
        return content

    def to_json(self) -> dict[str, Any]:
        """This entry as a JSON-ready dict, with its :attr:`checksum` once stored."""
        content = self._content()
        data = {"run_id": content.pop("run_id"), "seq": self.seq}
        data.update(content)
        data["checksum"] = (
            None if self.seq is None else entry_checksum(self.idempotency_key, self.seq)
        )
        return data

    @classmethod
    def from_json(cls, data: object) -> Entry:
        """Decode what :meth:`to_json` made, strictly: every field present, of
        its exact JSON type, nothing else; timestamps timezone-aware; and the
        stored checksum equal to the one of the decoded content.

        Entries of format version 1 (no ``token``, no ``checksum``) are read
        with token 0 and no checksum to verify; those of version 2 (no
        ``position``) with position ``None``.

        Raises:
            RecordDecodeError: the data is not such an entry, or its content
                does not match its checksum (it changed after it was stored).
        """
        legacy = isinstance(data, dict) and "checksum" not in data and "token" not in data
        positioned = isinstance(data, dict) and "position" in data
        fields = _ENTRY_FIELDS_V1 if legacy else _ENTRY_FIELDS_V3 if positioned else _ENTRY_FIELDS
        d = _exact_fields(data, fields, "entry")
        seq = d["seq"]
        if seq is not None and (type(seq) is not int or seq < 1):
            raise RecordDecodeError(f"entry field 'seq' must be a positive integer, not {seq!r}")
        attempt = d["attempt"]
        if type(attempt) is not int or attempt < 1:
            raise RecordDecodeError(
                f"entry field 'attempt' must be a positive integer, not {attempt!r}"
            )
        token = 0 if legacy else d["token"]
        if type(token) is not int or token < 0:
            raise RecordDecodeError(
                f"entry field 'token' must be a non-negative integer, not {token!r}"
            )
        position = d["position"] if positioned else None
        if positioned and (type(position) is not int or position < 0):
            raise RecordDecodeError(
                f"entry field 'position' must be a non-negative integer, not {position!r}"
            )
        error = d["error"]
        entry = cls(
            run_id=_str(d, "run_id", "entry"),
            key=_str(d, "key", "entry"),
            kind=_enum(EntryKind, d, "kind", "entry"),
            status=_enum(EntryStatus, d, "status", "entry"),
            value=_opt_str(d, "value", "entry"),
            error=None if error is None else ErrorInfo.from_json(error),
            args_digest=_str(d, "args_digest", "entry"),
            started_at=_time(d, "started_at", "entry"),
            finished_at=_time(d, "finished_at", "entry"),
            attempt=attempt,
            token=token,
            seq=seq,
            position=position,
        )
        if not legacy:
            checksum = d["checksum"]
            expected = None if seq is None else entry_checksum(entry.idempotency_key, seq)
            if checksum != expected:
                raise RecordDecodeError(
                    f"entry seq {seq} does not match its checksum ({checksum!r:.80}): "
                    "its content changed after it was stored"
                )
        return entry

    @property
    def idempotency_key(self) -> str:
        """A digest of everything in this entry but its ``seq``.

        Stores use it to make :meth:`Store.append` idempotent: appending an
        entry whose key equals a stored entry's returns the stored one (with
        its ``seq``) instead of storing a duplicate, so a save retried after
        an unclear outcome (cancelled in flight, timed out) never journals the
        same record twice. Two executions of a step never share a key: their
        timestamps differ.
        """
        return _idempotency_digest(self._content())

    @property
    def checksum(self) -> str | None:
        """The digest of every stored field, seq included (``None`` before it is stored).

        Stored with the entry and verified on every strict read
        (:func:`load_entry`), so an entry whose bytes changed is corrupt, not
        replayed.
        """
        return None if self.seq is None else entry_checksum(self.idempotency_key, self.seq)


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
    #: the lease holder (``host:pid:engine-id``); ``None`` once released
    owner: str | None = None
    #: the fencing token of the latest claim (0: never claimed); only grows.
    #: A write of this record is refused unless it is the run's current token.
    token: int = 0
    #: ``engine.cancel`` was recorded while an owner executed the run
    cancel_requested: bool = False
    #: when the owner's lease expires, on the store's clock; filled by the
    #: store on reads while the lease is live (``None`` when released or
    #: expired), never stored from a write
    lease_expires_at: datetime | None = None
    #: how many times workers claimed the run since it was submitted or
    #: last resumed by hand (``engine.resume``); see ``max_dispatches``
    dispatches: int = 0
    #: the version of the workflow that started the run (``None``: unversioned,
    #: and every run stored before format version 4)
    version: str | None = None
    #: when a ``waiting`` run is due (timezone-aware): workers claim it from
    #: then on; ``None`` for every other status, and for a waiting run that
    #: waits for messages only (a send makes it due)
    wake_at: datetime | None = None
    format_version: int = FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        """This record as a JSON-ready dict (without :attr:`lease_expires_at`, a reading).

        Always in the current format version.
        """
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
            "owner": self.owner,
            "token": self.token,
            "cancel_requested": self.cancel_requested,
            "dispatches": self.dispatches,
            "version": self.version,
            "wake_at": None if self.wake_at is None else self.wake_at.isoformat(),
            "format_version": FORMAT_VERSION,
        }

    @classmethod
    def from_json(cls, data: object) -> RunRecord:
        """Decode what :meth:`to_json` made, strictly (as :meth:`Entry.from_json`).

        Raises:
            RecordDecodeError: the data is not such a record, or its
                ``format_version`` is not one this version of tether reads.
        """
        version = data.get("format_version") if isinstance(data, dict) else None
        if type(version) is not int or not 1 <= version <= FORMAT_VERSION:
            raise RecordDecodeError(
                f"run record has format_version {version!r}; this tether reads "
                f"1 to {FORMAT_VERSION} (a newer tether wrote it?)"
            )
        d = _exact_fields(data, _RUN_FIELDS_BY_VERSION[version], "run record")
        token = _count(d, "token")
        dispatches = _count(d, "dispatches")
        cancel = d.get("cancel_requested", False)
        if type(cancel) is not bool:
            raise RecordDecodeError(
                f"run record field 'cancel_requested' must be a boolean, not {cancel!r}"
            )
        requests = d["requests"]
        if not isinstance(requests, list) or not all(type(r) is str for r in requests):
            raise RecordDecodeError(
                f"run record field 'requests' must be a list of strings, not {requests!r:.200}"
            )
        error = d["error"]
        workflow_version = _opt_str(d, "version", "run record") if "version" in d else None
        if workflow_version == "":
            raise RecordDecodeError("run record field 'version' must not be empty")
        wake_at = None
        if d.get("wake_at") is not None:
            wake_at = _time(d, "wake_at", "run record")
        return cls(
            run_id=_str(d, "run_id", "run record"),
            workflow=_str(d, "workflow", "run record"),
            args=_str(d, "args", "run record"),
            status=_enum(RunStatus, d, "status", "run record"),
            result=_opt_str(d, "result", "run record"),
            error=None if error is None else ErrorInfo.from_json(error),
            requests=tuple(requests),
            created_at=_time(d, "created_at", "run record"),
            updated_at=_time(d, "updated_at", "run record"),
            owner=_opt_str(d, "owner", "run record") if "owner" in d else None,
            token=token,
            cancel_requested=cancel,
            dispatches=dispatches,
            version=workflow_version,
            wake_at=wake_at,
            format_version=version,
        )


def load_run_record(text: str | bytes, run_id: str) -> RunRecord:
    """Decode stored text as the run record of *run_id* (stores' strict read).

    Raises:
        RecordDecodeError: not a run record, or one of another run.
    """
    record: RunRecord = loads_record(text, RunRecord.from_json)
    if record.run_id != run_id:
        raise RecordDecodeError(f"the record names run {record.run_id!r}")
    return record


def load_entry(text: str | bytes, run_id: str, seq: int) -> Entry:
    """Decode stored text as entry *seq* of *run_id* (stores' strict read).

    Raises:
        RecordDecodeError: not an entry, or one of another run or seq.
    """
    entry: Entry = loads_record(text, Entry.from_json)
    if entry.run_id != run_id:
        raise RecordDecodeError(f"the entry names run {entry.run_id!r}")
    if entry.seq != seq:
        raise RecordDecodeError(f"the entry says seq {entry.seq!r}, where it is stored {seq}")
    return entry
