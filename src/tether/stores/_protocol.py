"""The store contract: JSON-ready records in, copies out.

A store never imports the engine. Everything a store receives and returns is
made of these frozen records, whose fields are JSON-ready (strings, numbers,
timezone-aware datetimes that serialize as ISO 8601), so a third-party store
can persist them with nothing but the standard library.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, Protocol, TypeVar, final, runtime_checkable

import attrs

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

#: Version of the record format; stored with every run. Version 2 added the
#: lease fields of run records and the fencing token and checksum of entries;
#: version 3 the ``dispatches`` count of run records; version 4 their workflow
#: ``version``; version 5 their ``wake_at``. Records and entries of older
#: versions stay readable.
FORMAT_VERSION = 5


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
    #: a retry's backoff): no lease, no worker slot; any worker claims it once
    #: ``wake_at`` has come; ``engine.run``/``resume`` continue it at once
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


def entry_checksum(idempotency_key: str, seq: int) -> str:
    """The checksum of the entry with this :attr:`Entry.idempotency_key` stored as *seq*.

    The idempotency key covers every field but ``seq``; this covers it too.
    """
    return hashlib.sha256(f"{idempotency_key}:{seq}".encode()).hexdigest()


# ``json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``
# with the encoder made once, not on every call.
_IDEMPOTENCY_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _idempotency_digest(data: dict[str, Any]) -> str:
    """:attr:`Entry.idempotency_key` of an entry's ``to_json()`` without ``"seq"``.

    For stores that encode the entry anyway: they pay for ``to_json()`` once.
    """
    text = _IDEMPOTENCY_ENCODER.encode(data)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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
    #: then on; ``None`` for every other status
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


@final
@attrs.frozen(kw_only=True)
class Renewal:
    """What :meth:`Store.renew` found about the runs an owner said it holds."""

    #: runs whose lease the owner no longer holds (another token or owner now)
    lost: frozenset[str] = frozenset()
    #: held runs with a recorded cancel (``engine.cancel`` from anywhere)
    cancelled: frozenset[str] = frozenset()


#: A workflow as workers serve it: ``(name, version)``, the version ``None`` when unversioned.
Served = tuple[str, str | None]


@final
@attrs.frozen(kw_only=True)
class WorkerAd:
    """A worker's advertisement: the workflows it serves, while it lives.

    Written by :meth:`AdvertisingStore.advertise` when a worker starts and
    renewed while it runs; read back by :meth:`AdvertisingStore.list_workers`
    to find the runs no live worker serves (``tether runs list --stranded``).
    """

    owner: str  #: the worker's engine, ``host:pid:engine-id``
    serves: frozenset[Served]  #: the ``(workflow, version)`` pairs it claims runs of
    expires_at: datetime  #: when the advertisement lapses unless renewed (store's clock)


def served_to_json(serves: Collection[Served]) -> list[list[str | None]]:
    """A :attr:`WorkerAd.serves` set as JSON-ready ``[workflow, version]`` pairs, sorted."""
    pairs = sorted(serves, key=lambda p: (p[0], p[1] is not None, p[1] or ""))
    return [[name, version] for name, version in pairs]


def served_from_json(data: object) -> frozenset[Served]:
    """Decode what :func:`served_to_json` made, strictly.

    Raises:
        RecordDecodeError: anything else.
    """
    if not isinstance(data, list) or not all(
        isinstance(p, list)
        and len(p) == 2
        and type(p[0]) is str
        and p[0]
        and (p[1] is None or (type(p[1]) is str and p[1]))
        for p in data
    ):
        raise RecordDecodeError(
            f"a worker's served workflows must be [workflow, version] pairs, not {data!r:.200}"
        )
    return frozenset((p[0], p[1]) for p in data)


def dumps_served(serves: Collection[Served]) -> str:
    """The JSON text stores keep for a :attr:`WorkerAd.serves` set."""
    return json.dumps(served_to_json(serves), ensure_ascii=False, separators=(",", ":"))


def loads_served(text: str | bytes) -> frozenset[Served]:
    """Decode what :func:`dumps_served` made, strictly (see :func:`loads_record`).

    Raises:
        RecordDecodeError: anything else.
    """
    result: frozenset[Served] = loads_record(text, served_from_json)
    return result


# -- strict record decoding, shared by the stores that persist JSON ------------------------

_ENTRY_FIELDS_V1 = (
    "run_id",
    "seq",
    "key",
    "kind",
    "status",
    "value",
    "error",
    "args_digest",
    "started_at",
    "finished_at",
    "attempt",
)
_ENTRY_FIELDS = (*_ENTRY_FIELDS_V1, "token", "checksum")
_ENTRY_FIELDS_V3 = (*_ENTRY_FIELDS, "position")  # with the call's position
_RUN_FIELDS_V1 = (
    "run_id",
    "workflow",
    "args",
    "status",
    "result",
    "error",
    "requests",
    "created_at",
    "updated_at",
    "format_version",
)
_RUN_FIELDS_V2 = (*_RUN_FIELDS_V1, "owner", "token", "cancel_requested")
_RUN_FIELDS_V3 = (*_RUN_FIELDS_V2, "dispatches")
_RUN_FIELDS_V4 = (*_RUN_FIELDS_V3, "version")
_RUN_FIELDS_BY_VERSION: Final = {
    1: _RUN_FIELDS_V1,
    2: _RUN_FIELDS_V2,
    3: _RUN_FIELDS_V3,
    4: _RUN_FIELDS_V4,
    5: (*_RUN_FIELDS_V4, "wake_at"),
}

E = TypeVar("E", bound=enum.Enum)


class RecordDecodeError(ValueError):
    """A stored record is not valid JSON of the expected shape.

    Raised by :func:`loads_record` and the ``from_json`` decoders; a store
    turns it into :class:`~tether.CheckpointCorruptError` naming the run and
    the location (file, row), which is what callers see.
    """


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise RecordDecodeError(f"duplicate JSON key {k!r}")
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    raise RecordDecodeError(f"{name} is not JSON")


def dumps_record(data: Mapping[str, Any]) -> str:
    """The JSON text stores write for a record's ``to_json()`` dict."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def loads_record(text: str | bytes, decode: Callable[[object], Any]) -> Any:
    """Parse JSON *text* strictly and hand it to *decode* (a ``from_json``).

    Strict: the text must be UTF-8 JSON with no duplicate keys and no
    ``NaN``/``Infinity``.

    Raises:
        RecordDecodeError: the text is not such JSON, or *decode* refused it.
    """
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        data = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except RecordDecodeError:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
        raise RecordDecodeError(f"not valid JSON: {exc}") from None
    try:
        return decode(data)
    except RecordDecodeError:
        raise
    except (ValueError, TypeError) as exc:
        raise RecordDecodeError(str(exc)) from None


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


def first_gap(seqs: Sequence[int]) -> int | None:
    """The first seq missing from ``1, 2, 3, ...`` in the sorted *seqs*, else ``None``.

    A journal's seqs have no gaps: a missing one below the highest means an
    entry was lost, and its journal is corrupt (stores' strict read).
    """
    for expected, seq in enumerate(seqs, 1):
        if seq != expected:
            return expected
    return None


def _exact_fields(data: object, fields: Sequence[str], what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise RecordDecodeError(f"{what} must be a JSON object, not {type(data).__name__}")
    missing = [f for f in fields if f not in data]
    unknown = [k for k in data if k not in fields]
    if missing or unknown:
        parts = []
        if missing:
            parts.append(f"missing field(s) {', '.join(map(repr, missing))}")
        if unknown:
            parts.append(f"unknown field(s) {', '.join(map(repr, unknown))}")
        raise RecordDecodeError(f"{what}: {'; '.join(parts)}")
    return data


def _str(d: dict[str, Any], name: str, what: str) -> str:
    v = d[name]
    if type(v) is not str:
        raise RecordDecodeError(f"{what} field {name!r} must be a string, not {v!r:.100}")
    return v


def _opt_str(d: dict[str, Any], name: str, what: str) -> str | None:
    return None if d[name] is None else _str(d, name, what)


def _count(d: dict[str, Any], name: str) -> int:
    """A non-negative integer field of a run record (0 when an older version lacks it)."""
    v = d.get(name, 0)
    if type(v) is not int or v < 0:
        raise RecordDecodeError(
            f"run record field {name!r} must be a non-negative integer, not {v!r}"
        )
    return v


def _enum(cls: type[E], d: dict[str, Any], name: str, what: str) -> E:
    v = d[name]
    try:
        if type(v) is not str:
            raise ValueError
        return cls(v)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in cls)
        raise RecordDecodeError(
            f"{what} field {name!r} must be one of {choices}, not {v!r:.100}"
        ) from None


def _time(d: dict[str, Any], name: str, what: str) -> datetime:
    v = _str(d, name, what)
    try:
        t = datetime.fromisoformat(v)
    except ValueError:
        raise RecordDecodeError(f"{what} field {name!r} is not an ISO 8601 time: {v!r}") from None
    if t.tzinfo is None or t.utcoffset() is None:
        raise RecordDecodeError(f"{what} field {name!r} has no timezone: {v!r}")
    return t


#: The methods of :class:`Store`, in the order the protocol lists them.
STORE_METHODS: Final = (
    "open",
    "close",
    "create_run",
    "update_run",
    "get_run",
    "list_runs",
    "append",
    "load_entries",
    "claim",
    "renew",
    "cancel_run",
)


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

    async def update_run(self, record: RunRecord) -> RunRecord | None:
        """Replace an existing run record (status, result, error, requests, owner).

        Fenced: in the same atomic step as the write, the store checks the
        record's ``token`` against the run's (see :func:`fenced_update
        <tether.stores.fenced_update>`, which also keeps a recorded cancel).
        Returns the record as stored (the engine tolerates ``None``).

        Raises:
            RunNotFoundError: no run with this id.
            LeaseLostError: the token is not the run's current one; nothing
                was written.
        """

    async def claim(
        self,
        run_id: str,
        owner: str,
        *,
        ttl: float,
        create: RunRecord | None = None,
        takeover: int | None = None,
    ) -> RunRecord:
        """Take the run's lease for *owner* for *ttl* seconds, in one atomic step.

        Reads the run (with its lease), decides with :func:`decide_claim
        <tether.stores.decide_claim>`, writes what it decided, and sets
        *owner*'s lease expiry to now + *ttl* on the store's clock. With
        *create*, a run that is not stored is created already claimed (token
        1). *takeover* is a token whose holder the caller knows to be dead: a
        live lease with exactly that token does not block the claim.

        Returns the claimed record (new token, ``lease_expires_at`` set), or,
        for a completed run, the stored record unchanged.

        Raises:
            RunConflictError: another owner holds a live lease (naming it and
                its expiry), or *create* differs from the stored run.
            RunCancelledError: the run is cancelled or has a recorded cancel.
            RunNotFoundError: no such run and no *create*.
        """

    async def renew(self, owner: str, *, ttl: float, held: Mapping[str, int]) -> Renewal:
        """Extend every lease of *owner* to now + *ttl*: one write, however many runs.

        *held* maps the runs the owner executes to their tokens. Returns which
        of them were lost (another token or owner now) and which have a
        recorded cancel. ``ttl=0`` ends the owner's leases now, so that its
        runs can be claimed at once (tether's engine releases each run in
        its status write instead, but an owner that stops may use it).
        """

    async def cancel_run(self, run_id: str, *, takeover: int | None = None) -> RunRecord:
        """Record a cancel of the run (the one write without a token).

        Decided by :func:`decide_cancel <tether.stores.decide_cancel>` in one
        atomic step: a run held by a live owner gets ``cancel_requested`` (its
        owner stops it); any other unfinished run becomes ``cancelled`` at
        once, its requests cleared. Returns the stored record.

        Raises:
            RunNotFoundError: no run with this id.
            RunConflictError: the run has completed (nothing changes).
        """

    async def get_run(self, run_id: str) -> RunRecord | None:
        """The run record, or ``None`` for an unknown id."""

    async def list_runs(
        self,
        *,
        status: Collection[RunStatus] | None = None,
        workflow: str | None = None,
        after: str | None = None,
        limit: int | None = None,
        version: str | None = None,
    ) -> Sequence[RunRecord]:
        """Run records, oldest first (in creation order), filtered and paged.

        Args:
            status: only runs with one of these statuses.
            workflow: only runs of this workflow.
            after: a run id: only runs created after it (keyset pagination:
                pass the last id of the previous page).
            limit: at most this many records.
            version: only runs started under this workflow version. (The
                engine passes it only when asked to, so a store written
                before versions existed still lists runs.)

        Validate the arguments with :func:`check_run_filter
        <tether.stores.check_run_filter>`; stores that scan their records
        apply :meth:`RunFilter.page <tether.stores.RunFilter.page>`.

        Raises:
            UsageError: invalid arguments.
            RunNotFoundError: *after* names no stored run.
        """

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        """Atomically append journal entries to a run; the one journal write.

        Assigns each entry the run's next ``seq`` (distinct and increasing,
        also under concurrent appends) and returns the stored entries. (The
        engine tolerates ``None`` from a store that does not report them:
        the write counts as done, with the seq unknown to hooks.)

        The built-in stores are idempotent: an entry equal to one already
        stored in the run (same :attr:`Entry.idempotency_key`) is not stored
        again; the stored entry is returned in its place. A cancelled append
        either stored its entries whole or stored nothing; when a store cannot
        tell which (a write already handed to a thread), retrying the same
        entries is safe.

        Fenced: every entry's ``token`` must be the run's current one, checked
        in the same atomic step as the write (:func:`check_append
        <tether.stores.check_append>`).

        Raises:
            RunNotFoundError: no run with this id.
            LeaseLostError: an entry's token is not the run's current one;
                nothing was written.
        """

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        """The run's journal in ``seq`` order (empty for an unknown run).

        Strict: a missing seq below the highest, or an entry that does not
        match its checksum, raises :class:`~tether.CheckpointCorruptError`.
        """


@runtime_checkable
class WorkerStore(Store, Protocol):
    """A store that serves workers (``tether.open_worker``): it has :meth:`claim_next`.

    Optional: the engine needs only :class:`Store`; ``open_worker`` refuses a
    store without ``claim_next``. The built-in stores all have it.
    """

    async def claim_next(
        self,
        owner: str,
        *,
        ttl: float,
        workflows: Collection[Served | str],
        max_dispatches: int,
        gone: Collection[str] = (),
        now: datetime | None = None,
    ) -> RunRecord | None:
        """A worker's claim: take the lease of the oldest dispatchable run, in one atomic step.

        *workflows* are the ``(name, version)`` pairs the worker serves (a
        plain name stands for ``(name, None)``, the unversioned workflow;
        :func:`check_served <tether.stores.check_served>` validates them). A
        run matches only its own pair: a worker serving version ``"2"``
        never takes a version ``"1"`` run.

        Dispatchable (:func:`dispatchable
        <tether.stores.dispatchable>`): a run of one of *workflows* that is
        ``queued``, ``waiting`` with a ``wake_at`` no later than *now* (the
        claiming engine's clock, validated by :func:`check_now
        <tether.stores.check_now>`; ``None``: the wall clock), or
        ``running`` without a live lease (no owner, its
        owner's lease expired, or its owner is one of *gone*, owners the
        caller knows to be dead). Candidates are taken oldest first and
        decided by :func:`decide_dispatch <tether.stores.decide_dispatch>`:
        one with a recorded cancel is stored ``cancelled`` and one already
        dispatched *max_dispatches* times is stored ``dead_letter``, and the
        next candidate is tried; otherwise the claim is written (token and
        ``dispatches`` grow by one, status ``running``, owner *owner*) and
        *owner*'s lease expiry set to now + *ttl*, as :meth:`claim` does.

        Concurrent calls, from any process, never claim the same run.

        Returns:
            The claimed record (``lease_expires_at`` set), or ``None`` when
            no run is dispatchable now.
        """


#: Methods a store needs to serve workers (``tether.open_worker``), beyond :data:`STORE_METHODS`.
WORKER_METHODS: Final = ("claim_next",)


@runtime_checkable
class AdvertisingStore(Protocol):
    """A store where workers say what they serve, so stranded runs can be found (optional).

    ``open_worker`` advertises through it when the store has these methods,
    and ``engine.list_runs(stranded=True)`` (``tether runs list --stranded``)
    needs them; the built-in stores all have them. Advertisements are kept
    apart from leases: renewing one never extends the other.
    """

    async def advertise(self, owner: str, *, serves: Collection[Served], ttl: float) -> None:
        """Record that worker *owner* serves *serves* until now + *ttl* (store's clock).

        One write, replacing what *owner* advertised before; ``ttl=0``
        withdraws the advertisement. Idempotent. A store may drop expired
        advertisements here.

        Raises:
            UsageError: an invalid owner, ttl, or pair.
        """

    async def list_workers(self) -> Sequence[WorkerAd]:
        """The advertisements that have not expired on the store's clock, by owner.

        Raises:
            CheckpointCorruptError: a stored advertisement cannot be read.
        """


#: Methods of :class:`AdvertisingStore`: what finding stranded runs needs.
ADVERTISE_METHODS: Final = ("advertise", "list_workers")


@runtime_checkable
class DeletableStore(Protocol):
    """A store that can delete a run with its journal (optional).

    Retention (``tether runs prune``) needs it; the engine never calls it,
    so a store without it works everywhere else. The built-in stores all
    have it; :func:`tether.testing.check_store` checks it when present.
    """

    async def delete_run(self, run_id: str) -> bool:
        """Delete the run record and its whole journal, in one atomic step.

        Atomic for every reader, in every process: a read sees the whole run
        or no run (never a record without its journal, never a journal with
        a gap), also after a crash in the middle of the delete. A deleted id
        reads as unknown (``get_run`` returns ``None``, ``load_entries`` an
        empty journal), is gone from ``list_runs``, and can be created again,
        fresh (token 1, an empty journal), by ``create_run`` or ``claim``.
        Whatever the status: choosing which runs may go is the caller's
        (``runs prune`` deletes finished ones).

        Decide with :func:`check_delete <tether.stores.check_delete>` on the
        record read in the same atomic step. Cancelled, it deleted the run
        whole or not at all (a retry is safe).

        Returns:
            ``True`` when the run was deleted, ``False`` when no run has this
            id (nothing changes).

        Raises:
            RunConflictError: an owner holds a live lease on the run (it is
                executing); nothing was deleted.
        """


#: Methods of :class:`DeletableStore`: what deleting runs needs.
DELETE_METHODS: Final = ("delete_run",)


@runtime_checkable
class WatchableStore(Protocol):
    """A store that announces changes, so waiters need not poll (optional).

    ``open_engine`` starts :meth:`watch` in its own nursery when the store
    has it; ``engine.wait`` and workers then wake at once on a change and
    poll only as a fallback.
    """

    async def watch(self, changed: Callable[[], None]) -> None:
        """Call *changed()*, in this Trio run, after changes to runs; never return.

        A change is a committed write of a run record by anyone (a new or
        queued run, a status change, a recorded cancel), in any process.
        Notifications are hints: one may be lost (a dropped connection) or
        stand for several changes, so callers re-read what they wait for.
        Runs until cancelled; store errors are retried, not raised.
        """
