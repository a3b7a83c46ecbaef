"""``tether.receive``: a run takes the messages sent to it, each exactly once.

Layer: the API of workflow code (``_api``).

A receive is a call like a step: it takes its key (``receive.approve#n``,
counted per name) and position when it is called. The first execution that
reaches it takes the lowest-seq message of its name that no journaled receive
and no other receive of this execution has taken, and journals it (an entry of
kind ``message``: ``{"name": "approve", "seq": 3, "value": ...}``) before
returning it. So each message goes to exactly one receiving call, in send
order per name, through any crash: a crash before the save leaves the message
untaken, and the next execution takes it again. A replay returns the journaled
message, decoded by the call's type. The messages read from the mailbox, and
the seqs taken, are kept in the execution's
:class:`~tether._core._run.RunState`.

With no message yet, the task waits: it reads the mailbox again on every
change the engine learns of (a send from this process at once; others where
the store announces changes), and polls it otherwise. The wait never keeps a
run from settling (see :meth:`RunState._check_settled
<tether._core._run.RunState._check_settled>`): with an ``ask`` pending the run
pauses, and under a worker it parks, stored ``waiting`` with no ``wake_at``
(or its earliest timer's), until a send makes it due. A send that lands
between the execution's last read of the mailbox and its park write is caught
by :func:`wake_if_sent`.
"""

from __future__ import annotations

import logging
from typing import Any, Final, TypeVar, overload

import trio

from .._codec._values import codec, describe, dumps, loads
from .._core._events import MessageReceived
from .._core._frame import check_key, current_frame
from .._core._replay import json_kind
from .._core._run import RunState, own
from .._core._store_calls import StoreErrors, mailbox
from .._errors import (
    CheckpointCorruptError,
    CodecError,
    MessageRejectedError,
    UsageError,
)
from ..stores._mailbox import Message, check_message_name
from ..stores._records import Entry, EntryKind

__all__ = ("receive", "unseen")

log = logging.getLogger("tether")

#: A waiting receive reads the mailbox again after this long at first, doubling to _MAX_POLL
#: (a change the engine learns of wakes it at once).
_FIRST_POLL: Final = 0.05
_MAX_POLL: Final = 1.0

#: The fields of a journaled message (an entry of kind ``message``).
_FIELDS: Final = frozenset({"seq", "name", "value"})

T = TypeVar("T")


def unseen(run: RunState, messages: list[Message]) -> list[Message]:
    """Those of *messages* (just read) this execution had not read yet, and remember them.

    Messages already taken (journaled, or by a receive of this execution)
    are not kept for receives; a read that overlapped another one's keeps
    only what that one did not.
    """
    taken = _taken(run)
    fresh = [m for m in messages if m.seq > run.mailbox_read]
    if fresh:
        run.mailbox_read = fresh[-1].seq
        run.messages = own(run.messages)
        run.messages.extend(m for m in fresh if m.seq not in taken)
    return fresh


async def _read(run: RunState) -> None:
    """Read the messages sent since the last read into ``run.messages``.

    A checkpoint; cancelled, nothing is remembered (the next read reads them).

    Raises:
        StoreError, CheckpointCorruptError: the store failed, or a message
            cannot be read.
    """
    with StoreErrors(f"reading the mailbox of run {run.run_id!r}"):
        read = await mailbox(run.store).load_messages(run.run_id, after=run.mailbox_read)
    unseen(run, list(read))


def _taken(run: RunState) -> set[int]:
    """The seqs of messages no receive of this execution may take: journaled, or taken."""
    taken = run.taken
    if taken is None:
        taken = run.taken = set()
        for entry in run.journal.values():
            if entry.kind is EntryKind.MESSAGE:
                taken.add(_journaled(entry, run.run_id)[0])
    return taken


def _journaled(entry: Entry, run_id: str) -> tuple[int, str, Any]:
    """The seq, name and value (JSON values) journaled in a ``message`` *entry*.

    Raises:
        CheckpointCorruptError: its value is not such a record.
    """
    try:
        data = loads(entry.value or "null")
    except (ValueError, CodecError):
        data = None
    if (
        isinstance(data, dict)
        and set(data) == _FIELDS
        and type(data["seq"]) is int
        and data["seq"] >= 1
        and isinstance(data["name"], str)
    ):
        return data["seq"], data["name"], data["value"]
    raise CheckpointCorruptError(
        f"run {run_id!r}: receive {entry.key} (seq {entry.seq}): the journaled value "
        f"{entry.value!r:.100} is not a message ({{'seq': n, 'name': ..., 'value': ...}})"
    )


def _check_call(run: RunState, name: object, tp: Any) -> str:
    """The name of a ``receive(name, tp)`` call, once the run's workflow declares it so.

    Raises:
        UsageError: an invalid name, a name the workflow does not declare, or
            one declared with another type; or a store that keeps no messages.
    """
    name = check_message_name(name)
    declared = run.declared_messages
    if name not in declared:
        names = ", ".join(map(repr, sorted(declared))) or "none"
        raise UsageError(
            f"tether.receive({name!r}, ...) in run {run.run_id!r}: workflow {run.workflow} "
            f"declares no message {name!r} (declared: {names}); declare it with "
            f"@tether.workflow(messages={{{name!r}: {describe(tp)}}})"
        )
    if declared[name] != tp:
        raise UsageError(
            f"tether.receive({name!r}, {describe(tp)}) in run {run.run_id!r}: workflow "
            f"{run.workflow} declares message {name!r} as {describe(declared[name])}; "
            "receive it as exactly that type"
        )
    mailbox(run.store)
    return name


@overload
async def receive(name: str, response_type: type[T], *, key: str | None = None) -> T: ...
@overload
async def receive(name: str, response_type: Any, *, key: str | None = None) -> Any: ...
async def receive(name: str, response_type: Any, *, key: str | None = None) -> Any:
    """Wait for the next message called *name* sent to this run; return it, decoded.

    The message is decoded strictly into *response_type*, as ``tether.ask``
    decodes its response.

    Use inside a workflow or a ``parallel()`` branch. The workflow must
    declare the message with exactly this type
    (``@tether.workflow(messages={"approve": bool})``). Messages are sent
    with ``engine.send(run_id, name, value)`` (or ``tether send``), from any
    process, before or while the run waits; each one is taken by exactly
    one receiving call, in send order per name, and journaled before it is
    returned, so a resumed run returns the same message again at this call.
    The call's key is ``receive.<name>#n`` among its parent's calls, counted
    per name (or *key*, a string without ``/``).

    A checkpoint. With no message yet, the task waits, woken by a send from
    this process at once, from others where the store announces changes
    (else it polls the store, at most a second apart); cancelled like
    ``trio.sleep``, it took nothing. The wait never keeps the run from
    settling: with a ``tether.ask`` pending the run pauses (messages wait in
    the mailbox for the resume), and under a worker the run *parks*, stored
    ``waiting`` and holding no lease nor slot, until a message is sent to it
    (see :func:`tether.open_worker`): this task is then cancelled,
    framework-owned, and the run goes on from its journal.

    Raises:
        UsageError: *name* is not declared with exactly type
            *response_type*, or the run's store keeps no messages.
        NotInRunError: outside a run, or in a task tether does not track.
        NonDeterminismError: the journal holds another call at this place,
            or a message that no longer decodes as *response_type*.
        MessageRejectedError: the message taken does not decode as
            *response_type* (it was stored around ``engine.send``, or the
            type changed since it was sent); nothing was journaled.
        StoreError: the mailbox could not be read, or the message journaled.
    """
    if key is not None:
        check_key(key)
    frame = current_frame("tether.receive()")
    run = frame.run
    name = _check_call(run, name, response_type)
    key, position = frame.next_call(f"receive.{name}", key)
    entry = await run.reach("receive", key, position)
    if entry is not None:
        await trio.lowlevel.cancel_shielded_checkpoint()
        return _replayed(run, entry, name, response_type, key, position)
    message = await _take(run, name)
    what = f"message {name!r} (seq {message.seq}) of run {run.run_id!r}"
    try:
        primitive = loads(message.value)
        value = codec.structure(primitive, response_type, what=what)
    except (ValueError, CodecError) as exc:
        raise MessageRejectedError(
            f"receive {key}: {what} does not decode as {describe(response_type)}: {exc}. It "
            "was stored around engine.send, or the declared type changed since it was sent; "
            "nothing was journaled"
        ) from exc
    text = dumps({"seq": message.seq, "name": name, "value": primitive})
    # Durable before visible: a crash before this save leaves the message for the next execution.
    await run.save([run.call_entry(EntryKind.MESSAGE, key, position, text, at=run.clock.now())])
    if run.observer is not None:
        run.observer(MessageReceived(run_id=run.run_id, key=key, name=name, seq=message.seq))
    return value


def _replayed(run: RunState, entry: Entry, name: str, tp: Any, key: str, position: int) -> Any:
    """The message journaled in *entry* for the receive *key*, once the call matches it."""
    run.check_kind(entry, EntryKind.MESSAGE, "receive", key, position)
    seq, journaled, primitive = _journaled(entry, run.run_id)
    if journaled != name:
        raise run.diverged(
            "receive",
            key,
            position,
            f"it journaled a message {journaled!r} (journal seq {entry.seq}), not {name!r}",
        )
    what = f"message {name!r} (seq {seq}) of run {run.run_id!r}"
    try:
        return codec.structure(primitive, tp, what=what)
    except CodecError as exc:
        kind = json_kind(dumps(primitive), what=what)
        detail = (
            f"its journaled message {name!r} (seq {seq} in the mailbox) is {kind}, which "
            f"does not decode as {describe(tp)} (the receive's type now)"
        )
        raise run.diverged("receive", key, position, detail) from exc


async def _take(run: RunState, name: str) -> Message:
    """Take the lowest-seq message called *name* no receive has taken; wait for one.

    Taken synchronously once found, so two receives of one name never take
    the same message. A message taken stays taken for this execution even
    if its save fails: the save may have landed, and a second taker would
    journal it twice (the next execution knows from its journal).
    """
    changes = run.live_host().changes
    taken = _taken(run)
    poll = _FIRST_POLL
    while True:
        message = _first(run, name)
        if message is None:
            # The generation before the read: a send landing after it wakes the wait.
            seen = changes.generation
            await _read(run)
            message = _first(run, name)
        if message is not None:
            run.messages.remove(message)
            taken.add(message.seq)
            return message
        with run.receive_wait(name):
            await changes.wait(seen, poll)
        poll = min(poll * 2, _MAX_POLL)


def _first(run: RunState, name: str) -> Message | None:
    return next((m for m in run.messages if m.name == name), None)
