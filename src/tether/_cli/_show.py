"""``runs show``: one run in full, its state, pending requests, messages and journal.

Layer: the command line (``_cli``).

The longest of the run printers, and the only one that shows a journal entry's
outcome in words (a retry's next attempt, a timer's due time, the message a
receive took). Built on :mod:`._format`'s words for a run's state and on
:mod:`._text`'s times and tables; like them it writes to a stream it is given
and reads nothing from a store.

Whole because :func:`print_run` is the ``runs show`` page printed top to
bottom, in the order it is read (the run's state in words, its requests,
messages, failed attempts, journal; an error's traceback under it); its
sections share the stream and the width values are cut to, and each is a few
lines (the messages, an error's traceback and an entry's outcome in words are
helpers already).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TextIO

from .._engine._engine import RunInfo
from .._engine._info import backing_off
from .._engine._serving import is_stranded, stranded_text
from .._errors import ErrorInfo
from .._terminal import abbrev, escape_controls, table
from .._ui._timeline import entries_count, own_duration, timer_due
from ..stores import DEFAULT_QUEUE, Entry, EntryKind, EntryStatus, Message, RunStatus, Served
from ._format import interrupted, message_takers, next_step, wake
from ._text import clock, duration, json_text, lease, stored, stored_json, when

__all__ = ("print_run",)


def print_run(
    info: RunInfo,
    out: TextIO,
    *,
    width: int | None,
    store: str | None = None,
    messages: Sequence[Message] = (),
    served: frozenset[Served] | None = None,
) -> None:
    """``runs show``: values cut to *width* columns (``None``: shown in full, ``--full``);
    *messages*, the run's mailbox, listed with the receive that took each (or pending);
    *served*, what the live workers serve (``None``: unknown), to say whether a worker
    takes the run up or it is stranded."""
    cut = None if width is None else width - 11

    def field(name: str, value: str) -> None:
        print(f"{name + ':':<10} {escape_controls(value)}", file=out)

    field("run", info.run_id)
    field("workflow", info.workflow)
    if info.queue != DEFAULT_QUEUE or info.key is not None or info.dedupe is not None:
        placed = [f"queue {info.queue}"]
        placed += [] if info.key is None else [f"key {info.key}"]
        placed += [] if info.dedupe is None else [f"dedupe id {info.dedupe}"]
        field("queue", ", ".join(placed))
    if info.executing:
        field("status", f"{info.status.value} — executing")
        field("owner", str(info.owner))
        if info.lease_expires_at is not None:
            field("lease", lease(info.lease_expires_at))
    elif interrupted(info):
        cancel = ", cancel requested" if info.cancel_requested else ""
        then = next_step(info, store, served)
        field("status", f"{info.status.value} — interrupted{cancel}: {then}")
        last = "" if info.owner is None else f" (last: {info.owner}, no longer live)"
        field("owner", f"none{last}")
    elif info.status is RunStatus.QUEUED:
        field("status", f"{info.status.value} — waiting for a worker")
    elif info.status is RunStatus.WAITING and info.wake_at is None:
        field("status", f"{info.status.value} — parked, waiting for a message, holding no lease")
        field("wakes", "when a message is sent to it: any worker takes it up then")
    elif backing_off(info):
        tries = f"{info.dispatches} execution{'s' * (info.dispatches != 1)}"
        field("status", f"{info.status.value} — backing off: {tries} could not store an outcome")
        field("wakes", f"{wake(info).removeprefix('until ')}: any worker takes it up then")
    elif info.scheduled:
        field("status", f"{info.status.value} — scheduled to start, never started yet")
        field("wakes", f"{wake(info).removeprefix('until ')}: any worker starts it then")
    elif info.status is RunStatus.WAITING:
        field("status", f"{info.status.value} — parked on its timers, holding no lease")
        field("wakes", f"{wake(info).removeprefix('until ')}: any worker takes it up then")
    elif info.status is RunStatus.DEAD_LETTER:
        field(
            "status",
            f"{info.status.value} — dispatched {info.dispatches} "
            f"time{'s' * (info.dispatches != 1)} without an outcome: "
            f"{next_step(info, store)} once the cause is fixed",
        )
    else:
        field("status", info.status.value)
    if info.status.wants_worker and is_stranded(info, served):
        field("workers", stranded_text(info))
    if info.cancel_requested and info.executing:
        field(
            "cancel",
            "requested; its owner stops the run within one lease renewal interval "
            "(unless it completes first)",
        )
    field("created", f"{when(info.created_at)} UTC")
    field("updated", f"{when(info.updated_at)} UTC")
    if info.error is not None:
        field("error", abbrev(str(info.error), cut))
        _print_error_detail(info.error, out, width, indent="  ")
    if info.status is RunStatus.COMPLETED:
        field("result", abbrev(json_text(info.result), cut))
    if info.requests:
        print(f"\npending requests ({len(info.requests)}):", file=out)
        for request in info.requests:
            text = f"{request.key} -> {request.response_type}: {json_text(request.payload)}"
            print(f"  - {abbrev(text, None if width is None else width - 4)}", file=out)
    else:
        print("\npending requests: none", file=out)
    if messages:
        _print_messages(info, messages, out, width)
    failed = [e for e in info.entries if e.status is EntryStatus.FAILED and e.error is not None]
    if failed:
        print(f"\nfailed attempts ({len(failed)}):", file=out)
        for e in failed:
            text = f"{e.key} attempt {e.attempt}: {_entry_outcome(e)}"
            print(f"  - {abbrev(text, None if width is None else width - 4)}", file=out)
            if width is None and e.error is not None:  # --full: each attempt's traceback too
                _print_error_detail(e.error, out, width, indent="      ")
    if not info.entries:
        print("\njournal: empty", file=out)
        return
    print(f"\njournal ({entries_count(len(info.entries))}):", file=out)
    rows = [
        (
            "?" if e.seq is None else str(e.seq),
            abbrev(e.key, None if width is None else 48),
            e.kind.value,
            e.status.value,
            str(e.attempt),
            clock(e.started_at, info.created_at),
            duration(own_duration(e)),
            _entry_outcome(e),
        )
        for e in info.entries
    ]
    header = (
        "SEQ",
        "KEY",
        "KIND",
        "STATUS",
        "ATTEMPT",
        "STARTED (UTC)",
        "DURATION",
        "VALUE / ERROR",
    )
    table(out, header, rows, width)


def _print_error_detail(error: ErrorInfo, out: TextIO, width: int | None, *, indent: str) -> None:
    """An error's group members, one line each, and its traceback, whole (never cut:
    its lines are what it says), each line escaped for the terminal."""
    if error.members:
        print(f"{indent[:-2]}members:", file=out)
        for member in error.members:
            text = abbrev(str(member), None if width is None else width - len(indent) - 2)
            print(f"{indent}- {text}", file=out)
    if error.traceback is not None:
        print(f"{indent[:-2]}traceback:", file=out)
        for line in error.traceback.rstrip("\n").split("\n"):
            print(f"{indent}{escape_controls(line)}".rstrip(), file=out)


def _print_messages(
    info: RunInfo, messages: Sequence[Message], out: TextIO, width: int | None
) -> None:
    """The run's messages: seq, name, when sent, the receive that took it (or pending), value."""
    takers = message_takers(info.entries)
    pending = sum(m.seq not in takers for m in messages)
    print(f"\nmessages ({len(messages)}, {pending} pending):", file=out)
    rows = [
        (
            str(m.seq),
            m.name,
            clock(m.sent_at, info.created_at),
            takers.get(m.seq, "pending"),
            stored_json(m.value),
        )
        for m in messages
    ]
    table(out, ("SEQ", "NAME", "SENT (UTC)", "TAKEN BY", "VALUE"), rows, width)


def _entry_outcome(entry: Entry) -> str:
    if entry.error is not None:
        text = str(entry.error)
        retry = stored(entry.value) if entry.value is not None else None
        if isinstance(retry, dict) and set(retry) == {"next_at"}:
            # A failed attempt of a step with a retry policy.
            moment = _moment(retry["next_at"])
            text += "; gave up" if moment is None else f"; next attempt at {when(moment)} UTC"
        return text
    if entry.value is None:
        return "-"
    if entry.kind is EntryKind.MESSAGE:
        taken = stored(entry.value)
        if isinstance(taken, dict) and set(taken) == {"seq", "name", "value"}:
            return f"message {taken['seq']}: {json_text(taken['value'])}"
    due = timer_due(entry)
    if due is not None:
        return f"due {when(due)} UTC"
    return stored_json(entry.value)


def _moment(value: object) -> datetime | None:
    """A stored ISO 8601 time (``None`` when it is not one)."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None
