"""A form for a pending request, from its response type, and strict decoding of the response.

Layer: the dashboard (``_ui``).

A stored request names its response type (``bool``, ``Decision``, …), not the
type itself: :func:`~tether._codec._resolve.resolve_type` finds it, by that
name, among the builtins and in the modules of the workflow's code (the run's
workflow module and the ``--import`` modules), as ``engine.respond`` does. It
never evaluates the name.

:func:`form_for` turns a type into fields: a choice of ``true``/``false`` for a
``bool``, a text input for an ``int``, ``float`` or ``str``, a choice of
members for an enum, one field per attribute for an attrs class or a
dataclass, and a JSON text for anything else (a nested class, a list, an
optional value, or a type not found here).

:func:`decode` reads what was submitted exactly as ``tether resume --respond
KEY=VALUE`` reads VALUE (:func:`~tether._codec._json.parse_value`: JSON, or else the
text itself), except that a ``str`` field takes its text as typed (a form has
no quoting to tell ``42`` the number from ``"42"`` the text), then decodes it
strictly into its type with the codec the engine decodes responses with. Each
field's error is reported under the field's name; nothing is coerced.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any, Final, Literal

import attrs

from .._codec._converter import describe
from .._codec._json import dumps, parse_value
from .._codec._resolve import resolve_type
from .._codec._values import codec
from .._errors import CodecError, Request

__all__ = ("ANSWER", "Field", "Form", "decode", "form_for")

#: The form field name of a whole response; an attribute's field is ``answer.NAME``.
ANSWER: Final = "answer"

FieldKind = Literal["bool", "int", "float", "str", "enum", "json"]

_FACTORY: Final[type] = type(attrs.Factory(list))


@attrs.frozen(kw_only=True)
class Field:
    """One input of a form."""

    name: str  #: the submitted field's name
    label: str
    kind: FieldKind
    #: the type the value decodes into; ``None`` when it is not known here
    #: (a JSON field then, checked by ``engine.respond`` against the type it finds)
    tp: Any
    type_name: str  #: the type, as shown
    choices: tuple[tuple[str, str], ...] = ()  #: (submitted text, label), for bool and enum
    default: str | None = None  #: the text the input starts with


@attrs.frozen(kw_only=True)
class Form:
    """The form of one pending request."""

    key: str  #: the request's key
    type_name: str  #: the response type's name, as stored with the request
    tp: Any  #: the response type, or ``None`` when it is not known here
    fields: tuple[Field, ...]
    #: the answer is an object of the fields (an attrs class or a dataclass)
    composite: bool = False


def _kind(tp: Any) -> FieldKind:
    if tp is bool:
        return "bool"
    if tp in (int, float, str):
        return typing.cast(FieldKind, tp.__name__)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "enum"
    return "json"


def _default(value: Any, kind: FieldKind) -> str | None:
    """A default as the text of its input (only plain values; none for factories)."""
    if value is attrs.NOTHING or value is dataclasses.MISSING or isinstance(value, _FACTORY):
        return None
    if isinstance(value, enum.Enum):
        return dumps(value.value)
    if kind == "str" and isinstance(value, str):
        return value
    if value is None or isinstance(value, bool | int | float | str):
        return dumps(value)
    return None


def _field(name: str, label: str, tp: Any, default: Any = attrs.NOTHING) -> Field:
    kind = _kind(tp)
    choices: tuple[tuple[str, str], ...] = ()
    if kind == "bool":
        choices = (("true", "true"), ("false", "false"))
    elif kind == "enum":
        choices = tuple((dumps(m.value), m.name) for m in tp)
    return Field(
        name=name,
        label=label,
        kind=kind,
        tp=tp,
        type_name=describe(tp),
        choices=choices,
        default=_default(default, kind),
    )


def _attributes(tp: Any) -> list[tuple[str, Any, Any]] | None:
    """(name, type, default) of an attrs class's or dataclass's fields; ``None`` otherwise."""
    if attrs.has(tp):
        fields = [(a.name, a.default) for a in attrs.fields(tp) if a.init]
    elif dataclasses.is_dataclass(tp) and isinstance(tp, type):
        fields = [(f.name, f.default) for f in dataclasses.fields(tp) if f.init]
    else:
        return None
    try:
        hints = typing.get_type_hints(tp)
    except (NameError, TypeError):  # an annotation that does not resolve: one JSON field
        return None
    return [(name, hints[name], default) for name, default in fields]


def form_for(request: Request, modules: Sequence[ModuleType]) -> Form:
    """The form of *request*, its type looked up in *modules* (see :func:`resolve_type`)."""
    tp = resolve_type(request.response_type, modules)
    if tp is None:
        field = Field(
            name=ANSWER,
            label="response (JSON)",
            kind="json",
            tp=None,
            type_name=request.response_type,
        )
        return Form(key=request.key, type_name=request.response_type, tp=None, fields=(field,))
    attributes = _attributes(tp)
    if attributes is None:
        field = _field(ANSWER, "response", tp)
        return Form(key=request.key, type_name=request.response_type, tp=tp, fields=(field,))
    fields = tuple(_field(f"{ANSWER}.{n}", n, t, d) for n, t, d in attributes)
    return Form(
        key=request.key, type_name=request.response_type, tp=tp, fields=fields, composite=True
    )


def _read(field: Field, data: Mapping[str, str]) -> tuple[Any, str | None]:
    """The value of one field as a JSON value, and its error (``None`` if it decodes)."""
    text = data.get(field.name)
    if text is None:
        return None, "choose one" if field.choices else "missing"
    value = text if field.kind == "str" else parse_value(text)
    if field.tp is None:
        return value, None
    try:
        codec.structure(value, field.tp, what=field.label)
    except CodecError as exc:
        return value, str(exc)
    return value, None


def decode(form: Form, data: Mapping[str, str]) -> tuple[Any, dict[str, str]]:
    """The answer *data* (submitted fields) gives to *form*, as JSON values, and the errors.

    The errors map a field's name to what is wrong with it (``""``: the answer
    as a whole, e.g. a class's own validator refused it). With errors, the
    answer must not be used. The answer is what ``engine.respond`` takes as the
    request's response; it decoded here exactly as the engine decodes it.
    """
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for field in form.fields:
        value, error = _read(field, data)
        values[field.name.removeprefix(f"{ANSWER}.")] = value
        if error is not None:
            errors[field.name] = error
    answer = values if form.composite else values[ANSWER]
    if not errors and form.tp is not None:
        try:  # as a whole too: a class's own validators, say
            codec.structure(answer, form.tp, what=f"the response to {form.key}")
        except CodecError as exc:
            errors[""] = str(exc)
    return answer, errors
