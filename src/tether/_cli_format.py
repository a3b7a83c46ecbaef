"""How the command line prints runs: tables, times, values, commands to type.

Everything here writes text (or JSON) to a stream it is given, and reads
nothing from a store: the commands (``_cli_runs``, ``_cli_exec``) fetch, this
module shows. Values are shown as JSON everywhere (``runs show``, ``run``'s
result, ``--json``), by one function, :func:`json_value`.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import shutil
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from ._codec import codec
from ._engine import RunInfo
from ._errors import TetherError
from .stores import Entry, EntryKind, EntryStatus, Message, RunRecord, RunStatus

__all__ = (
    "cli_message",
    "command",
    "hint",
    "json_text",
    "json_value",
    "print_run",
    "print_records",
    "print_run_list",
    "run_json",
    "terminal_width",
)


def terminal_width() -> int:
    """The width ``runs show`` cuts values to (``$COLUMNS`` or the terminal's; at least 60)."""
    return max(60, shutil.get_terminal_size((120, 24)).columns)


def _abbrev(text: str, width: int | None) -> str:
    """*text* on one line, cut to *width* (``None``: never cut)."""
    text = " ".join(text.split())
    if width is None or len(text) <= width:
        return text
    return text[: max(0, width - 1)] + "…"


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _clock(moment: datetime, day: datetime) -> str:
    """Time of day with milliseconds; with the date too when it is not *day*'s."""
    moment = moment.astimezone(UTC)
    text = moment.strftime("%H:%M:%S.%f")[:-3]
    if moment.date() != day.astimezone(UTC).date():
        text = moment.strftime("%Y-%m-%d ") + text
    return text


def _duration(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    if seconds < 0:
        return "?"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    return f"{seconds / 60:.1f} min"


def _from_now(moment: datetime, now: datetime) -> str:
    seconds = (moment - now).total_seconds()
    if seconds <= 0:
        return "now"
    if seconds < 120:
        return f"in {math.ceil(seconds)} s"
    return f"in {seconds / 60:.0f} min"


def _lease(expires: datetime) -> str:
    """``until 12:00:03 UTC (in 9 s)``: when a lease expires, and how soon."""
    now = datetime.now(UTC)
    expires = expires.astimezone(UTC)
    time = expires.strftime("%H:%M:%S") if expires.date() == now.date() else _when(expires)
    return f"until {time} UTC ({_from_now(expires, now)})"


def command(
    *words: str, imports: Sequence[str] = (), store: str | None = None, extra: Sequence[str] = ()
) -> str:
    """A command line to type, quoted for a POSIX shell: *words*, then ``--import`` for
    each of *imports*, ``--store`` *store* (when given), and *extra*."""
    line = list(words)
    for module in imports:
        line += ["--import", module]
    if store is not None:
        line += ["--store", store]
    return shlex.join([*line, *extra])


def hint(*words: str, store: str | None, imports: Sequence[str] = ()) -> str:
    """:func:`command` in backquotes, for a sentence; with ``--store`` when the reader named one."""
    return f"`{command(*words, imports=imports, store=store)}`"


_ENGINE_RESUME = re.compile(r"engine\.resume\((?:'[^']*'|\"[^\"]*\")?\)")


def cli_message(exc: BaseException, *, resume: str | None = None) -> str:
    """*exc* as the command line tells it: ``Type: message``, where the advice to call
    ``engine.resume(...)`` (shared with the library) names the command *resume* instead."""
    text = f"{type(exc).__name__}: {exc}"
    if resume is not None:
        text = _ENGINE_RESUME.sub(f"`{resume}`", text).replace(
            "choose a new run_id", "choose a new --run-id"
        )
    return text


def _interrupted(info: RunInfo) -> bool:
    """A ``running`` run that no live owner executes (a crash, a caller cancellation)."""
    return info.status is RunStatus.RUNNING and not info.executing


def _execution(info: RunInfo, store: str | None) -> str:
    """Who executes *info* now, or what to do with an interrupted run; ``-`` when neither.

    *store* is the ``--store`` the command was given, if any: the hints repeat it.
    """
    if info.executing:
        text = f"executing on {info.owner}, lease "
        text += _lease(info.lease_expires_at) if info.lease_expires_at else "live"
        return text + ("; cancel requested" if info.cancel_requested else "")
    if _interrupted(info):
        cancel = ", cancel requested" if info.cancel_requested else ""
        return f"interrupted{cancel} — {_next_step(info, store)}"
    if info.status is RunStatus.QUEUED:
        return "waiting for a worker"
    if info.status is RunStatus.WAITING:
        if info.wake_at is None:
            return "parked, waiting for a message"
        return f"parked on its timers {_wake(info)}"
    if info.status is RunStatus.DEAD_LETTER:
        return f"set aside after {info.dispatches} dispatches — {_next_step(info, store)}"
    return "-"


def _wake(info: RunInfo) -> str:
    """``until 2026-12-04 10:00:00 UTC``: when a waiting run is due (workers take it then)."""
    if info.wake_at is None:
        return "(due now)"
    return f"until {_when(info.wake_at)} UTC"


def _next_step(info: RunInfo, store: str | None) -> str:
    """What to do with an interrupted run."""
    if info.cancel_requested:  # its owner vanished before it saw the cancel
        command = hint("tether", "runs", "cancel", info.run_id, store=store)
        return f"finish the cancel with {command}"
    # `tether resume` needs the workflow's code: MODULE is the operator's to name.
    resume = hint("tether", "resume", info.run_id, store=store, imports=["MODULE"])
    return f"resume it with {resume}"


def json_value(value: Any) -> Any:
    """A stored or decoded value as JSON-ready primitives (its ``repr`` when it has none).

    A value decoded into the workflow's own types (its code is loaded here:
    attrs classes, dataclasses, datetimes, ...) becomes the JSON it is
    stored as, so a run's result reads the same with or without its code.
    """
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        pass
    else:
        return value
    try:
        return codec.to_primitive(value, what="the value")
    except TetherError:
        return repr(value)


def json_text(value: Any) -> str:
    """:func:`json_value` as compact JSON text, on one line, keys sorted."""
    return json.dumps(
        json_value(value), sort_keys=True, ensure_ascii=False, separators=(", ", ": ")
    )


def _stored(text: str) -> Any:
    """Stored JSON text as its value (the text itself when it is not JSON)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _stored_json(text: str) -> str:
    """JSON text as stored, re-encoded compactly (unchanged when it is not JSON)."""
    try:
        return json_text(json.loads(text))
    except ValueError:
        return text


def _table(
    out: TextIO, header: Sequence[str], rows: Sequence[Sequence[str]], width: int | None
) -> None:
    """Left-aligned columns; the last one is abbreviated to fit *width* (``None``: never)."""
    widths = [len(h) for h in header]
    for row in rows:
        for i, cell in enumerate(row[:-1]):
            widths[i] = max(widths[i], len(cell))
    fixed = sum(widths[:-1]) + 2 * (len(header) - 1)
    last = None if width is None else max(12, len(header[-1]), width - fixed)

    def line(cells: Sequence[str]) -> str:
        parts = [c.ljust(w) for c, w in zip(cells[:-1], widths, strict=False)]
        parts.append(_abbrev(cells[-1], last))
        return "  ".join(parts).rstrip()

    print(line(header), file=out)
    for row in rows:
        print(line(row), file=out)


def _entry_outcome(entry: Entry) -> str:
    if entry.error is not None:
        text = str(entry.error)
        retry = _stored(entry.value) if entry.value is not None else None
        if isinstance(retry, dict) and set(retry) == {"next_at"}:
            # A failed attempt of a step with a retry policy.
            moment = _moment(retry["next_at"])
            text += "; gave up" if moment is None else f"; next attempt at {_when(moment)} UTC"
        return text
    if entry.value is None:
        return "-"
    if entry.kind is EntryKind.MESSAGE:
        taken = _stored(entry.value)
        if isinstance(taken, dict) and set(taken) == {"seq", "name", "value"}:
            return f"message {taken['seq']}: {json_text(taken['value'])}"
    if entry.kind is EntryKind.TIMER:
        due = _stored(entry.value)
        moment = _moment(due.get("due")) if isinstance(due, dict) else None
        if moment is not None:
            return f"due {_when(moment)} UTC"
    return _stored_json(entry.value)


def _moment(value: object) -> datetime | None:
    """A stored ISO 8601 time (``None`` when it is not one)."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def print_run_list(
    runs: Sequence[RunInfo], spec: str, out: TextIO, *, store: str | None = None
) -> None:
    if not runs:
        print(f"no runs in {spec}", file=out)
        return
    rows = [
        (
            r.run_id,
            r.workflow if r.version is None else f"{r.workflow}@{r.version}",
            r.status.value,
            _when(r.created_at),
            _when(r.updated_at),
            str(len(r.requests)),
            _execution(r, store),
        )
        for r in runs
    ]
    header = (
        "RUN ID",
        "WORKFLOW",
        "STATUS",
        "CREATED (UTC)",
        "UPDATED (UTC)",
        "PENDING",
        "EXECUTION",
    )
    # Every column matters here (an owner cut short names nobody): abbreviate none.
    _table(out, header, rows, None)
    print(f"\n{len(runs)} run{'s' if len(runs) != 1 else ''} in {spec}", file=out)


def print_records(records: Sequence[RunRecord], out: TextIO) -> None:
    """A short table of stored runs (``runs prune --dry-run``): id, workflow, status, update."""
    rows = [(r.run_id, r.workflow, r.status.value, _when(r.updated_at)) for r in records]
    if rows:
        _table(out, ("RUN ID", "WORKFLOW", "STATUS", "UPDATED (UTC)"), rows, None)


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def run_json(
    info: RunInfo, *, detail: bool = False, messages: Sequence[Message] = ()
) -> dict[str, Any]:
    """One run as ``runs list --json`` prints it; with *detail*, as ``runs show --json``
    does: the same fields, and its result, its pending requests, its journal and, when it
    was sent any, its *messages* (each with the key of the receive that took it, or
    ``null``)."""
    data: dict[str, Any] = {
        "run_id": info.run_id,
        "workflow": info.workflow,
        "version": info.version,
        "status": info.status.value,
        "created_at": info.created_at.isoformat(),
        "updated_at": info.updated_at.isoformat(),
        "pending": [r.key for r in info.requests],
        "executing": info.executing,
        "interrupted": _interrupted(info),
        "owner": info.owner,
        "lease_expires_at": _iso(info.lease_expires_at),
        "cancel_requested": info.cancel_requested,
        "dispatches": info.dispatches,
        "wake_at": _iso(info.wake_at),
        "error": None if info.error is None else info.error.to_json(),
    }
    if detail:
        completed = info.status is RunStatus.COMPLETED
        data["result"] = json_value(info.result) if completed else None
        data["requests"] = [
            {"key": r.key, "response_type": r.response_type, "payload": json_value(r.payload)}
            for r in info.requests
        ]
        data["entries"] = [_entry_json(e) for e in info.entries]
    if detail and messages:
        takers = _takers(info.entries)
        data["messages"] = [
            {
                "seq": m.seq,
                "name": m.name,
                "sent_at": m.sent_at.isoformat(),
                "value": _stored(m.value),
                "taken_by": takers.get(m.seq),
            }
            for m in messages
        ]
    return data


def _takers(entries: Sequence[Entry]) -> dict[int, str]:
    """Which receive took each message: its seq -> the key of the journal entry that took it."""
    found: dict[int, str] = {}
    for entry in entries:
        if entry.kind is EntryKind.MESSAGE and entry.value is not None:
            taken = _stored(entry.value)
            if isinstance(taken, dict) and type(taken.get("seq")) is int:
                found[taken["seq"]] = entry.key
    return found


def _entry_json(entry: Entry) -> dict[str, Any]:
    return {
        "seq": entry.seq,
        "key": entry.key,
        "kind": entry.kind.value,
        "status": entry.status.value,
        "attempt": entry.attempt,
        "started_at": entry.started_at.isoformat(),
        "finished_at": entry.finished_at.isoformat(),
        "value": None if entry.value is None else _stored(entry.value),
        "error": None if entry.error is None else entry.error.to_json(),
    }


def print_run(
    info: RunInfo,
    out: TextIO,
    *,
    width: int | None,
    store: str | None = None,
    messages: Sequence[Message] = (),
) -> None:
    """``runs show``: values cut to *width* columns (``None``: shown in full, ``--full``);
    *messages*, the run's mailbox, listed with the receive that took each (or pending)."""
    cut = None if width is None else width - 11

    def field(name: str, value: str) -> None:
        print(f"{name + ':':<10} {value}", file=out)

    field("run", info.run_id)
    field("workflow", info.workflow)
    if info.executing:
        field("status", f"{info.status.value} — executing")
        field("owner", str(info.owner))
        if info.lease_expires_at is not None:
            field("lease", _lease(info.lease_expires_at))
    elif _interrupted(info):
        cancel = ", cancel requested" if info.cancel_requested else ""
        field("status", f"{info.status.value} — interrupted{cancel}: {_next_step(info, store)}")
        last = "" if info.owner is None else f" (last: {info.owner}, no longer live)"
        field("owner", f"none{last}")
    elif info.status is RunStatus.QUEUED:
        field("status", f"{info.status.value} — waiting for a worker")
    elif info.status is RunStatus.WAITING and info.wake_at is None:
        field("status", f"{info.status.value} — parked, waiting for a message, holding no lease")
        field("wakes", "when a message is sent to it: any worker takes it up then")
    elif info.status is RunStatus.WAITING:
        field("status", f"{info.status.value} — parked on its timers, holding no lease")
        field("wakes", f"{_wake(info).removeprefix('until ')}: any worker takes it up then")
    elif info.status is RunStatus.DEAD_LETTER:
        field(
            "status",
            f"{info.status.value} — its workers died {info.dispatches} times: "
            f"{_next_step(info, store)} once the cause is fixed",
        )
    else:
        field("status", info.status.value)
    if info.cancel_requested and info.executing:
        field(
            "cancel",
            "requested; its owner stops the run within one lease renewal interval "
            "(unless it completes first)",
        )
    field("created", f"{_when(info.created_at)} UTC")
    field("updated", f"{_when(info.updated_at)} UTC")
    if info.error is not None:
        field("error", _abbrev(str(info.error), cut))
    if info.status is RunStatus.COMPLETED:
        field("result", _abbrev(json_text(info.result), cut))
    if info.requests:
        print(f"\npending requests ({len(info.requests)}):", file=out)
        for request in info.requests:
            text = f"{request.key} -> {request.response_type}: {json_text(request.payload)}"
            print(f"  - {_abbrev(text, None if width is None else width - 4)}", file=out)
    else:
        print("\npending requests: none", file=out)
    if messages:
        _print_messages(info, messages, out, width)
    failed = [e for e in info.entries if e.status is EntryStatus.FAILED and e.error is not None]
    if failed:
        print(f"\nfailed attempts ({len(failed)}):", file=out)
        for e in failed:
            text = f"{e.key} attempt {e.attempt}: {_entry_outcome(e)}"
            print(f"  - {_abbrev(text, None if width is None else width - 4)}", file=out)
    if not info.entries:
        print("\njournal: empty", file=out)
        return
    print(f"\njournal ({len(info.entries)} entries):", file=out)
    rows = [
        (
            "?" if e.seq is None else str(e.seq),
            _abbrev(e.key, None if width is None else 48),
            e.kind.value,
            e.status.value,
            str(e.attempt),
            _clock(e.started_at, info.created_at),
            _duration(e.finished_at - e.started_at),
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
    _table(out, header, rows, width)


def _print_messages(
    info: RunInfo, messages: Sequence[Message], out: TextIO, width: int | None
) -> None:
    """The run's messages: seq, name, when sent, the receive that took it (or pending), value."""
    takers = _takers(info.entries)
    pending = sum(m.seq not in takers for m in messages)
    print(f"\nmessages ({len(messages)}, {pending} pending):", file=out)
    rows = [
        (
            str(m.seq),
            m.name,
            _clock(m.sent_at, info.created_at),
            takers.get(m.seq, "pending"),
            _stored_json(m.value),
        )
        for m in messages
    ]
    _table(out, ("SEQ", "NAME", "SENT (UTC)", "TAKEN BY", "VALUE"), rows, width)
