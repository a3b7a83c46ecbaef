"""``tether worker`` and ``tether submit``: the queue from the command line.

Layer: the command line (``_cli``).

``tether worker --store URL --import MODULE`` serves the workflows MODULE
defines (``tether.open_worker``) until SIGTERM or SIGINT, then drains: it
stops claiming, gives the runs it holds ``--grace`` seconds, cancels the
rest as a caller cancellation and releases their leases, so other workers
take them over at once. Run outcomes and lost leases are logged to stderr
(the ``tether.worker`` logger), one line each (:class:`LogFormat`: the
source named once); the worker itself exits 0 after a drain. It
also serves the schedules MODULE defines (``tether.schedule``; see
:mod:`._schedules`), unless ``--no-schedules``.

``tether submit MODULE:WORKFLOW ARGS…`` stores a queued run and prints its id
(its arguments decoded as ``tether run`` decodes them), in a queue the
imported code defines (``--queue MODULE:QUEUE``), with the other options of
``engine.submit``.

:func:`add_queue_commands` adds both commands to the parser.
"""

from __future__ import annotations

import argparse
import gc
import logging
import signal
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import trio

from .._api._workflow import Workflow
from .._engine._engine import internals, open_engine
from .._errors import TetherError
from .._worker._schedule import Schedule
from .._worker._worker import open_worker
from ..stores import Store
from ._args import decode_args, import_modules, parse_aware_time, resolve_queue, resolve_workflow
from ._exits import EXIT_FAILED, EXIT_OK
from ._schedules import module_schedules
from ._stores import STORE_ENV, StoreSpec
from ._text import cli_message

__all__ = ("LogFormat", "queue_command", "serve", "submit")


class LogFormat(logging.Formatter):
    """A worker's log line: ``TIME LEVEL SOURCE: MESSAGE``, the source named once.

    tether's own messages begin with it (``tether: ...``, ``tether worker
    w-1: ...``), as they read wherever they are logged; any other (the
    PostgreSQL driver's) gets its logger's name in front.
    """

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        """The line, with the logger's name before a message that does not name its source."""
        if not record.message.startswith(record.name.partition(".")[0]):
            record.message = f"{record.name}: {record.message}"
        return super().formatMessage(record)


async def _serve(
    store: Store,
    shown: str,
    *,
    concurrency: int,
    max_dispatches: int,
    grace: float,
    lease_ttl: float,
    poll_interval: float,
    park_after: float,
    schedules: Sequence[Schedule],
    out: TextIO,
) -> int:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with open_engine(store, lease_ttl=lease_ttl) as engine:
            # What is loaded by now lives as long as the process: out of the garbage
            # collector's full collections, which would walk it again and again while
            # the worker runs (the runs' objects, made from here on, are collected as
            # ever). Before the worker claims any run.
            gc.collect()
            gc.freeze()
            keys = internals(engine).workflow_keys()  # name@version for the versioned ones
            names = ", ".join(sorted(n if v is None else f"{n}@{v}" for n, v in keys)) or "(none)"
            async with open_worker(
                engine,
                concurrency=concurrency,
                max_dispatches=max_dispatches,
                grace=grace,
                poll_interval=poll_interval,
                park_after=park_after,
                schedules=schedules,
            ) as worker:
                print(
                    f"tether worker {engine.owner} serving {names} from {shown} "
                    f"(concurrency {concurrency})",
                    file=out,
                    flush=True,
                )
                if schedules:
                    served = ", ".join(f"{s.name} ({s.cron})" for s in schedules)
                    print(f"tether worker {engine.owner}: schedules {served}", file=out, flush=True)
                async for signum in signals:
                    name = signal.Signals(signum).name
                    print(
                        f"tether worker {engine.owner}: {name}: draining "
                        f"({len(worker.running)} held, grace {grace:g} s)",
                        file=out,
                        flush=True,
                    )
                    break
    done = ", ".join(f"{n} {how}" for how, n in sorted(worker.outcomes.items())) or "none"
    print(f"tether worker {engine.owner}: stopped; claimed {worker.claimed}, {done}", file=out)
    return 0


def serve(
    store: Store,
    shown: str,
    args: Any,
    out: TextIO,
    err: TextIO,
    schedules: Sequence[Schedule] = (),
) -> int:
    """``tether worker``: serve until SIGTERM/SIGINT (and *schedules*); the exit status."""
    handler = logging.StreamHandler(err)
    handler.setFormatter(LogFormat())
    logger = logging.getLogger("tether")
    logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)
    # The PostgreSQL driver's pool warns as connections drop (a server restart):
    # the same format, so a worker's log reads as one.
    driver = logging.getLogger("psycopg")
    driver.addHandler(handler)
    try:
        return trio.run(
            lambda: _serve(
                store,
                shown,
                concurrency=args.concurrency,
                max_dispatches=args.max_dispatches,
                grace=args.grace,
                lease_ttl=args.lease_ttl,
                poll_interval=args.poll_interval,
                park_after=args.park_after,
                schedules=schedules,
                out=out,
            )
        )
    finally:
        logger.removeHandler(handler)
        driver.removeHandler(handler)


async def _submit(
    store: Store, wf: Workflow[..., Any], values: Sequence[Any], options: dict[str, Any]
) -> str:
    async with open_engine(store) as engine:
        return await engine.submit(wf, *values, **options)


def submit(store: Store, args: Any, out: TextIO, err: TextIO) -> int:
    """``tether submit``: store a queued run, print its id; the exit status.

    Raises:
        BadUsage: the workflow or its arguments are wrong (nothing is stored).
    """
    wf = resolve_workflow(args.workflow)
    values = decode_args(wf, args.workflow, args.args)
    options = {
        "run_id": args.run_id,
        "queue": None if args.queue is None else resolve_queue(args.queue),
        "key": args.key,
        "dedupe": args.dedupe,
        "debounce": args.debounce,
        "not_before": args.not_before,
    }
    try:
        run_id = trio.run(_submit, store, wf, values, options)
    except TetherError as exc:
        print(f"tether: {cli_message(exc)}", file=err)
        return EXIT_FAILED
    print(run_id, file=out)
    return EXIT_OK


def queue_command(spec: StoreSpec, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``tether submit`` / ``tether worker``; the exit status (both create a missing store).

    Raises:
        BadUsage: a module does not import, or the workflow or its arguments are wrong.
    """
    if spec.kind == "memory":
        # A queue another process serves, or a worker of runs another process submits.
        print(
            f"tether: tether {args.command} needs a store other processes share; memory: is "
            "a new, empty MemoryStore in every process (name another with --store or "
            f"${STORE_ENV})",
            file=err,
        )
        return EXIT_FAILED
    import_modules(args.imports)
    serves = args.command == "worker" and args.schedules
    schedules = module_schedules(args.imports) if serves else ()
    store = spec.open_for_writing()
    if args.command == "submit":
        return submit(store, args, out, err)
    try:
        return serve(store, str(spec), args, out, err, schedules)
    except TetherError as exc:
        print(f"tether: {type(exc).__name__}: {exc}", file=err)
        return EXIT_FAILED


def add_queue_commands(
    sub: Any,
    imports: argparse.ArgumentParser,
    command: Callable[..., argparse.ArgumentParser],
    exits: Sequence[int],
) -> dict[str, argparse.ArgumentParser]:
    """Add ``tether worker`` and ``tether submit`` to *sub*; their parsers, by name.

    *imports* gives ``--store`` and ``--import``; *command* makes a subcommand
    whose help ends with its stores and *exits*.
    """
    worker = command(
        sub,
        "worker",
        creates=True,
        exits=exits,
        parents=[imports],
        help="claim queued and orphaned runs and execute them, until SIGTERM",
        description="Serve the workflows the --import modules define: claim queued runs, "
        "and runs whose owner's lease expired, and execute them, at most --concurrency at "
        "once. SIGTERM or SIGINT drains: claiming stops, held runs get --grace seconds, "
        "then are cancelled as a caller cancellation and released for other workers "
        "(exit status 0). Run outcomes are logged to stderr.",
    )
    worker.add_argument("--concurrency", type=int, default=16, metavar="N")
    worker.add_argument(
        "--max-dispatches",
        type=int,
        default=5,
        metavar="N",
        help="a run dispatched N times without an outcome (its worker died, or could not "
        "store it) is set aside as dead_letter (default 5)",
    )
    worker.add_argument(
        "--grace",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="on SIGTERM or SIGINT, seconds the held runs get to finish before they are "
        "cancelled and released (default 0, as tether.open_worker: at once)",
    )
    worker.add_argument("--lease-ttl", type=float, default=15.0, metavar="SECONDS")
    worker.add_argument("--poll-interval", type=float, default=1.0, metavar="SECONDS")
    worker.add_argument(
        "--park-after",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="a run whose every task waits, on messages or on timers due later than this, "
        "is parked: stored waiting, its lease and slot given up, until it is due or sent a "
        "message (default 60)",
    )
    worker.add_argument(
        "--schedules",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve the schedules (tether.schedule) the --import modules define: submit each "
        "tick's run, one run per tick across all workers (default: yes)",
    )
    submit = command(
        sub,
        "submit",
        creates=True,
        exits=exits,
        parents=[imports],
        help="queue a run for the workers; print its id",
        description="Store MODULE:WORKFLOW with ARGS (decoded as for `tether run`) as a "
        "queued run, and print its id. Submitting an id that exists with the same "
        "arguments prints it and changes nothing.",
    )
    submit.add_argument("workflow", metavar="MODULE:WORKFLOW")
    submit.add_argument("args", nargs="*", metavar="ARG")
    submit.add_argument("--run-id", metavar="ID", help="the run's id (default: a random one)")
    submit.add_argument(
        "--queue",
        metavar="MODULE:QUEUE",
        help="the tether.Queue the module defines, with its limits (default: the default queue)",
    )
    submit.add_argument("--key", metavar="KEY", help="whose run it is, in its queue")
    submit.add_argument(
        "--dedupe",
        metavar="ID",
        help="while a run of the queue submitted with ID is unfinished, print its id and "
        "store nothing",
    )
    submit.add_argument(
        "--debounce",
        type=float,
        metavar="SECONDS",
        help="(with --dedupe) start SECONDS after the last submit, with its arguments",
    )
    submit.add_argument(
        "--not-before",
        type=parse_aware_time,
        metavar="TIME",
        help="start no earlier than TIME (ISO 8601 with its UTC offset, e.g. "
        "2026-12-24T09:00:00+01:00)",
    )
    return {"worker": worker, "submit": submit}
