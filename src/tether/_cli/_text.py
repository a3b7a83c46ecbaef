"""The command line's words for things that are not runs: times, tables, commands, values.

Layer: the command line (``_cli``).

Times in UTC and durations, one-line abbreviations cut to the terminal, left-aligned
tables, command lines to type (quoted for a shell), errors as the command line tells
them, and values as JSON, by one function, :func:`json_value`. Apart from the run
printers (:mod:`._format`, :mod:`._show`) because the other commands and the bench
report use them too, and they need no engine: nothing here takes a run.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from .._codec._values import codec
from .._errors import TetherError
from .._terminal import escape_controls, shell_join
from .._terminal import when as when  # (one format, shared with the dashboard)

__all__ = (
    "cli_message",
    "command",
    "hint",
    "json_text",
    "json_value",
    "terminal_width",
)


def terminal_width() -> int:
    """The width ``runs show`` cuts values to (``$COLUMNS`` or the terminal's; at least 60)."""
    return max(60, shutil.get_terminal_size((120, 24)).columns)


def clock(moment: datetime, day: datetime) -> str:
    """Time of day with milliseconds; with the date too when it is not *day*'s."""
    moment = moment.astimezone(UTC)
    text = moment.strftime("%H:%M:%S.%f")[:-3]
    if moment.date() != day.astimezone(UTC).date():
        text = moment.strftime("%Y-%m-%d ") + text
    return text


def duration(delta: timedelta) -> str:
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


def lease(expires: datetime) -> str:
    """``until 12:00:03 UTC (in 9 s)``: when a lease expires, and how soon."""
    now = datetime.now(UTC)
    expires = expires.astimezone(UTC)
    time = expires.strftime("%H:%M:%S") if expires.date() == now.date() else when(expires)
    return f"until {time} UTC ({_from_now(expires, now)})"


def command(
    *words: str, imports: Sequence[str] = (), store: str | None = None, extra: Sequence[str] = ()
) -> str:
    """A command line to type, quoted for a POSIX shell (:func:`tether._terminal.shell_join`:
    a word with a control character, as a hostile run id may hold, pastes back exactly):
    *words*, then ``--import`` for each of *imports*, ``--store`` *store* (when given),
    and *extra*."""
    line = list(words)
    for module in imports:
        line += ["--import", module]
    if store is not None:
        line += ["--store", store]
    return shell_join([*line, *extra])


def hint(*words: str, store: str | None, imports: Sequence[str] = ()) -> str:
    """:func:`command` in backquotes, for a sentence; with ``--store`` when the reader named one."""
    return f"`{command(*words, imports=imports, store=store)}`"


_ENGINE_RESUME = re.compile(r"engine\.resume\((?:'[^']*'|\"[^\"]*\")?\)")


def cli_message(exc: BaseException, *, resume: str | None = None) -> str:
    """*exc* as the command line tells it: ``Type: message``, where the advice to call
    ``engine.resume(...)`` (shared with the library) names the command *resume* instead."""
    text = f"{type(exc).__name__}: {exc}"
    if resume is not None:
        text = _ENGINE_RESUME.sub(f"`{resume}`", text).replace(
            "choose a new run_id", "choose a new --run-id"
        )
    return text


def json_value(value: Any) -> Any:
    """A stored or decoded value as JSON-ready primitives (its ``repr`` when it has none).

    A value decoded into the workflow's own types (its code is loaded here:
    attrs classes, dataclasses, datetimes, ...) becomes the JSON it is
    stored as, so a run's result reads the same with or without its code.
    """
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        pass
    else:
        return value
    try:
        return codec.to_primitive(value, what="the value")
    except TetherError:
        return repr(value)


def json_text(value: Any) -> str:
    """:func:`json_value` as compact JSON text, on one line, keys sorted; safe on a
    terminal (every control character and lone surrogate as a JSON escape, ``\\u009b``)."""
    text = json.dumps(
        json_value(value), sort_keys=True, ensure_ascii=False, separators=(", ", ": ")
    )
    return escape_controls(text, json=True)


def stored(text: str) -> Any:
    """Stored JSON text as its value (the text itself when it is not JSON)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def stored_json(text: str) -> str:
    """JSON text as stored, re-encoded compactly (unchanged when it is not JSON)."""
    try:
        return json_text(json.loads(text))
    except ValueError:
        return text
