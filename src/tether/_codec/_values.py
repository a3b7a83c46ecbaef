"""The private value codec: typed Python values <-> JSON text.

Layer: the codec (``_codec``).

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
``timedelta``, ``date``, ``time``, paths, ``bytes``, named tuples) are handled
in :mod:`._types`; users' own types, registered with ``tether.register_type``,
in :mod:`._registry`.

Nesting is bounded: a value may nest at most :data:`MAX_DEPTH` levels of
arrays and objects, checked as it is written, so whatever is stored decodes
again from any call stack. A value nested deeper, in either direction, fails
as a :class:`CodecError` that says so, never as a ``RecursionError``.

This module holds :class:`Codec`, which puts the parts together, and
:class:`Signature`, the declared types of a callable. The converter and its
strict hooks are in :mod:`._converter`, the JSON text (canonical writing,
strict reading, the nesting bound, digests) in :mod:`._json`, and the
round-trip comparison and the text of errors in :mod:`._check`.
"""

from __future__ import annotations

import inspect
import math
import typing
from collections.abc import Callable
from typing import Any

from .._errors import CodecError
from ._check import diff, explain
from ._converter import describe, describe_type, new_converter
from ._json import MAX_DEPTH, SCALAR_TEXT, digest, dumps, json_text, loads, too_deep
from ._types import show as _show

__all__ = ("MAX_DEPTH", "Codec", "Signature", "codec", "describe", "digest", "dumps", "loads")

_SCALARS = frozenset({int, float, str, bool, type(None)})


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
        self._conv = new_converter()

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
            try:
                return SCALAR_TEXT[cls](value), value
            except ValueError:
                pass  # an int too long for text: the full path says so, naming *what*
        try:
            text = dumps(self._conv.unstructure(value, unstructure_as=tp), max_depth=MAX_DEPTH)
        except Exception as exc:
            # Too deep, or an int too long (a CodecError): the type is fine, the value is not.
            supported = "" if too_deep(exc) or isinstance(exc, CodecError) else _SUPPORTED
            raise CodecError(
                f"{_named(what)}: cannot encode {type(value).__qualname__} value "
                f"{_show(value, 80)} as {describe_type(tp)} to JSON ({explain(exc)}).{supported}"
            ) from exc
        try:
            back = self._conv.structure(loads(text), tp)
            difference = diff(value, back, "the value")
        except Exception as exc:
            raise CodecError(
                f"{_named(what)}: {type(value).__qualname__} value {_show(value, 80)} encodes "
                f"but does not decode back as {describe_type(tp)} ({explain(exc)}); check the type "
                "annotation."
            ) from exc
        if difference is not None:
            hint = (
                " It has no type annotation to decode it by: annotate it."
                if tp is Any
                else f" Check that the annotation {describe_type(tp)} describes the value exactly."
            )
            raise CodecError(
                f"{_named(what)}: {type(value).__qualname__} value {_show(value, 80)} does not "
                f"survive a round trip through JSON as {describe_type(tp)}: {difference}.{hint}"
            )
        return text, back

    def unsupported(self, tp: Any) -> str | None:
        """Why the codec cannot decode values into *tp*, or ``None`` when it can.

        A look-up of the decoding, not a decode: a class the codec does not
        support, alone, in a container or among an attrs class's fields, is
        found before any value exists (``@tether.workflow(messages=...)``).
        """
        try:
            self._conv.get_structure_hook(tp, cache_result=False)
        except Exception as exc:
            return f"{explain(exc)}.{_SUPPORTED}"
        return None

    def decode(self, text: str, tp: Any, *, what: object) -> Any:
        """Decode stored JSON *text* strictly into *tp*.

        Raises:
            CodecError: the text is not JSON or does not fit *tp*.
        """
        try:
            return self._conv.structure(loads(text), tp)
        except Exception as exc:
            raise CodecError(
                f"{_named(what)}: stored value does not decode as "
                f"{describe_type(tp)}: {explain(exc)}"
            ) from exc

    def structure(self, primitive: Any, tp: Any, *, what: object) -> Any:
        """Decode already-parsed JSON primitives strictly into *tp*."""
        try:
            return self._conv.structure(primitive, tp)
        except Exception as exc:
            raise CodecError(
                f"{_named(what)}: {_show(primitive, 80)} does not decode as {describe_type(tp)}: "
                f"{explain(exc)}"
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
                f"{_show(value, 80)} to JSON ({explain(exc)})"
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
                write = SCALAR_TEXT.get(cls)
                if write is None or (cls is float and not math.isfinite(arg)):
                    break  # not a scalar, or NaN: the full path writes or explains it
                try:
                    texts.append(write(arg))
                except ValueError:
                    break  # an int too long for text: the full path explains it
            else:
                return "[[" + ",".join(texts) + "],{}]"
        try:
            return json_text([self._conv.unstructure(list(args)), self._conv.unstructure(kwargs)])
        except Exception as exc:
            raise CodecError(
                f"{_named(what)}: arguments cannot be encoded to JSON ({explain(exc)}). Step "
                "arguments are digested to detect changed inputs on replay; pass data, not "
                "live objects (create clients inside the step)."
            ) from exc


codec = Codec()


_UNRESOLVED: Any = object()


class Signature:
    """A callable's parameter and return types, resolved lazily and cached."""

    __slots__ = ("_fn", "_positional", "_resolved", "_return")

    def __init__(self, fn: Callable[..., Any]) -> None:
        self._fn = fn
        self._resolved: tuple[inspect.Signature, dict[str, Any], Any] | None = None
        self._return: Any = _UNRESOLVED
        self._positional: dict[int, tuple[tuple[Any, ...], tuple[str, ...]]] = {}

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

    def positional(self, n: int) -> tuple[tuple[Any, ...], tuple[str, ...]]:
        """The types and the names of *n* positional arguments (cached per *n*, unless the
        callable takes ``*args``: a cache of every count it was called with could grow
        without bound).

        Raises:
            TypeError: the callable does not take *n* positional arguments
                (what ``bind`` raises).
        """
        found = self._positional.get(n)
        if found is None:
            sig = self.bind((None,) * n, {}).signature
            names: list[str] = []
            variadic = False
            for p in sig.parameters.values():
                if len(names) >= n:
                    break
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                    names.append(p.name)
                elif p.kind is p.VAR_POSITIONAL:
                    variadic = True
                    names.extend(f"*{p.name}[{i}]" for i in range(n - len(names)))
            found = (typing.get_args(self.args_type(n)), tuple(names))
            if not variadic:
                self._positional[n] = found
        return found

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
