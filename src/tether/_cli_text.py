"""The command line's words for things that are not runs: times, tables, commands, values.

Times in UTC and durations, one-line abbreviations cut to the terminal, left-aligned
tables, command lines to type (quoted for a shell), errors as the command line tells
them, and values as JSON, by one function, :func:`json_value`. Apart from the run
printers (``_cli_format``, ``_cli_show``) because the other commands and the bench
report use them too, and they need no engine: nothing here takes a run.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import shutil
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from ._codec import codec
from ._errors import TetherError

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


def _abbrev(text: str, width: int | None) -> str:
    """*text* on one line, cut to *width* (``None``: never cut)."""
    text = " ".join(text.split())
    if width is None or len(text) <= width:
        return text
    return text[: max(0, width - 1)] + "…"


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _clock(moment: datetime, day: datetime) -> str:
    """Time of day with milliseconds; with the date too when it is not *day*'s."""
    moment = moment.astimezone(UTC)
    text = moment.strftime("%H:%M:%S.%f")[:-3]
    if moment.date() != day.astimezone(UTC).date():
        text = moment.strftime("%Y-%m-%d ") + text
    return text


def _duration(delta: timedelta) -> str:
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


def _lease(expires: datetime) -> str:
    """``until 12:00:03 UTC (in 9 s)``: when a lease expires, and how soon."""
    now = datetime.now(UTC)
    expires = expires.astimezone(UTC)
    time = expires.strftime("%H:%M:%S") if expires.date() == now.date() else _when(expires)
    return f"until {time} UTC ({_from_now(expires, now)})"


def command(
    *words: str, imports: Sequence[str] = (), store: str | None = None, extra: Sequence[str] = ()
) -> str:
    """A command line to type, quoted for a POSIX shell: *words*, then ``--import`` for
    each of *imports*, ``--store`` *store* (when given), and *extra*."""
    line = list(words)
    for module in imports:
        line += ["--import", module]
    if store is not None:
        line += ["--store", store]
    return shlex.join([*line, *extra])


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
    """:func:`json_value` as compact JSON text, on one line, keys sorted."""
    return json.dumps(
        json_value(value), sort_keys=True, ensure_ascii=False, separators=(", ", ": ")
    )


def _stored(text: str) -> Any:
    """Stored JSON text as its value (the text itself when it is not JSON)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _stored_json(text: str) -> str:
    """JSON text as stored, re-encoded compactly (unchanged when it is not JSON)."""
    try:
        return json_text(json.loads(text))
    except ValueError:
        return text


def _table(
    out: TextIO, header: Sequence[str], rows: Sequence[Sequence[str]], width: int | None
) -> None:
    """Left-aligned columns; the last one is abbreviated to fit *width* (``None``: never)."""
    widths = [len(h) for h in header]
    for row in rows:
        for i, cell in enumerate(row[:-1]):
            widths[i] = max(widths[i], len(cell))
    fixed = sum(widths[:-1]) + 2 * (len(header) - 1)
    last = None if width is None else max(12, len(header[-1]), width - fixed)

    def line(cells: Sequence[str]) -> str:
        parts = [c.ljust(w) for c, w in zip(cells[:-1], widths, strict=False)]
        parts.append(_abbrev(cells[-1], last))
        return "  ".join(parts).rstrip()

    print(line(header), file=out)
    for row in rows:
        print(line(row), file=out)
