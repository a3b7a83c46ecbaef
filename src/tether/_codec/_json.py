"""The codec's JSON text: canonical writing, strict reading, the nesting bound, digests.

Layer: the codec (``_codec``).

Everything here works on JSON-ready primitives (what the converter of
:mod:`._converter` makes and takes), never on typed values: the text is
written canonically, so equal values give equal text in every process (object
keys sorted, NaN and infinities refused, object keys strings only), and read
strictly (no NaN or infinities). It is separate so that the codec
(:mod:`._values`) and the records that wrap an encoded value share one writer,
one reader and one bound on nesting.

Nesting is bounded by :data:`MAX_DEPTH`, checked as a value is written; a
value nested deeper, written or read, fails as a :class:`CodecError` that
says so (:class:`_TooDeepError`), never as a ``RecursionError``.

Ints are bounded by Python's limit on int-text conversion
(``sys.get_int_max_str_digits()``, 4300 digits by default): an int with more
digits, written or read, fails as a :class:`CodecError` that says so
(:class:`_IntTooLongError`), never as the bare ``ValueError`` Python raises.
Both errors are looked for only once writing or reading failed, so the
common path pays nothing for them.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Callable
from typing import Any

from .._errors import CodecError
from ._types import got as _got

__all__ = ("MAX_DEPTH", "digest", "dumps", "loads", "parse_value")

#: How many levels of arrays and objects a value may nest (``[[...]]`` is two).
#: Checked when a value is encoded, on the JSON form it is about to be written
#: as. Python's recursion limit (1000 frames by default) is the hard ceiling:
#: encoding or decoding a level of lists or dicts takes one frame, so about
#: half of it is left to the caller's stack, and a stored value decodes on replay
#: however deep the code that reads it. Classes take several frames a level
#: and may reach the recursion limit sooner; that fails with the same error.
MAX_DEPTH = 512

_NoneType = type(None)

TOO_DEEP = (
    f"nested too deeply: the limit is {MAX_DEPTH} levels of arrays and objects, fewer for "
    "nested classes"
)


class _TooDeepError(CodecError, ValueError):
    """A value nested beyond :data:`MAX_DEPTH` or Python's recursion limit.

    A ``ValueError`` too, for the callers of :func:`dumps` and :func:`loads`.
    """

    def __init__(self) -> None:
        super().__init__(TOO_DEEP)


class _IntTooLongError(CodecError, ValueError):
    """An int with more digits than Python converts to or from text.

    A ``ValueError`` too, for the callers of :func:`dumps` and :func:`loads`.
    """

    def __init__(self, digits: str, *, reading: bool = False) -> None:
        limit = sys.get_int_max_str_digits()
        advice = (
            "it was written where that limit is higher: read it there, or raise the limit "
            "here with sys.set_int_max_str_digits()"
            if reading
            else "store a number that large in another form (a str of its hex digits, bytes, "
            "a Decimal in scientific notation)"
        )
        super().__init__(
            f"an int of {digits} digits is more than JSON text can hold here: Python converts "
            f"ints of at most {limit} digits to and from text (sys.get_int_max_str_digits()); "
            f"{advice}"
        )


def _long_int(primitive: Any) -> int | None:
    """The first int in *primitive* too long to write as text (for an error), or ``None``."""
    if isinstance(primitive, int) and not isinstance(primitive, bool):
        try:
            int.__repr__(primitive)
        except ValueError:
            return primitive
        return None
    if isinstance(primitive, dict | list | tuple):
        for item in primitive.values() if isinstance(primitive, dict) else primitive:
            found = _long_int(item)
            if found is not None:
                return found
    return None


def _digits(value: int) -> str:
    """How many decimal digits *value* has, roughly (its text cannot be made)."""
    return f"about {int(abs(value).bit_length() * math.log10(2)) + 1}"


def too_deep(exc: BaseException) -> bool:
    """Whether *exc* is (or, as a cattrs error group, holds) nesting too deep."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup((RecursionError, _TooDeepError)) is not None
    return isinstance(exc, (RecursionError, _TooDeepError))


def _check_keys(primitive: Any, levels: int) -> None:
    """Refuse non-str object keys, and arrays or objects nested over *levels* deep.

    A negative *levels* never counts down to 0: no bound but the recursion limit.
    """
    # json.dumps would write {1: 2} as {"1": 2}, which reads back as another value.
    if isinstance(primitive, dict):
        if not levels:
            raise _TooDeepError
        for key, value in primitive.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"object keys must be strings, got {_got(key)} (JSON would turn it "
                    "into a string); use dict[str, ...] or a list of pairs"
                )
            _check_keys(value, levels - 1)
    elif isinstance(primitive, list | tuple):
        if not levels:
            raise _TooDeepError
        for value in primitive:
            _check_keys(value, levels - 1)


def dumps(primitive: Any, *, max_depth: int | None = None) -> str:
    """Serialize JSON-ready primitives canonically (sorted keys, no NaN).

    *max_depth* bounds the nesting of arrays and objects; without it, only
    Python's recursion limit does (the codec passes :data:`MAX_DEPTH`; records
    that wrap an encoded value may nest a level or two more).

    Raises:
        TypeError: something is not JSON-ready, or an object key is not a str.
        ValueError: a float is NaN or infinite, or the value is nested too
            deeply or holds an int too long for text (then also a
            :class:`CodecError`).
    """
    try:
        _check_keys(primitive, -1 if max_depth is None else max_depth)
    except RecursionError:
        raise _TooDeepError from None
    return json_text(primitive)


# One encoder and one decoder, made once: json.dumps/loads with options build
# a new one per call, which shows on the per-step path.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), sort_keys=True)


def _true_or_false(value: bool) -> str:
    return "true" if value else "false"


def _null(value: None) -> str:
    return "null"


#: The JSON text of a scalar of exactly this type, as ``_ENCODER`` writes it
#: (floats must be finite), without the encoder object ``JSONEncoder.encode``
#: builds on every call for anything but a string. An int too long for text
#: raises Python's bare ``ValueError`` here (the per-step path pays nothing
#: for the check): a caller falls back to :func:`dumps` or :func:`json_text`,
#: which say what it is.
SCALAR_TEXT: dict[type, Callable[[Any], str]] = {
    str: json.encoder.encode_basestring_ascii,
    int: int.__repr__,
    float: float.__repr__,
    bool: _true_or_false,
    _NoneType: _null,
}


def json_text(primitive: Any) -> str:
    """The canonical JSON text of *primitive*, unchecked (see :func:`dumps`).

    Raises:
        TypeError, ValueError: as the ``json`` module does, but an int too
            long for text, or nesting too deep for the recursion limit, raise
            a ``ValueError`` that is also a :class:`CodecError`.
    """
    try:
        return _ENCODER.encode(primitive)
    except RecursionError:
        raise _TooDeepError from None
    except ValueError:
        try:
            long = _long_int(primitive)
        except RecursionError:
            long = None
        if long is None:
            raise
        raise _IntTooLongError(_digits(long)) from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text:.40} is out of the range of a float")
    return value


def _parse_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise _IntTooLongError(str(len(text.lstrip("-"))), reading=True) from None


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_parse_float)
#: The same, reading ints in Python: used only to say why _DECODER failed.
_INT_DECODER = json.JSONDecoder(
    parse_constant=_refuse_constant, parse_float=_parse_float, parse_int=_parse_int
)


def loads(text: str) -> Any:
    """Parse JSON text strictly (no NaN or infinities); raises ``ValueError``.

    Text nested too deeply for Python's recursion limit, or holding an int
    with more digits than Python reads, raises a ``ValueError`` that is also
    a :class:`CodecError`.
    """
    if not isinstance(text, str):
        raise TypeError(f"expected JSON text, got {type(text).__qualname__}")
    try:
        return _DECODER.decode(text)
    except RecursionError:
        raise _TooDeepError from None
    except json.JSONDecodeError:
        raise
    except ValueError:
        # Not a syntax error: read it again, ints in Python, to find an int
        # too long to read; else it was another refusal (NaN, a huge float).
        try:
            _INT_DECODER.decode(text)
        except _IntTooLongError as long:
            raise long from None
        except ValueError:
            pass
        raise


_DIGEST = hashlib.blake2b(digest_size=12)  # copied per digest: cheaper than a new one


def digest(text: str) -> str:
    """A short, stable digest of encoded arguments, for replay checks (blake2b, 12 bytes)."""
    h = _DIGEST.copy()
    h.update(text.encode())
    return h.hexdigest()


def parse_value(text: str) -> Any:
    """A command-line value: JSON when it parses as JSON, else the text itself.

    ``42`` is the number, ``true`` the bool, ``'"42"'`` the string ``"42"``,
    ``o-1`` (not JSON) the string ``"o-1"``.
    """
    try:
        return json.loads(text)
    except ValueError:
        return text
