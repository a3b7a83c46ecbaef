"""The ``tether`` command line.

``tether demo`` tells the checkout story on SQLite; ``tether runs list`` and
``tether runs show RUN_ID`` read a store and print what it holds, including
whether a ``running`` run is executing now (its owner and lease) or was
interrupted (no live owner: resume it). ``tether runs cancel RUN_ID`` records
a cancel (``engine.cancel``). The ``runs`` commands never create a store, and
they work without the workflows' code (a result is then shown as the JSON it
was stored as); ``list`` and ``show`` only read. ``tether run MODULE:WORKFLOW``
and ``tether resume RUN_ID`` execute, with a live progress display (see
``_cli_exec``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

import trio

from ._cli_stores import DEFAULT_STORE, STORE_ENV, STORE_HELP, Missing, SpecError, StoreSpec
from ._codec import codec
from ._engine import RunInfo, open_engine
from ._errors import RunConflictError, TetherError
from ._ownership import owner_is_gone
from .stores import Entry, RunRecord, RunStatus, Store

__all__ = ("StoreSpec", "main")

# -- formatting -----------------------------------------------------------------------


def _width() -> int:
    return max(60, shutil.get_terminal_size((120, 24)).columns)


def _abbrev(text: str, width: int) -> str:
    text = " ".join(text.split())  # one line
    if len(text) <= width:
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


def _hint(*words: str, store: str | None, then: str = "") -> str:
    """A command to type, in backquotes; with ``--store`` when the reader named one."""
    named = "" if store is None else f" --store {shlex.quote(store)}"
    return f"`{shlex.join(words)}{then}{named}`"


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
    if info.status is RunStatus.DEAD_LETTER:
        return f"set aside after {info.dispatches} dispatches — {_next_step(info, store)}"
    return "-"


def _next_step(info: RunInfo, store: str | None) -> str:
    """What to do with an interrupted run."""
    if info.cancel_requested:  # its owner vanished before it saw the cancel
        command = _hint("tether", "runs", "cancel", info.run_id, store=store)
        return f"finish the cancel with {command}"
    # `tether resume` needs the workflow's code: MODULE is the operator's to name.
    command = _hint("tether", "resume", info.run_id, store=store, then=" --import MODULE")
    return f"resume it with {command}"


def _json_text(value: Any) -> str:
    """A stored or decoded value, as compact JSON when it is JSON-ready."""
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))
    except (TypeError, ValueError):
        pass
    # Decoded into the workflow's own type (its code is loaded here): show its JSON.
    try:
        return _stored_json(codec.snapshot(value, type(value), what="the value")[0])
    except TetherError:
        return repr(value)


def _stored_json(text: str) -> str:
    """JSON text as stored, re-encoded compactly (unchanged when it is not JSON)."""
    try:
        return _json_text(json.loads(text))
    except ValueError:
        return text


def _table(out: TextIO, header: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> None:
    """Left-aligned columns; the last one is abbreviated to fit *width*."""
    widths = [len(h) for h in header]
    for row in rows:
        for i, cell in enumerate(row[:-1]):
            widths[i] = max(widths[i], len(cell))
    fixed = sum(widths[:-1]) + 2 * (len(header) - 1)
    last = max(12, len(header[-1]), width - fixed)

    def line(cells: Sequence[str]) -> str:
        parts = [c.ljust(w) for c, w in zip(cells[:-1], widths, strict=False)]
        parts.append(_abbrev(cells[-1], last))
        return "  ".join(parts).rstrip()

    print(line(header), file=out)
    for row in rows:
        print(line(row), file=out)


def _entry_outcome(entry: Entry) -> str:
    if entry.error is not None:
        return str(entry.error)
    if entry.value is None:
        return "-"
    return _stored_json(entry.value)


def print_run_list(
    runs: Sequence[RunInfo], spec: str, out: TextIO, *, store: str | None = None
) -> None:
    if not runs:
        print(f"no runs in {spec}", file=out)
        return
    rows = [
        (
            r.run_id,
            r.workflow,
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
    _table(out, header, rows, sys.maxsize)
    print(f"\n{len(runs)} run{'s' if len(runs) != 1 else ''} in {spec}", file=out)


def _run_json(info: RunInfo) -> dict[str, Any]:
    """One run of ``runs list --json``."""
    return {
        "run_id": info.run_id,
        "workflow": info.workflow,
        "status": info.status.value,
        "created_at": info.created_at.isoformat(),
        "updated_at": info.updated_at.isoformat(),
        "pending": [r.key for r in info.requests],
        "executing": info.executing,
        "owner": info.owner,
        "lease_expires_at": None
        if info.lease_expires_at is None
        else info.lease_expires_at.isoformat(),
        "cancel_requested": info.cancel_requested,
        "error": None if info.error is None else info.error.to_json(),
    }


def print_run(info: RunInfo, out: TextIO, width: int, *, store: str | None = None) -> None:
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
        field("error", _abbrev(str(info.error), width - 11))
    if info.status is RunStatus.COMPLETED:
        field("result", _abbrev(_json_text(info.result), width - 11))
    if info.requests:
        print(f"\npending requests ({len(info.requests)}):", file=out)
        for request in info.requests:
            text = f"{request.key} -> {request.response_type}: {_json_text(request.payload)}"
            print(f"  - {_abbrev(text, width - 4)}", file=out)
    else:
        print("\npending requests: none", file=out)
    if not info.entries:
        print("\njournal: empty", file=out)
        return
    print(f"\njournal ({len(info.entries)} entries):", file=out)
    rows = [
        (
            "?" if e.seq is None else str(e.seq),
            _abbrev(e.key, 48),
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


# -- commands -------------------------------------------------------------------------


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
            return 1
        try:
            await engine.cancel(run_id)
        except RunConflictError as exc:
            print(f"tether: {exc}", file=err)
            return 1
        after = await store.get_run(run_id)
    assert after is not None  # runs are never deleted
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
        return 1
    else:  # pragma: no cover - the stores store nothing else after a cancel
        print(f"run {run_id}: cancel recorded; it is {after.status.value}", file=out)
    return 0


async def _runs_command(
    store: Store,
    spec: str,
    named: str | None,
    command: str,
    run_id: str | None,
    out: TextIO,
    err: TextIO,
    filters: dict[str, Any] | None = None,
    as_json: bool = False,
) -> int:
    """One ``runs`` command; *named* is the ``--store`` given (shown without a
    password), which hints repeat."""
    if command == "cancel":
        assert run_id is not None
        return await _cancel(store, spec, run_id, out, err)
    async with open_engine(store) as engine:
        if command == "list":
            runs = await engine.list_runs(**(filters or {}))
            if as_json:
                print(json.dumps([_run_json(r) for r in runs], indent=2), file=out)
            else:
                print_run_list(runs, spec, out, store=named)
            return 0
        assert run_id is not None
        info = await engine.get_run(run_id)
        if info is None:
            print(f"tether: no run {run_id!r} in {spec}", file=err)
            return 1
        print_run(info, out, _width(), store=named)
        return 0


def _spec(parser: argparse.ArgumentParser, args: argparse.Namespace) -> StoreSpec:
    if args.store is not None:
        text, source = args.store, "--store"
    elif os.environ.get(STORE_ENV):
        text, source = os.environ[STORE_ENV], f"${STORE_ENV}"
    else:
        text, source = DEFAULT_STORE, "the default store"
    try:
        return StoreSpec.parse(text)
    except SpecError as exc:
        parser.error(f"{source}: {exc}")  # exits with status 2


def _execute(
    parser: argparse.ArgumentParser, args: argparse.Namespace, out: TextIO, err: TextIO
) -> int:
    from ._cli_exec import execute, import_modules, parse_value, resolve_workflow

    spec = _spec(parser, args)
    try:
        import_modules(args.imports)
        if args.command == "run":
            wf = resolve_workflow(args.workflow)
            values = [parse_value(a) for a in args.args]
            run_id, timeout = args.run_id, args.timeout
            start: Any = lambda engine: engine.open_run(  # noqa: E731
                wf, *values, run_id=run_id, timeout=timeout
            )
        else:
            responses: dict[str, Any] = {}
            for pair in args.respond:
                key, sep, value = pair.partition("=")
                if not sep or not key:
                    parser.error(f"--respond takes KEY=VALUE, not {pair!r}")
                responses[key] = parse_value(value)
            run_id, timeout = args.run_id, args.timeout
            start = lambda engine: engine.open_resume(  # noqa: E731
                run_id, responses or None, timeout=timeout
            )
    except TetherError as exc:
        print(f"tether: {exc}", file=err)
        return 1
    return execute(spec.open_for_writing(), start, out, err)


def _queue(
    parser: argparse.ArgumentParser, args: argparse.Namespace, out: TextIO, err: TextIO
) -> int:
    from ._cli_exec import import_modules
    from ._cli_worker import serve, submit

    spec = _spec(parser, args)
    try:
        import_modules(args.imports)
        store = spec.open_for_writing()
        if args.command == "worker":
            return serve(store, str(spec), args, out, err)
        return submit(store, args, out)
    except TetherError as exc:
        print(f"tether: {type(exc).__name__}: {exc}", file=err)
        return 1


def _runs(
    parser: argparse.ArgumentParser, args: argparse.Namespace, out: TextIO, err: TextIO
) -> int:
    spec = _spec(parser, args)
    try:
        store = spec.open_existing()
    except Missing as exc:
        print(
            f"tether: {exc} (the runs commands never create a store; name one with --store "
            f"or ${STORE_ENV})",
            file=err,
        )
        return 1
    try:
        run_id: str | None = getattr(args, "run_id", None)
        command = args.runs_command
        named = None if args.store is None else str(spec)
        filters: dict[str, Any] = {}
        if command == "list":
            statuses = [s for text in args.status for s in text.split(",") if s]
            filters = {
                k: v
                for k, v in (
                    ("status", statuses or None),
                    ("workflow", args.workflow),
                    ("limit", args.limit),
                    ("after", args.after),
                )
                if v is not None
            }
        return trio.run(
            _runs_command,
            store,
            str(spec),
            named,
            command,
            run_id,
            out,
            err,
            filters,
            getattr(args, "json", False),
        )
    except TetherError as exc:
        # Strict reads: a record that cannot be read names the run and the place.
        print(f"tether: {spec}: {type(exc).__name__}: {exc}", file=err)
        return 1


def _command(sub: Any, name: str, **options: Any) -> argparse.ArgumentParser:
    """A subcommand whose help ends with the stores and exit statuses."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name, epilog=STORE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter, **options
    )
    return parser


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(
        prog="tether",
        description="tether: durable Trio workflows",
        epilog=STORE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser(
        "demo",
        help="run the checkout demo on SQLite (fails, resumes, times out on time, survives a kill)",
        description="The checkout demo, on a SQLite store in a temporary directory.",
    )
    demo.add_argument(
        "--db",
        metavar="PATH",
        type=Path,
        help="keep the demo's SQLite store in PATH (a new file) to inspect it afterwards "
        "with `tether runs list --store sqlite:PATH`",
    )
    # The demo's crash chapter runs itself as a child process, killed mid-run.
    demo.add_argument("--child", nargs=2, metavar=("DB", "EFFECTS"), help=argparse.SUPPRESS)

    store_options = argparse.ArgumentParser(add_help=False)
    store_options.add_argument(
        "--store",
        metavar="SPEC",
        help=f"sqlite:PATH, file:DIR or postgresql://... (default: ${STORE_ENV}, "
        f"else {DEFAULT_STORE})",
    )
    runs = _command(
        sub,
        "runs",
        help="inspect stored runs, or cancel one",
        description="Inspect the runs in a store (list and show only read), or cancel one.",
    )
    runs_sub = runs.add_subparsers(dest="runs_command", required=True, metavar="COMMAND")
    listing = _command(
        runs_sub,
        "list",
        parents=[store_options],
        help="one line per run: id, workflow, status, times, pending requests, execution",
        description="List the runs of a store, oldest first. EXECUTION tells, for a "
        "running run, whether an owner executes it now (the owner and when its lease "
        "expires) or it was interrupted (no live owner: resume it).",
    )
    listing.add_argument(
        "--status",
        action="append",
        default=[],
        metavar="STATUS",
        help="only runs with this status (repeatable, or comma-separated): "
        + ", ".join(s.value for s in RunStatus),
    )
    listing.add_argument("--workflow", metavar="NAME", help="only runs of this workflow")
    listing.add_argument("--limit", type=int, metavar="N", help="at most N runs")
    listing.add_argument(
        "--after", metavar="RUN_ID", help="the runs after RUN_ID (the next page of a --limit)"
    )
    listing.add_argument("--json", action="store_true", help="print JSON, for machines")
    show = _command(
        runs_sub,
        "show",
        parents=[store_options],
        help="one run: status, result or error, pending requests, journal",
        description="Show one run: its status, result or error, pending requests and journal.",
    )
    show.add_argument("run_id", metavar="RUN_ID")
    cancel = _command(
        runs_sub,
        "cancel",
        parents=[store_options],
        help="cancel a run (final: it never executes again)",
        description="Cancel RUN_ID (engine.cancel). A paused, failed or interrupted run is "
        "cancelled at once; a run that an owner executes is stopped by that owner within "
        "one lease renewal interval (its lease_ttl / 3), unless the run completes first. "
        "The journal is kept. Cancelling a cancelled run does nothing; a completed run "
        "cannot be cancelled (exit status 1, nothing changes).",
    )
    cancel.add_argument("run_id", metavar="RUN_ID")

    exec_options_no_timeout = argparse.ArgumentParser(add_help=False, parents=[store_options])
    exec_options_no_timeout.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (it defines the workflows; repeatable)",
    )
    exec_options = argparse.ArgumentParser(add_help=False, parents=[exec_options_no_timeout])
    exec_options.add_argument(
        "--timeout", type=float, metavar="SECONDS", help="the caller's deadline, as timeout="
    )
    run = _command(
        sub,
        "run",
        parents=[exec_options],
        help="run a workflow, showing its progress live",
        description="Run MODULE:WORKFLOW with ARGS (each JSON, or else a plain string), "
        "printing its steps as they happen. Exit status: 0 completed, 1 failed, 3 paused "
        "(answer with `tether resume`). The store is created if it does not exist.",
    )
    run.add_argument("workflow", metavar="MODULE:WORKFLOW")
    run.add_argument("args", nargs="*", metavar="ARG")
    run.add_argument("--run-id", metavar="ID", help="the run's id (default: a random one)")
    resume = _command(
        sub,
        "resume",
        parents=[exec_options],
        help="resume a run (with answers to its requests), showing its progress live",
        description="Resume RUN_ID from its journal, printing its steps as they happen; "
        "--respond answers a pending request. Exit status as for `tether run`.",
    )
    resume.add_argument("run_id", metavar="RUN_ID")
    resume.add_argument(
        "--respond",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="answer the request KEY with VALUE (JSON, or else a plain string; repeatable)",
    )
    worker = _command(
        sub,
        "worker",
        parents=[exec_options_no_timeout],
        help="claim queued and orphaned runs and execute them, until SIGTERM",
        description="Serve the workflows the --import modules define: claim queued runs, "
        "and runs whose owner's lease expired, and execute them, at most --concurrency at "
        "once. SIGTERM or SIGINT drains: claiming stops, held runs get --grace seconds, "
        "then are cancelled as a caller cancellation and released for other workers. "
        "Run outcomes are logged to stderr.",
    )
    worker.add_argument("--concurrency", type=int, default=16, metavar="N")
    worker.add_argument(
        "--max-dispatches",
        type=int,
        default=5,
        metavar="N",
        help="a run whose worker died N times is set aside as dead_letter (default 5)",
    )
    worker.add_argument("--grace", type=float, default=10.0, metavar="SECONDS")
    worker.add_argument("--lease-ttl", type=float, default=15.0, metavar="SECONDS")
    worker.add_argument("--poll-interval", type=float, default=1.0, metavar="SECONDS")
    submit = _command(
        sub,
        "submit",
        parents=[exec_options_no_timeout],
        help="queue a run for the workers; print its id",
        description="Store MODULE:WORKFLOW with ARGS (each JSON, or else a plain string) as "
        "a queued run, and print its id. Submitting an id that exists with the same "
        "arguments prints it and changes nothing.",
    )
    submit.add_argument("workflow", metavar="MODULE:WORKFLOW")
    submit.add_argument("args", nargs="*", metavar="ARG")
    submit.add_argument("--run-id", metavar="ID", help="the run's id (default: a random one)")
    return parser, {
        "worker": worker,
        "submit": submit,
        "list": listing,
        "show": show,
        "cancel": cancel,
        "run": run,
        "resume": resume,
    }


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Entry point of ``tether`` and ``python -m tether``; returns the exit status.

    Usage errors raise ``SystemExit(2)`` (argparse's convention).
    """
    out = out or sys.stdout
    err = err or sys.stderr
    parser, runs_parsers = _parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        from ._demo import child_main
        from ._demo import main as demo

        if args.child is not None:
            return child_main(Path(args.child[0]), Path(args.child[1]), out)
        return demo(out, db=args.db)
    if args.command in ("run", "resume"):
        return _execute(runs_parsers[args.command], args, out, err)
    if args.command in ("worker", "submit"):
        return _queue(runs_parsers[args.command], args, out, err)
    if args.command == "runs":
        try:
            return _runs(runs_parsers[args.runs_command], args, out, err)
        except BrokenPipeError:
            # The reader left (`tether runs list | head`): stop quietly, and
            # keep Python from failing again when it flushes stdout at exit.
            if out is sys.stdout:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            return 1
    raise AssertionError(args.command)  # pragma: no cover - argparse refuses others
