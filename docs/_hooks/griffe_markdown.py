"""A griffe extension: the reST in tether's docstrings, as Markdown for the site.

tether's docstrings are written to read well in ``help()`` and an editor,
with two reST habits that Markdown (which mkdocstrings renders docstrings
as) would garble:

- roles naming other objects (``:class:`Store```,
  ``:func:`~tether.testing.explore```) would show as ``:class:`` and a name:
  each becomes a code span of the name (``~`` keeps its last part, as in
  Sphinx);
- definition lists (a line of code spans alone at the left margin, the term,
  and its definition indented under it) would run together into one paragraph:
  each becomes a Markdown definition list (the ``def_list`` extension).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|exc|data|mod|obj|const):`([^`]+)`(\\ )?")
#: a definition list's term: code spans alone on a line, at the left margin
_TERM = re.compile(r"``[^`].*``")
_INDENT = "    "


def _name(match: re.Match[str]) -> str:
    target = match.group(1)
    if target.startswith("~"):
        target = target[1:].rsplit(".", 1)[-1]
    return f"`{target}`"


def unrole(text: str) -> str:
    """*text* with every Sphinx cross-reference role turned into a code span."""
    return _ROLE.sub(_name, text)


def definition_lists(text: str) -> str:
    """*text* with each reST definition list at the margin written as Markdown's."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        after = lines[i + 1] if i + 1 < len(lines) else ""
        if not (_TERM.fullmatch(line) and after.startswith(_INDENT) and after.strip()):
            out.append(line)
            i += 1
            continue
        if out and out[-1].strip():
            out.append("")
        out += [line, f":   {after[len(_INDENT) :]}"]
        i += 2
        while i < len(lines) and lines[i].startswith(_INDENT):
            out.append(lines[i])  # the definition goes on, indented as Markdown wants
            i += 1
        out.append("")
    return "\n".join(out)


class MarkdownDocstrings(griffe.Extension):
    """Rewrites each object's docstring as it is loaded (see the module's docstring)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = definition_lists(unrole(obj.docstring.value))
