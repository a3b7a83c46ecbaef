"""``tether.register_type``: users' own types in step results, ``ask`` responses and arguments.

A registered type is stored where any supported type is, on every store and
across a resume by another engine (as another process would), and is held to
the same rules: the round trip at save time, strict decoding, and errors that
name what failed and where, never an exception of the user's functions.
"""

from __future__ import annotations

import enum
import io
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, TypedDict

import attrs
import pytest
import trio

import tether
from tether._cli._main import main
from tether._codec._values import codec
from tether.stores import EntryKind, EntryStatus, RunStatus, Store

from ._money import Price
from .conftest import reopen_store

WHAT = "step x#0"
effects: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _reset() -> None:
    effects.clear()


# -- a registered type through runs ---------------------------------------------------


@attrs.frozen
class Line:
    sku: str
    price: Price  # a registered type as a field


@tether.step
async def quote(order_id: str) -> list[Line]:
    effects["quote"] += 1
    return [Line(sku="lamp", price=Price(Decimal("12.50"), "EUR"))]


@tether.step
async def add_tip(price: Price, tip: Price) -> Price:
    effects["add_tip"] += 1
    return Price(price.amount + tip.amount, price.currency)


@tether.workflow(name="tests.test_codec_registry.checkout")
async def checkout(order_id: str, budget: Price | None) -> Price:
    [line] = await quote(order_id)
    tip = await tether.ask({"price": line.price, "budget": budget}, Price)
    total = await add_tip(line.price, tip)
    if budget is not None and total.amount > budget.amount:
        raise ValueError(f"over budget: {total}")
    return total


async def test_a_registered_type_in_results_responses_and_arguments(tether_store: Store) -> None:
    budget = Price(Decimal("20.00"), "EUR")
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.Paused) as caught:
            await engine.run(checkout, "o-1", budget, run_id="o-1")
    [request] = caught.value.requests
    # The payload is shown as JSON values, by the registration's encode.
    assert request.payload == {
        "price": {"amount": "12.50", "currency": "EUR"},
        "budget": {"amount": "20.00", "currency": "EUR"},
    }
    assert request.response_type == "Price"

    # Another engine on the same location: the arguments and the journaled
    # step result are decoded from the store, by the registration's decode.
    async with tether.open_engine(reopen_store(tether_store)) as engine:
        tip = Price(Decimal("1.25"), "EUR")
        total = await engine.resume("o-1", responses={request.key: tip})
        info = await engine.get_run("o-1")
    assert total == Price(Decimal("13.75"), "EUR")
    assert effects == {"quote": 1, "add_tip": 1}
    assert info is not None and info.status is RunStatus.COMPLETED
    entries = {e.key: e for e in info.entries}
    assert entries["quote#0"].value == (
        '[{"price":{"amount":"12.50","currency":"EUR"},"sku":"lamp"}]'
    )
    assert entries["ask#0"].kind is EntryKind.RESPONSE
    assert entries["ask#0"].value == '{"amount":"1.25","currency":"EUR"}'

    async with tether.open_engine(reopen_store(tether_store)) as engine:
        # Completed: the stored result, decoded by the return annotation.
        again = await engine.run(checkout, "o-1", budget, run_id="o-1")
    assert type(again) is Price and again == total
    assert str(again.amount) == "13.75"


async def test_a_response_given_as_json_values_decodes(tether_store: Store) -> None:
    """What ``tether resume --respond`` passes: the JSON form, decoded by the registration."""
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.Paused):
            await engine.run(checkout, "o-2", None, run_id="o-2")
        total = await engine.resume(
            "o-2", responses={"ask#0": {"amount": "0.50", "currency": "EUR"}}
        )
    assert total == Price(Decimal("13.00"), "EUR")


async def test_a_response_the_decode_function_refuses_leaves_the_run_paused(
    tether_store: Store,
) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.Paused):
            await engine.run(checkout, "o-3", None, run_id="o-3")
        with pytest.raises(tether.InvalidResponseError) as caught:
            await engine.resume("o-3", responses={"ask#0": {"currency": "EUR"}})
        info = await engine.get_run("o-3")
        message = str(caught.value)
        assert "the response to request ask#0 does not decode as Price" in message
        assert "the decode function registered for Price raised KeyError: 'amount'" in message
        assert info is not None and info.status is RunStatus.PAUSED
        assert [e.key for e in info.entries] == ["quote#0"]  # nothing journaled
        # Answered properly, it completes.
        tip = Price(Decimal("0"), "EUR")
        assert await engine.resume("o-3", responses={"ask#0": tip}) == Price(
            Decimal("12.50"), "EUR"
        )


def test_the_cli_answers_with_a_registered_type(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"sqlite:{tmp_path / 'runs.db'}"

    def cli(*argv: str) -> tuple[int | str | None, str, str]:
        out, err = io.StringIO(), io.StringIO()
        try:
            status: int | str | None = main(list(argv), out=out, err=err)
        except SystemExit as exc:  # a refused response may be reported as a usage error
            status = exc.code
        captured = capsys.readouterr()
        return status, out.getvalue() + captured.out, err.getvalue() + captured.err

    flow = "tests.test_codec_registry:checkout"
    status, out, err = cli("run", flow, "o-4", "null", "--run-id", "o-4", "--store", store)
    assert status == 3, err  # paused
    assert '"amount": "12.50"' in out
    resume = ("resume", "o-4", "--import", "tests.test_codec_registry", "--store", store)
    status, out, err = cli(*resume, "--respond", 'ask#0={"amount": 2}')
    assert status not in (0, 3)
    assert "InvalidResponseError" in err and "the decode function registered for Price" in err
    status, out, err = cli(*resume, "--respond", 'ask#0={"amount":"2.00","currency":"EUR"}')
    assert status == 0, err
    assert '{"amount": "14.50", "currency": "EUR"}' in out


# -- the round trip at save time -------------------------------------------------------


class Lossy:
    """Its registration forgets the note: decode(encode(x)) != x."""

    def __init__(self, value: int, note: str) -> None:
        self.value, self.note = value, note

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Lossy) and (self.value, self.note) == (other.value, other.note)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Lossy({self.value}, {self.note!r})"


tether.register_type(Lossy, encode=lambda x: x.value, decode=lambda n: Lossy(n, ""))


class Fragile:
    """Its registration's functions fail on demand."""

    fail_encode = False
    fail_decode = False

    def __init__(self, n: int) -> None:
        self.n = n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fragile) and other.n == self.n

    __hash__ = None  # type: ignore[assignment]


def _encode_fragile(x: Fragile) -> Any:
    if Fragile.fail_encode:
        raise RuntimeError("encode broke")
    if x.n < 0:
        return {"n": Decimal(x.n)}  # not a JSON value
    return {"n": x.n}


def _decode_fragile(data: Any) -> Any:
    if Fragile.fail_decode:
        raise RuntimeError("decode broke")
    if data["n"] == 0:
        return data  # not a Fragile
    return Fragile(data["n"])


tether.register_type(Fragile, encode=_encode_fragile, decode=_decode_fragile)


@pytest.fixture
def fragile() -> Any:
    yield Fragile
    Fragile.fail_encode = Fragile.fail_decode = False


async def _fail_at_save(value: Any, annotation: Any) -> tuple[str, tether.RunInfo]:
    async def make() -> Any:
        return value

    make.__annotations__ = {"return": annotation}
    step = tether.step(name="make")(make)

    @tether.workflow(name="tests.test_codec_registry.save")
    async def wf() -> None:
        await step()

    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(tether.CodecError) as caught:
            await engine.run(wf, run_id="bad")
        info = await engine.get_run("bad")
    assert info is not None and info.status is RunStatus.FAILED
    assert not [e for e in info.entries if e.status is EntryStatus.COMPLETED]
    message = str(caught.value)
    assert message.startswith("step make#0 of run 'bad'")
    return message, info


async def test_a_registration_that_loses_information_is_refused_at_save(
    autojump_clock: trio.abc.Clock,
) -> None:
    message, _ = await _fail_at_save([Lossy(1, "kept?")], list[Lossy])
    assert "does not survive a round trip" in message
    assert "Lossy(1, 'kept?') but comes back as Lossy(1, '')" in message


@pytest.mark.parametrize(
    ("value", "annotation", "broken", "expected"),
    [
        (
            Fragile(1),
            Fragile,
            "encode",
            "the encode function registered for Fragile raised RuntimeError: encode broke",
        ),
        (
            {"a": Fragile(-1)},
            dict[str, Fragile],
            None,
            "must return JSON values (dicts with str keys, lists, str, int, float, bool, None); "
            "it returned Decimal Decimal('-1') at ['n']",
        ),
        (Fragile(0), Fragile, None, "the decode function registered for Fragile returned dict"),
        (
            Fragile(2),
            Fragile | None,
            "decode",
            "the decode function registered for Fragile raised RuntimeError: decode broke",
        ),
    ],
    ids=["encode-raises", "encode-not-json", "decode-wrong-class", "decode-raises"],
)
async def test_a_failing_registration_fails_the_step_naming_it(
    value: Any,
    annotation: Any,
    broken: str | None,
    expected: str,
    fragile: Any,
    autojump_clock: trio.abc.Clock,
) -> None:
    fragile.fail_encode = broken == "encode"
    fragile.fail_decode = broken == "decode"
    message, _ = await _fail_at_save(value, annotation)
    assert expected in message


async def test_a_stored_value_the_decode_function_refuses_names_the_step(
    fragile: Any, autojump_clock: trio.abc.Clock
) -> None:
    @tether.step(name="produce")
    async def produce() -> list[Fragile]:
        effects["produce"] += 1
        return [Fragile(5)]

    @tether.workflow(name="tests.test_codec_registry.replay")
    async def wf() -> int:
        [x] = await produce()
        if effects["produce"] == 1 and not effects["failed"]:
            effects["failed"] += 1
            raise ValueError("first run fails")
        return x.n

    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(ValueError, match="first run fails"):
            await engine.run(wf, run_id="r")
        fragile.fail_decode = True  # the code changed: stored values no longer decode
        with pytest.raises(tether.TetherError) as caught:
            await engine.resume("r")
        fragile.fail_decode = False
        assert await engine.resume("r") == 5
    error = caught.value
    assert "produce#0" in str(error) and "'r'" in str(error)
    # The codec's own error says why and where: the message, or the error it is raised from.
    reason = f"{error} {error.__cause__}"
    assert "the decode function registered for Fragile raised RuntimeError: decode broke" in reason
    assert "$[0]" in reason  # where in the value
    assert effects["produce"] == 1


def test_decode_errors_say_where_inside_a_value() -> None:
    with pytest.raises(tether.CodecError) as caught:
        codec.decode(
            '[{"sku":"a","price":{"amount":"1","currency":"EUR"}},{"sku":"b","price":{}}]',
            list[Line],
            what=WHAT,
        )
    message = str(caught.value)
    assert message.startswith("step x#0: stored value does not decode as list[")
    assert "the decode function registered for Price raised KeyError: 'amount' @ $[1].price" in (
        message
    )


def test_a_decode_function_gets_a_copy_of_what_is_stored() -> None:
    class Greedy:
        def __init__(self, items: list[int]) -> None:
            self.items = items

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Greedy) and other.items == self.items

        __hash__ = None  # type: ignore[assignment]

    def decode(data: Any) -> Greedy:
        items = data.pop("items")  # consumes its input
        return Greedy(items)

    tether.register_type(Greedy, encode=lambda g: {"items": g.items}, decode=decode)
    given = {"items": [1, 2]}
    assert codec.structure(given, Greedy, what=WHAT) == Greedy([1, 2])
    assert given == {"items": [1, 2]}  # what a response journals is what was given


# -- what a registration covers ---------------------------------------------------------


class Tag:
    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tag) and type(other) is type(self) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


class SubTag(Tag):
    """Not registered: a registration covers its own class only."""


tether.register_type(Tag, encode=lambda t: t.name, decode=Tag)


def test_a_subclass_of_a_registered_type_is_not_covered() -> None:
    with pytest.raises(tether.CodecError, match="register SubTag too"):
        codec.snapshot(SubTag("x"), Tag, what=WHAT)
    with pytest.raises(tether.CodecError, match="SubTag is a subclass of Tag"):
        codec.snapshot(SubTag("x"), SubTag, what=WHAT)
    with pytest.raises(tether.CodecError, match="SubTag is a subclass of Tag"):
        codec.decode('"x"', SubTag, what=WHAT)


@pytest.mark.parametrize(
    ("value", "tp", "text"),
    [
        (Tag("a"), Tag, '"a"'),
        ([Tag("b"), Tag("a")], list[Tag], '["b","a"]'),
        (frozenset({Tag("b"), Tag("a")}), frozenset[Tag], '["a","b"]'),  # sorted: canonical
        ({"k": Tag("a")}, dict[str, Tag], '{"k":"a"}'),
        ({Tag("a"): 1}, dict[Tag, int], '{"a":1}'),  # written as a string: a fine key
        (None, Tag | None, "null"),
        ((Tag("a"), 1), tuple[Tag, int], '["a",1]'),
    ],
)
def test_a_registered_type_nests_like_any_other(value: Any, tp: Any, text: str) -> None:
    stored, back = codec.snapshot(value, tp, what=WHAT)
    assert stored == text
    assert back == value


@attrs.frozen
class Celsius:
    degrees: float


def test_a_registration_replaces_the_field_by_field_encoding_of_a_class_of_yours() -> None:
    assert codec.snapshot(Celsius(21.5), Celsius, what=WHAT)[0] == '{"degrees":21.5}'

    @attrs.frozen
    class Kelvin:
        degrees: float

    tether.register_type(Kelvin, encode=lambda k: k.degrees, decode=lambda d: Kelvin(d))
    assert codec.snapshot(Kelvin(294.65), Kelvin, what=WHAT) == ("294.65", Kelvin(294.65))


def test_a_type_used_before_it_is_registered_works_once_it_is() -> None:
    class Late:
        def __init__(self, n: int) -> None:
            self.n = n

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Late) and other.n == self.n

        __hash__ = None  # type: ignore[assignment]

    with pytest.raises(tether.CodecError):
        codec.snapshot([Late(1)], list[Late], what=WHAT)
    tether.register_type(Late, encode=lambda x: x.n, decode=Late)
    assert codec.snapshot([Late(1)], list[Late], what=WHAT)[0] == "[1]"


class Twice:
    pass


def _encode_twice(x: Twice) -> Any:
    return None


def _decode_twice(data: Any) -> Twice:
    return Twice()


def test_registering_again_with_the_same_functions_does_nothing() -> None:
    tether.register_type(Twice, encode=_encode_twice, decode=_decode_twice)
    tether.register_type(Twice, encode=_encode_twice, decode=_decode_twice)
    with pytest.raises(tether.UsageError, match=r"already registered .* with other functions"):
        tether.register_type(Twice, encode=_encode_twice, decode=lambda data: Twice())


class Plain:
    pass


class Shape(TypedDict):
    sides: int


@pytest.mark.parametrize(
    ("cls", "why"),
    [
        (int, "built-in encoding"),
        (str, "built-in encoding"),
        (bool, "built-in encoding"),
        (Decimal, "built-in encoding"),
        (list, "built-in encoding"),
        (enum.Enum, "built-in encoding"),
        (object, "built-in types derive from it"),
        (enum.ReprEnum, "built-in types derive from it"),
        (Shape, "TypedDict"),
        (list[int], "it takes a class"),
        (Literal["a"], "it takes a class"),
        (Tag | None, "it takes a class"),
        ("Plain", "it takes a class"),
    ],
)
def test_what_cannot_be_registered(cls: Any, why: str) -> None:
    with pytest.raises(tether.UsageError, match=f"^tether.register_type cannot register .*{why}"):
        tether.register_type(cls, encode=str, decode=str)


@pytest.mark.parametrize("role", ["encode", "decode"])
def test_encode_and_decode_must_be_functions(role: str) -> None:
    functions: dict[str, Any] = {"encode": str, "decode": lambda data: Plain()}
    functions[role] = "not a function"
    with pytest.raises(tether.UsageError, match=f"{role}= must be a function"):
        tether.register_type(Plain, **functions)
    # Nothing was registered.
    with pytest.raises(tether.CodecError, match="cannot encode Plain"):
        codec.snapshot(Plain(), Plain, what=WHAT)
