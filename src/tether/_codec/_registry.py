"""Users' own types for the codec: :func:`register_type`.

Layer: the codec (``_codec``).

A registration gives a class an encoding to JSON values and back. The codec
uses it wherever the class is the declared type or a value's runtime type
(step results, ``ask`` responses and payloads, workflow arguments and
results, step arguments' digests, inside containers and other classes), and
holds it to the same round-trip check at save time as everything else.
"""

from __future__ import annotations

import copy
import typing
import weakref
from collections.abc import Callable
from typing import Any, TypeVar, final

import attrs
import cattrs

from .._errors import UsageError
from ._types import BUILT_IN, got

__all__ = ("is_registered", "register_type")

T = TypeVar("T")

_JSON_SCALARS = (str, int, float, bool, type(None))


def _not_json(value: Any) -> str | None:
    """What in *value* is not a JSON value (with where), or ``None``."""
    # A stack, not recursion: the encoded value may nest deeply, and dumps
    # reports nesting too deep for the codec in its own words.
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, where = stack.pop()
        cls = type(item)
        if cls in _JSON_SCALARS:
            continue
        if cls is list or cls is tuple:
            stack.extend((x, f"{where}[{i}]") for i, x in enumerate(item))
        elif cls is dict:
            for key, x in item.items():
                if type(key) is not str:
                    return f"an object key {got(key)} at {where or 'the top'}"
                stack.append((x, f"{where}[{key!r:.30}]"))
        else:
            return f"{got(item)} at {where or 'the top'}"
    return None


@final
@attrs.frozen
class _Registration:
    cls: type
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]

    def _subclass(self, cls: type) -> TypeError:
        name = self.cls.__qualname__
        return TypeError(
            f"{cls.__qualname__} is a subclass of {name}, which is registered with "
            f"tether.register_type; a registration covers its own class only: register "
            f"{cls.__qualname__} too"
        )

    def unstructure(self, value: Any) -> Any:
        cls, name = type(value), self.cls.__qualname__
        if cls is not self.cls:
            if isinstance(value, self.cls):
                raise self._subclass(cls)
            raise TypeError(f"expected {name}, got {got(value)}")
        try:
            out = self.encode(value)
        except Exception as exc:
            raise ValueError(
                f"the encode function registered for {name} raised {type(exc).__qualname__}: {exc}"
            ) from exc
        problem = _not_json(out)
        if problem is not None:
            raise TypeError(
                f"the encode function registered for {name} must return JSON values (dicts "
                f"with str keys, lists, str, int, float, bool, None); it returned {problem}"
            )
        return out

    def structure(self, data: Any, cl: Any) -> Any:
        name = self.cls.__qualname__
        if cl is not self.cls:
            raise self._subclass(cl)
        # A copy: decode functions may consume what they are given, and the
        # caller may still store it (a response is journaled as given).
        given = copy.deepcopy(data) if type(data) is dict or type(data) is list else data
        try:
            out = self.decode(given)
        except Exception as exc:
            raise ValueError(
                f"the decode function registered for {name} raised {type(exc).__qualname__}: {exc}"
            ) from exc
        if type(out) is not self.cls:
            raise TypeError(
                f"the decode function registered for {name} returned {got(out)}, not a {name}"
            )
        return out


class _Registry:
    """The registered types, and the converters that know them."""

    def __init__(self) -> None:
        self._types: dict[type, _Registration] = {}
        self._converters: weakref.WeakSet[cattrs.Converter] = weakref.WeakSet()

    def __contains__(self, cls: object) -> bool:
        return cls in self._types

    def add(self, registration: _Registration) -> None:
        cls = registration.cls
        old = self._types.get(cls)
        if old is not None:
            if old == registration:
                return  # the same functions again: nothing changes
            raise UsageError(
                f"{cls.__module__}.{cls.__qualname__} is already registered with "
                "tether.register_type, with other functions. A type has one encoding "
                "(stored values must read back the same way): register it once, at import"
            )
        self._types[cls] = registration
        for conv in self._converters:
            _install(conv, registration)

    def install(self, conv: cattrs.Converter) -> None:
        """Teach *conv* every registration, now and to come."""
        self._converters.add(conv)
        for registration in self._types.values():
            _install(conv, registration)


def _install(conv: cattrs.Converter, registration: _Registration) -> None:
    # By class: class dispatch is tried before every predicate (attrs classes,
    # enums, named tuples) and prefers the most derived class, so the
    # registration wins over the codec's own handling of its class and bases.
    conv.register_unstructure_hook(registration.cls, registration.unstructure)
    conv.register_structure_hook(registration.cls, registration.structure)


_REGISTRY = _Registry()

#: Whether a class is registered (for the round-trip check, which then uses ``==``).
is_registered = _REGISTRY.__contains__
install = _REGISTRY.install


def _refused(cls: Any) -> str | None:
    """Why *cls* cannot be registered, or ``None``."""
    if not isinstance(cls, type):
        return f"it takes a class, got {cls!r:.80}"
    if typing.is_typeddict(cls):
        return "a TypedDict's values are plain dicts, which a registration cannot tell apart"
    if cls in BUILT_IN:
        return "tether has a built-in encoding for it, which stored values depend on"
    try:
        base_of = [b for b in BUILT_IN if issubclass(b, cls)]
    except TypeError:  # a protocol that refuses class checks
        return "it refuses issubclass() checks"
    if base_of:
        names = ", ".join(sorted(b.__qualname__ for b in base_of)[:3])
        return f"built-in types derive from it ({names}): it would take over their encoding"
    return None


def register_type(cls: type[T], *, encode: Callable[[T], Any], decode: Callable[[Any], T]) -> None:
    """Teach the codec a class of your own: how to write it as JSON values, and read it back.

    *encode* takes a value of exactly *cls* and returns JSON values (dicts with
    ``str`` keys, lists, ``str``, ``int``, finite ``float``, ``bool``,
    ``None``); *decode* takes those values, as stored, and returns an equal
    value of exactly *cls*. The codec then stores *cls* wherever it is declared
    (step results, ``ask`` response types, workflow parameters, fields of
    attrs classes and dataclasses, containers, ``Optional``) and encodes it
    wherever it is found by runtime type. Like every value, a registered one
    is encoded when its step returns and decoded back at once: unless
    ``decode(encode(x)) == x`` (and of the same class), the step fails with a
    :class:`tether.CodecError` naming it, and nothing is stored.

    Register at import time, next to the class, in every process that runs
    or resumes the workflows using it. The registration covers *cls* itself,
    not its subclasses: a subclass needs its own. It may replace the codec's
    field-by-field encoding of an attrs class, dataclass, enum or NamedTuple
    of yours, but not a type tether encodes itself.

    Raises:
        UsageError: *cls* is not a class, is a built-in type (``int``,
            ``Decimal``, ``datetime``, ``list``, ...) or a base of one (``object``),
            is a ``TypedDict``, or is already registered with other functions
            (registering the same functions again does nothing); *encode* or
            *decode* is not callable.

    An *encode* or *decode* that raises, returns something that is not JSON
    (encode) or a value of another class (decode) makes the encoding or
    decoding fail as the codec's own failures do: a :class:`tether.CodecError`
    (or the error of the operation, such as ``InvalidResponseError`` for a
    response) naming what was encoded or decoded, and where in it.
    """
    why = _refused(cls)
    if why is not None:
        raise UsageError(f"tether.register_type cannot register {cls!r:.80}: {why}")
    for role, fn in (("encode", encode), ("decode", decode)):
        if not callable(fn):
            raise UsageError(
                f"tether.register_type({cls.__qualname__}): {role}= must be a function, "
                f"got {got(fn)}"
            )
    _REGISTRY.add(_Registration(cls, encode, decode))
