"""The store contract: JSON-ready records in, copies out.

Layer: stores. A store never imports the engine. Everything a store receives and returns is
made of these frozen records, whose fields are JSON-ready (strings, numbers,
timezone-aware datetimes that serialize as ISO 8601), so a third-party store
can persist them with nothing but the standard library.

This module holds the records of runs: :class:`RunRecord` and
the journal's :class:`Entry`, and their status enums (:class:`ErrorInfo` and
:class:`Request`, which exceptions carry too, live in :mod:`tether._errors`).
The rest of the contract lives beside it: the records' JSON (format versions,
strict reading, digests) in :mod:`._record_json`, the records about lease
holders and workers in :mod:`._owners`, and the :class:`Store` protocols in
:mod:`._store`; :mod:`tether.stores` is the public face of them all.

Whole because a record and its strict decoder are one contract, read together
field by field: split, each field's meaning would sit apart from how it is read.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any, Final, final

import attrs

from .._codec._json import dumps, loads
from .._errors import ErrorInfo, Request
from ._record_json import (
    ENTRY_FIELDS,
    ENTRY_FIELDS_V1,
    ENTRY_FIELDS_V3,
    FORMAT_VERSION,
    RUN_FIELDS_BY_VERSION,
    RecordDecodeError,
    count,
    entry_checksum,
    enum_field,
    exact_fields,
    idempotency_digest,
    loads_record,
    opt_str,
    str_field,
    time_field,
)

__all__ = (
    "DEFAULT_QUEUE",
    "Entry",
    "EntryKind",
    "EntryStatus",
    "RunRecord",
    "RunStatus",
    "load_entry",
    "load_error_info",
    "load_run_record",
    "request_from_json",
    "request_to_json",
    "utcnow",
)


#: The queue of every run submitted without ``queue=`` (unlimited), and of every
#: run stored before format version 7.
DEFAULT_QUEUE: Final = "default"


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
    #: time its worker died, or could not store the outcome): set aside so it
    #: cannot crash-loop the fleet; ``engine.resume`` executes it again
    DEAD_LETTER = "dead_letter"
    #: parked by a worker while its tasks wait on durable timers (``tether.sleep``,
    #: a retry's backoff) or messages (``tether.receive``), or backing off after
    #: an execution that could not store its outcome: no lease, no worker
    #: slot; any worker claims it once ``wake_at`` has come (without one, once a
    #: message is sent to it); ``engine.run``/``resume`` continue it at once
    WAITING = "waiting"

    # The sets of statuses the rules speak of, each written once, here.

    @property
    def may_execute(self) -> bool:
        """Whether a run in this status may still execute: every status but completed and cancelled.

        A claim moves such a run to ``running`` (clearing its error and requests).
        """
        return self is not RunStatus.COMPLETED and self is not RunStatus.CANCELLED

    @property
    def finished(self) -> bool:
        """Whether a run in this status never executes again on its own, so takes no message.

        Completed, failed, dead-lettered or cancelled (a failed run executes
        again only when resumed).
        """
        return self in _FINISHED

    @property
    def wants_worker(self) -> bool:
        """Whether a run in this status waits for a worker: queued, running or waiting."""
        return self in _WANTS_WORKER


_FINISHED: Final = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.DEAD_LETTER, RunStatus.CANCELLED}
)
_WANTS_WORKER: Final = frozenset({RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING})


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


def load_error_info(data: object, *, member: bool = False) -> ErrorInfo:
    """Decode what :meth:`ErrorInfo.to_json` made, strictly (*member*: one of its ``members``).

    An error stored before format version 6 has no ``traceback`` and no
    ``members``: it reads with ``None`` and ``()``. When present, they are a
    string and a non-empty list of errors that have neither.

    Raises:
        RecordDecodeError: anything else (see :func:`loads_record`).
    """
    what = "error member" if member else "error"
    present = data if isinstance(data, dict) and not member else {}
    extras = tuple(f for f in ("traceback", "members") if f in present)
    d = exact_fields(data, ("type", "message", "key", *extras), what)
    listed = d.get("members")
    if "members" in d and (not isinstance(listed, list) or not listed):
        raise RecordDecodeError(
            f"error field 'members' must be a non-empty list, not {listed!r:.100}"
        )
    return ErrorInfo(
        type=str_field(d, "type", what),
        message=str_field(d, "message", what),
        key=opt_str(d, "key", what),
        traceback=str_field(d, "traceback", what) if "traceback" in d else None,
        members=tuple(load_error_info(m, member=True) for m in listed or ()),
    )


def request_to_json(request: Request) -> str:
    """The stored form of *request*: canonical JSON text."""
    return dumps(
        {"key": request.key, "payload": request.payload, "response_type": request.response_type}
    )


def request_from_json(text: str) -> Request:
    """Parse a stored request strictly.

    Raises:
        ValueError: the text is not a request record (the caller names the run).
    """
    data = loads(text)
    if not isinstance(data, dict) or set(data) != {"key", "payload", "response_type"}:
        raise ValueError(f"not a request record: {text:.120}")
    key, type_name = data["key"], data["response_type"]
    if not isinstance(key, str) or not key or not isinstance(type_name, str):
        raise ValueError(f"request record has a bad key or response_type: {text:.120}")
    return Request(key=key, payload=data["payload"], response_type=type_name)


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
        fields = ENTRY_FIELDS_V1 if legacy else ENTRY_FIELDS_V3 if positioned else ENTRY_FIELDS
        d = exact_fields(data, fields, "entry")
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
            run_id=str_field(d, "run_id", "entry"),
            key=str_field(d, "key", "entry"),
            kind=enum_field(EntryKind, d, "kind", "entry"),
            status=enum_field(EntryStatus, d, "status", "entry"),
            value=opt_str(d, "value", "entry"),
            error=None if error is None else load_error_info(error),
            args_digest=str_field(d, "args_digest", "entry"),
            started_at=time_field(d, "started_at", "entry"),
            finished_at=time_field(d, "finished_at", "entry"),
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
        return idempotency_digest(self._content())

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
    #: the queue the run was submitted to (:class:`tether.Queue`'s name;
    #: ``"default"`` for a run submitted without one, and every run stored
    #: before format version 7)
    queue: str = DEFAULT_QUEUE
    #: the key it was submitted with in its queue (``engine.submit(key=)``), or ``None``
    key: str | None = None
    #: its dedupe id (``engine.submit(dedupe=)``): while the run is unfinished,
    #: a submit to its queue with the same id gives this run; ``None``: none
    dedupe: str | None = None
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
            "queue": self.queue,
            "key": self.key,
            "dedupe": self.dedupe,
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
        d = exact_fields(data, RUN_FIELDS_BY_VERSION[version], "run record")
        token = count(d, "token")
        dispatches = count(d, "dispatches")
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
        workflow_version = opt_str(d, "version", "run record") if "version" in d else None
        if workflow_version == "":
            raise RecordDecodeError("run record field 'version' must not be empty")
        wake_at = None
        if d.get("wake_at") is not None:
            wake_at = time_field(d, "wake_at", "run record")
        return cls(
            run_id=str_field(d, "run_id", "run record"),
            workflow=str_field(d, "workflow", "run record"),
            args=str_field(d, "args", "run record"),
            status=enum_field(RunStatus, d, "status", "run record"),
            result=opt_str(d, "result", "run record"),
            error=None if error is None else load_error_info(error),
            requests=tuple(requests),
            created_at=time_field(d, "created_at", "run record"),
            updated_at=time_field(d, "updated_at", "run record"),
            owner=opt_str(d, "owner", "run record") if "owner" in d else None,
            token=token,
            cancel_requested=cancel,
            dispatches=dispatches,
            version=workflow_version,
            wake_at=wake_at,
            queue=str_field(d, "queue", "run record") if "queue" in d else DEFAULT_QUEUE,
            key=opt_str(d, "key", "run record") if "key" in d else None,
            dedupe=opt_str(d, "dedupe", "run record") if "dedupe" in d else None,
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
