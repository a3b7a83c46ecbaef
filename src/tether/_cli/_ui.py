"""``tether ui``: the dashboard, served until Ctrl-C (needs ``tether[ui]``).

Layer: the command line (``_cli``).

``tether ui --store URL`` serves the dashboard (:mod:`tether._ui._app`) on
127.0.0.1:8700 and prints its URL and the token that write actions (responses,
cancels) need; ``--read-only`` offers none. The store must exist: the
dashboard never creates one. ``--import MODULE`` loads workflow code, which
responding to a request needs (each response is checked against its type;
``engine.respond`` then queues the run for the workers: nothing executes in
this process). SIGINT or SIGTERM stops it: requests in flight get 2 s.
"""

from __future__ import annotations

import argparse
import secrets
import signal
import sys
from functools import partial
from types import ModuleType
from typing import TextIO

import trio

from .._errors import TetherError
from ..stores import Store
from ._args import import_modules
from ._exits import BadUsage
from ._stores import StoreSpec

__all__ = ("DESCRIPTION", "HELP", "INSTALL_HINT", "add_ui_arguments", "serve_ui")

INSTALL_HINT = (
    "tether ui needs the dashboard's dependencies: pip install -e '.[ui]' in tether's clone"
)


#: ``tether ui``'s one-line help and its description.
HELP = "serve the web dashboard: runs, timelines, responses to requests, cancels"
DESCRIPTION = (
    "Serve the dashboard of a store until Ctrl-C: the runs, each run's journal and timeline, "
    "and forms that respond to pending requests. Responses and cancels are POSTs that need "
    "the token printed at start (or --token); --read-only offers none. Responding needs the "
    "workflow's code (--import). The store must exist. Needs tether[ui]."
)


def add_ui_arguments(ui: argparse.ArgumentParser) -> None:
    """Add ``tether ui``'s own options to its parser (``--store`` and ``--import`` come
    from the parents the command line gives it)."""
    ui.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    ui.add_argument("--port", type=int, default=8700, help="port to listen on (default 8700)")
    ui.add_argument("--token", help="the token write actions need (default: a random one)")
    ui.add_argument("--read-only", action="store_true", help="offer no responses and no cancels")


async def _serve(
    store: Store, shown: str, args: argparse.Namespace, modules: list[ModuleType], out: TextIO
) -> None:
    from .._ui._app import is_loopback, open_dashboard, serve

    token = args.token or secrets.token_urlsafe(24)
    stop = trio.Event()
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with (
            open_dashboard(
                store, shown=shown, token=token, read_only=args.read_only, modules=modules
            ) as dash,
            trio.open_nursery() as nursery,
        ):
            urls = await nursery.start(
                partial(serve, dash, host=args.host, port=args.port, shutdown_trigger=stop.wait)
            )
            url = urls[0]
            mode = " read-only" if args.read_only else ""
            print(f"tether ui: serving {shown}{mode} at {url}/", file=out)
            if not args.read_only:
                print(f"  to respond and cancel, open {url}/?token={token}", file=out)
                print(f"  (writes need the token {token})", file=out)
            if not is_loopback(args.host):
                print(f"  warning: anyone who reaches {args.host} can read every run", file=out)
            print("  Ctrl-C stops it", file=out, flush=True)
            async for _ in signals:
                stop.set()
                break
    print("tether ui: stopped", file=out)


def serve_ui(spec: StoreSpec, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``tether ui``: serve until SIGINT/SIGTERM; the exit status (1: cannot start).

    Raises:
        BadUsage: an empty ``--token``, a port out of range, or an ``--import`` that fails.
    """
    if args.token is not None and not args.token:
        raise BadUsage("--token must not be empty")
    if not 0 <= args.port <= 65535:
        raise BadUsage(f"--port must be 0 to 65535 (0: any free port), not {args.port}")
    try:
        import hypercorn  # noqa: F401
        import starlette  # noqa: F401
    except ImportError:
        print(f"tether: {INSTALL_HINT}", file=err)
        return 1
    # It resumes runs: ride out a database outage as `tether resume` does.
    store = spec.open_existing_or_say(err, "tether ui never creates a store", retry_timeout=None)
    if store is None:
        return 1
    import_modules(args.imports)
    modules = [sys.modules[name] for name in args.imports]
    status = 0
    try:
        trio.run(_serve, store, str(spec), args, modules, out)
    except* TetherError as group:
        status = _report(group, err, "")
    except* OSError as group:
        status = _report(group, err, f"cannot serve on {args.host}:{args.port}: ")
    return status


def _report(group: BaseExceptionGroup[Exception], err: TextIO, what: str) -> int:
    """Print the first error of *group* (the nurseries on the way wrap it); exit status 1."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    name = "" if isinstance(exc, OSError) else f"{type(exc).__name__}: "
    print(f"tether: {what}{name}{exc}", file=err)
    return 1
