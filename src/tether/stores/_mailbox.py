"""A run's mailbox: the messages ``engine.send`` stores for ``tether.receive``.

Layer: stores (``tether.stores``).

A store that keeps messages (a :class:`MailboxStore`: every built-in one)
stores each one with the run's next ``seq`` (1, 2, 3, ... per run, in send
order, no gaps), in one atomic step that also checks the run and wakes it
when it is parked. As with :mod:`._leases`, the rules are written once,
here, and every store calls them inside its atomic step:

- :func:`check_send` and :func:`check_after` validate the arguments;
- :func:`decide_send` decides on the run record read in the step: an unknown
  run or a finished one refuses the message, and a ``waiting`` run is made
  due now (its ``wake_at`` moved to the send's *now*, or kept when earlier);
- :func:`load_message` is the one strict reader of a stored message, and
  :func:`message_gap` finds a seq missing from what a read returned.

A stored message is one JSON record (``dumps_record(message.to_json())``),
with a format number and a checksum over every field, read back as strictly
as journal entries are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final, Protocol, final, runtime_checkable

import attrs

from .._errors import RunConflictError, RunNotFoundError, UsageError
from ._record_json import (
    RecordDecodeError,
    exact_fields,
    first_gap,
    idempotency_digest,
    loads_record,
    str_field,
    time_field,
)
from ._records import RunRecord, RunStatus
from ._run_ids import check_run_id

__all__ = (
    "FINISHED",
    "MAILBOX_METHODS",
    "MESSAGE_FORMAT",
    "MailboxStore",
    "Message",
    "check_after",
    "check_message_name",
    "check_send",
    "decide_send",
    "load_message",
    "message_gap",
)

#: Version of a stored message's format (its ``format_version`` field).
MESSAGE_FORMAT: Final = 1

#: Statuses of a run that never executes again on its own: it takes no message.
FINISHED: Final = frozenset(s for s in RunStatus if s.finished)

#: 1 to 100 letters, digits, ``_``, ``-`` or ``.``.
_NAME: Final = re.compile(r"[A-Za-z0-9_.\-]{1,100}")

_FIELDS: Final = ("format_version", "run_id", "seq", "name", "value", "sent_at", "checksum")


@final
@attrs.frozen(kw_only=True)
class Message:
    """One message sent to a run, as its store keeps it."""

    run_id: str
    seq: int  #: 1, 2, 3, ... per run, in send order, no gaps
    name: str  #: the name the workflow declared it under
    value: str  #: JSON text, exactly as the sender encoded it
    sent_at: datetime  #: the sender's *now* (timezone-aware, UTC)

    def _content(self) -> dict[str, Any]:
        return {
            "format_version": MESSAGE_FORMAT,
            "run_id": self.run_id,
            "seq": self.seq,
            "name": self.name,
            "value": self.value,
            "sent_at": self.sent_at.isoformat(),
        }

    @property
    def checksum(self) -> str:
        """The digest of every stored field; stored with the message, verified on reads."""
        return idempotency_digest(self._content())

    def to_json(self) -> dict[str, Any]:
        """This message as a JSON-ready dict, with its :attr:`checksum`."""
        content = self._content()
        content["checksum"] = idempotency_digest(content)
        return content

    @classmethod
    def from_json(cls, data: object) -> Message:
        """Decode what :meth:`to_json` made, strictly: every field present, of its
        exact JSON type, nothing else; ``sent_at`` timezone-aware; and the stored
        checksum equal to the one of the decoded content.

        Raises:
            RecordDecodeError: the data is not such a message, of a format this
                tether reads, or its content changed after it was stored.
        """
        version = data.get("format_version") if isinstance(data, dict) else None
        if version != MESSAGE_FORMAT or type(version) is not int:
            raise RecordDecodeError(
                f"message has format_version {version!r}; this tether reads {MESSAGE_FORMAT} "
                "(a newer tether wrote it?)"
            )
        d = exact_fields(data, _FIELDS, "message")
        seq = d["seq"]
        if type(seq) is not int or seq < 1:
            raise RecordDecodeError(f"message field 'seq' must be a positive integer, not {seq!r}")
        message = cls(
            run_id=str_field(d, "run_id", "message"),
            seq=seq,
            name=str_field(d, "name", "message"),
            value=str_field(d, "value", "message"),
            sent_at=time_field(d, "sent_at", "message"),
        )
        if d["checksum"] != message.checksum:
            raise RecordDecodeError(
                f"message seq {seq} does not match its checksum ({d['checksum']!r:.80}): "
                "its content changed after it was stored"
            )
        return message


def load_message(text: str | bytes, run_id: str, seq: int) -> Message:
    """Decode stored text as message *seq* of *run_id* (every store's strict read).

    Raises:
        RecordDecodeError: not a message, or one of another run or seq; the
            store turns it into :class:`~tether.CheckpointCorruptError` naming
            itself, the run and the seq.
    """
    message: Message = loads_record(text, Message.from_json)
    if message.run_id != run_id:
        raise RecordDecodeError(f"the message names run {message.run_id!r}")
    if message.seq != seq:
        raise RecordDecodeError(f"the message says seq {message.seq}, where it is stored {seq}")
    return message


def message_gap(seqs: Sequence[int], *, after: int) -> int | None:
    """The first seq missing from ``after + 1, after + 2, ...`` in the sorted *seqs*.

    ``None`` when none is: what ``load_messages(run_id, after=after)`` read
    has no gap (a missing seq below the highest means a message was lost, and
    the mailbox is corrupt).
    """
    gap = first_gap([seq - after for seq in seqs])
    return None if gap is None else gap + after


def check_message_name(name: object) -> str:
    """A message name, validated: 1 to 100 letters, digits, ``_``, ``-`` or ``.``.

    Raises:
        UsageError: anything else.
    """
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise UsageError(
            f"a message name is 1 to 100 letters, digits, '_', '-' or '.', not {name!r:.120}"
        )
    return name


def check_send(run_id: object, name: object, value: object, now: object) -> datetime:
    """``send_message``'s arguments, validated; returns *now* in UTC (the ``sent_at``).

    Raises:
        UsageError: an invalid run id (:func:`check_run_id`), an invalid name,
            a value that is not JSON text, or a *now* that is not a
            timezone-aware datetime.
    """
    check_run_id(run_id)
    check_message_name(name)
    if not isinstance(value, str):
        raise UsageError(f"a message's value is JSON text, not {type(value).__name__}")
    try:
        json.loads(value)
    except ValueError:
        raise UsageError(f"a message's value is JSON text, not {value!r:.100}") from None
    if not isinstance(now, datetime) or now.utcoffset() is None:
        raise UsageError(f"send_message's now is a timezone-aware datetime, not {now!r:.100}")
    return now.astimezone(UTC)


def check_after(after: object) -> int:
    """``load_messages``'s *after*, validated: a non-negative integer (a seq, or 0).

    Raises:
        UsageError: anything else.
    """
    if not isinstance(after, int) or isinstance(after, bool) or after < 0:
        raise UsageError(f"after must be a message seq or 0, not {after!r:.100}")
    return after


def decide_send(current: RunRecord | None, *, run_id: str, now: datetime) -> RunRecord | None:
    """Decide a send to *run_id* on the record read in the same atomic step.

    Returns the run record to store with the message, or ``None`` when the
    record stays as it is: a ``waiting`` run (parked on timers or messages)
    is made due at *now* (a ``wake_at`` earlier than *now* is kept; ``None``,
    waiting for messages, counts as later than anything), so that any worker
    claims it at once.

    Raises:
        RunNotFoundError: no such run.
        RunConflictError: the run has finished (completed, failed, dead letter
            or cancelled); nothing may be stored.
    """
    if current is None:
        raise RunNotFoundError(f"no run {run_id!r} to send a message to")
    if current.status.finished:
        raise RunConflictError(
            f"run {run_id!r} is {current.status.value}: a finished run takes no messages "
            "(nothing was stored)"
        )
    if current.status is not RunStatus.WAITING or (
        current.wake_at is not None and current.wake_at <= now
    ):
        return None
    return attrs.evolve(current, wake_at=now, updated_at=now, lease_expires_at=None)


#: The methods of :class:`MailboxStore`, as wrappers forward them.
MAILBOX_METHODS: Final = ("send_message", "load_messages")


@runtime_checkable
class MailboxStore(Protocol):
    """A store that keeps runs' messages, for ``engine.send`` and ``tether.receive`` (optional).

    The engine refuses ``send`` and ``receive`` on a store without these
    methods; the built-in stores all have them, and
    :func:`tether.testing.check_store` checks them when present.
    """

    async def send_message(self, run_id: str, name: str, value: str, *, now: datetime) -> Message:
        """Store a message for the run with its next seq, in one atomic step.

        In that step: the run must exist and not be finished (decided by
        :func:`decide_send <tether.stores.decide_send>` on the record read
        there); the message is stored with the seq after the run's highest;
        a ``waiting`` run's ``wake_at`` becomes ``min(wake_at, now)``
        (``None`` counts as later than anything), so workers claim it at
        once; and it is a change for :meth:`~tether.stores.WatchableStore.watch`.
        *value* is JSON text, stored exactly; *now* (timezone-aware) is the
        sender's clock, stored as :attr:`Message.sent_at` in UTC.

        Cancelled, it stored the message whole or not at all. A store that
        cannot tell which (a write handed to a thread) documents it.

        Returns:
            The stored message.

        Raises:
            RunNotFoundError: no such run.
            RunConflictError: the run has finished; nothing was stored.
            UsageError: invalid arguments (:func:`check_send
                <tether.stores.check_send>`).
        """

    async def load_messages(self, run_id: str, *, after: int = 0) -> Sequence[Message]:
        """The run's messages with ``seq > after``, in seq order (empty for an unknown run).

        Strict: a message that does not decode or match its checksum, or a
        seq missing below the highest, raises
        :class:`~tether.CheckpointCorruptError` naming the store, the run and
        the seq.

        Raises:
            UsageError: *after* is not a non-negative integer.
        """
