"""How the command line prints runs: a run's state in words, ``runs list``, JSON.

Layer: the command line (``_cli``).

Everything here writes text (or JSON) to a stream it is given, and reads
nothing from a store: the commands (:mod:`._runs`, :mod:`._exec`) fetch, this
module shows. Values are shown as JSON everywhere (``runs show``, ``run``'s
result, ``--json``), by one function, :func:`._text.json_value`. One run in
full (``runs show``) is :mod:`._show`, built on the words for a run's state
here; times, tables and values, which know nothing of runs, are :mod:`._text`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, TextIO

from .._engine._engine import RunInfo
from .._engine._info import backing_off
from .._engine._serving import TAKEN_OVER, taken_over
from .._terminal import table
from ..stores import Entry, EntryKind, Message, RunRecord, RunStatus, Served
from ._text import hint, json_value, lease, stored, when

__all__ = ("print_records", "print_run_list", "run_json")


def interrupted(info: RunInfo) -> bool:
    """A ``running`` run that no live owner executes (a crash, a caller cancellation)."""
    return info.status is RunStatus.RUNNING and not info.executing


def _execution(info: RunInfo, store: str | None, served: frozenset[Served] | None) -> str:
    """Who executes *info* now, or what to do with an interrupted run; ``-`` when neither.

    *store* is the ``--store`` the command was given, if any: the hints repeat it;
    *served*, what the live workers serve (``None``: unknown).
    """
    if info.executing:
        text = f"executing on {info.owner}, lease "
        text += lease(info.lease_expires_at) if info.lease_expires_at else "live"
        return text + ("; cancel requested" if info.cancel_requested else "")
    if interrupted(info):
        cancel = ", cancel requested" if info.cancel_requested else ""
        return f"interrupted{cancel} — {next_step(info, store, served)}"
    if info.status is RunStatus.QUEUED:
        return "waiting for a worker"
    if info.status is RunStatus.WAITING:
        if info.wake_at is None:
            return "parked, waiting for a message"
        if backing_off(info):
            return f"backing off {wake(info)}: its outcome could not be stored"
        if info.scheduled:
            return f"scheduled to start at {when(info.wake_at)} UTC"
        return f"parked on its timers {wake(info)}"
    if info.status is RunStatus.DEAD_LETTER:
        aside = f"set aside after {info.dispatches} dispatches without an outcome"
        return f"{aside} — {next_step(info, store)}"
    return "-"


def wake(info: RunInfo) -> str:
    """``until 2026-12-04 10:00:00 UTC``: when a waiting run is due (workers take it then)."""
    if info.wake_at is None:
        return "(due now)"
    return f"until {when(info.wake_at)} UTC"


def next_step(info: RunInfo, store: str | None, served: frozenset[Served] | None = None) -> str:
    """What to do with an interrupted or set-aside run: nothing when a live worker (of
    *served*, ``None``: unknown) takes it over."""
    if info.cancel_requested:  # its owner vanished before it saw the cancel
        command = hint("tether", "runs", "cancel", info.run_id, store=store)
        return f"finish the cancel with {command}"
    if taken_over(info, cancel_requested=info.cancel_requested, served=served):
        return TAKEN_OVER
    # `tether resume` needs the workflow's code: MODULE is the operator's to name.
    resume = hint("tether", "resume", info.run_id, store=store, imports=["MODULE"])
    return f"resume it with {resume}"


def print_run_list(
    runs: Sequence[RunInfo],
    spec: str,
    out: TextIO,
    *,
    store: str | None = None,
    served: frozenset[Served] | None = None,
) -> None:
    if not runs:
        print(f"no runs in {spec}", file=out)
        return
    rows = [
        (
            r.run_id,
            r.workflow if r.version is None else f"{r.workflow}@{r.version}",
            r.status.value,
            when(r.created_at),
            when(r.updated_at),
            str(len(r.requests)),
            _execution(r, store, served),
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
    table(out, header, rows, None)
    print(f"\n{len(runs)} run{'s' if len(runs) != 1 else ''} in {spec}", file=out)


def print_records(records: Sequence[RunRecord], out: TextIO) -> None:
    """A short table of stored runs (``runs prune --dry-run``): id, workflow, status, update."""
    rows = [(r.run_id, r.workflow, r.status.value, when(r.updated_at)) for r in records]
    if rows:
        table(out, ("RUN ID", "WORKFLOW", "STATUS", "UPDATED (UTC)"), rows, None)


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
        "interrupted": interrupted(info),
        "owner": info.owner,
        "lease_expires_at": _iso(info.lease_expires_at),
        "cancel_requested": info.cancel_requested,
        "dispatches": info.dispatches,
        "wake_at": _iso(info.wake_at),
        "queue": info.queue,
        "key": info.key,
        "dedupe": info.dedupe,
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
        takers = message_takers(info.entries)
        data["messages"] = [
            {
                "seq": m.seq,
                "name": m.name,
                "sent_at": m.sent_at.isoformat(),
                "value": stored(m.value),
                "taken_by": takers.get(m.seq),
            }
            for m in messages
        ]
    return data


def message_takers(entries: Sequence[Entry]) -> dict[int, str]:
    """Which receive took each message: its seq -> the key of the journal entry that took it."""
    found: dict[int, str] = {}
    for entry in entries:
        if entry.kind is EntryKind.MESSAGE and entry.value is not None:
            taken = stored(entry.value)
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
        "value": None if entry.value is None else stored(entry.value),
        "error": None if entry.error is None else entry.error.to_json(),
    }
