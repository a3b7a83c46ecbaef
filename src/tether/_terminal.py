"""How text reaches a person's terminal: control characters escaped, abbreviations, tables.

Layer: values, beside :mod:`._errors`; it imports nothing of tether's.

The command line and the bench report both print through it. Stored strings
(run ids, keys, values, error messages) often come from outside (an order
id, a webhook): :func:`escape_controls` is the one function that shows their
control characters as escapes, so that none reaches a terminal raw (an
``ESC ]0;...`` that retitles it, an ``ESC [2J`` that clears it), nor a lone
surrogate, which no terminal encoding can write. The command line writes
through :func:`escaped` streams, and its tables and abbreviations escape each
cell first, so a stored newline cannot break a row and widths count what is
shown (``\\x1b`` is four columns wide).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final, TextIO, cast

__all__ = ("abbrev", "escape_controls", "escaped", "shell_join", "table", "unescaped", "when")

#: C0 controls, DEL, C1 controls and surrogates (lone ones, in a ``str``).
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
#: The escapes a ``repr`` writes in short.
_SHORT: Final = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def escape_controls(text: str, *, keep: str = "", json: bool = False) -> str:
    """*text* with every control character as its escape, safe to show on a terminal.

    C0 controls (newline and tab too, unless in *keep*), DEL, C1 controls
    and lone surrogates are written as a Python ``repr`` writes them:
    ``\\n``, ``\\x1b``, ``\\x7f``, ``\\x9b``, ``\\ud800``; with *json*, as
    JSON's ``\\u001b`` (for JSON text: a JSON reader reads the character
    back). Everything else, backslashes included, is left as it is.
    """
    if _CONTROLS.search(text) is None:
        return text

    def escape(found: re.Match[str]) -> str:
        char = found[0]
        if char in keep:
            return char
        code = ord(char)
        if json:
            return f"\\u{code:04x}"
        return _SHORT.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")

    return _CONTROLS.sub(escape, text)


class _Escaped:
    """A text stream that writes to *stream* what it is given, control characters
    but newlines escaped (:func:`escape_controls`)."""

    __slots__ = ("stream",)

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(escape_controls(text, keep="\n"))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def fileno(self) -> int:
        return self.stream.fileno()

    def isatty(self) -> bool:
        return self.stream.isatty()


def escaped(stream: TextIO) -> TextIO:
    """*stream*, through which no control character but a newline is written raw.

    What the command line prints goes through it (JSON output passes
    unchanged: ``json.dumps`` escapes them already).
    """
    if isinstance(stream, _Escaped):
        return stream
    return cast(TextIO, _Escaped(stream))


def unescaped(stream: TextIO) -> TextIO:
    """The stream an :func:`escaped` one writes to (*stream* itself when it is not one)."""
    return stream.stream if isinstance(stream, _Escaped) else stream


def abbrev(text: str, width: int | None) -> str:
    """*text* on one line, control characters escaped, cut to *width* (``None``: never cut).

    The width counts the escapes as shown; a cut never splits one.
    """
    text = " ".join(text.split())
    shown = escape_controls(text)
    if width is None or len(shown) <= width:
        return shown
    if shown is text:
        return text[: max(0, width - 1)] + "…"
    parts: list[str] = []
    used = 0
    for char in text:
        part = escape_controls(char)
        used += len(part)
        if used > width - 1:
            break
        parts.append(part)
    return "".join(parts) + "…"


def table(
    out: TextIO, header: Sequence[str], rows: Sequence[Sequence[str]], width: int | None
) -> None:
    """Left-aligned columns; the last one is abbreviated to fit *width* (``None``: never).

    Every cell is shown with its control characters escaped (so a stored
    newline cannot break a row), and column widths count the escapes.
    """
    shown = [[escape_controls(cell) for cell in row[:-1]] + [row[-1]] for row in rows]
    widths = [len(h) for h in header]
    for row in shown:
        for i, cell in enumerate(row[:-1]):
            widths[i] = max(widths[i], len(cell))
    fixed = sum(widths[:-1]) + 2 * (len(header) - 1)
    last = None if width is None else max(12, len(header[-1]), width - fixed)

    def line(cells: Sequence[str]) -> str:
        parts = [c.ljust(w) for c, w in zip(cells[:-1], widths, strict=False)]
        parts.append(abbrev(cells[-1], last))
        return "  ".join(parts).rstrip()

    print(line(header), file=out)
    for row in shown:
        print(line(row), file=out)


def when(moment: datetime) -> str:
    """A moment as shown to people, in UTC to the second: ``2026-12-04 10:00:00``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def shell_join(words: Sequence[str]) -> str:
    """A command line of *words* to paste into a POSIX shell, shown without a raw
    control character: as :func:`shlex.join` quotes it, except that a word holding a
    control character is written in ``$'...'`` (bash, zsh) with ``\\uXXXX`` escapes,
    which give that very word back when pasted."""
    return " ".join(_shell_word(word) for word in words)


def _shell_word(word: str) -> str:
    if _CONTROLS.search(word) is None:
        return shlex.quote(word)

    def escape(found: re.Match[str]) -> str:
        c = found.group()
        return "\\" + c if c in "\\'" else f"\\u{ord(c):04x}"

    # (A lone surrogate, which only a path from argv may hold, comes out as \udXXX.)
    return "$'" + re.sub("[\\\\']|" + _CONTROLS.pattern, escape, word) + "'"
