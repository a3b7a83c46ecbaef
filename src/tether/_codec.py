"""The private value codec: typed Python values <-> JSON text.

One ``cattrs`` converter, configured for JSON and never the global one. The
type to decode into always comes from code (a step's return annotation, a
workflow's parameter annotations, ``ask``'s ``response_type``), never from
storage, and nothing is pickled.

Decoding is strict: no lenient coercion (``"1"`` is not an ``int``, ``1`` is
not a ``bool``, ``{"a": 1}`` is not a ``bool``, ``"ab"`` is not a
``list[str]``, unknown attrs fields are refused). The one widening is the
numeric one typing itself makes: a ``float`` accepts a JSON integer.

Encoding is canonical, so equal values give equal text in every process
(argument digests and stored arguments are compared as text): object keys are
sorted, sets are written sorted by their encoded items, NaN and infinities are
refused, and object keys must be strings (JSON would silently turn ``1`` into
``"1"``).

The standard library's types JSON has no form of (``Decimal``, ``UUID``,
``timedelta``, ``date``, ``time``, paths, ``bytes``, named tuples) are
handled in :mod:`._codec_types`; users' own types, registered with
``tether.register_type``, in :mod:`._codec_registry`.

Nesting is bounded: a value may nest at most :data:`MAX_DEPTH` levels of
arrays and objects, checked as it is written, so whatever is stored decodes
again from any call stack. A value nested deeper, in either direction, fails
as a :class:`CodecError` that says so, never as a ``RecursionError``.
"""

from __future__ import annotations

import collections
import collections.abc as abc
import dataclasses
import datetime as dt
import enum
import hashlib
import inspect
import json
import math
import types
import typing
from collections.abc import Callable
from typing import Any

import attrs
import cattrs
from cattrs.preconf.json import make_converter

from . import _codec_registry, _codec_types
from ._codec_types import got as _got
from ._codec_types import is_named_tuple
from ._codec_types import show as _show
from ._errors import CodecError

__all__ = ("MAX_DEPTH", "Codec", "Signature", "codec", "describe", "digest", "dumps", "loads")

#: How many levels of arrays and objects a value may nest (``[[...]]`` is two).
#: Checked when a value is encoded, on the JSON form it is about to be written
#: as. Python's recursion limit (1000 frames by default) is the hard ceiling:
#: encoding or decoding a level of lists or dicts takes one frame, so about
#: half of it is left to the caller's stack, and a stored value decodes on replay
#: however deep the code that reads it. Classes take several frames a level
#: and may reach the recursion limit sooner; that fails with the same error.
MAX_DEPTH = 512

_NoneType = type(None)
_PRIMITIVES = (int, float, str, bool)
_SCALARS = frozenset({int, float, str, bool, type(None)})
# Annotations whose JSON form is an array; anything else that is iterable (a
# str, an object's keys) must not stand in for one.
_ARRAY_ORIGINS: frozenset[Any] = frozenset(
    {abc.Sequence, abc.MutableSequence, abc.Set, abc.MutableSet, abc.Collection, abc.Iterable}
)
_ARRAY_BASES = (list, tuple, set, frozenset, collections.deque)


def _qualname(tp: Any) -> str:
    return getattr(tp, "__qualname__", None) or repr(tp)


def describe(tp: Any) -> str:
    """A type's readable name: ``bool``, ``list[int]``, ``Order``."""
    return _describe(tp)


def _describe(tp: Any) -> str:
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__qualname__
    if tp is None:
        return "None"
    return repr(tp).replace("typing.", "")


_TOO_DEEP = (
    f"nested too deeply: the limit is {MAX_DEPTH} levels of arrays and objects, fewer for "
    "nested classes"
)


class _TooDeepError(CodecError, ValueError):
    """A value nested beyond :data:`MAX_DEPTH` or Python's recursion limit.

    A ``ValueError`` too, for the callers of :func:`dumps` and :func:`loads`.
    """

    def __init__(self) -> None:
        super().__init__(_TOO_DEEP)


def _too_deep(exc: BaseException) -> bool:
    """Whether *exc* is (or, as a cattrs error group, holds) nesting too deep."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup((RecursionError, _TooDeepError)) is not None
    return isinstance(exc, (RecursionError, _TooDeepError))


# -- strict structure hooks ------------------------------------------------------


def _structure_enum(value: Any, cl: type[enum.Enum]) -> enum.Enum:
    # Enum lookup compares by ==, so IntEnum(True) and IntEnum(1.0) would
    # succeed: the stored value must have the member value's own type.
    try:
        member = cl(value)
    except (ValueError, TypeError):
        member = None
    if member is None or type(member.value) is not type(value):
        raise ValueError(f"expected a value of {cl.__qualname__}, got {_got(value)}")
    return member


def _primitive(tp: type) -> Callable[[Any, Any], Any]:
    accepted = (float, int) if tp is float else (tp,)

    def structure(value: Any, cl: Any) -> Any:
        # Registered by class, so this also receives subclasses: enums with a
        # str/int/float mix-in, and the likes of `class UserId(str)`.
        if cl is not tp and isinstance(cl, type) and issubclass(cl, enum.Enum):
            return _structure_enum(value, cl)
        # `type(...) in` rather than isinstance: True is not an int here.
        if type(value) not in accepted:
            raise TypeError(f"expected {_qualname(cl)}, got {_got(value)}")
        if tp is float and not math.isfinite(value):
            raise ValueError(f"expected a finite float, got {value!r}")
        return value if type(value) is cl else cl(value)

    return structure


def _structure_none(value: Any, _: Any) -> None:
    if value is not None:
        raise TypeError(f"expected null, got {_got(value)}")


def _is_enum(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, enum.Enum)


def _is_literal(tp: Any) -> bool:
    return typing.get_origin(tp) is typing.Literal


def _structure_literal(value: Any, cl: Any) -> Any:
    for arg in typing.get_args(cl):
        raw = arg.value if isinstance(arg, enum.Enum) else arg
        if type(raw) is type(value) and raw == value:
            return arg
    raise ValueError(f"expected one of {_describe(cl)}, got {_got(value)}")


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _expected_json(tp: Any) -> type | None:
    """``list`` or ``dict`` when *tp* is decoded from a JSON array or object.

    Mappings are not listed: cattrs structures them through ``.items()``,
    which only a JSON object has (and it caches their hooks in a way a
    wrapper would be bypassed by).
    """
    origin = typing.get_origin(tp) or tp
    if origin in _ARRAY_ORIGINS:
        return list
    if not isinstance(origin, type) or issubclass(origin, (str, bytes, bytearray)):
        return None
    if is_named_tuple(origin):
        return dict  # by field name, like the classes below
    try:
        if issubclass(origin, _ARRAY_BASES):
            return list
    except TypeError:  # TypedDict refuses class checks
        return None
    if attrs.has(origin) or dataclasses.is_dataclass(origin):
        return dict
    return None


class _Shapes:
    """Wraps cattrs' container and class hooks with a JSON-type check.

    cattrs structures a ``list[str]`` from anything iterable (``"ab"`` becomes
    ``["a", "b"]``, a dict its keys); the wrapper accepts a JSON array only
    where an array is expected, and a JSON object where an object is.
    """

    def __init__(self, conv: cattrs.Converter) -> None:
        self._conv = conv
        self._resolving: set[Any] = set()

    def applies(self, tp: Any) -> bool:
        try:
            if tp in self._resolving:
                return False
        except TypeError:  # an unhashable annotation
            return False
        return _expected_json(tp) is not None

    def factory(self, tp: Any) -> Callable[[Any, Any], Any]:
        want = _expected_json(tp)
        self._resolving.add(tp)
        try:
            # With this wrapper out of the way, cattrs' own hook for *tp*.
            inner = self._conv.get_structure_hook(tp, cache_result=False)
        finally:
            self._resolving.discard(tp)
        kind = "an array" if want is list else "an object"
        unique = _is_set(tp)

        def structure(value: Any, cl: Any) -> Any:
            if type(value) is not want:
                raise TypeError(f"expected {_describe(cl)} as {kind}, got {_got(value)}")
            out: Any = inner(value, cl)
            if unique and len(out) != len(typing.cast(list[Any], value)):
                raise ValueError(f"expected {_describe(cl)} without repeated items")
            return out

        return structure


def _union_factory(conv: cattrs.Converter) -> Callable[[Any], Callable[[Any, Any], Any]]:
    def factory(tp: Any) -> Callable[[Any, Any], Any]:
        members = typing.get_args(tp)
        exact = frozenset(m for m in members if m in (*_PRIMITIVES, _NoneType))
        others = [m for m in members if m not in exact]
        promote = float in exact and int not in exact

        def structure(value: Any, cl: Any) -> Any:
            # A JSON primitive that is exactly a member is that member (True
            # is not an int); otherwise the first member that decodes it
            # strictly, in declaration order. An ambiguous union (bytes | str)
            # decodes one way only, and the round-trip check at save time
            # refuses the values that would come back as the other.
            if type(value) in exact:
                return value
            errors: list[str] = []
            for member in others:
                try:
                    return conv.structure(value, member)
                except Exception as exc:
                    if _too_deep(exc):
                        raise  # not a reason to try the next member
                    errors.append(f"not {_describe(member)}: {_explain(exc)}")
            if promote and type(value) is int:
                return float(value)
            detail = f" ({'; '.join(errors)})" if errors else ""
            raise TypeError(f"expected {_describe(cl)}, got {_got(value)}{detail}")

        return structure

    return factory


def _is_set(tp: Any) -> bool:
    origin = typing.get_origin(tp) or tp
    if origin in (abc.Set, abc.MutableSet):
        return True
    return isinstance(origin, type) and issubclass(origin, (set, frozenset))


def _set_unstructure_factory(conv: cattrs.Converter) -> Callable[[Any], Callable[[Any], Any]]:
    def factory(tp: Any) -> Callable[[Any], Any]:
        args = typing.get_args(tp)
        item = conv.get_unstructure_hook(args[0] if args else Any)

        def unstructure(value: Any) -> list[Any]:
            # Sorted by encoded item: a set's iteration order depends on
            # insertion history and string hashing, which differ by process.
            return sorted((item(x) for x in value), key=dumps)

        return unstructure

    return factory


def _array_and_object_hooks(
    conv: cattrs.Converter,
) -> tuple[Callable[[Any], list[Any]], Callable[[Any], dict[Any, Any]]]:
    """Unstructure hooks for exactly ``list``/``tuple`` and ``dict``, by runtime type.

    Same output as cattrs' own, but one stack frame a level where those take
    three (hook, generator, ``unstructure``): with them, Python's recursion
    limit would stop a list of lists at about 330 levels, short of MAX_DEPTH.
    """
    hook = conv.get_unstructure_hook

    def array(value: Any) -> list[Any]:
        out = []
        for item in value:
            out.append(hook(item.__class__)(item))
        return out

    def obj(value: Any) -> dict[Any, Any]:
        out = {}
        for key, item in value.items():
            out[hook(key.__class__)(key)] = hook(item.__class__)(item)
        return out

    return array, obj


def _make_converter() -> cattrs.Converter:
    conv = make_converter(forbid_extra_keys=True)
    # Registered by class (cattrs' own primitive hooks are, and class dispatch
    # wins over predicates), so they see enum subclasses and hand them on.
    for tp in _PRIMITIVES:
        conv.register_structure_hook(tp, _primitive(tp))
    _codec_types.install(conv)
    _codec_registry.install(conv)
    # Predicates registered later are tried first.
    conv.register_structure_hook_func(lambda t: t is None or t is _NoneType, _structure_none)
    conv.register_structure_hook_func(_is_enum, _structure_enum)
    conv.register_structure_hook_func(_is_literal, _structure_literal)
    conv.register_structure_hook_factory(_is_union, _union_factory(conv))
    shapes = _Shapes(conv)
    conv.register_structure_hook_factory(shapes.applies, shapes.factory)
    conv.register_unstructure_hook_factory(_is_set, _set_unstructure_factory(conv))
    # Exact classes only: subclasses (named tuples, OrderedDict...) keep cattrs' hooks.
    array, obj = _array_and_object_hooks(conv)
    conv.register_unstructure_hook_func(lambda t: t is list or t is tuple, array)
    conv.register_unstructure_hook_func(lambda t: t is dict, obj)
    return conv


# -- JSON text ----------------------------------------------------------------------


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
            deeply (then also a :class:`CodecError`).
    """
    try:
        _check_keys(primitive, -1 if max_depth is None else max_depth)
        return _json_text(primitive)
    except RecursionError:
        raise _TooDeepError from None


# One encoder and one decoder, made once: json.dumps/loads with options build
# a new one per call, which shows on the per-step path.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), sort_keys=True)


def _true_or_false(value: bool) -> str:
    return "true" if value else "false"


def _null(value: None) -> str:
    return "null"


#: The JSON text of a scalar of exactly this type, as ``_ENCODER`` writes it
#: (floats must be finite), without the encoder object ``JSONEncoder.encode``
#: builds on every call for anything but a string.
_SCALAR_TEXT: dict[type, Callable[[Any], str]] = {
    str: json.encoder.encode_basestring_ascii,
    int: int.__repr__,
    float: float.__repr__,
    bool: _true_or_false,
    _NoneType: _null,
}


def _json_text(primitive: Any) -> str:
    return _ENCODER.encode(primitive)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text:.40} is out of the range of a float")
    return value


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_parse_float)


def loads(text: str) -> Any:
    """Parse JSON text strictly (no NaN or infinities); raises ``ValueError``.

    Text nested too deeply for Python's recursion limit raises a ``ValueError``
    that is also a :class:`CodecError`.
    """
    if not isinstance(text, str):
        raise TypeError(f"expected JSON text, got {type(text).__qualname__}")
    try:
        return _DECODER.decode(text)
    except RecursionError:
        raise _TooDeepError from None


_DIGEST = hashlib.blake2b(digest_size=12)  # copied per digest: cheaper than a new one


def digest(text: str) -> str:
    """A short, stable digest of encoded arguments, for replay checks (blake2b, 12 bytes)."""
    h = _DIGEST.copy()
    h.update(text.encode())
    return h.hexdigest()


# -- round-trip check ---------------------------------------------------------------


def _explain(exc: BaseException) -> str:
    """One line for an encoding or decoding error, with the path for nested ones."""
    if _too_deep(exc):
        return _TOO_DEEP  # one message however deep the failure was, or where
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


def _diff(value: Any, back: Any, path: str) -> str | None:
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
            found = _diff(v, b, f"{path}[{i}]")
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
            found = _diff(k, returned[k], f"{path} item {_show(k, 40)}")
            if not found and tv is dict:
                found = _diff(value[k], back[returned[k]], f"{path}[{_show(k, 40)}]")
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
        found = _diff(getattr(value, name), getattr(back, name), f"{path}.{name}")
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


def _named(what: object) -> str:
    """*what* as the text that names a value in an error (see :class:`Codec`)."""
    if type(what) is tuple:
        return str(what[0]).format(*what[1:])
    return str(what)


_SUPPORTED = (
    " Supported: JSON values, attrs classes, dataclasses, named tuples, TypedDicts, enums, "
    "Literal, datetimes, Decimal, UUID, timedelta, paths, bytes, containers and unions of "
    "these, and classes registered with tether.register_type."
)


class Codec:
    """Encodes values by a declared type and proves they decode back equal.

    Each method's *what* names the value in its errors: a string, or a tuple
    ``(format, *args)`` formatted only when an error needs it (the per-step
    path makes no string it does not use).
    """

    def __init__(self) -> None:
        self._conv = _make_converter()

    def snapshot(self, value: Any, tp: Any, *, what: object) -> tuple[str, Any]:
        """Encode *value* as *tp* now, and decode it back.

        Returns the JSON text and the decoded copy. The copy is what workflow
        code sees, on the first run and on replay alike, so later mutation of
        *value* by anyone cannot change what was recorded or returned.

        Raises:
            CodecError: the value cannot be encoded (or nests more than
                MAX_DEPTH levels), or does not decode back to an equal value of
                the same type, all the way down (names *what*).
        """
        cls = type(value)
        if (
            cls in _SCALARS
            and (tp is cls or tp is Any)
            and (cls is not float or math.isfinite(value))
        ):
            # Fast path: a scalar that is exactly its declared type encodes to
            # itself and decodes to an equal value of the same type.
            return _SCALAR_TEXT[cls](value), value
        try:
            text = dumps(self._conv.unstructure(value, unstructure_as=tp), max_depth=MAX_DEPTH)
        except Exception as exc:
            supported = "" if _too_deep(exc) else _SUPPORTED  # the type is fine, the value deep
            raise CodecError(
                f"{_named(what)}: cannot encode {type(value).__qualname__} value "
                f"{_show(value, 80)} as {_describe(tp)} to JSON ({_explain(exc)}).{supported}"
            ) from exc
        try:
            back = self._conv.structure(loads(text), tp)
            difference = _diff(value, back, "the value")
        except Exception as exc:
            raise CodecError(
                f"{_named(what)}: {type(value).__qualname__} value {_show(value, 80)} encodes "
                f"but does not decode back as {_describe(tp)} ({_explain(exc)}); check the type "
                "annotation."
            ) from exc
        if difference is not None:
            hint = (
                " It has no type annotation to decode it by: annotate it."
                if tp is Any
                else f" Check that the annotation {_describe(tp)} describes the value exactly."
            )
            raise CodecError(
                f"{_named(what)}: {type(value).__qualname__} value {_show(value, 80)} does not "
                f"survive a round trip through JSON as {_describe(tp)}: {difference}.{hint}"
            )
        return text, back

    def decode(self, text: str, tp: Any, *, what: object) -> Any:
        """Decode stored JSON *text* strictly into *tp*.

        Raises:
            CodecError: the text is not JSON or does not fit *tp*.
        """
        try:
            return self._conv.structure(loads(text), tp)
        except Exception as exc:
            raise CodecError(
                f"{_named(what)}: stored value does not decode as {_describe(tp)}: {_explain(exc)}"
            ) from exc

    def structure(self, primitive: Any, tp: Any, *, what: object) -> Any:
        """Decode already-parsed JSON primitives strictly into *tp*."""
        try:
            return self._conv.structure(primitive, tp)
        except Exception as exc:
            raise CodecError(
                f"{_named(what)}: {_show(primitive, 80)} does not decode as {_describe(tp)}: "
                f"{_explain(exc)}"
            ) from exc

    def to_primitive(self, value: Any, *, what: object) -> Any:
        """*value* as JSON-ready primitives, by its runtime type (canonical, checked).

        Used for values that are shown or decoded later by a type known only
        then (``ask`` payloads, responses given to ``resume``).

        Raises:
            CodecError: the value cannot be encoded to JSON (names *what*).
        """
        try:
            return loads(dumps(self._conv.unstructure(value), max_depth=MAX_DEPTH))
        except Exception as exc:
            raise CodecError(
                f"{_named(what)}: cannot encode {type(value).__qualname__} value "
                f"{_show(value, 80)} to JSON ({_explain(exc)})"
            ) from exc

    def encode_args(self, args: tuple[Any, ...], kwargs: dict[str, Any], *, what: object) -> str:
        """Canonical JSON of call arguments by their runtime types (for digests).

        Arguments are only digested, never decoded, so object keys that are
        not strings are let through here (as JSON writes them), and only the
        recursion limit bounds their nesting, not MAX_DEPTH.
        """
        if not kwargs:
            # Fast path, same text as below: scalars unstructure to themselves.
            texts = []
            for arg in args:
                cls = type(arg)
                write = _SCALAR_TEXT.get(cls)
                if write is None or (cls is float and not math.isfinite(arg)):
                    break  # not a scalar, or NaN: the full path writes or explains it
                texts.append(write(arg))
            else:
                return "[[" + ",".join(texts) + "],{}]"
        try:
            return _json_text([self._conv.unstructure(list(args)), self._conv.unstructure(kwargs)])
        except Exception as exc:
            raise CodecError(
                f"{_named(what)}: arguments cannot be encoded to JSON ({_explain(exc)}). Step "
                "arguments are digested to detect changed inputs on replay; pass data, not "
                "live objects (create clients inside the step)."
            ) from exc


codec = Codec()


_UNRESOLVED: Any = object()


class Signature:
    """A callable's parameter and return types, resolved lazily and cached."""

    __slots__ = ("_fn", "_resolved", "_return")

    def __init__(self, fn: Callable[..., Any]) -> None:
        self._fn = fn
        self._resolved: tuple[inspect.Signature, dict[str, Any], Any] | None = None
        self._return: Any = _UNRESOLVED

    def _resolve(self) -> tuple[inspect.Signature, dict[str, Any], Any]:
        if self._resolved is None:
            sig = inspect.signature(self._fn)
            try:
                hints = typing.get_type_hints(self._fn)
            except Exception as exc:
                raise CodecError(
                    f"cannot resolve the type annotations of {self._fn.__qualname__} ({exc}); "
                    "define the annotated types at module level"
                ) from exc
            params = {name: hints.get(name, Any) for name in sig.parameters}
            self._resolved = (sig, params, hints.get("return", Any))
            self._return = self._resolved[2]
        return self._resolved

    @property
    def return_type(self) -> Any:
        tp = self._return
        return self._resolve()[2] if tp is _UNRESOLVED else tp

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> inspect.BoundArguments:
        return self._resolve()[0].bind(*args, **kwargs)

    def args_type(self, n: int) -> Any:
        """The tuple type of *n* positional arguments, from the annotations."""
        sig, params, _ = self._resolve()
        arg_types: list[Any] = []
        for p in sig.parameters.values():
            if len(arg_types) >= n:
                break
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                arg_types.append(params[p.name])
            elif p.kind is p.VAR_POSITIONAL:
                arg_types.extend([params[p.name]] * (n - len(arg_types)))
        return tuple[tuple(arg_types)] if arg_types else tuple[()]  # type: ignore[misc]
