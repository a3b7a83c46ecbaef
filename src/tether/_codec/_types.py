"""The codec's hooks for standard-library types that JSON has no form of.

Layer: the codec (``_codec``).

Each of these types is written one way, and only that way is read back, so
a value gives the same text in every process, and stored text decodes to the
value that was stored (``Decimal("1.5")`` and ``Decimal("1.50")`` are
written apart, as ``1`` and ``1.0`` are):

- ``bytes``: base85 text;
- ``datetime``, ``date``, ``time``: ISO 8601 text, exactly as ``isoformat()``
  writes it. An aware ``datetime`` or ``time`` keeps its UTC offset, not its
  zone's name; a ``time`` whose zone gives it no offset (a ``ZoneInfo``: the
  offset depends on the date) is refused;
- ``Decimal``: its ``str()`` text, so ``Decimal("1.50")`` keeps its exponent
  and comes back as ``Decimal("1.50")``; NaN and infinities are refused, as
  they are for floats;
- ``UUID``: the canonical lowercase hyphenated text;
- ``timedelta``: ``[days, seconds, microseconds]``, its own normalized form:
  exact, and each number small enough for any JSON reader;
- ``pathlib`` paths: ``str(path)``. The annotation chooses the class: a
  ``PurePosixPath`` or ``PureWindowsPath`` reads the same anywhere, while
  ``PurePath`` and ``Path`` take the flavour of the machine that decodes;
- ``TypedDict``: cattrs' own handling, strict like the rest; one whose
  ``Required``/``NotRequired`` marks typing could not read (string
  annotations) is refused rather than decoded by the wrong keys;
- ``typing.NamedTuple``: an object of its fields, by name (as attrs classes
  and dataclasses are), so reordering fields cannot swap stored values and a
  field added with a default still reads older values. Unknown fields are
  refused.

Subclasses are decoded as the annotated class (``cl(text)``); the round-trip
check at save time refuses a value whose class the annotation does not name.
"""

from __future__ import annotations

import base64
import collections
import datetime as dt
import decimal
import enum
import pathlib
import typing
import uuid
from collections.abc import Callable
from typing import Any, final

import attrs
import cattrs
from cattrs.cols import namedtuple_dict_structure_factory, namedtuple_dict_unstructure_factory

__all__ = ("BUILT_IN", "got", "install", "is_named_tuple", "show")

#: Classes with an encoding of the codec's own, which a registration may not
#: replace (nor may a class they derive from, such as ``object``).
BUILT_IN: frozenset[type] = frozenset(
    {
        int,
        float,
        str,
        bool,
        type(None),
        bytes,
        list,
        tuple,
        dict,
        set,
        frozenset,
        collections.deque,
        dt.datetime,
        dt.date,
        dt.time,
        dt.timedelta,
        decimal.Decimal,
        uuid.UUID,
        pathlib.PurePath,
        pathlib.PurePosixPath,
        pathlib.PureWindowsPath,
        pathlib.Path,
        pathlib.PosixPath,
        pathlib.WindowsPath,
        enum.Enum,
        enum.IntEnum,
        enum.StrEnum,
        enum.Flag,
        enum.IntFlag,
    }
)


def show(value: Any, width: int) -> str:
    """``repr(value)`` cut to *width* characters (the repr itself recurses).

    A value whose repr fails (too deep; an int with more digits than Python
    writes, alone or inside) is shown as what it is instead.
    """
    try:
        return repr(value)[:width]
    except RecursionError:
        return "<too deep to show>"
    except ValueError as exc:
        if "int" not in str(exc):  # (Python's own words for an int too long to write)
            return f"<a {type(value).__qualname__} whose repr failed: {exc}>"[:width]
        if isinstance(value, int):
            return f"<an int of {abs(value).bit_length()} bits, too long to show>"[:width]
        return f"<a {type(value).__qualname__} holding an int too long to show>"[:width]


def got(value: Any) -> str:
    """What a value is, for an error: ``str 'ab'``."""
    return f"{type(value).__qualname__} {show(value, 60)}"


@final
@attrs.frozen
class _Text:
    """A type written as one JSON string, and read back only from that string.

    *parse* makes a value of the annotated class from text and may accept
    more spellings than *write* gives (``fromisoformat``, ``Decimal``,
    ``UUID`` and paths all do); only text that *write* gives back unchanged
    is accepted, so each value has one stored form.
    """

    base: type
    form: str  #: how the text is described in errors
    write: Callable[[Any], str]
    parse: Callable[[Any, str], Any]

    def unstructure(self, value: Any) -> str:
        if not isinstance(value, self.base):
            raise TypeError(f"expected {self.base.__qualname__}, got {got(value)}")
        return self.write(value)

    def structure(self, value: Any, cl: Any) -> Any:
        name = getattr(cl, "__qualname__", self.base.__qualname__)
        if type(value) is not str:
            raise TypeError(f"expected {name} as {self.form}, got {got(value)}")
        try:
            out = self.parse(cl, value)
        except (ValueError, ArithmeticError):  # Decimal's InvalidOperation is the latter
            out = None
        if out is None or not isinstance(out, cl) or self.write(out) != value:
            raise ValueError(f"expected {name} as {self.form}, got {value!r:.60}")
        return out


def _isoformat(value: dt.date | dt.time) -> str:
    return value.isoformat()


def _write_time(value: dt.time) -> str:
    if value.tzinfo is not None and value.utcoffset() is None:
        raise ValueError(
            f"the time {value} has a tzinfo ({value.tzinfo}) that gives it no UTC offset: "
            "a zone's offset depends on the date. Store a datetime, or a naive time and "
            "the zone's name"
        )
    return value.isoformat()


def _write_decimal(value: decimal.Decimal) -> str:
    if not value.is_finite():
        raise ValueError(f"a Decimal must be finite to be stored, got {value}")
    return str(value)


def _b85encode(value: bytes) -> str:
    return base64.b85encode(value).decode("ascii")


def _b85decode(_: Any, text: str) -> bytes:
    return base64.b85decode(text)


def _from_iso(cl: Any, text: str) -> Any:
    return cl.fromisoformat(text)


def _construct(cl: Any, text: str) -> Any:
    return cl(text)


_TEXTS = (
    _Text(bytes, "base85 text", _b85encode, _b85decode),
    _Text(dt.datetime, "ISO 8601 text (what isoformat() writes)", _isoformat, _from_iso),
    _Text(dt.date, "ISO 8601 text (what isoformat() writes)", _isoformat, _from_iso),
    _Text(dt.time, "ISO 8601 text (what isoformat() writes)", _write_time, _from_iso),
    _Text(decimal.Decimal, "decimal text (what str() writes)", _write_decimal, _construct),
    _Text(uuid.UUID, "canonical text (lowercase, hyphenated)", str, _construct),
    _Text(pathlib.PurePath, "text (what str() writes)", str, _construct),
)


def _unstructure_timedelta(value: Any) -> list[int]:
    if not isinstance(value, dt.timedelta):
        raise TypeError(f"expected timedelta, got {got(value)}")
    return [value.days, value.seconds, value.microseconds]


def _structure_timedelta(value: Any, cl: Any) -> dt.timedelta:
    form = "[days, seconds, microseconds]"
    if type(value) is not list or len(value) != 3 or any(type(n) is not int for n in value):
        raise TypeError(f"expected timedelta as {form} integers, got {got(value)}")
    out: dt.timedelta = cl(days=value[0], seconds=value[1], microseconds=value[2])
    # timedelta normalizes [0, 90000, 0] into [1, 3600, 0]: only the normal form is ours.
    if [out.days, out.seconds, out.microseconds] != value:
        raise ValueError(
            f"expected timedelta as {form} with 0 <= seconds < 86400 and "
            f"0 <= microseconds < 1000000, got {value!r:.60}"
        )
    return out


def is_named_tuple(tp: Any) -> bool:
    """Whether *tp* is a ``typing.NamedTuple`` class (class or functional syntax).

    A ``collections.namedtuple`` has no field types to decode by; it stays a
    tuple (an array).
    """
    if not isinstance(tp, type) or not issubclass(tp, tuple):
        return False
    fields = getattr(tp, "_fields", None)
    if type(fields) is not tuple:
        return False
    try:
        hints = typing.get_type_hints(tp)
    except Exception:
        return True  # annotated, but unresolvable: decoding it will say so
    return all(name in hints for name in fields)


def _misread_marks(tp: Any) -> str | None:
    """For a TypedDict whose required keys typing got wrong: which key, and how.

    ``TypedDict`` reads ``Required``/``NotRequired`` when the class is made;
    annotations that are still strings then (``from __future__ import
    annotations``) hide them, and ``__required_keys__`` says otherwise.
    """
    try:
        hints = typing.get_type_hints(tp, include_extras=True)
    except Exception:
        return None  # decoding it will say what cannot be resolved
    for name, hint in hints.items():
        origin = typing.get_origin(hint)
        if origin is typing.Annotated:
            origin = typing.get_origin(typing.get_args(hint)[0])
        required = name in tp.__required_keys__
        if origin is typing.NotRequired and required:
            return f"{name} is NotRequired, but typing reads it as required"
        if origin is typing.Required and not required:
            return f"{name} is Required, but typing reads it as not required"
    return None


def _is_misread_typed_dict(tp: Any) -> bool:
    return typing.is_typeddict(tp) and _misread_marks(tp) is not None


def _refuse_misread(tp: Any) -> Callable[..., Any]:
    problem = (
        f"TypedDict {tp.__qualname__}: {_misread_marks(tp)}, as its annotations are strings "
        "(from __future__ import annotations); define it in a module without that import, "
        "or with TypedDict's functional syntax"
    )

    def refuse(*_: Any) -> Any:
        raise TypeError(problem)

    return refuse


def install(conv: cattrs.Converter) -> None:
    """Register these hooks on *conv*: by class, so they see subclasses too."""
    for text in _TEXTS:
        conv.register_unstructure_hook(text.base, text.unstructure)
        conv.register_structure_hook(text.base, text.structure)
    conv.register_unstructure_hook(dt.timedelta, _unstructure_timedelta)
    conv.register_structure_hook(dt.timedelta, _structure_timedelta)
    # Predicates, registered after cattrs' own tuple and TypedDict hooks so
    # they are tried first.
    conv.register_structure_hook_factory(_is_misread_typed_dict, _refuse_misread)
    conv.register_unstructure_hook_factory(_is_misread_typed_dict, _refuse_misread)
    conv.register_structure_hook_factory(
        is_named_tuple,
        lambda cl: namedtuple_dict_structure_factory(cl, conv, "from_converter", True),
    )
    conv.register_unstructure_hook_factory(
        is_named_tuple, lambda cl: namedtuple_dict_unstructure_factory(cl, conv)
    )
