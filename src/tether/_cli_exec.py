"""``tether run`` and ``tether resume``: execute a workflow with live progress.

Both print one line per event of the run as it happens (built on
``engine.open_run``/``engine.open_resume`` and ``show_progress``), then the
outcome. Exit status: 0 completed, 1 failed (or a bad store), 3 paused.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

import trio

from ._engine import Engine, open_engine
from ._errors import (
    LeaseLostError,
    RunCancelledError,
    RunConflictError,
    TetherError,
    UsageError,
)
from ._events import OpenRun
from ._progress import show_progress
from ._requests import Paused
from ._workflow import Workflow
from .stores import Store

__all__ = ("EXIT_PAUSED", "import_modules", "parse_value", "resolve_workflow", "run_live")

#: Exit status of ``tether run``/``tether resume`` when the run paused for input.
EXIT_PAUSED = 3


def parse_value(text: str) -> Any:
    """A command-line value: JSON when it parses as JSON, else the text itself.

    ``42`` is the number, ``true`` the bool, ``'"42"'`` the string ``"42"``,
    ``o-1`` (not JSON) the string ``"o-1"``.
    """
    try:
        return json.loads(text)
    except ValueError:
        return text


def import_modules(names: list[str]) -> None:
    """Import the modules that define workflows (the current directory first on the path).

    Raises:
        UsageError: a module cannot be imported (names it and the reason).
    """
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise UsageError(f"cannot import module {name!r}: {exc}") from exc


def resolve_workflow(target: str) -> Workflow[..., Any]:
    """``MODULE:NAME`` as a workflow object.

    Raises:
        UsageError: not ``MODULE:NAME``, not importable, or not a ``@tether.workflow``.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"{target!r} is not MODULE:WORKFLOW (for example shop.flows:checkout)")
    import_modules([module_name])
    wf = getattr(sys.modules[module_name], attr, None)
    if not isinstance(wf, Workflow):
        raise UsageError(f"{target} is {wf!r}, not a @tether.workflow")
    return wf


async def run_live(
    store: Store,
    start: Callable[[Engine], OpenRun[Any]],
    out: TextIO,
    err: TextIO,
) -> int:
    """Open an engine on *store*, run what *start* opens with live progress; the exit status."""
    async with open_engine(store) as engine, start(engine) as run:
        await show_progress(run, out)
        try:
            result = await run.result()
        except Paused as paused:
            print(f"\nrun {paused.run_id} is paused, waiting for:", file=out)
            for request in paused.requests:
                payload = json.dumps(request.payload, sort_keys=True)
                print(f"  {request.key} ({request.response_type}): {payload}", file=out)
            respond = " ".join(f"--respond '{r.key}=...'" for r in paused.requests)
            print(f"answer with: tether resume {paused.run_id} {respond}", file=out)
            return EXIT_PAUSED
        except (RunCancelledError, RunConflictError, LeaseLostError) as exc:
            # Not the workflow failing: the run is cancelled, or another owner
            # holds it (or took it over). Saying "failed" would mislead.
            print(f"tether: run {run.run_id}: {type(exc).__name__}: {exc}", file=err)
            return 1
        except Exception as exc:
            print(f"tether: run {run.run_id} failed: {type(exc).__name__}: {exc}", file=err)
            return 1
    print(json.dumps(result, sort_keys=True, default=repr), file=out)
    return 0


def execute(store: Store, start: Callable[[Engine], OpenRun[Any]], out: TextIO, err: TextIO) -> int:
    """``trio.run`` of :func:`run_live`, with tether's own errors as exit status 1."""
    main: Callable[[], Awaitable[int]] = lambda: run_live(store, start, out, err)  # noqa: E731
    try:
        return trio.run(main)
    except TetherError as exc:
        print(f"tether: {type(exc).__name__}: {exc}", file=err)
        return 1
