"""``tether respond RUN KEY=VALUE...``: answer a paused run for the workers (``engine.respond``).

Layer: the command line (``_cli``).

``tether respond o-3 manager=true --import shop.flows`` journals the response
to request ``manager`` of run ``o-3`` and queues the run, in one store write,
and returns: a worker executes the run, never this command. (``tether resume
--respond`` executes the run here instead, for a store no worker serves.)
Each VALUE is read as ``--respond`` reads one (JSON, or else the plain text)
and decoded strictly into the type its request asks for. A response that does
not fit, a key that is not pending, or a workflow the ``--import`` modules do
not define is a usage error (exit status 2) and nothing is stored; a run that
does not exist, has finished or is executing is exit status 1. When no live
worker serves the run's workflow, the command says so: the run is stranded
until one starts.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from .._engine._engine import internals, open_engine
from .._engine._serving import is_stranded, stranded_text
from .._errors import (
    InvalidResponseError,
    UnknownRequestError,
    UsageError,
    WorkflowNotFoundError,
)
from ..stores import Store
from ._args import import_modules, parse_responses
from ._exits import EXIT_OK
from ._stores import StoreSpec
from ._writes import add_run_command, write_to_run

__all__ = ("add_respond_command", "respond_command")

_HELP = "respond to a paused run's requests; a worker executes the run (engine.respond)"
_DESCRIPTION = (
    "Respond to the pending requests of RUN_ID, as engine.respond does: each KEY=VALUE "
    "responds to the request KEY (VALUE is JSON, or else the plain text, decoded strictly into "
    "the type the request asks for); the responses are journaled and the run queued for "
    "the workers in one write, and nothing executes here. --import names the module that "
    "defines the run's workflow. To execute the run in this process instead, use "
    "`tether resume RUN_ID --respond KEY=VALUE`."
)


def add_respond_command(
    sub: Any,
    imports: argparse.ArgumentParser,
    command: Callable[..., argparse.ArgumentParser],
    exits: Sequence[int],
) -> dict[str, argparse.ArgumentParser]:
    """Add ``tether respond`` to *sub*; its parser, keyed ``"respond"``.

    *imports* gives ``--store`` and ``--import``; *command* makes a subcommand
    whose help ends with its stores and *exits*.
    """
    respond = add_run_command(
        sub, "respond", imports, command, exits, help=_HELP, description=_DESCRIPTION
    )
    respond.add_argument(
        "responses",
        nargs="+",
        metavar="KEY=VALUE",
        help="respond to the request KEY with VALUE (JSON, or else the plain text; once per KEY)",
    )
    return {"respond": respond}


async def _respond(
    store: Store, *, args: argparse.Namespace, responses: dict[str, Any]
) -> str | None:
    """Respond; what to say when the run is stranded now (else ``None``)."""
    async with open_engine(store) as engine:
        await engine.respond(args.run_id, responses)
        info = await engine.get_run(args.run_id)
        if info is None or not is_stranded(info, await internals(engine).served()):
            return None
        return stranded_text(info)


def respond_command(spec: StoreSpec, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``tether respond``: the exit status.

    Raises:
        BadUsage: a module that does not import, a response that does not fit,
            a key that is not pending, a workflow the ``--import`` modules do
            not define. Nothing was stored.
    """
    responses = parse_responses(args.responses, "tether respond")
    import_modules(args.imports)
    usage = (InvalidResponseError, UnknownRequestError, UsageError, WorkflowNotFoundError)
    write = functools.partial(_respond, args=args, responses=responses)
    status, stranded = write_to_run(spec, args.run_id, "respond", write, usage, err)
    if status != EXIT_OK:
        return status
    keys = ", ".join(responses)
    print(f"responded to {keys} of run {args.run_id}: queued for the workers", file=out)
    if stranded is not None:
        print(f"tether: run {args.run_id}: {stranded}", file=err)
    return EXIT_OK
