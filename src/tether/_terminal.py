"""How text reaches a person's terminal: one-line abbreviations and left-aligned tables.

Layer: values, beside :mod:`._errors`; it imports nothing of tether's.

The command line and the bench report both print through it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

__all__ = ("abbrev", "table")


def abbrev(text: str, width: int | None) -> str:
    """*text* on one line, cut to *width* (``None``: never cut)."""
    text = " ".join(text.split())
    if width is None or len(text) <= width:
        return text
    return text[: max(0, width - 1)] + "…"


def table(
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
        parts.append(abbrev(cells[-1], last))
        return "  ".join(parts).rstrip()

    print(line(header), file=out)
    for row in rows:
        print(line(row), file=out)
