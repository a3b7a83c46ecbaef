"""``tether bench cancel`` / ``steps`` / ``throughput``: the benches of :mod:`tether.bench`.

Layer: the command line (``_cli``).

``tether bench cancel MODULE:WORKFLOW [ARGS...]`` imports the workflow and
decodes its arguments as ``tether run`` does, makes its stores from
``--store`` (a fresh store object on the same storage for each sample) or
from ``--store-factory MODULE:CALLABLE`` (a third-party store), runs the
bench, and prints its table, findings and verdict; ``--json`` and
``--plot`` write the samples and the latency CDF. ``--clock virtual`` runs
the whole bench under ``trio.testing.MockClock(autojump_threshold=0)``.
A finding that is a bug exits with status 1.

This module builds the parsers without importing :mod:`tether.bench` (which
imports the testing tools): the command does, when it runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Final, TextIO

import trio
import trio.testing

from .._errors import TetherError, UsageError
from ._args import decode_args, import_modules, resolve_workflow
from ._exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, BadUsage
from ._stores import StoreSpec, store_help

__all__ = ("add_bench_commands", "bench_command")

_EXITS: Final = (
    (EXIT_OK, "no finding is a bug"),
    (
        EXIT_FAILED,
        "a finding is a bug (the store or the workflow breaks the promise), or the bench "
        "could not run (the store failed)",
    ),
    (EXIT_USAGE, "usage error: the command line is wrong"),
    (EXIT_INTERRUPTED, "interrupted by Ctrl-C"),
)
_STORES: Final = (
    "\n  --store-factory MODULE:CALLABLE names a store of your own instead: a callable\n"
    "  that returns a fresh, unopened store (a class, or a function), called once\n"
    "  per run of the bench, as tether.testing.check_store calls its factory."
)
_CANCEL: Final = (
    "Run MODULE:WORKFLOW with ARGS (decoded as for `tether run`) on stores wrapped in "
    "tether.testing.FaultyStore, with --fault at the store's --at calls, under a caller "
    "deadline (trio.move_on_at, --deadline seconds after each sample's start). For each "
    "sample, a fresh run on a fresh store object: first the floor (a bare trio nursery of "
    "--parallel tasks sleeping forever, cancelled by the same deadline), then the workflow; "
    "the overshoot is the time from the deadline until engine.run returned. What still "
    "holds the caller --tolerance seconds after the deadline is named; the tasks and threads "
    "left running are counted (once the caller returned, and once the store closed); the "
    "fault is then cleared and the run resumed, which must end as an undisturbed run of the "
    "workflow (measured first) ends. Runs that resumed so are deleted where the store can "
    "(--keep-runs keeps them). --clock virtual runs everything in virtual time "
    "(MockClock(autojump_threshold=0)), where every overshoot must be exactly 0. The "
    "undisturbed run and each resume get at most --phase-timeout seconds: an undisturbed run "
    "that does not end, or that waits for a message nothing sends, stops the bench with an "
    "error naming what it waits for. Progress goes to standard error."
)


def _exit_help() -> str:
    lines = ["exit status:"]
    for status, meaning in _EXITS:
        lines += textwrap.wrap(
            meaning, width=78, initial_indent=f"  {status:<5}", subsequent_indent=" " * 7
        )
    return "\n".join(lines)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, not {text}")
    return value


def add_bench_commands(
    sub: Any, imports: argparse.ArgumentParser
) -> dict[str, argparse.ArgumentParser]:
    """Add ``tether bench cancel|steps|throughput`` to *sub*; their parsers, keyed
    ``"bench cancel"`` and so on. *imports* gives ``--store`` and ``--import``."""
    epilog = f"{store_help(creates=True)}{_STORES}\n\n{_exit_help()}"
    group = sub.add_parser(
        "bench",
        help="benchmark your workflow and store: cancellation latency, step cost, throughput",
        description="Benchmarks of your own workflow on your own store.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench_sub = group.add_subparsers(dest="bench_command", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False, parents=[imports])
    common.add_argument(
        "--store-factory",
        metavar="MODULE:CALLABLE",
        help="a store of your own: a callable returning a fresh, unopened store "
        "(instead of --store)",
    )
    common.add_argument(
        "--json",
        metavar="FILE",
        help="also write every sample and finding as JSON to FILE (-: stdout, instead of "
        "the table)",
    )
    common.add_argument(
        "--keep-runs",
        action="store_true",
        help="keep the bench's runs in the store (default: delete them where the store can)",
    )

    def command(name: str, **options: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = bench_sub.add_parser(
            name,
            parents=[common],
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            **options,
        )
        return parser

    cancel = command(
        "cancel",
        help="does the workflow stop on time when the store hangs, and what does it leave?",
        description=_CANCEL,
    )
    cancel.add_argument("workflow", metavar="MODULE:WORKFLOW")
    cancel.add_argument("args", nargs="*", metavar="ARG")
    cancel.add_argument(
        "--fault",
        default="hang",
        metavar="hang|delay:SECONDS",
        help="what the faulty calls do: hang forever, or sleep SECONDS first (default hang)",
    )
    cancel.add_argument(
        "--at",
        default="append",
        metavar="METHOD",
        help="the store method whose calls get the fault: append (the journal's writes; "
        "the default), update_run, claim, get_run, load_entries, ...",
    )
    cancel.add_argument(
        "--sweep",
        action="store_true",
        help="the fault at the 1st --at call only, then the 2nd, ..., up to the number of calls "
        "an undisturbed run makes (--samples each); default: at every call",
    )
    cancel.add_argument(
        "--deadline",
        type=_seconds,
        default=0.2,
        metavar="SECONDS",
        help="the caller's deadline after each sample's start (default 0.2)",
    )
    cancel.add_argument(
        "--samples",
        type=_positive_int,
        default=10,
        metavar="N",
        help="samples (per fault position with --sweep; default 10)",
    )
    cancel.add_argument(
        "--parallel",
        type=_positive_int,
        metavar="N",
        help="the floor's width: tasks in its nursery (default: the most steps an undisturbed "
        "run has in flight at once); the workflow's own width is whatever its ARGS make it",
    )
    cancel.add_argument(
        "--clock",
        choices=("real", "virtual"),
        default="real",
        help="real time (default), or virtual time, where every overshoot must be exactly 0",
    )
    cancel.add_argument(
        "--tolerance",
        type=_seconds,
        default=0.02,
        metavar="SECONDS",
        help="a sample is late past the floor's p99 + SECONDS; also when what holds a caller "
        "is looked at (default 0.02)",
    )
    cancel.add_argument(
        "--phase-timeout",
        type=_seconds,
        default=60.0,
        metavar="SECONDS",
        help="the most the undisturbed run, and each resume, may take before the bench "
        "gives up on it and names what it waits for (default 60)",
    )
    cancel.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help="also draw the overshoot's CDF, the workflow against the floor (needs "
        "tether[bench]: matplotlib)",
    )
    steps = command(
        "steps",
        help="what one durable sequential step costs on the store",
        description="Time runs of --steps sequential trivial steps on the store, a run of "
        "none (the fixed per-run cost), and as many plain awaits of a no-op coroutine and "
        "trio.lowlevel.checkpoint() calls, interleaved --repeats times; print a step's cost "
        "in microseconds and in trio checkpoints (medians).",
    )
    steps.add_argument(
        "--steps",
        type=_positive_int,
        default=100,
        metavar="N",
        help="sequential steps per run (default 100)",
    )
    steps.add_argument(
        "--repeats",
        type=_positive_int,
        default=5,
        metavar="N",
        help="interleaved repeats (default 5)",
    )
    throughput = command(
        "throughput",
        help="durable parallel steps per second, with group commit and without",
        description="Time runs of --steps trivial steps, --parallel at a time in "
        "tether.parallel(), on fresh stores: with group commit (tether's normal path) and with "
        "one save per step (each record in an append of its own), alternated --repeats times; "
        "print steps/s (median [lowest-highest]) and the ratio.",
    )
    throughput.add_argument(
        "--parallel",
        type=_positive_int,
        default=100,
        metavar="N",
        help="steps per parallel() block (default 100)",
    )
    throughput.add_argument(
        "--steps",
        type=_positive_int,
        default=1000,
        metavar="N",
        help="steps per run (default 1000)",
    )
    throughput.add_argument(
        "--repeats",
        type=_positive_int,
        default=3,
        metavar="N",
        help="alternated repeats (default 3)",
    )
    return {"bench cancel": cancel, "bench steps": steps, "bench throughput": throughput}


def _factory(spec: StoreSpec, args: argparse.Namespace) -> tuple[Callable[[], Any], str]:
    """The store factory the command line names, and how to show it.

    Raises:
        BadUsage: both ``--store`` and ``--store-factory``, or a factory that does not import
            or is not callable.
    """
    target = args.store_factory
    if target is None:
        return spec.open_for_writing, str(spec)
    if args.store is not None:
        raise BadUsage("give --store or --store-factory, not both")
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise BadUsage(f"--store-factory takes MODULE:CALLABLE, not {target!r}")
    import_modules([module_name])
    factory = getattr(sys.modules[module_name], attr, None)
    if not callable(factory):
        what = "has no attribute" if factory is None else "is not callable:"
        raise BadUsage(f"--store-factory: module {module_name!r} {what} {attr!r}")
    return factory, target


def _fault(text: str) -> Any:
    """``hang`` or ``delay:SECONDS`` as a :mod:`tether.testing` fault.

    Raises:
        BadUsage: anything else.
    """
    from ..testing import Delay, Hang

    if text == "hang":
        return Hang()
    kind, _, seconds = text.partition(":")
    if kind == "delay":
        try:
            value = _seconds(seconds)
        except argparse.ArgumentTypeError as exc:
            raise BadUsage(f"--fault delay:SECONDS: {exc}") from None
        return Delay(value)
    raise BadUsage(f"--fault takes hang or delay:SECONDS, not {text!r}")


def _say(err: TextIO) -> Callable[[str], None]:
    def say(line: str) -> None:
        print(line, file=err, flush=True)

    return say


def _run(args: argparse.Namespace, factory: Callable[[], Any], shown: str, err: TextIO) -> Any:
    """Run the bench *args* name in ``trio.run``; its result.

    Raises:
        BadUsage: the bench refused an option (a UsageError), or the command line is wrong.
        TetherError: the store (or tether) failed.
    """
    from .. import bench
    from ..bench._plot import INSTALL_HINT, plot_available

    common = {"store": factory, "shown": shown, "keep_runs": args.keep_runs}
    if args.bench_command == "steps":
        go: Callable[[], Any] = partial(
            bench.bench_steps, steps=args.steps, repeats=args.repeats, **common
        )
        clock = None
    elif args.bench_command == "throughput":
        go = partial(
            bench.bench_throughput,
            width=args.parallel,
            steps=args.steps,
            repeats=args.repeats,
            **common,
        )
        clock = None
    else:
        import_modules(args.imports)
        wf = resolve_workflow(args.workflow)
        values = decode_args(wf, args.workflow, args.args)
        if args.plot is not None and not plot_available():
            raise BadUsage(INSTALL_HINT)
        go = partial(
            bench.bench_cancel,
            wf,
            *values,
            fault=_fault(args.fault),
            at=args.at,
            deadline=args.deadline,
            samples=args.samples,
            sweep=args.sweep,
            width=args.parallel,
            tolerance=args.tolerance,
            progress=_say(err),
            phase_timeout=args.phase_timeout,
            **common,
        )
        clock = trio.testing.MockClock(autojump_threshold=0) if args.clock == "virtual" else None
    try:
        return trio.run(go, clock=clock)
    except UsageError as exc:
        raise BadUsage(str(exc)) from None


def bench_command(spec: StoreSpec, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``tether bench cancel|steps|throughput``: the exit status.

    Raises:
        BadUsage: the command line is wrong.
    """
    from .. import bench

    factory, shown = _factory(spec, args)
    try:
        result = _run(args, factory, shown, err)
    except TetherError as exc:
        print(
            f"tether: bench {args.bench_command} on {shown}: {type(exc).__name__}: {exc}", file=err
        )
        return EXIT_FAILED
    data = bench.to_json(result)
    if args.json == "-":
        print(json.dumps(data, indent=2), file=out)
    else:
        bench.write_table(result, out)
        if args.json is not None:
            Path(args.json).write_text(json.dumps(data, indent=2) + "\n")
            print(f"\nJSON written to {args.json}", file=out)
    if getattr(args, "plot", None) is not None:
        bench.plot_cancel(result, args.plot)
        print(f"plot written to {args.plot}", file=out if args.json != "-" else err)
    bugs = isinstance(result, bench.CancelResult) and bool(result.bugs)
    return EXIT_FAILED if bugs else EXIT_OK
