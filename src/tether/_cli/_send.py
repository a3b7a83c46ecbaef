"""``tether send RUN NAME VALUE``: send a message to a run (``engine.send``).

Layer: the command line (``_cli``).

``tether send order-7 approve true --import shop.flows`` gives run
``order-7`` the message ``approve`` with the value ``true``, from the shell,
as ``engine.send`` does from code. VALUE is read as ``--respond`` reads an
answer (JSON, or else the plain text: :func:`~tether._codec._json.parse_value`) and
decoded strictly into the type the run's workflow declares for NAME (so
``{"sku": "lamp"}`` is an attrs ``Item``), then ``engine.send`` checks and
stores it. A message that does not fit, a name the workflow does not
declare, or a workflow the ``--import`` modules do not define is a usage
error (exit status 2) and nothing is stored. A run that does not exist or
has finished is exit status 1. The store must exist (a message goes to a
stored run): this command never creates one.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from .._api._workflow import lookup_workflow
from .._codec._json import parse_value
from .._codec._values import codec
from .._engine._engine import Engine, open_engine
from .._engine._send import refusal
from .._errors import (
    CodecError,
    MessageRejectedError,
    UsageError,
    WorkflowNotFoundError,
)
from ..stores import Store
from ._args import import_modules
from ._exits import EXIT_OK, BadUsage
from ._stores import StoreSpec
from ._text import json_text
from ._writes import add_run_command, write_to_run

__all__ = ("add_send_command", "send_command")

_HELP = "send a message to a run (what its workflow receives with tether.receive)"
_DESCRIPTION = (
    "Send the message NAME with VALUE to RUN_ID, as engine.send does: it is stored in the "
    "run's mailbox, in order, and goes to exactly one tether.receive(NAME, ...) of the run. "
    "A run that waits for it wakes (a parked run is taken up by any worker). VALUE is JSON, "
    "or else the plain text, as for `tether resume --respond`, and must decode strictly "
    "into the type the run's workflow declares for NAME (@tether.workflow(messages=...)); "
    "--import names the module that defines the workflow. A refused message is not stored."
)


def add_send_command(
    sub: Any,
    imports: argparse.ArgumentParser,
    command: Callable[..., argparse.ArgumentParser],
    exits: Sequence[int],
) -> dict[str, argparse.ArgumentParser]:
    """Add ``tether send`` to *sub*; its parser, keyed ``"send"``.

    *imports* gives ``--store`` and ``--import``; *command* makes a subcommand
    whose help ends with its stores and *exits*.
    """
    send = add_run_command(
        sub, "send", imports, command, exits, help=_HELP, description=_DESCRIPTION
    )
    send.add_argument(
        "name", metavar="NAME", help="the message's name, as the workflow declares it"
    )
    send.add_argument(
        "value", metavar="VALUE", help="the message's value: JSON, or else the plain text"
    )
    return {"send": send}


async def _typed(engine: Engine, run_id: str, name: str, text: str) -> Any:
    """VALUE as the message's value: parsed as an answer is, then decoded strictly into the
    type the run's workflow declares for *name*.

    Where that type is not known here (no such run, its workflow not
    imported, *name* not declared), the parsed value is returned as it is:
    ``engine.send`` refuses it, saying why.

    Raises:
        BadUsage: the value does not decode into the declared type.
    """
    value = parse_value(text)
    record = await engine.store.get_run(run_id)
    if record is None:
        return value
    try:
        messages = lookup_workflow(record.workflow, record.version).messages
    except WorkflowNotFoundError:
        return value
    if name not in messages:
        return value
    tp = messages[name]
    try:
        return codec.structure(value, tp, what=f"VALUE {text!r}")
    except CodecError as exc:
        why = refusal(run_id, name, record.workflow, tp, f"VALUE {text}", exc)
        raise BadUsage(
            f"{MessageRejectedError.__name__}: {why}{_as_text(text, value, tp)}"
        ) from None


def _as_text(text: str, value: Any, tp: Any) -> str:
    """A hint when VALUE parsed as JSON (``42``) but the type wants the text itself."""
    if value == text:
        return ""
    try:
        codec.structure(text, tp, what="VALUE")
    except CodecError:
        return ""
    return f" (to send the text {text}, give it as a JSON string: {json.dumps(text)!r})"


async def _send(store: Store, *, args: argparse.Namespace) -> Any:
    """Send the message; the value sent."""
    async with open_engine(store) as engine:
        value = await _typed(engine, args.run_id, args.name, args.value)
        await engine.send(args.run_id, args.name, value)
    return value


def send_command(spec: StoreSpec, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``tether send``: the exit status.

    Raises:
        BadUsage: a module that does not import, a message the run refuses
            (an undeclared name, a value that does not decode), a run whose
            workflow the ``--import`` modules do not define. Nothing was stored.
    """
    import_modules(args.imports)
    # (WorkflowNotFoundError's message says to name the module with --import.)
    usage = (MessageRejectedError, UsageError, WorkflowNotFoundError)
    sent: tuple[int, Any] = write_to_run(
        spec, args.run_id, "send", functools.partial(_send, args=args), usage, err
    )
    status, value = sent
    if status == EXIT_OK:
        print(f"sent {args.name} to run {args.run_id}: {json_text(value)}", file=out)
    return status
