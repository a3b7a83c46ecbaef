"""The JSON form of stored records: format versions, strict reading, digests.

Layer: stores (``tether.stores``).

Records (:mod:`._records`) say what their fields mean; this module says how
their JSON is written and read, whatever the record: the format version and
the fields of each version, the one writer (:func:`dumps_record`) and the one
strict reader (:func:`loads_record`, with :class:`RecordDecodeError` for
anything else), the readers of single fields that every ``from_json`` uses
(exact JSON types, timezone-aware times), the gap check of a journal's seqs,
and the digests of an entry's JSON (its idempotency key and checksum). None
of it depends on what a record holds, which is why it is apart: every record,
and every store that persists JSON, reads by the same strict rules.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, TypeVar

__all__ = (
    "ENTRY_FIELDS",
    "ENTRY_FIELDS_V1",
    "ENTRY_FIELDS_V3",
    "FORMAT_VERSION",
    "RUN_FIELDS_BY_VERSION",
    "count",
    "enum_field",
    "exact_fields",
    "idempotency_digest",
    "opt_str",
    "str_field",
    "time_field",
    "RecordDecodeError",
    "dumps_record",
    "entry_checksum",
    "first_gap",
    "loads_record",
)

#: Version of the record format; stored with every run. Version 2 added the
#: lease fields of run records and the fencing token and checksum of entries;
#: version 3 the ``dispatches`` count of run records; version 4 their workflow
#: ``version``; version 5 their ``wake_at``; version 6 the ``traceback`` and
#: ``members`` of stored errors (of run records and entries, written only
#: when there are some); version 7 the ``queue``, ``key`` and ``dedupe`` of run
#: records. Records and entries of older versions stay readable.
FORMAT_VERSION = 7


# The fields of each format version, exactly: ``from_json`` refuses a missing or unknown one.
ENTRY_FIELDS_V1 = (
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
ENTRY_FIELDS = (*ENTRY_FIELDS_V1, "token", "checksum")
ENTRY_FIELDS_V3 = (*ENTRY_FIELDS, "position")  # with the call's position
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
RUN_FIELDS_BY_VERSION: Final = {
    1: _RUN_FIELDS_V1,
    2: _RUN_FIELDS_V2,
    3: _RUN_FIELDS_V3,
    4: _RUN_FIELDS_V4,
    5: (*_RUN_FIELDS_V4, "wake_at"),
    6: (*_RUN_FIELDS_V4, "wake_at"),  # the same fields; errors may hold more
    7: (*_RUN_FIELDS_V4, "wake_at", "queue", "key", "dedupe"),
}


# -- strict record decoding, shared by the stores that persist JSON ------------------------

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


def exact_fields(data: object, fields: Sequence[str], what: str) -> dict[str, Any]:
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


def str_field(d: dict[str, Any], name: str, what: str) -> str:
    v = d[name]
    if type(v) is not str:
        raise RecordDecodeError(f"{what} field {name!r} must be a string, not {v!r:.100}")
    return v


def opt_str(d: dict[str, Any], name: str, what: str) -> str | None:
    return None if d[name] is None else str_field(d, name, what)


def count(d: dict[str, Any], name: str) -> int:
    """A non-negative integer field of a run record (0 when an older version lacks it)."""
    v = d.get(name, 0)
    if type(v) is not int or v < 0:
        raise RecordDecodeError(
            f"run record field {name!r} must be a non-negative integer, not {v!r}"
        )
    return v


def enum_field(cls: type[E], d: dict[str, Any], name: str, what: str) -> E:
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


def time_field(d: dict[str, Any], name: str, what: str) -> datetime:
    v = str_field(d, name, what)
    try:
        t = datetime.fromisoformat(v)
    except ValueError:
        raise RecordDecodeError(f"{what} field {name!r} is not an ISO 8601 time: {v!r}") from None
    if t.tzinfo is None or t.utcoffset() is None:
        raise RecordDecodeError(f"{what} field {name!r} has no timezone: {v!r}")
    return t


def first_gap(seqs: Sequence[int]) -> int | None:
    """The first seq missing from ``1, 2, 3, ...`` in the sorted *seqs*, else ``None``.

    A journal's seqs have no gaps: a missing one below the highest means an
    entry was lost, and its journal is corrupt (stores' strict read).
    """
    for expected, seq in enumerate(seqs, 1):
        if seq != expected:
            return expected
    return None


# -- digests of an entry's JSON ------------------------------------------------------------


def entry_checksum(idempotency_key: str, seq: int) -> str:
    """The checksum of the entry with this :attr:`Entry.idempotency_key` stored as *seq*.

    The idempotency key covers every field but ``seq``; this covers it too.
    """
    return hashlib.sha256(f"{idempotency_key}:{seq}".encode()).hexdigest()


# ``json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``
# with the encoder made once, not on every call.
_IDEMPOTENCY_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def idempotency_digest(data: dict[str, Any]) -> str:
    """:attr:`Entry.idempotency_key` of an entry's ``to_json()`` without ``"seq"``.

    For stores that encode the entry anyway: they pay for ``to_json()`` once.
    """
    text = _IDEMPOTENCY_ENCODER.encode(data)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
