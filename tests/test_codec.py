"""The value codec: every supported value round-trips, everything else is refused.

Properties (Hypothesis) over a recursive space of annotated types: a value of
a type is snapshotted, written as JSON and decoded back to an equal value of
the same type, all the way down; and the same through an engine run, where
the value is read back from the store. Unsupported values fail at save time
with a :class:`tether.CodecError` naming the step; stored text that does not
fit the annotation exactly is refused when it is decoded.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import itertools
import json
import math
import operator
import random
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath
from types import GenericAlias
from typing import Any, Literal, NamedTuple, NotRequired, Optional, Required, TypedDict
from uuid import UUID
from zoneinfo import ZoneInfo

import attrs
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tether
from tether._codec._values import codec, dumps, loads
from tether.stores import EntryStatus, RunStatus, Store

from ._money import Price

WHAT = "step x#0"

# -- the types the codec supports ----------------------------------------------------


class Color(enum.Enum):
    """A plain enum whose values are of different JSON types."""

    RED = "red"
    GREEN = 2
    BLUE = 3.5


class Mood(str, enum.Enum):  # noqa: UP042 (the str mix-in is under test)
    HAPPY = "happy"
    SAD = "sad"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Size(enum.StrEnum):
    S = "s"
    M = "m"


class Perm(enum.IntFlag):
    R = 4
    W = 2
    X = 1


class Pair(NamedTuple):
    left: int
    right: str | None = None


# The functional syntax: in this module's string annotations (from __future__
# import annotations), typing could not read the class syntax's marks.
Address = TypedDict("Address", {"street": str, "number": NotRequired[int]})  # noqa: UP013
Options = TypedDict(  # noqa: UP013
    "Options", {"name": Required[str], "verbose": bool}, total=False
)


@attrs.frozen(kw_only=True)
class Point:
    x: int
    y: float


@attrs.frozen(kw_only=True)
class LabelledPoint(Point):
    label: str


@attrs.frozen(kw_only=True)
class Shape:
    """Frozen, nested and recursive."""

    name: str
    points: tuple[Point, ...]
    color: Color
    tags: frozenset[str]
    drawn: datetime | None = None
    parent: Shape | None = None


@attrs.define
class Tally:
    """A mutable attrs class."""

    counts: dict[str, int]
    seen: set[Size] = attrs.Factory(set)


@dataclasses.dataclass(frozen=True)
class Money:
    amount: float
    currency: str


@dataclasses.dataclass
class Basket:
    items: list[Money]
    note: str | None = None


class Plain:
    """A class the codec has no way to encode."""

    def __init__(self) -> None:
        self.a = 1


class Boom(Exception):
    """Raised by test workflows to fail a run on purpose."""


# -- strategies: (annotation, values) pairs ------------------------------------------


class Spec(NamedTuple):
    """An annotation, a strategy for its values, and whether they can go in a set."""

    tp: Any
    values: st.SearchStrategy[Any]
    hashable: bool

    def __repr__(self) -> str:
        return f"Spec({self.tp!r})"


finite_floats = st.floats(allow_nan=False, allow_infinity=False)
# Fixed offsets strictly inside a day, to the second (isoformat writes the
# seconds of an offset when there are any). Offsets under one second are
# refused: CPython 3.11's fromisoformat reads "+00:00:00.000005" as +00:00.
offsets = st.integers(min_value=-86399, max_value=86399).map(lambda s: timedelta(seconds=s))
timezones = st.just(UTC) | st.builds(timezone, offsets)
datetimes = st.datetimes() | st.datetimes(timezones=timezones)
times = st.times() | st.times(timezones=timezones)
decimals = st.decimals(allow_nan=False, allow_infinity=False)
_segments = st.text(st.characters(exclude_characters="/\\:\x00"), min_size=1, max_size=4)
posix_paths = st.builds(
    lambda root, parts: PurePosixPath(root, *parts),
    st.sampled_from(["", "/", "//"]),
    st.lists(_segments, max_size=3),
)
windows_paths = st.builds(
    lambda anchor, parts: PureWindowsPath(anchor, *parts),
    st.sampled_from(["", "C:", "C:\\", "\\\\server\\share\\"]),
    st.lists(_segments, max_size=3),
)
prices = st.builds(Price, decimals, st.sampled_from(["EUR", "USD", ""]))
points = st.builds(Point, x=st.integers(), y=finite_floats)
moneys = st.builds(Money, amount=finite_floats, currency=st.text(max_size=3))
shapes: st.SearchStrategy[Shape] = st.deferred(
    lambda: st.builds(
        Shape,
        name=st.text(max_size=5),
        points=st.lists(points, max_size=3).map(tuple),
        color=st.sampled_from(Color),
        tags=st.frozensets(st.text(max_size=3), max_size=3),
        drawn=st.none() | datetimes,
        parent=st.none() | shapes,
    )
)

LEAVES: list[Spec] = [
    Spec(int, st.integers(), True),
    Spec(float, finite_floats, True),
    Spec(str, st.text(), True),
    Spec(bool, st.booleans(), True),
    Spec(type(None), st.none(), True),
    Spec(bytes, st.binary(), True),
    Spec(datetime, datetimes, True),
    Spec(date, st.dates(), True),
    Spec(time, times, True),
    Spec(timedelta, st.timedeltas(), True),
    Spec(Decimal, decimals, True),
    Spec(UUID, st.uuids(), True),
    Spec(PurePosixPath, posix_paths, True),
    Spec(PureWindowsPath, windows_paths, True),
    Spec(PurePath, posix_paths, True),  # the flavour of this (POSIX) machine
    Spec(Path, posix_paths.map(Path), True),
    Spec(Price, prices, True),  # registered with tether.register_type
    Spec(Color, st.sampled_from(Color), True),
    Spec(Mood, st.sampled_from(Mood), True),
    Spec(Level, st.sampled_from(Level), True),
    Spec(Size, st.sampled_from(Size), True),
    Spec(
        Perm,
        st.sets(st.sampled_from(list(Perm))).map(
            lambda s: functools.reduce(operator.or_, s, Perm(0))
        ),
        True,
    ),
    Spec(Literal["a", 1, True], st.sampled_from(["a", 1, True]), True),
    Spec(
        Literal[Color.RED, Level.HIGH, None], st.sampled_from([Color.RED, Level.HIGH, None]), True
    ),
    Spec(Pair, st.builds(Pair, st.integers(), st.none() | st.text()), True),
    Spec(
        Address,
        st.fixed_dictionaries({"street": st.text()}, optional={"number": st.integers()}),
        False,
    ),
    Spec(
        Options,
        st.fixed_dictionaries({"name": st.text()}, optional={"verbose": st.booleans()}),
        False,
    ),
    Spec(Point, points, True),
    Spec(Shape, shapes, True),
    Spec(Money, moneys, True),
    Spec(
        Tally,
        st.builds(
            Tally,
            counts=st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
            seen=st.sets(st.sampled_from(Size)),
        ),
        False,
    ),
    Spec(
        Basket,
        st.builds(Basket, items=st.lists(moneys, max_size=3), note=st.none() | st.text()),
        False,
    ),
    # Unions the issue names, and unions of members with distinct JSON forms.
    Spec(int | None, st.none() | st.integers(), True),
    Spec(str | int, st.text() | st.integers(), True),
    Spec(Optional[Point], st.none() | points, True),  # noqa: UP045 (the spelling under test)
    Spec(Point | Money, points | moneys, True),
    Spec(
        bool | int | float | str | None,
        st.booleans() | st.integers() | finite_floats | st.text() | st.none(),
        True,
    ),
    Spec(Mood | Level, st.sampled_from(Mood) | st.sampled_from(Level), True),
    Spec(float | int, finite_floats | st.integers(), True),
    Spec(UUID | Decimal, st.uuids() | decimals, True),  # both strings; each reads only its own
    Spec(date | timedelta | None, st.dates() | st.timedeltas() | st.none(), True),
]

#: Types written as JSON strings, so they may be object keys.
KEYS: list[Spec] = [
    Spec(Mood, st.sampled_from(Mood), True),
    Spec(Size, st.sampled_from(Size), True),
    Spec(UUID, st.uuids(), True),
    Spec(Decimal, decimals, True),
    Spec(date, st.dates(), True),
    Spec(PurePosixPath, posix_paths, True),
    Spec(Literal["x", "y"], st.sampled_from(["x", "y"]), True),
]

_class_ids = itertools.count()


def _attrs_class(a: Spec, b: Spec) -> Spec:
    cls = attrs.make_class(
        f"Gen{next(_class_ids)}",
        {"a": attrs.field(type=a.tp), "b": attrs.field(type=b.tp)},
        frozen=True,
    )
    return Spec(cls, st.builds(cls, a=a.values, b=b.values), a.hashable and b.hashable)


def _dataclass(a: Spec, b: Spec) -> Spec:
    cls = dataclasses.make_dataclass(f"Data{next(_class_ids)}", [("a", a.tp), ("b", b.tp)])
    return Spec(cls, st.builds(cls, a=a.values, b=b.values), False)


_make_named_tuple: Any = NamedTuple  # built at run time: a type checker cannot follow it
_make_typed_dict: Any = TypedDict


def _named_tuple(a: Spec, b: Spec) -> Spec:
    cls = _make_named_tuple(f"Tup{next(_class_ids)}", [("a", a.tp), ("b", b.tp)])
    return Spec(cls, st.builds(cls, a.values, b.values), a.hashable and b.hashable)


def _typed_dict(a: Spec, b: Spec) -> Spec:
    """A TypedDict with a required and a NotRequired field (or total=False and Required)."""
    n = next(_class_ids)
    name = f"Dict{n}"
    if n % 2:  # both spellings, by the id's parity
        cls = _make_typed_dict(name, {"a": a.tp, "b": NotRequired[b.tp]})
    else:
        cls = _make_typed_dict(name, {"a": Required[a.tp], "b": b.tp}, total=False)
    values = st.fixed_dictionaries({"a": a.values}, optional={"b": b.values})
    return Spec(cls, values, False)


def _containers(children: st.SearchStrategy[Spec]) -> st.SearchStrategy[Spec]:
    def one(make: Callable[[Spec], Spec]) -> st.SearchStrategy[Spec]:
        return children.map(make)

    def two(make: Callable[[Spec, Spec], Spec]) -> st.SearchStrategy[Spec]:
        return st.tuples(children, children).map(lambda ab: make(*ab))

    hashable = children.filter(lambda s: s.hashable)
    return st.one_of(
        one(lambda s: Spec(GenericAlias(list, s.tp), st.lists(s.values, max_size=3), False)),
        one(
            lambda s: Spec(
                GenericAlias(tuple, (s.tp, ...)),
                st.lists(s.values, max_size=3).map(tuple),
                s.hashable,
            )
        ),
        one(
            lambda s: Spec(
                GenericAlias(dict, (str, s.tp)),
                st.dictionaries(st.text(max_size=3), s.values, max_size=3),
                False,
            )
        ),
        st.tuples(st.sampled_from(KEYS), children).map(
            lambda kv: Spec(
                GenericAlias(dict, (kv[0].tp, kv[1].tp)),
                st.dictionaries(kv[0].values, kv[1].values, max_size=3),
                False,
            )
        ),
        one(lambda s: Spec(s.tp | None, st.none() | s.values, s.hashable)),
        hashable.map(lambda s: Spec(GenericAlias(set, s.tp), st.sets(s.values, max_size=3), False)),
        hashable.map(
            lambda s: Spec(GenericAlias(frozenset, s.tp), st.frozensets(s.values, max_size=3), True)
        ),
        two(
            lambda a, b: Spec(
                GenericAlias(tuple, (a.tp, b.tp)),
                st.tuples(a.values, b.values),
                a.hashable and b.hashable,
            )
        ),
        two(_attrs_class),
        two(_dataclass),
        two(_named_tuple),
        two(_typed_dict),
    )


specs = st.recursive(st.sampled_from(LEAVES), _containers, max_leaves=5)
cases = specs.flatmap(lambda s: st.tuples(st.just(s.tp), s.values))


def assert_identical(value: Any, back: Any, path: str = "value") -> None:
    """*back* equals *value* and has the same type, all the way down."""
    assert type(back) is type(value), f"{path}: {type(value)} came back as {type(back)}"
    assert back == value, path
    if isinstance(value, datetime | time):
        assert back.utcoffset() == value.utcoffset(), path
    elif isinstance(value, Decimal | PurePath | Price):
        assert repr(back) == repr(value), path  # a Decimal's exponent, a path's spelling
    elif isinstance(value, list | tuple):
        assert len(back) == len(value), path
        for i, (v, b) in enumerate(zip(value, back, strict=True)):
            assert_identical(v, b, f"{path}[{i}]")
    elif isinstance(value, dict | set | frozenset):
        returned = {k: k for k in back}
        for k in value:
            assert_identical(k, returned[k], f"{path} key {k!r}")
            if isinstance(value, dict):
                assert_identical(value[k], back[returned[k]], f"{path}[{k!r}]")
    elif attrs.has(type(value)):
        for field in attrs.fields(type(value)):
            name = field.name
            assert_identical(getattr(value, name), getattr(back, name), f"{path}.{name}")
    elif dataclasses.is_dataclass(value):
        for dfield in dataclasses.fields(value):
            name = dfield.name
            assert_identical(getattr(value, name), getattr(back, name), f"{path}.{name}")
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        for name in value._fields:
            assert_identical(getattr(value, name), getattr(back, name), f"{path}.{name}")


# -- the codec round trip --------------------------------------------------------------


@given(cases)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_supported_values_round_trip(case: tuple[Any, Any]) -> None:
    tp, value = case
    text, back = codec.snapshot(value, tp, what=WHAT)
    assert_identical(value, back)
    json.loads(text)  # plain JSON, readable by anything
    assert dumps(loads(text)) == text  # already canonical
    assert_identical(value, codec.decode(text, tp, what=WHAT))
    # Encoding is canonical: the decoded copy encodes to the same text.
    assert codec.snapshot(back, tp, what=WHAT)[0] == text


@given(st.sets(st.text(max_size=4), min_size=2, max_size=8), st.randoms())
def test_equal_sets_encode_to_equal_text_whatever_their_order(
    items: set[str], rnd: random.Random
) -> None:
    shuffled = list(items)
    rnd.shuffle(shuffled)
    other = set(shuffled)  # another insertion order
    assert (
        codec.snapshot(items, set[str], what=WHAT)[0]
        == codec.snapshot(other, set[str], what=WHAT)[0]
    )
    assert codec.encode_args((items,), {"s": frozenset(items)}, what=WHAT) == codec.encode_args(
        (other,), {"s": frozenset(other)}, what=WHAT
    )


def test_sets_of_one_content_iterating_differently_encode_alike() -> None:
    first, second = {1, 9}, {9, 1}  # 1 and 9 share a hash slot: insertion order shows
    assert list(first) != list(second)
    assert codec.encode_args((first,), {}, what=WHAT) == codec.encode_args((second,), {}, what=WHAT)
    assert codec.snapshot(first, set[int], what=WHAT)[0] == "[1,9]"
    assert codec.snapshot(second, set[int], what=WHAT)[0] == "[1,9]"


@pytest.mark.parametrize(
    ("value", "tp", "expected"),
    [
        (1, float, 1.0),  # an int where a float is declared: typing's numeric widening
        ([1, 2.5], list[float], [1.0, 2.5]),
        (Point(x=1, y=2), Point, Point(x=1, y=2.0)),
        (None, type(None), None),  # what `-> None` resolves to
        (None, None, None),
        ((), tuple[()], ()),
    ],
)
def test_values_that_decode_to_the_declared_type(value: Any, tp: Any, expected: Any) -> None:
    _, back = codec.snapshot(value, tp, what=WHAT)
    assert_identical(expected, back)


@pytest.mark.parametrize(
    "value",
    [
        datetime(2020, 3, 29, 12, 0, tzinfo=ZoneInfo("Europe/Paris")),
        datetime(2020, 10, 25, 2, 30, tzinfo=ZoneInfo("Europe/Paris")),  # the repeated hour
        datetime(2020, 10, 25, 2, 30, fold=1, tzinfo=ZoneInfo("Europe/Paris")),
    ],
)
def test_zoneinfo_datetimes_come_back_with_their_fixed_offset(value: datetime) -> None:
    text, back = codec.snapshot(value, datetime, what=WHAT)
    assert back.replace(tzinfo=None) == value.replace(tzinfo=None)
    assert back.utcoffset() == value.utcoffset()
    assert isinstance(back.tzinfo, timezone)  # the zone's name is not stored
    assert codec.decode(text, datetime, what=WHAT) == back


# -- strict decoding -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tp"),
    [
        ('"1"', int),
        ("1.5", int),
        ("true", int),
        ("1", bool),
        ('{"a":1}', bool),
        ('"true"', bool),
        ("1", str),
        ("null", int),
        ("1", type(None)),
        ('"x"', None),
        ("true", float),
        ('"1.5"', float),
        ("NaN", float),
        ("Infinity", float),
        ("-Infinity", float),
        ("1e400", float),
        ('{"x":1,"y":2.0,"z":3}', Point),  # an unknown field
        ('{"x":1}', Point),  # a missing field
        ('{"x":"1","y":2.0}', Point),
        ("[1, 2.0]", Point),
        ("[]", Point),
        ("null", Point),
        ('{"amount":1.0,"currency":"EUR","extra":0}', Money),
        ('"ab"', list[str]),  # a str is iterable, but not an array
        ('{"a":1}', list[str]),  # nor are an object's keys
        ('"ab"', tuple[str, ...]),
        ('{"a":1}', set[str]),
        ("[1,1]", set[int]),  # a set is written without repeats
        ("[1,2]", tuple[int]),
        ("[1]", tuple[int, int]),
        ("[1]", tuple[()]),
        ("[1]", dict[str, int]),
        ('{"a":"1"}', dict[str, int]),
        ('{"1":1}', dict[int, int]),  # JSON keys are strings; no coercion
        ('"sad "', Mood),
        ('"SAD"', Mood),
        ("1", Mood),
        ('"1"', Level),
        ("true", Level),  # True == 1, but is not a Level's value
        ("1.0", Level),
        ('"RED"', Color),
        ("2.0", Color),
        ('"2"', Color),
        ("1", Literal[True]),
        ("true", Literal[1]),
        ('"2020-01-01"', datetime),  # a date is not a datetime
        ('"2020-01-01 00:00:00"', datetime),  # not what isoformat() writes
        ('"2020-01-01T00:00:00Z"', datetime),
        ("1577836800", datetime),
        ('"2020-01-01T00:00:00"', date),
        ('"20200101"', date),
        ('"zz"', bytes),  # base85 decodes it, but never writes it
        ("[1,2]", bytes),
        ('"1"', int | None),
        ("true", int | None),
        ("true", str | int),
        ("1.5", str | int),
        ('{"x":1,"y":2.0,"q":0}', Optional[Point]),  # noqa: UP045
        ('{"amount":1.0}', Point | Money),
        ("not json", int),
        ("", int),
    ],
)
def test_strict_decoding_refuses(text: str, tp: Any) -> None:
    with pytest.raises(tether.CodecError, match=r"^step x#0: stored value does not decode"):
        codec.decode(text, tp, what=WHAT)


@pytest.mark.parametrize(
    ("text", "tp", "expected"),
    [
        ("1", float, 1.0),  # the one widening: a float accepts a JSON integer
        ("1", float | None, 1.0),
        ("1", int | float, 1),
        ("true", bool | int, True),
        ("1", bool | int, 1),
        ('"happy"', Mood, Mood.HAPPY),
        ("2", Level, Level.HIGH),
        ("3.5", Color, Color.BLUE),
        ('{"x":1,"y":2}', Point, Point(x=1, y=2.0)),
        ('{"amount":1.0,"currency":"EUR"}', Point | Money, Money(1.0, "EUR")),
    ],
)
def test_strict_decoding_accepts(text: str, tp: Any, expected: Any) -> None:
    assert_identical(expected, codec.decode(text, tp, what=WHAT))


def test_decoding_errors_say_where() -> None:
    with pytest.raises(tether.CodecError, match=r"\$\.points\[1\]\.x"):
        codec.decode(
            '{"name":"n","points":[{"x":1,"y":1.0},{"x":"2","y":1.0}],"color":"red","tags":[]}',
            Shape,
            what=WHAT,
        )


# -- through the engine ----------------------------------------------------------------

_run_ids = itertools.count()


async def _round_trip_through_a_run(store: Store, tp: Any, value: Any) -> None:
    calls: list[None] = []
    seen: list[Any] = []
    fail_once = [Boom()]

    async def produce() -> Any:
        calls.append(None)
        return value

    async def flow() -> Any:
        got = await step()
        seen.append(got)
        if fail_once:
            raise fail_once.pop()
        return got

    produce.__annotations__ = {"return": tp}
    flow.__annotations__ = {"return": tp}
    step = tether.step(produce)
    wf = tether.workflow(name="tests.test_codec.round_trip")(flow)
    run_id = f"round-trip-{next(_run_ids)}"
    async with tether.open_engine(store) as engine:
        with pytest.raises(Boom):
            await engine.run(wf, run_id=run_id)
        resumed = await engine.resume(run_id)  # the step replays from the journal
        again = await engine.run(wf, run_id=run_id)  # completed: the stored result
        info = await engine.get_run(run_id)
    assert calls == [None]
    assert info is not None
    assert info.status is RunStatus.COMPLETED
    [entry] = [e for e in info.entries if e.key == "produce#0"]
    assert entry.status is EntryStatus.COMPLETED
    assert entry.value is not None
    assert_identical(value, codec.decode(entry.value, tp, what=WHAT))
    assert len(seen) == 2
    for got in (*seen, resumed, again, info.result):
        assert_identical(value, got)


@given(cases)
@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
def test_supported_values_round_trip_through_a_run(
    tether_store_factory: Callable[[], Store], case: tuple[Any, Any]
) -> None:
    # A plain trio.run per example: Hypothesis drives the examples. Nothing
    # sleeps, so there is no clock to fake (and a thread-backed store needs a
    # real one).
    tp, value = case
    trio.run(_round_trip_through_a_run, tether_store_factory(), tp, value)


async def test_a_step_returning_none_and_an_int_for_a_float(tether_store: Store) -> None:
    await _round_trip_through_a_run(tether_store, type(None), None)
    await _round_trip_through_a_run(tether_store, Shape | None, None)

    async def one() -> float:
        return 1

    @tether.workflow(name="tests.test_codec.widened")
    async def widened() -> float:
        return await tether.step(one)()

    async with tether.open_engine(tether_store) as engine:
        first = await engine.run(widened, run_id="widened")
        again = await engine.run(widened, run_id="widened")
    assert_identical(1.0, first)
    assert_identical(1.0, again)


# -- unsupported values fail at save time, naming the step ---------------------------


def _unannotated() -> None:
    """A marker: the step has no return annotation."""


UNSUPPORTED: list[tuple[str, Callable[[], Any], Any]] = [
    ("object", object, _unannotated),
    ("object-annotated", object, object),
    ("plain-class", Plain, Plain),
    ("tuple-unannotated", lambda: (1, 2), _unannotated),
    ("set-unannotated", lambda: {1, 2}, _unannotated),
    ("int-keys-any", lambda: {1: "a"}, Any),
    ("int-keys-unannotated", lambda: {1: "a"}, _unannotated),
    ("int-keys-annotated", lambda: {1: "a"}, dict[int, str]),
    ("nan", lambda: math.nan, float),
    ("inf-nested", lambda: [1.0, math.inf], list[float]),
    ("nan-unannotated", lambda: {"x": math.nan}, _unannotated),
    ("subclass", lambda: LabelledPoint(x=1, y=2.0, label="p"), Point),
    ("subclass-nested", lambda: [LabelledPoint(x=1, y=2.0, label="p")], list[Point]),
    ("attrs-unannotated", lambda: Point(x=1, y=2.0), _unannotated),
    ("enum-as-str", lambda: Mood.SAD, str),
    ("enum-unannotated", lambda: [Level.LOW], _unannotated),
    ("str-as-enum", lambda: "sad", Mood),
    ("bool-as-int", lambda: True, int),
    ("list-as-tuple", lambda: [1, 2], tuple[int, ...]),
    ("timedelta-unannotated", lambda: timedelta(1), _unannotated),
    ("decimal-nan", lambda: Decimal("NaN"), Decimal),
    ("decimal-as-float", lambda: Decimal("1.5"), float),
    ("float-as-decimal", lambda: 1.5, Decimal),
    ("uuid-as-str", lambda: UUID(int=1), str),
    ("zoneinfo-time", lambda: time(9, tzinfo=ZoneInfo("Europe/Paris")), time),
    ("concrete-path-as-pure", lambda: Path("a"), PurePath),
    ("windows-path-as-pure", lambda: PureWindowsPath("a"), PurePath),
    ("named-tuple-unannotated", lambda: Pair(1, "x"), _unannotated),
    ("named-tuple-as-tuple", lambda: Pair(1, "x"), tuple[int, str]),
    ("typed-dict-extra-key", lambda: {"street": "x", "zip": 1}, Address),
    ("literal-other-value", lambda: "b", Literal["a"]),
    ("big-int-as-float", lambda: 2**53 + 1, float),  # would come back rounded
    ("bytes-as-str-union", lambda: b"ab", bytes | str),  # ambiguous: comes back a str
]


@pytest.mark.parametrize(
    ("make", "annotation"),
    [pytest.param(make, ann, id=name) for name, make, ann in UNSUPPORTED],
)
async def test_unsupported_value_fails_naming_the_step(
    make: Callable[[], Any], annotation: Any, autojump_clock: trio.abc.Clock
) -> None:
    async def f() -> Any:
        return make()

    f.__annotations__ = {} if annotation is _unannotated else {"return": annotation}

    @tether.workflow(name="tests.test_codec.unsupported")
    async def wf() -> None:
        await tether.step(f)()

    store = tether.MemoryStore()
    async with tether.open_engine(store) as engine:
        with pytest.raises(tether.CodecError, match=r"^step f#0 of run 'bad'") as caught:
            await engine.run(wf, run_id="bad")
        info = await engine.get_run("bad")
    assert type(make()).__qualname__ in str(caught.value)  # and says what it got
    assert info is not None
    assert info.status is RunStatus.FAILED
    assert info.error is not None
    assert info.error.key == "f#0"
    assert not [e for e in info.entries if e.status is EntryStatus.COMPLETED]


@pytest.mark.parametrize(
    "args",
    [(object(),), (math.nan,), ([1, {"x": math.inf}],), (Plain(),)],
    ids=["object", "nan", "inf-nested", "plain-class"],
)
async def test_unencodable_step_arguments_fail_naming_the_step(
    args: tuple[Any, ...], autojump_clock: trio.abc.Clock
) -> None:
    async def g(x: Any) -> int:
        return 1

    @tether.workflow(name="tests.test_codec.bad_args")
    async def wf() -> None:
        await tether.step(g)(*args)

    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(tether.CodecError, match=r"^step g#0 of run 'bad-args'"):
            await engine.run(wf, run_id="bad-args")


# -- workflow arguments ----------------------------------------------------------------

ARGS_SEEN: list[tuple[Any, ...]] = []
ARGS_FAIL: list[Boom] = []


@tether.workflow(name="tests.test_codec.with_args")
async def with_args(shape: Shape, when: datetime, sizes: frozenset[Size], *more: Point) -> Shape:
    ARGS_SEEN.append((shape, when, sizes, *more))
    if ARGS_FAIL:
        raise ARGS_FAIL.pop()
    return shape


SHAPE = Shape(
    name="tri",
    points=(Point(x=0, y=0.5), Point(x=3, y=-1.25)),
    color=Color.GREEN,
    tags=frozenset({"a", "b"}),
    drawn=datetime(2024, 5, 6, 7, 8, 9, 10, tzinfo=timezone(timedelta(hours=-3, minutes=-30))),
    parent=Shape(name="root", points=(), color=Color.BLUE, tags=frozenset()),
)
WHEN = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


async def test_workflow_arguments_are_stored_and_decoded_on_resume(tether_store: Store) -> None:
    ARGS_SEEN.clear()
    ARGS_FAIL[:] = [Boom()]
    sizes = frozenset({Size.S, Size.M})
    extra = Point(x=7, y=7.5)
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(Boom):
            await engine.run(with_args, SHAPE, WHEN, sizes, extra, run_id="args")
        result = await engine.resume("args")
    first, second = ARGS_SEEN
    for seen in (first, second):
        for got, given_value in zip(seen, (SHAPE, WHEN, sizes, extra), strict=True):
            assert_identical(given_value, got)
            assert got is not given_value  # a decoded copy, not the caller's object
    assert_identical(SHAPE, result)


async def test_rerun_with_equal_set_arguments_resumes(tether_store: Store) -> None:
    """Equal arguments are equal text, so run() resumes instead of conflicting."""
    seen: list[set[int]] = []
    fail_once = [Boom()]

    @tether.workflow(name="tests.test_codec.set_args")
    async def set_args(items: set[int]) -> list[int]:
        seen.append(items)
        if fail_once:
            raise fail_once.pop()
        return sorted(items)

    first, second = {1, 9}, {9, 1}
    assert list(first) != list(second)
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(Boom):
            await engine.run(set_args, first, run_id="sets")
        assert await engine.run(set_args, second, run_id="sets") == [1, 9]
    assert seen == [{1, 9}, {1, 9}]


async def test_unencodable_workflow_argument_is_refused(tether_store: Store) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.CodecError, match="arguments of workflow"):
            await engine.run(with_args, Plain(), WHEN, frozenset(), run_id="plain")
        assert await engine.get_run("plain") is None


def test_signature_args_type_from_annotations() -> None:
    sig = with_args.signature
    assert sig.args_type(0) == tuple[()]
    assert sig.args_type(3) == tuple[Shape, datetime, frozenset[Size]]
    assert sig.args_type(5) == tuple[Shape, datetime, frozenset[Size], Point, Point]


async def test_step_arguments_are_only_digested(tether_store: Store) -> None:
    """Arguments need not decode: a dict with int keys is a fine argument."""

    async def h(table: dict[int, str]) -> str:
        return table[1]

    @tether.workflow(name="tests.test_codec.int_key_args")
    async def wf() -> str:
        return await tether.step(h)({1: "a", 2: "b"})

    async with tether.open_engine(tether_store) as engine:
        assert await engine.run(wf, run_id="int-keys") == "a"
