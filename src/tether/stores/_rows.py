"""Journal rows as stores write them: their exact JSON text and checksums.

Layer: stores (``tether.stores``).

An append is encoded once by the caller (:func:`encode_append`): each
entry's idempotency key and its JSON after the seq, so that a writer only
numbers its rows (:func:`row_data`). The text is exactly what
``dumps_record`` writes for ``entry.stored_as(seq).to_json()``, checksum
included: :func:`generic_encode_entry` is the reference, and a test holds
the fast path equal to it. Shared by the stores that keep entries as rows
(SQLite, PostgreSQL).
"""

from __future__ import annotations

import hashlib
import json
import json.encoder
from collections.abc import Sequence
from datetime import datetime
from typing import Final

import attrs

from .._errors import ErrorInfo
from ._record_json import entry_checksum
from ._records import Entry, EntryKind, EntryStatus

__all__ = (
    "Appending",
    "encode_append",
    "encode_entry",
    "generic_encode_entry",
    "row_data",
)


# ``dumps_record``'s encoder, made once.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


@attrs.frozen
class Appending:
    """An append, encoded before it is queued: the writer only numbers it.

    Row ``i`` of the run stored with seq ``n`` has the data
    ``head + str(n) + tails[i] + checksum``, exactly
    ``dumps_record(entry.stored_as(n).to_json())`` (see :func:`row_data`).
    """

    run_id: str
    head: str  # '{"run_id":<run_id>,"seq":'
    ikeys: tuple[str, ...]  # Entry.idempotency_key of each entry
    tails: tuple[str, ...]  # each entry's JSON after its seq, up to its checksum
    entries: tuple[Entry, ...]  # for the fencing check


def encode_append(run_id: str, entries: Sequence[Entry]) -> Appending:
    ikeys: list[str] = []
    tails: list[str] = []
    for entry in entries:
        ikey, tail = encode_entry(entry)
        ikeys.append(ikey)
        tails.append(tail)
    head = '{"run_id":' + _string(run_id) + ',"seq":'
    return Appending(run_id, head, tuple(ikeys), tuple(tails), tuple(entries))


def row_data(appending: Appending, i: int, seq: int) -> str:
    """The stored JSON of entry *i* of *appending* as seq *seq*, checksum included."""
    checksum = entry_checksum(appending.ikeys[i], seq)
    return f'{appending.head}{seq}{appending.tails[i]},"checksum":"{checksum}"}}'


# What json.dumps(..., ensure_ascii=False) writes for a string.
_string: Final = json.encoder.encode_basestring
_KINDS: Final = {k: _string(k.value) for k in EntryKind}
_STATUSES: Final = {s: _string(s.value) for s in EntryStatus}


def encode_entry(entry: Entry) -> tuple[str, str]:
    """(:attr:`Entry.idempotency_key`, the JSON of the entry after its seq).

    Both texts are assembled from one encoding of each field, exactly as
    ``json.dumps`` writes them (``generic_encode_entry`` is the reference;
    a test holds them equal); a field of an unexpected type takes that path.
    """
    e = entry
    error = e.error
    value = e.value
    position = e.position
    if not (
        type(e.key) is str
        and type(e.run_id) is str
        and type(e.args_digest) is str
        and type(e.attempt) is int
        and type(e.token) is int
        and type(e.kind) is EntryKind
        and type(e.status) is EntryStatus
        and type(e.started_at) is datetime
        and type(e.finished_at) is datetime
        and (value is None or type(value) is str)
        and (position is None or type(position) is int)
        and (
            error is None
            or (
                type(error) is ErrorInfo
                and type(error.type) is str
                and type(error.message) is str
                and (error.key is None or type(error.key) is str)
                and error.traceback is None  # (the failures with one take the other path)
                and not error.members
            )
        )
    ):
        return generic_encode_entry(e)
    key = _string(e.key)
    kind = _KINDS[e.kind]
    status = _STATUSES[e.status]
    text = "null" if value is None else _string(value)
    digest = _string(e.args_digest)
    started = '"' + e.started_at.isoformat() + '"'  # ISO 8601: nothing to escape
    finished = '"' + e.finished_at.isoformat() + '"'
    attempt = int.__repr__(e.attempt)
    token = int.__repr__(e.token)
    if error is None:
        err = sorted_err = "null"
    else:
        etype, emessage = _string(error.type), _string(error.message)
        ekey = "null" if error.key is None else _string(error.key)
        err = f'{{"type":{etype},"message":{emessage},"key":{ekey}}}'
        sorted_err = f'{{"key":{ekey},"message":{emessage},"type":{etype}}}'
    # An entry without a position is written in the older format, without the field.
    place = "" if position is None else f',"position":{int.__repr__(position)}'
    ikey_text = (
        f'{{"args_digest":{digest},"attempt":{attempt},"error":{sorted_err},'
        f'"finished_at":{finished},"key":{key},"kind":{kind}{place},'
        f'"run_id":{_string(e.run_id)},'
        f'"started_at":{started},"status":{status},"token":{token},"value":{text}}}'
    )
    tail = (
        f',"key":{key},"kind":{kind},"status":{status},"value":{text},"error":{err},'
        f'"args_digest":{digest},"started_at":{started},"finished_at":{finished},'
        f'"attempt":{attempt},"token":{token}{place}'
    )
    return hashlib.sha256(ikey_text.encode("utf-8")).hexdigest(), tail


def generic_encode_entry(entry: Entry) -> tuple[str, str]:
    data = entry.to_json()  # run_id, seq, then the rest, in this order, checksum last
    ikey = entry.idempotency_key
    for name in ("run_id", "seq", "checksum"):
        del data[name]
    return ikey, "," + _ENCODER.encode(data)[1:-1]
