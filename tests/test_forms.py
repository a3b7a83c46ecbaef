"""Forms from response types, and strict decoding of answers (``tether._forms``)."""

from __future__ import annotations

import dataclasses
import enum
import sys
import types

import attrs
import pytest

import tether
from tether._codec._converter import describe
from tether._codec._resolve import resolve_type
from tether._errors import Request
from tether._ui._forms import ANSWER, decode, form_for
from tether.stores import EntryKind

HERE = [sys.modules[__name__]]


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Size(enum.IntEnum):
    S = 1
    L = 3


@attrs.frozen
class Order:
    approved: bool
    amount: int
    ratio: float
    note: str
    colour: Colour = Colour.BLUE
    tags: list[str] = attrs.Factory(list)
    limit: int | None = None


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int = 0


class Outer:
    @attrs.frozen
    class Inner:
        flag: bool


def request(type_name: str, key: str = "ask#0") -> Request:
    return Request(key=key, payload={"q": 1}, response_type=type_name)


def test_types_are_found_by_name_among_builtins_and_the_modules_given() -> None:
    assert resolve_type("bool", []) is bool
    assert resolve_type("float", []) is float
    assert resolve_type("Order", HERE) is Order
    assert resolve_type("Outer.Inner", HERE) is Outer.Inner
    assert resolve_type("Order", []) is None  # not imported: unknown
    assert resolve_type("Nope", HERE) is None
    # Generic names are read by their syntax, never evaluated.
    assert resolve_type("list[int]", HERE) == list[int]
    nested = dict[str, Order | None]
    assert resolve_type(describe(nested), HERE) == nested  # names Order with its module
    assert resolve_type("__import__('os')", HERE) is None
    assert resolve_type("os.system", HERE) is None  # not a type
    assert resolve_type("list[Nope]", HERE) is None


def test_a_name_two_modules_define_differently_is_not_guessed() -> None:
    other = types.ModuleType("other")
    other.Order = type("Order", (), {})  # type: ignore[attr-defined]
    assert resolve_type("Order", [*HERE, other]) is None
    assert resolve_type("Order", [*HERE, *HERE]) is Order


def test_scalar_and_enum_forms() -> None:
    (field,) = form_for(request("bool"), []).fields
    assert (field.name, field.kind, field.choices) == (
        ANSWER,
        "bool",
        (("true", "true"), ("false", "false")),
    )
    (field,) = form_for(request("Colour"), HERE).fields
    assert field.kind == "enum" and field.choices == (('"red"', "RED"), ('"blue"', "BLUE"))
    (field,) = form_for(request("Size"), HERE).fields
    assert field.choices == (("1", "S"), ("3", "L"))


def test_a_class_gets_one_field_per_attribute_with_its_default() -> None:
    form = form_for(request("Order"), HERE)
    assert form.composite and form.tp is Order
    shown = {f.name: (f.kind, f.default) for f in form.fields}
    assert shown == {
        "answer.approved": ("bool", None),
        "answer.amount": ("int", None),
        "answer.ratio": ("float", None),
        "answer.note": ("str", None),
        "answer.colour": ("enum", '"blue"'),
        "answer.tags": ("json", None),  # a factory: nothing to show
        "answer.limit": ("json", "null"),
    }
    point = form_for(request("Point"), HERE)
    assert [(f.name, f.default) for f in point.fields] == [("answer.x", None), ("answer.y", "0")]


def test_an_unknown_type_is_one_json_field() -> None:
    form = form_for(request("Mystery"), HERE)
    assert form.tp is None and [(f.name, f.kind, f.tp) for f in form.fields] == [
        (ANSWER, "json", None)
    ]
    # Read as --respond reads a value; the engine checks it when the run resumes.
    assert decode(form, {ANSWER: '{"a": 1}'}) == ({"a": 1}, {})
    assert decode(form, {ANSWER: "plain words"}) == ("plain words", {})


GOOD = {
    "answer.approved": "true",
    "answer.amount": "12",
    "answer.ratio": "2",
    "answer.note": "42",
    "answer.colour": '"red"',
    "answer.tags": '["a", "b"]',
    "answer.limit": "null",
}


def test_a_good_answer_decodes_to_json_values() -> None:
    answer, errors = decode(form_for(request("Order"), HERE), GOOD)
    assert errors == {}
    # A str field takes its text as typed: "42" stays text.
    assert answer == {
        "approved": True,
        "amount": 12,
        "ratio": 2,
        "note": "42",
        "colour": "red",
        "tags": ["a", "b"],
        "limit": None,
    }


@pytest.mark.parametrize(
    ("field", "text", "expected"),
    [
        ("answer.amount", "12.5", "does not decode as int"),
        ("answer.amount", "twelve", "does not decode as int"),
        ("answer.amount", "true", "does not decode as int"),
        ("answer.approved", "1", "does not decode as bool"),
        ("answer.ratio", '"2"', "does not decode as float"),
        ("answer.colour", '"green"', "does not decode as Colour"),
        ("answer.tags", '"ab"', "does not decode as list[str]"),
        ("answer.limit", "", "does not decode as"),
    ],
)
def test_a_bad_field_is_refused_under_its_own_name(field: str, text: str, expected: str) -> None:
    _, errors = decode(form_for(request("Order"), HERE), {**GOOD, field: text})
    assert list(errors) == [field]
    assert expected in errors[field]


def test_a_choice_not_made_is_refused() -> None:
    data = dict(GOOD)
    del data["answer.approved"]
    _, errors = decode(form_for(request("Order"), HERE), data)
    assert errors == {"answer.approved": "choose one"}


@attrs.frozen
class Ticket:
    seat: int = attrs.field(validator=attrs.validators.ge(1))


def test_the_answer_as_a_whole_is_checked_too() -> None:
    _, errors = decode(form_for(request("Ticket"), HERE), {"answer.seat": "0"})
    assert list(errors) == [""] and "Ticket" in errors[""]


@tether.workflow(name="tests.forms.order")
async def ordering() -> Order:
    return await tether.ask({"q": 1}, Order)


async def test_the_form_accepts_and_refuses_what_the_engine_does() -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(tether.Paused) as paused:
            await engine.run(ordering, run_id="o")
        (req,) = paused.value.requests
        form = form_for(req, HERE)
        bad, errors = decode(form, {**GOOD, "answer.amount": "12.5"})
        assert errors
        with pytest.raises(tether.InvalidResponseError):
            await engine.resume("o", {req.key: bad})
        info = await engine.get_run("o")
        assert info is not None and info.status is tether.RunStatus.PAUSED
        assert info.entries == ()  # nothing journaled
        good, errors = decode(form, GOOD)
        assert errors == {}
        result = await engine.resume("o", {req.key: good})
        info = await engine.get_run("o")
        assert info is not None and [e.kind for e in info.entries] == [EntryKind.RESPONSE]
        assert result == Order(
            approved=True, amount=12, ratio=2.0, note="42", colour=Colour.RED, tags=["a", "b"]
        )
