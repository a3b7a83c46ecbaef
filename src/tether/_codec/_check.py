"""How a value fails the codec: the round-trip comparison and the one-line error text.

Layer: the codec (``_codec``).

:meth:`Codec.snapshot <._values.Codec.snapshot>` decodes what it just encoded
and compares the two with :func:`diff`, all the way down, in value and in
type, so a value that would come back different on replay is refused when it
is saved, with the path to what differs. :func:`explain` turns an encoding or
decoding error (a cattrs error group included) into one line with the path to
the failure; the converter's union hook (:mod:`._converter`) uses it for the
members it tried. It is separate because it reads values and errors, not
types: it uses neither the converter nor its hooks.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import attrs
import cattrs

from . import _registry as _codec_registry
from ._json import TOO_DEEP, too_deep
from ._types import got as _got
from ._types import show as _show

__all__ = ()


def explain(exc: BaseException) -> str:
    """One line for an encoding or decoding error, with the path for nested ones."""
    if too_deep(exc):
        return TOO_DEEP  # one message however deep the failure was, or where
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc, format_exception=_format_exception))
    return _format_exception(exc, None)


def _format_exception(exc: BaseException, _: Any) -> str:
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return f"unknown fields {', '.join(sorted(exc.extra_fields))}"
    if isinstance(exc, KeyError):
        return "required field missing"
    if isinstance(exc, AttributeError) and str(exc).endswith("has no attribute 'items'"):
        return f"expected an object ({exc})"  # a mapping structured from a non-object
    return str(exc) or type(exc).__qualname__


def diff(value: Any, back: Any, path: str) -> str | None:
    """Where *back* differs from *value* in value or type, or ``None``."""
    tv, tb = type(value), type(back)
    if tv is not tb:
        if tv is int and tb is float and value == back:
            return None  # an int where a float is declared: typing's own widening
        return f"{path} is {_got(value)} but comes back as {_got(back)}"
    if tv is list or tv is tuple:
        if len(value) != len(back):
            return f"{path} has {len(value)} items but comes back with {len(back)}"
        for i, (v, b) in enumerate(zip(value, back, strict=True)):
            found = diff(v, b, f"{path}[{i}]")
            if found:
                return found
        return None
    if tv is dict or tv is set or tv is frozenset:
        if len(value) != len(back):
            return f"{path} has {len(value)} items but comes back with {len(back)}"
        # Pair each item with the equal one that came back, to compare types.
        returned = {k: k for k in back}
        for k in value:
            if k not in returned:
                return f"{path} item {_show(k, 60)} does not come back"
            found = diff(k, returned[k], f"{path} item {_show(k, 40)}")
            if not found and tv is dict:
                found = diff(value[k], back[returned[k]], f"{path}[{_show(k, 40)}]")
            if found:
                return found
        return None
    if _codec_registry.is_registered(tv):
        # The registration's promise is decode(encode(x)) == x, by the class's own ==.
        if back == value:
            return None
        return (
            f"{path} is {_show(value, 60)} but comes back as {_show(back, 60)} through the "
            f"encode and decode functions registered for {tv.__qualname__}"
        )
    names: list[str] = []
    if attrs.has(tv):
        names = [a.name for a in attrs.fields(tv)]
    elif dataclasses.is_dataclass(tv):
        names = [f.name for f in dataclasses.fields(tv)]
    elif issubclass(tv, tuple):
        # A named tuple's fields, by name: its == compares items by value only.
        names = list(getattr(tv, "_fields", None) or ())
    for name in names:
        found = diff(getattr(value, name), getattr(back, name), f"{path}.{name}")
        if found:
            return found
    if names:
        return None  # compared field by field, whatever the class's own __eq__ says
    if tv is dt.datetime or tv is dt.time:
        # Wall time and UTC offset, not ==: an aware datetime comes back with a
        # fixed-offset tzinfo, and == between different tzinfos is False for a
        # time in a zone's repeated hour, though nothing was lost.
        same = (value.replace(tzinfo=None), value.utcoffset()) == (
            back.replace(tzinfo=None),
            back.utcoffset(),
        )
    else:
        same = back == value
    if not same:
        return f"{path} is {_show(value, 60)} but comes back as {_show(back, 60)}"
    return None
