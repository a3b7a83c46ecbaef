"""``tether schedules list``: the schedules of the imported modules, and their last runs.

Layer: the command line (``_cli``).

``tether schedules list --import MODULE`` imports the modules and takes the
schedules they define at their top level (each ``tether.schedule()``
object among a module's attributes, in the order they were defined; one
imported under two names counts once). For each one it prints the next
tick and the most recent tick that has a run in the store, with that run's
status (probing at most :data:`~tether._worker._schedule.LOOKBACK` ticks back, as a
worker does). ``tether worker`` serves the same schedules
(:func:`module_schedules`), unless ``--no-schedules``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TextIO

import trio

from .._core._clock import SystemClock
from .._engine._engine import open_engine
from .._errors import TetherError, UsageError
from .._terminal import table
from .._worker._schedule import LOOKBACK, Schedule, check_schedules, last_run
from ..stores import Store
from ._args import import_modules
from ._exits import EXIT_FAILED, EXIT_OK, BadUsage, exit_help
from ._stores import StoreSpec, store_help
from ._text import when

__all__ = ("add_schedules_commands", "module_schedules", "schedules_command")

_HELP = "list the schedules the --import modules define: next tick, last run"
_DESCRIPTION = (
    "List the schedules (tether.schedule) that the --import modules define at their top "
    "level: name, workflow, cron expression (UTC), catch-up policy, the next tick, and the "
    f"most recent tick that has a run in the store, with its status (looking back at most "
    f"{LOOKBACK} ticks). `tether worker` serves the same schedules. Only reads the store."
)


def module_schedules(names: Sequence[str]) -> tuple[Schedule, ...]:
    """The schedules that the modules *names* (imported already) define at their top level.

    Raises:
        BadUsage: two of them have one name.
    """
    found = [v for name in names for v in vars(sys.modules[name]).values()]
    try:
        return check_schedules(
            (v for v in found if isinstance(v, Schedule)), "the --import modules"
        )
    except UsageError as exc:
        raise BadUsage(str(exc)) from None


def add_schedules_commands(
    sub: Any,
    imports: argparse.ArgumentParser,
    command: Callable[..., argparse.ArgumentParser],
    exits: Sequence[int],
) -> dict[str, argparse.ArgumentParser]:
    """Add ``tether schedules list`` to *sub*; its parser, keyed ``"schedules list"``.

    *imports* gives ``--store`` and ``--import``; *command* makes a subcommand
    whose help ends with its stores and *exits*.
    """
    group = sub.add_parser(
        "schedules",
        help="list the schedules the --import modules define, with their last runs",
        description="The schedules (tether.schedule) that the --import modules define.",
        epilog=f"{store_help(creates=False)}\n\n{exit_help(*exits)}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    group_sub = group.add_subparsers(dest="schedules_command", required=True, metavar="COMMAND")
    listing: argparse.ArgumentParser = command(
        group_sub,
        "list",
        creates=False,
        exits=exits,
        parents=[imports],
        help=_HELP,
        description=_DESCRIPTION,
    )
    listing.add_argument(
        "--json",
        action="store_true",
        help="print a JSON list, one object per schedule (times in ISO 8601, UTC)",
    )
    return {"schedules list": listing}


def schedules_command(spec: StoreSpec, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``tether schedules list``: the exit status.

    Raises:
        BadUsage: no ``--import``, a module that does not import, two schedules
            with one name.
    """
    if not args.imports:
        raise BadUsage("name the modules that define the schedules: --import MODULE")
    import_modules(args.imports)
    schedules = module_schedules(args.imports)
    store = spec.open_existing_or_say(err, "tether schedules never creates a store")
    if store is None:
        return EXIT_FAILED
    try:
        rows = trio.run(_read, store, schedules)
    except TetherError as exc:
        print(f"tether: {spec}: {type(exc).__name__}: {exc}", file=err)
        return EXIT_FAILED
    if args.json:
        print(json.dumps(rows, indent=2), file=out)
    else:
        _print(rows, args.imports, str(spec), out)
    return EXIT_OK


async def _read(store: Store, schedules: Sequence[Schedule]) -> list[dict[str, Any]]:
    """One JSON-ready row per schedule: its definition, next tick and last run."""
    now = SystemClock().now()
    rows = []
    async with open_engine(store) as engine:
        for s in schedules:
            found = await last_run(engine.store, s, now)
            tick, record = found if found is not None else (None, None)
            rows.append(
                {
                    "name": s.name,
                    "workflow": s.workflow.name,
                    "cron": s.cron,
                    "catch_up": s.catch_up,
                    "args": json.loads(s.encoded_args),
                    "next_tick": _iso(s.next_tick(now)),
                    "last_tick": _iso(tick),
                    "last_run_id": None if record is None else record.run_id,
                    "last_status": None if record is None else record.status.value,
                }
            )
    return rows


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _print(rows: Sequence[dict[str, Any]], modules: Sequence[str], spec: str, out: TextIO) -> None:
    where = ", ".join(modules)
    if not rows:
        print(f"no schedules in {where}", file=out)
        return

    def shown(iso: str | None) -> str:
        return "-" if iso is None else when(datetime.fromisoformat(iso))

    cells = [
        (
            r["name"],
            r["workflow"],
            r["cron"],
            r["catch_up"],
            shown(r["next_tick"]) if r["next_tick"] else "(none: fires no more)",
            "-" if r["last_tick"] is None else f"{shown(r['last_tick'])} {r['last_status']}",
        )
        for r in rows
    ]
    header = ("NAME", "WORKFLOW", "CRON", "CATCH-UP", "NEXT TICK (UTC)", "LAST RUN (UTC)")
    table(out, header, cells, None)
    n = len(rows)
    print(f"\n{n} schedule{'' if n == 1 else 's'} in {where}; runs in {spec}", file=out)
