"""HTML and SVG built safely: the one escaping helper of the dashboard and the timeline.

Layer: the dashboard (``_ui``).

Every piece of text that reaches a page goes through :func:`esc` (directly, or
as a child or attribute value of :func:`tag`), which escapes ``& < > " '``,
and shows control characters (but newlines and tabs) and lone surrogates as
the command line does (``\\x1b``, ``\\ud800``:
:func:`~tether._terminal.escape_controls`), so a page is always valid UTF-8.
:class:`Markup` marks text that is already safe (made by :func:`esc` or
:func:`tag`), so composing fragments never escapes twice and never forgets to
escape once: a stored value containing ``<script>`` shows as text.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import final

from .._terminal import escape_controls

__all__ = ("Markup", "esc", "join", "tag")


@final
class Markup(str):
    """Text that is safe to put in a page as it is (already escaped, or built by :func:`tag`)."""

    __slots__ = ()


def esc(value: object) -> Markup:
    """*value* as safe page text: :class:`Markup` as it is, anything else ``str()``-ed and escaped.

    ``None`` is the empty string. Quotes are escaped too, so the result is
    safe in attribute values as well as in element content. Control
    characters but newlines and tabs, and lone surrogates, are shown escaped.
    """
    if isinstance(value, Markup):
        return value
    if value is None:
        return Markup("")
    return Markup(html.escape(escape_controls(str(value), keep="\n\t"), quote=True))


def join(parts: Iterable[object], sep: str = "") -> Markup:
    """The escaped *parts*, concatenated with the (literal, trusted) separator *sep*."""
    return Markup(sep.join(esc(p) for p in parts))


_VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "col"})


def tag(element: str, /, *children: object, **attributes: object) -> Markup:
    """``<element attr="value">children</element>``, every child and attribute value escaped.

    Attribute names are written as given, with a trailing ``_`` dropped
    (``class_=``) and other ``_`` turned into ``-`` (``data_key=``); they come
    from code, never from data. ``True`` writes a bare attribute (``checked``),
    ``False`` and ``None`` leave it out. Children that are ``None`` are skipped.
    """
    attrs_text = "".join(_attribute(k, v) for k, v in attributes.items())
    if element in _VOID:
        return Markup(f"<{element}{attrs_text}>")
    inner = "".join(esc(c) for c in children if c is not None)
    return Markup(f"<{element}{attrs_text}>{inner}</{element}>")


def _attribute(name: str, value: object) -> str:
    if value is None or value is False:
        return ""
    name = name.removesuffix("_").replace("_", "-")
    if value is True:
        return f" {name}"
    return f' {name}="{esc(value)}"'
