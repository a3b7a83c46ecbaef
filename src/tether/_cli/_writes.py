"""The one way a command writes to a stored run from the shell (``send``, ``respond``).

Layer: the command line (``_cli``).

Such a command never creates a store: it needs the one that holds the run.
It opens the store, makes its one write in ``trio.run``, and maps what the
engine refuses to exit statuses the same way for every command: a refusal of
what was typed (a value that does not fit, a name or key not declared, code
not imported) is a usage error (exit status 2); no such run, or a run that
takes no such write now (finished, executing), is exit status 1.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TextIO, TypeVar

import trio

from .._errors import RunConflictError, RunNotFoundError, TetherError
from ..stores import Store
from ._exits import EXIT_FAILED, EXIT_OK, BadUsage
from ._stores import StoreSpec

__all__ = ("add_run_command", "write_to_run")

T = TypeVar("T")


def write_to_run(
    spec: StoreSpec,
    run_id: str,
    command: str,
    write: Callable[[Store], Awaitable[T]],
    usage: tuple[type[TetherError], ...],
    err: TextIO,
) -> tuple[int, T | None]:
    """``trio.run(write, store)`` on *spec*'s existing store: the exit status, and what
    *write* returned (``None`` unless the status is ``EXIT_OK``).

    Raises:
        BadUsage: *write* raised one of *usage*: nothing was stored.
    """
    why = f"tether {command} never creates a store: it needs the one that holds run {run_id!r}"
    store = spec.open_existing_or_say(err, why)
    if store is None:
        return EXIT_FAILED, None
    try:
        return EXIT_OK, trio.run(write, store)
    except usage as exc:
        raise BadUsage(f"{type(exc).__name__}: {exc}") from None
    except RunNotFoundError:
        print(f"tether: no run {run_id!r} in {spec}", file=err)
    except RunConflictError as exc:
        print(f"tether: {exc}", file=err)
    except TetherError as exc:
        print(f"tether: {spec}: {type(exc).__name__}: {exc}", file=err)
    return EXIT_FAILED, None


def add_run_command(
    sub: Any,
    name: str,
    imports: argparse.ArgumentParser,
    command: Callable[..., argparse.ArgumentParser],
    exits: Sequence[int],
    *,
    help: str,
    description: str,
) -> argparse.ArgumentParser:
    """Add the command *name*, which writes to the stored run ``RUN_ID`` (its first argument).

    *imports* gives ``--store`` and ``--import``; *command* makes a subcommand
    whose help ends with its stores and *exits*. The command never creates a
    store.
    """
    parser = command(
        sub,
        name,
        creates=False,
        exits=exits,
        parents=[imports],
        help=help,
        description=description,
    )
    parser.add_argument("run_id", metavar="RUN_ID")
    return parser
