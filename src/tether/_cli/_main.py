"""The ``tether`` command line: the parser, and :func:`main`, which dispatches.

Layer: the command line (``_cli``).

``tether demo`` tells the checkout story on SQLite. ``tether runs list`` /
``show`` / ``cancel`` / ``prune`` read a store, cancel a run or delete
finished runs (:mod:`._runs`; they never create a store). ``tether run
MODULE:WORKFLOW`` and ``tether resume RUN_ID`` execute with a live progress
display (:mod:`._exec`); ``tether submit`` and ``tether worker`` use the queue
(:mod:`._worker`, which adds them); ``tether schedules list`` shows the schedules of the
imported modules (:mod:`._schedules`); ``tether send`` sends a run a message
(:mod:`._send`); ``tether bench`` benchmarks a workflow and a store
(:mod:`._bench`). How runs are printed is :mod:`._format` (one run in full,
``runs show``: :mod:`._show`; times, tables and values: :mod:`._text`); the
exit statuses are :mod:`._exits`, listed by each command's ``--help``.

Each subcommand is added by one ``_add_*`` function, through :func:`_command`,
which gives its help the stores and exit statuses that apply to it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from .._errors import UsageError
from .._terminal import escape_controls, escaped
from .._version import __version__
from ..stores import RunStatus
from ._bench import add_bench_commands, bench_command
from ._exec import ctrl_c, execute_command
from ._exits import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PAUSED,
    EXIT_TIMED_OUT,
    EXIT_USAGE,
    BadUsage,
    exit_help,
)
from ._respond import add_respond_command, respond_command
from ._runs import PRUNABLE, parse_age, parse_statuses, runs
from ._schedules import add_schedules_commands, schedules_command
from ._send import add_send_command, send_command
from ._stores import DEFAULT_STORE, STORE_ENV, STORE_HELP, StoreSpec, store_help
from ._worker import add_queue_commands, queue_command

__all__ = ("StoreSpec", "main")

#: What a command may exit with: reading and writing commands, and executing ones.
_READS = (EXIT_OK, EXIT_FAILED, EXIT_USAGE)
_EXECUTES = (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PAUSED, EXIT_TIMED_OUT, EXIT_INTERRUPTED)


def _spec(parser: argparse.ArgumentParser, args: argparse.Namespace) -> StoreSpec:
    if args.store is not None:
        text, source = args.store, "--store"
    elif os.environ.get(STORE_ENV):
        text, source = os.environ[STORE_ENV], f"${STORE_ENV}"
    else:
        text, source = DEFAULT_STORE, "the default store"
    try:
        return StoreSpec.parse(text)
    except UsageError as exc:
        parser.error(f"{source}: {exc}")  # exits with status 2


def _command(
    sub: Any, name: str, *, creates: bool, exits: Sequence[int], **options: Any
) -> argparse.ArgumentParser:
    """A subcommand whose help ends with its stores (*creates*: a missing one is
    created) and the exit statuses it can return."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        epilog=f"{store_help(creates=creates)}\n\n{exit_help(*exits)}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **options,
    )
    return parser


def _store_options() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--store",
        metavar="SPEC",
        help=f"sqlite:PATH, file:DIR, memory: or postgresql://... (default: ${STORE_ENV}, "
        f"else {DEFAULT_STORE})",
    )
    return options


def _add_demo(sub: Any) -> dict[str, argparse.ArgumentParser]:
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
    return {"demo": demo}


def _add_runs(sub: Any, store: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    group = sub.add_parser(
        "runs",
        help="inspect stored runs, cancel one, or delete finished ones",
        description="Inspect the runs in a store (list and show only read), cancel one, "
        "or delete finished runs (prune).",
        epilog=f"{store_help(creates=False)}\n\n{exit_help(*_READS)}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    runs_sub = group.add_subparsers(dest="runs_command", required=True, metavar="COMMAND")
    listing = _command(
        runs_sub,
        "list",
        creates=False,
        exits=_READS,
        parents=[store],
        help="one line per run: id, workflow, status, times, pending requests, execution",
        description="List the runs of a store, oldest first. EXECUTION tells, for a "
        "running run, whether an owner executes it now (the owner and when its lease "
        "expires) or it was interrupted (no live owner: resume it). No column is cut.",
    )
    listing.add_argument(
        "--status",
        action="append",
        default=[],
        type=parse_statuses,
        metavar="STATUS",
        help="only runs with this status (repeatable, or comma-separated): "
        + ", ".join(s.value for s in RunStatus),
    )
    listing.add_argument("--workflow", metavar="NAME", help="only runs of this workflow")
    listing.add_argument(
        "--workflow-version",
        metavar="VERSION",
        help="only runs started under this version of their workflow",
    )
    listing.add_argument(
        "--queue",
        metavar="NAME",
        help="only runs of this queue (default: runs submitted without one)",
    )
    listing.add_argument("--key", metavar="KEY", help="only runs submitted with this key")
    listing.add_argument(
        "--stranded",
        action="store_true",
        help="only runs waiting for a worker (queued, or running without a live lease) "
        "whose workflow and version no live worker serves (none alive: every waiting run)",
    )
    listing.add_argument(
        "--patch",
        metavar="CHANGE_ID",
        help="only unfinished runs that have not recorded tether.patched(CHANGE_ID): those "
        "that may still take its old path (use with --workflow)",
    )
    listing.add_argument("--limit", type=int, metavar="N", help="at most N runs")
    listing.add_argument(
        "--after", metavar="RUN_ID", help="the runs after RUN_ID (the next page of a --limit)"
    )
    listing.add_argument(
        "--json",
        action="store_true",
        help="print a JSON list, one object per run (the fields of `runs show --json` "
        "without result, requests and entries)",
    )
    show = _command(
        runs_sub,
        "show",
        creates=False,
        exits=_READS,
        parents=[store],
        help="one run: status, result or error, pending requests, journal",
        description="Show one run: its status, result or error, pending requests and "
        "journal. Values are cut to the terminal's width ($COLUMNS); --full shows them "
        "whole, --json as JSON.",
    )
    show.add_argument("run_id", metavar="RUN_ID")
    show_as = show.add_mutually_exclusive_group()
    show_as.add_argument(
        "--full", action="store_true", help="show every value whole, never cut to the width"
    )
    show_as.add_argument(
        "--json",
        action="store_true",
        help="print the run as a JSON object: the fields of `runs list --json`, and "
        "result, requests and entries (the journal), values as stored",
    )
    show.add_argument(
        "--timeline",
        type=Path,
        metavar="FILE.svg",
        help="also write the run's timeline picture to FILE.svg (SVG: a lane per parallel "
        "branch, a bar per journal entry coloured by outcome, retries marked)",
    )
    cancel = _command(
        runs_sub,
        "cancel",
        creates=False,
        exits=_READS,
        parents=[store],
        help="cancel a run (final: it never executes again)",
        description="Cancel RUN_ID (engine.cancel). A paused, failed or interrupted run is "
        "cancelled at once; a run that an owner executes is stopped by that owner within "
        "one lease renewal interval (its lease_ttl / 3), unless the run completes first. "
        "The journal is kept. Cancelling a cancelled run does nothing; a completed run "
        "cannot be cancelled (exit status 1, nothing changes).",
    )
    cancel.add_argument("run_id", metavar="RUN_ID")
    prune = _command(
        runs_sub,
        "prune",
        creates=False,
        exits=_READS,
        parents=[store],
        help="delete finished runs older than an age, with their journals",
        description="Delete the runs with one of --status that were last updated (that "
        "finished) more than --older-than ago, each with its journal, in one atomic step "
        "of the store. Only finished statuses are accepted; a run that is executing now is "
        "never deleted. Prints how many runs were deleted; --dry-run lists them instead.",
    )
    prune.add_argument(
        "--status",
        action="append",
        required=True,
        type=lambda text: parse_statuses(text, allowed=PRUNABLE),
        metavar="STATUS",
        help="delete runs with this status (repeatable, or comma-separated): "
        + ", ".join(s.value for s in PRUNABLE),
    )
    prune.add_argument(
        "--older-than",
        required=True,
        type=parse_age,
        metavar="AGE",
        help="only runs last updated more than AGE ago: 30d, 12h or 90m",
    )
    prune.add_argument(
        "--dry-run", action="store_true", help="list the runs that would be deleted; delete none"
    )
    return {"list": listing, "show": show, "cancel": cancel, "prune": prune}


def _add_execute(sub: Any, store: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    imports = _imports(store)
    options = argparse.ArgumentParser(add_help=False, parents=[imports])
    options.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="the caller's deadline, as timeout=; when it expires the run is left "
        f"interrupted and resumable (exit status {EXIT_TIMED_OUT})",
    )
    run = _command(
        sub,
        "run",
        creates=True,
        exits=_EXECUTES,
        parents=[options],
        help="run a workflow, showing its progress live",
        description="Run MODULE:WORKFLOW with ARGS, printing its steps as they happen, then "
        "its result as JSON. Each ARG is decoded into its parameter's annotated type: as "
        'JSON when it parses as JSON and fits (42, true, {"a": 1}), else as plain text. '
        "A paused run prints the command that responds to it; a run stopped by --timeout or "
        "Ctrl-C prints the command that resumes it.",
    )
    run.add_argument("workflow", metavar="MODULE:WORKFLOW")
    run.add_argument("args", nargs="*", metavar="ARG")
    run.add_argument("--run-id", metavar="ID", help="the run's id (default: a random one)")
    resume = _command(
        sub,
        "resume",
        creates=False,
        exits=_EXECUTES,
        parents=[options],
        help="resume a run here (with responses to its requests), showing its progress live",
        description="Resume RUN_ID from its journal and execute it in this process, printing "
        "its steps as they happen; --respond responds to a pending request (once per key). "
        "--import names the module that defines the run's workflow. To respond and let a "
        "worker execute the run, use `tether respond RUN_ID KEY=VALUE`.",
    )
    resume.add_argument("run_id", metavar="RUN_ID")
    resume.add_argument(
        "--respond",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="respond to the request KEY with VALUE (JSON, or else a plain string; "
        "repeatable, once per KEY); the run then executes here",
    )
    return {"run": run, "resume": resume}


def _imports(store: argparse.ArgumentParser) -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False, parents=[store])
    options.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (it defines the workflows; repeatable)",
    )
    return options


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser, and each command's own (``runs`` commands by their second word)."""
    parser = argparse.ArgumentParser(
        prog="tether",
        description="tether: durable Trio workflows",
        epilog=f"{STORE_HELP}\n\n{exit_help()}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    store = _store_options()
    parsers = _add_demo(sub)
    parsers |= _add_runs(sub, store)
    parsers |= _add_execute(sub, store)
    parsers |= add_queue_commands(sub, _imports(store), _command, _READS)
    parsers |= add_schedules_commands(sub, _imports(store), _command, _READS)
    parsers |= add_send_command(sub, _imports(store), _command, _READS)
    parsers |= add_respond_command(sub, _imports(store), _command, _READS)
    parsers |= _add_ui(sub, store)
    parsers |= add_bench_commands(sub, _imports(store))
    return parser, parsers


def _add_ui(sub: Any, store: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    from ._ui import DESCRIPTION, HELP, add_ui_arguments

    ui = _command(
        sub,
        "ui",
        creates=False,
        exits=_READS,
        parents=[_imports(store)],
        help=HELP,
        description=DESCRIPTION,
    )
    add_ui_arguments(ui)
    return {"ui": ui}


def _ui(spec: StoreSpec, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ._ui import serve_ui

    return serve_ui(spec, args, out, err)


def _demo(spec: StoreSpec | None, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ._demo import child_main
    from ._demo import main as demo

    if args.child is not None:
        return child_main(Path(args.child[0]), Path(args.child[1]), out)
    return demo(out, db=args.db)


_Command = Callable[[Any, argparse.Namespace, TextIO, TextIO], int]
#: Each command, by its name (``runs`` commands by their second word).
_COMMANDS: dict[str, _Command] = {
    "demo": _demo,
    "run": execute_command,
    "resume": execute_command,
    "worker": queue_command,
    "submit": queue_command,
    "schedules list": schedules_command,
    "send": send_command,
    "respond": respond_command,
    "list": runs,
    "show": runs,
    "cancel": runs,
    "prune": runs,
    "ui": _ui,
    "bench cancel": bench_command,
    "bench steps": bench_command,
    "bench throughput": bench_command,
}


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Entry point of ``tether`` and ``python -m tether``; returns the exit status.

    Usage errors, argparse's and tether's own (:class:`BadUsage`), print the
    usage and the error to ``sys.stderr`` and raise ``SystemExit(2)``
    (argparse's convention); ``--help`` and ``--version`` raise
    ``SystemExit(0)``. Ctrl-C returns 130 after one line, never a traceback.
    What it prints goes through :func:`~tether._terminal.escaped` streams: no
    stored string writes a control character to the terminal.
    """
    out = escaped(out or sys.stdout)
    err = escaped(err or sys.stderr)
    parser, parsers = _parser()
    args = parser.parse_args(argv)
    name = args.runs_command if args.command == "runs" else args.command
    if args.command == "schedules":
        name = f"schedules {args.schedules_command}"
    elif args.command == "bench":
        name = f"bench {args.bench_command}"
    own = parsers[name]
    try:
        spec = None if name == "demo" else _spec(own, args)
        missing = None if spec is None else spec.missing()
        if missing is not None:  # an extra to install: one line, no usage
            print(f"tether: {missing}", file=err)
            return EXIT_FAILED
        return _COMMANDS[name](spec, args, out, err)
    except BadUsage as exc:
        own.error(escape_controls(str(exc), keep="\n"))  # exits with status 2
    except BaseException as exc:
        if not ctrl_c(exc):
            raise
        print("tether: interrupted (Ctrl-C)", file=err)
        return EXIT_INTERRUPTED
