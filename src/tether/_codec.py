"""The private value codec: typed Python values <-> JSON text.

One ``cattrs`` converter, configured for JSON and never the global one. The
type to decode into always comes from code (a step's return annotation, a
workflow's parameter annotations, ``ask``'s ``response_type``), never from
storage, and nothing is pickled.

Decoding is strict: no lenient coercion (``"1"`` is not an ``int``,
``{"a": 1}`` is not a ``bool``, unknown attrs fields are refused).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import typing
from collections.abc import Callable
from typing import Any

import cattrs
from cattrs.preconf.json import make_converter

from ._errors import CodecError

__all__ = ("Codec", "Signature", "codec", "digest", "dumps", "loads")


def _strict(tp: type, *accepted: type) -> Callable[[Any, Any], Any]:
    ok = accepted or (tp,)

    def structure(value: Any, _: Any) -> Any:
        # `type(...) in` rather than isinstance: True is not an int here.
        if type(value) in ok:
            return tp(value) if type(value) is not tp else value
        raise TypeError(f"expected {tp.__name__}, got {type(value).__name__} {value!r:.60}")

    return structure


def _make_converter() -> cattrs.Converter:
    conv = make_converter(forbid_extra_keys=True)
    conv.register_structure_hook(int, _strict(int))
    conv.register_structure_hook(float, _strict(float, float, int))
    conv.register_structure_hook(str, _strict(str))
    conv.register_structure_hook(bool, _strict(bool))
    conv.register_structure_hook(type(None), _strict(type(None)))
    return conv


def dumps(primitive: Any) -> str:
    """Serialize JSON-ready primitives canonically (sorted keys, no NaN)."""
    return json.dumps(primitive, allow_nan=False, separators=(",", ":"), sort_keys=True)


def loads(text: str) -> Any:
    """Parse JSON text; raises ``ValueError`` on malformed input."""
    return json.loads(text)


def digest(text: str) -> str:
    """A short, stable digest of encoded arguments, for replay checks."""
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def _describe(tp: Any) -> str:
    return getattr(tp, "__qualname__", None) or repr(tp)


class Codec:
    """Encodes values by a declared type and proves they decode back equal."""

    def __init__(self) -> None:
        self._conv = _make_converter()

    def snapshot(self, value: Any, tp: Any, *, what: str) -> tuple[str, Any]:
        """Encode *value* as *tp* now, and decode it back.

        Returns the JSON text and the decoded copy. The copy is what workflow
        code sees, on the first run and on replay alike, so later mutation of
        *value* by anyone cannot change what was recorded or returned.

        Raises:
            CodecError: the value cannot be encoded, or does not decode back to
                an equal value of the same type (names *what*).
        """
        try:
            text = dumps(self._conv.unstructure(value, unstructure_as=tp))
        except Exception as exc:
            raise CodecError(
                f"{what}: cannot encode {type(value).__qualname__} value {value!r:.80} "
                f"as {_describe(tp)} to JSON ({exc}). Supported: JSON primitives, attrs "
                "classes, dataclasses, enums, datetimes, bytes, tuples, sets, "
                "Optional/Union and containers of these."
            ) from exc
        try:
            back = self._conv.structure(loads(text), tp)
            equal = bool(back == value) and type(back) is type(value)
        except Exception as exc:
            raise CodecError(
                f"{what}: {type(value).__qualname__} value {value!r:.80} encodes but does "
                f"not decode back as {_describe(tp)} ({exc}); check the type annotation."
            ) from exc
        if not equal:
            hint = (
                " It has no type annotation to decode it by: annotate it."
                if tp is Any
                else f" Check that the annotation {_describe(tp)} describes the value exactly."
            )
            raise CodecError(
                f"{what}: {type(value).__qualname__} value {value!r:.80} does not survive a "
                f"round trip through JSON (it comes back as {back!r:.80}).{hint}"
            )
        return text, back

    def decode(self, text: str, tp: Any, *, what: str) -> Any:
        """Decode stored JSON *text* strictly into *tp*.

        Raises:
            CodecError: the text is not JSON or does not fit *tp*.
        """
        try:
            return self._conv.structure(loads(text), tp)
        except Exception as exc:
            raise CodecError(
                f"{what}: stored value does not decode as {_describe(tp)}: {exc}"
            ) from exc

    def structure(self, primitive: Any, tp: Any, *, what: str) -> Any:
        """Decode already-parsed JSON primitives strictly into *tp*."""
        try:
            return self._conv.structure(primitive, tp)
        except Exception as exc:
            raise CodecError(
                f"{what}: {primitive!r:.80} does not decode as {_describe(tp)}: {exc}"
            ) from exc

    def encode_args(self, args: tuple[Any, ...], kwargs: dict[str, Any], *, what: str) -> str:
        """Canonical JSON of call arguments by their runtime types (for digests)."""
        try:
            return dumps([self._conv.unstructure(list(args)), self._conv.unstructure(kwargs)])
        except Exception as exc:
            raise CodecError(
                f"{what}: arguments cannot be encoded to JSON ({exc}). Step arguments are "
                "digested to detect changed inputs on replay; pass data, not live objects "
                "(create clients inside the step)."
            ) from exc


codec = Codec()


class Signature:
    """A callable's parameter and return types, resolved lazily and cached."""

    __slots__ = ("_fn", "_resolved")

    def __init__(self, fn: Callable[..., Any]) -> None:
        self._fn = fn
        self._resolved: tuple[inspect.Signature, dict[str, Any], Any] | None = None

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
        return self._resolved

    @property
    def return_type(self) -> Any:
        return self._resolve()[2]

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> inspect.BoundArguments:
        return self._resolve()[0].bind(*args, **kwargs)

    def args_type(self, n: int) -> Any:
        """The tuple type of *n* positional arguments, from the annotations."""
        sig, params, _ = self._resolve()
        types: list[Any] = []
        for p in sig.parameters.values():
            if len(types) >= n:
                break
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                types.append(params[p.name])
            elif p.kind is p.VAR_POSITIONAL:
                types.extend([params[p.name]] * (n - len(types)))
        return tuple[tuple(types)] if types else tuple[()]  # type: ignore[misc]
