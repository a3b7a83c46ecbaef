"""``tether runs list``, ``show``, ``cancel`` and ``prune``: read a store, cancel or delete.

Layer: the command line (``_cli``).

The ``runs`` commands never create a store (``StoreSpec.open_existing``), and
they work without the workflows' code (a result is then shown as the JSON it
was stored as); ``list`` and ``show`` only read. ``prune`` deletes finished
runs, each with its journal in one atomic step of the store
(``delete_run``); a run that is executing is never deleted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TextIO, cast

import trio

from .._api._patches import on_old_path
from .._core._owners import owner_is_gone
from .._engine._engine import internals, open_engine
from .._errors import RunConflictError, TetherError, UsageError
from .._terminal import unescaped
from .._ui._timeline import timeline_svg
from ..stores import DeletableStore, RunRecord, RunStatus, Store, mailbox_of
from ..stores._capabilities import Capability, has
from ._exits import EXIT_FAILED, EXIT_OK, BadUsage
from ._format import print_records, print_run_list, run_json
from ._show import print_run
from ._stores import StoreSpec
from ._text import terminal_width

__all__ = ("PRUNABLE", "parse_age", "parse_statuses", "runs")

#: The statuses ``runs prune`` deletes: finished ones (a failed or set-aside run
#: could be resumed, but nothing executes it unless asked).
PRUNABLE: Final = (
    RunStatus.COMPLETED,
    RunStatus.FAILED,
    RunStatus.CANCELLED,
    RunStatus.DEAD_LETTER,
)
_AGE = re.compile(r"(\d+)([dhm])")
_UNITS: Final = {"d": "days", "h": "hours", "m": "minutes"}
#: Runs read per page while ``runs prune`` looks for what to delete.
_PAGE: Final = 500


def parse_statuses(text: str, *, allowed: Sequence[RunStatus] = tuple(RunStatus)) -> list[str]:
    """``--status`` (one status, or several comma-separated), checked against *allowed*.

    Raises:
        argparse.ArgumentTypeError: an unknown status, or one not *allowed*.
    """
    names = [s.strip() for s in text.split(",") if s.strip()]
    for name in names:
        if name not in {s.value for s in allowed}:
            known = name in {s.value for s in RunStatus}
            why = "is not a finished status" if known else "is not a run status"
            choices = ", ".join(s.value for s in allowed)
            raise argparse.ArgumentTypeError(f"{name!r} {why}: use {choices}")
    return names


def parse_age(text: str) -> timedelta:
    """``--older-than``: ``30d``, ``12h`` or ``90m``.

    Raises:
        argparse.ArgumentTypeError: anything else.
    """
    found = _AGE.fullmatch(text.strip())
    if found is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an age: use a whole number of days, hours or minutes, "
            "such as 30d, 12h or 90m"
        )
    return timedelta(**{_UNITS[found[2]]: int(found[1])})


def _live_owner(record: RunRecord) -> bool:
    """Whether a live owner executes *record* (as ``RunInfo.executing`` tells)."""
    return (
        record.owner is not None
        and record.lease_expires_at is not None
        and not owner_is_gone(record.owner)
    )


async def _cancel(store: Store, spec: str, run_id: str, out: TextIO, err: TextIO) -> int:
    """``tether runs cancel``: ``engine.cancel``, then one line saying what it did."""
    async with open_engine(store) as engine:
        before = await store.get_run(run_id)
        if before is None:
            print(f"tether: no run {run_id!r} in {spec}", file=err)
            return EXIT_FAILED
        try:
            await engine.cancel(run_id)
        except RunConflictError as exc:
            print(f"tether: {exc}", file=err)
            return EXIT_FAILED
        after = await store.get_run(run_id)
    if after is None:  # deleted meanwhile (runs prune)
        print(f"tether: run {run_id!r} was deleted from {spec} meanwhile", file=err)
        return EXIT_FAILED
    if before.status is RunStatus.CANCELLED:
        print(f"run {run_id} was already cancelled", file=out)
    elif after.status is RunStatus.CANCELLED:
        was = before.status.value
        if before.status is RunStatus.RUNNING:
            was = "executing" if _live_owner(before) else "interrupted"
        print(f"run {run_id} cancelled (it was {was}; its journal is kept)", file=out)
    elif after.status is RunStatus.RUNNING and after.cancel_requested:
        again = " was already" if before.cancel_requested else ""
        print(
            f"run {run_id}: cancel{again} recorded; its owner {after.owner} stops it within "
            "one lease renewal interval (unless it completes first)",
            file=out,
        )
    elif after.status is RunStatus.COMPLETED:
        # The cancel was recorded as the owner finished: a completed run stands.
        print(f"tether: run {run_id!r} completed before its owner saw the cancel", file=err)
        return EXIT_FAILED
    else:  # pragma: no cover - the stores store nothing else after a cancel
        print(f"run {run_id}: cancel recorded; it is {after.status.value}", file=out)
    return EXIT_OK


async def _prunable(store: Store, statuses: list[RunStatus], before: datetime) -> list[RunRecord]:
    """The runs with one of *statuses* last updated before *before*, oldest first.

    Read page by page, and all of them before anything is deleted (a page
    continues after a run id: that run must still be there).
    """
    found: list[RunRecord] = []
    after: str | None = None
    while True:
        page = await store.list_runs(status=statuses, after=after, limit=_PAGE)
        found += [r for r in page if r.updated_at < before]
        if len(page) < _PAGE:
            return found
        after = page[-1].run_id


async def _prune(
    store: Store, spec: str, args: argparse.Namespace, out: TextIO, err: TextIO
) -> int:
    """``tether runs prune``: delete finished runs older than ``--older-than``.

    Each run is deleted in its own atomic step (the store's ``delete_run``):
    interrupted (Ctrl-C, a cancellation), the runs deleted so far stay
    deleted and the others stay whole.
    """
    statuses = [RunStatus(s) for text in args.status for s in text]
    age: timedelta = args.older_than
    shown = f"{', '.join(s.value for s in statuses)}, last updated more than {_age(age)} ago"
    if not has(store, Capability.DELETE):
        print(f"tether: {spec} cannot delete runs (its store has no delete_run)", file=err)
        return EXIT_FAILED
    deleting = cast(DeletableStore, store)
    async with open_engine(store):
        before = datetime.now(UTC) - age
        runs = await _prunable(store, statuses, before)
        if args.dry_run:
            print_records(runs, out)
            print(
                f"{_count(len(runs))} would be deleted from {spec} ({shown}); "
                "dry run: nothing was deleted",
                file=out,
            )
            return EXIT_OK
        deleted = 0
        for record in runs:
            # Read again: a failed run may have been resumed since it was listed.
            current = await store.get_run(record.run_id)
            if current is None or current.status not in statuses or current.updated_at >= before:
                continue
            try:
                if await deleting.delete_run(record.run_id):
                    deleted += 1
            except RunConflictError:
                print(f"kept {record.run_id}: it is executing now", file=out)
    print(f"deleted {_count(deleted)} from {spec} ({shown})", file=out)
    return EXIT_OK


def _age(age: timedelta) -> str:
    minutes = int(age.total_seconds() // 60)
    for unit, size in (("d", 24 * 60), ("h", 60)):
        if minutes and minutes % size == 0:
            return f"{minutes // size}{unit}"
    return f"{minutes}m"


def _count(n: int) -> str:
    return f"{n} run{'' if n == 1 else 's'}"


async def _runs_command(
    store: Store, spec: str, named: str | None, args: argparse.Namespace, out: TextIO, err: TextIO
) -> int:
    """One ``runs`` command; *named* is the ``--store`` given (shown without a
    password), which hints repeat."""
    command = args.runs_command
    if command == "cancel":
        return await _cancel(store, spec, args.run_id, out, err)
    if command == "prune":
        return await _prune(store, spec, args, out, err)
    async with open_engine(store) as engine:
        if command == "list":
            statuses = [s for text in args.status for s in text]
            filters: dict[str, Any] = {
                k: v
                for k, v in (
                    ("status", statuses or None),
                    ("workflow", args.workflow),
                    ("version", args.workflow_version),
                    ("queue", args.queue),
                    ("key", args.key),
                    ("stranded", args.stranded or None),
                    ("limit", args.limit),
                    ("after", args.after),
                )
                if v is not None
            }
            runs = await engine.list_runs(**filters)
            if args.patch is not None:
                runs = await on_old_path(engine.store, runs, args.patch)
            if args.json:
                print(json.dumps([run_json(r) for r in runs], indent=2), file=out)
            else:
                served = await internals(engine).served()
                print_run_list(runs, spec, out, store=named, served=served)
            return EXIT_OK
        info = await engine.get_run(args.run_id)
        if info is None:
            print(f"tether: no run {args.run_id!r} in {spec}", file=err)
            return EXIT_FAILED
        mailbox = mailbox_of(engine.store)
        messages = () if mailbox is None else await mailbox.load_messages(args.run_id)
        if args.json:
            print(json.dumps(run_json(info, detail=True, messages=messages), indent=2), file=out)
        else:
            width = None if args.full else terminal_width()
            served = await internals(engine).served()
            print_run(info, out, width=width, store=named, messages=messages, served=served)
        if args.timeline is not None:
            try:
                args.timeline.write_text(timeline_svg(info.entries), encoding="utf-8")
            except OSError as exc:
                print(f"tether: cannot write the timeline: {exc}", file=err)
                return EXIT_FAILED
            if not args.json:
                print(f"\ntimeline: {args.timeline}", file=out)
        return EXIT_OK


def runs(spec: StoreSpec, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``tether runs COMMAND``: the exit status.

    Raises:
        BadUsage: an option's value the store refuses (a ``--limit``, a run id).
    """
    store = spec.open_existing_or_say(err, "the runs commands never create a store")
    if store is None:
        return EXIT_FAILED
    named = None if args.store is None else str(spec)
    try:
        status: int = trio.run(_runs_command, store, str(spec), named, args, out, err)
    except UsageError as exc:
        raise BadUsage(str(exc)) from None
    except TetherError as exc:
        # Strict reads: a record that cannot be read names the run and the place.
        print(f"tether: {spec}: {type(exc).__name__}: {exc}", file=err)
        return EXIT_FAILED
    except BrokenPipeError:
        # The reader left (`tether runs list | head`): stop quietly, and
        # keep Python from failing again when it flushes stdout at exit.
        if unescaped(out) is sys.stdout:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED
    return status
