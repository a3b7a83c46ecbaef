"""The codec's converter: one strict ``cattrs`` converter for JSON.

Layer: the codec (``_codec``).

The hooks here make decoding strict where cattrs is lenient (``"1"`` is not an
``int``, ``1`` is not a ``bool``, ``"ab"`` is not a ``list[str]``, an enum
value must have its member value's own type, a union decodes a JSON primitive
as the member it exactly is), and make encoding canonical where cattrs follows
iteration order (sets are written sorted by their encoded items).
:func:`new_converter` builds the converter with them, with the
standard-library types of :mod:`._types` and the registered types of
:mod:`._registry`. It is separate from :mod:`._values`, which encodes and
decodes values with it, so that each reads as one thing: how a type is read
and written here, what a value must survive there.
"""

from __future__ import annotations

import collections
import collections.abc as abc
import dataclasses
import enum
import math
import types
import typing
from collections.abc import Callable
from typing import Any

import attrs
import cattrs
from cattrs.preconf.json import make_converter

from . import _registry as _codec_registry
from . import _types as _codec_types
from ._check import explain
from ._json import dumps, too_deep
from ._types import got as _got
from ._types import is_named_tuple

__all__ = ("describe",)

_NoneType = type(None)
_PRIMITIVES = (int, float, str, bool)
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
    return describe_type(tp)


def describe_type(tp: Any) -> str:
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__qualname__
    if tp is None:
        return "None"
    return repr(tp).replace("typing.", "")


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
    raise ValueError(f"expected one of {describe_type(cl)}, got {_got(value)}")


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
                raise TypeError(f"expected {describe_type(cl)} as {kind}, got {_got(value)}")
            out: Any = inner(value, cl)
            if unique and len(out) != len(typing.cast(list[Any], value)):
                raise ValueError(f"expected {describe_type(cl)} without repeated items")
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
                    if too_deep(exc):
                        raise  # not a reason to try the next member
                    errors.append(f"not {describe_type(member)}: {explain(exc)}")
            if promote and type(value) is int:
                return float(value)
            detail = f" ({'; '.join(errors)})" if errors else ""
            raise TypeError(f"expected {describe_type(cl)}, got {_got(value)}{detail}")

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


def new_converter() -> cattrs.Converter:
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
