"""The standard-library types the codec writes itself: one stored form each, read strictly.

The round trip of every type, nested in containers and classes, is the
Hypothesis property of ``tests/test_codec.py``; here, what each is written as,
what is refused on reading, and the rules where a choice was made (a
``Decimal``'s exponent, a ``time``'s zone, a path's flavour, named tuples by
field name, TypedDicts whose marks typing could not read).
"""

from __future__ import annotations

import enum
import sys
from datetime import UTC, date, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath
from typing import Any, Literal, NamedTuple, NotRequired, TypedDict
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest

import tether
from tether._codec._values import codec, dumps
from tether.stores import Store

from .test_codec import Address, Level, Options, Pair, Perm, Size, assert_identical

WHAT = "step x#0"
POSIX = pytest.mark.skipif(sys.platform == "win32", reason="PurePath is PurePosixPath here")


class Amount(Decimal):
    """A Decimal subclass: decoded as the annotated class."""


class Point3(NamedTuple):
    x: int
    y: int
    z: int = 0  # a field added later, with a default


class Unreadable(TypedDict):
    """In this module's string annotations, typing cannot see NotRequired."""

    street: str
    number: NotRequired[int]


@pytest.mark.parametrize(
    ("value", "tp", "text"),
    [
        (Decimal("1.50"), Decimal, '"1.50"'),  # the exponent is kept: 1.50 is not 1.5
        (Decimal("-0"), Decimal, '"-0"'),
        (Decimal("1E+3"), Decimal, '"1E+3"'),
        (Decimal("0.000001"), Decimal, '"0.000001"'),
        (UUID(int=1), UUID, '"00000000-0000-0000-0000-000000000001"'),
        (timedelta(days=-1, seconds=5, microseconds=7), timedelta, "[-1,5,7]"),
        (timedelta(hours=25), timedelta, "[1,3600,0]"),
        (time(9, 30), time, '"09:30:00"'),
        (time(9, 30, 0, 5, tzinfo=timezone(timedelta(hours=2))), time, '"09:30:00.000005+02:00"'),
        (time(0, tzinfo=UTC), time, '"00:00:00+00:00"'),
        (date(2024, 2, 29), date, '"2024-02-29"'),
        (PurePosixPath("/srv//data/./x"), PurePosixPath, '"/srv/data/x"'),
        (PureWindowsPath("C:/Users/ada"), PureWindowsPath, '"C:\\\\Users\\\\ada"'),
        (Pair(1), Pair, '{"left":1,"right":null}'),
        (Point3(1, 2), Point3, '{"x":1,"y":2,"z":0}'),
        ({"street": "Main"}, Address, '{"street":"Main"}'),
        ({"name": "n", "verbose": True}, Options, '{"name":"n","verbose":true}'),
        (frozenset({3, 1, 2}), frozenset[int], "[1,2,3]"),
        (frozenset({Decimal("10"), Decimal("9")}), frozenset[Decimal], '["10","9"]'),
        (
            {UUID(int=2): Decimal("2.5")},
            dict[UUID, Decimal],
            '{"00000000-0000-0000-0000-000000000002":"2.5"}',
        ),
        (Level.HIGH, Level, "2"),  # an IntEnum as its value, like every enum
        (Size.M, Size, '"m"'),
        (Perm.R | Perm.W, Perm, "6"),
        (Size.S, Literal[Size.S, "t"], '"s"'),
    ],
)
def test_each_type_has_one_stored_form(value: Any, tp: Any, text: str) -> None:
    stored, back = codec.snapshot(value, tp, what=WHAT)
    assert stored == text
    assert_identical(value, back)
    # By runtime type too (ask payloads and responses, step arguments): the same text.
    assert dumps(codec.to_primitive(back, what=WHAT)) == text


def test_a_decimal_subclass_decodes_as_itself() -> None:
    _, back = codec.snapshot(Amount("2.50"), Amount, what=WHAT)
    assert type(back) is Amount
    assert str(back) == "2.50"


@POSIX
def test_pure_path_and_path_take_this_machines_flavour() -> None:
    _, back = codec.snapshot(PurePosixPath("a/b"), PurePath, what=WHAT)
    assert type(back) is PurePosixPath
    assert type(codec.decode('"a/b"', Path, what=WHAT)) is type(Path("a/b"))
    # A Windows path read on POSIX machine is not PurePath's flavour here: refused at save.
    with pytest.raises(tether.CodecError, match="comes back as PurePosixPath"):
        codec.snapshot(PureWindowsPath("a/b"), PurePath, what=WHAT)


def test_a_named_tuple_reads_older_values_by_field_name() -> None:
    # Stored before `z` existed; reordering fields could not swap x and y either.
    assert codec.decode('{"y":2,"x":1}', Point3, what=WHAT) == Point3(1, 2, 0)


def test_a_time_in_a_zone_without_a_fixed_offset_is_refused() -> None:
    paris = time(9, tzinfo=ZoneInfo("Europe/Paris"))
    with pytest.raises(tether.CodecError, match="gives it no UTC offset") as caught:
        codec.snapshot(paris, time, what=WHAT)
    assert str(caught.value).startswith("step x#0: cannot encode time value")


@pytest.mark.parametrize("value", [Decimal("NaN"), Decimal("-Infinity"), Decimal("sNaN")])
def test_a_decimal_that_is_not_finite_is_refused(value: Decimal) -> None:
    with pytest.raises(tether.CodecError, match="a Decimal must be finite"):
        codec.snapshot(value, Decimal, what=WHAT)


def test_a_typed_dict_whose_marks_typing_cannot_read_is_refused() -> None:
    with pytest.raises(tether.CodecError, match="number is NotRequired, but typing reads it"):
        codec.snapshot({"street": "x"}, Unreadable, what=WHAT)
    with pytest.raises(tether.CodecError, match="from __future__ import annotations"):
        codec.decode('{"street":"x","number":1}', Unreadable, what=WHAT)


@pytest.mark.parametrize(
    ("text", "tp"),
    [
        ("1.5", Decimal),  # a JSON number: Decimal is written as text, never as a float
        ('"1.5 "', Decimal),
        ('" 1.5"', Decimal),
        ('"+1.5"', Decimal),
        ('"1_000"', Decimal),
        ('"1e3"', Decimal),  # Decimal reads it, but str() writes 1E+3
        ('"NaN"', Decimal),
        ('"Infinity"', Decimal),
        ('"sNaN"', Decimal),
        ('"abc"', Decimal),
        ("null", Decimal),
        ('"00000000-0000-0000-0000-00000000000A"', UUID),  # upper case
        ('"{00000000-0000-0000-0000-000000000001}"', UUID),
        ('"urn:uuid:00000000-0000-0000-0000-000000000001"', UUID),
        ('"00000000000000000000000000000001"', UUID),
        ('"x"', UUID),
        ("1", UUID),
        ("[0,90000,0]", timedelta),  # not normalized
        ("[0,-1,0]", timedelta),
        ("[0,0,1000000]", timedelta),
        ("[1,2]", timedelta),
        ("[1,2,3,4]", timedelta),
        ("[1.0,0,0]", timedelta),
        ("[true,0,0]", timedelta),
        ("[1000000000,0,0]", timedelta),  # beyond timedelta.max
        ("86400", timedelta),
        ('"1 day, 0:00:00"', timedelta),
        ('{"days":1}', timedelta),
        ('"9:30"', time),
        ('"09:30"', time),  # isoformat() writes the seconds
        ('"09:30:00Z"', time),
        ('"0930"', time),
        ('"2020-01-01T09:30:00"', time),
        ('"24:00:00"', time),
        ("930", time),
        ('"a//b"', PurePosixPath),
        ('"a/"', PurePosixPath),
        ('"./a"', PurePosixPath),
        ('""', PurePosixPath),  # str() writes the empty path as "."
        ('"C:/x"', PureWindowsPath),
        ("1", PurePosixPath),
        ('["a","b"]', PurePosixPath),
        ("[1,null]", Pair),  # a named tuple is an object, not an array
        ('{"left":1,"right":null,"extra":0}', Pair),
        ('{"right":"x"}', Pair),
        ('{"left":"1"}', Pair),
        ('"ab"', Pair),
        ('{"street":"x","zip":1}', Address),
        ("{}", Address),
        ('{"street":1}', Address),
        ('{"verbose":true}', Options),  # name is Required
        ('"b"', Literal["a"]),
        ('"s"', Literal["t", Size.M]),
        ("[1,1]", frozenset[int]),
        ('{"a":1}', frozenset[str]),
        ('"1"', Level),
        ('"S"', Size),
        ("{1.5:1}", dict[Decimal, int]),  # keys are JSON strings
    ],
)
def test_strict_decoding_refuses(text: str, tp: Any) -> None:
    with pytest.raises(tether.CodecError, match=r"^step x#0: stored value does not decode"):
        codec.decode(text, tp, what=WHAT)


@pytest.mark.parametrize(
    ("text", "tp", "expected"),
    [
        ('"1.50"', Decimal, Decimal("1.50")),
        ('"-0"', Decimal, Decimal("-0")),
        ("[-1,86399,999999]", timedelta, timedelta(microseconds=-1)),
        ('"09:30:00+02:00"', time, time(9, 30, tzinfo=timezone(timedelta(hours=2)))),
        ('"."', PurePosixPath, PurePosixPath()),
        ('{"left":1}', Pair, Pair(1, None)),  # a field with a default may be missing
        ('{"1.5":1}', dict[Decimal, int], {Decimal("1.5"): 1}),
        ('{"street":"x","number":3}', Address, {"street": "x", "number": 3}),
        ('{"name":"n"}', Options, {"name": "n"}),
        ("5", Perm, Perm.R | Perm.X),
    ],
)
def test_strict_decoding_accepts(text: str, tp: Any, expected: Any) -> None:
    assert_identical(expected, codec.decode(text, tp, what=WHAT))


class Flavour(enum.StrEnum):
    SWEET = "sweet"


ARGS: list[tuple[Any, ...]] = []
FAIL_ONCE: list[Exception] = []


@tether.workflow(name="tests.test_codec_types.with_args")
async def with_args(
    amount: Decimal,
    order_id: UUID,
    wait: timedelta,
    at: time,
    where: PurePosixPath,
    pair: Pair,
    address: Address,
    flavour: Flavour,
    *sizes: Literal["s", "m"],
) -> dict[UUID, Decimal]:
    ARGS.append((amount, order_id, wait, at, where, pair, address, flavour, *sizes))
    if FAIL_ONCE:
        raise FAIL_ONCE.pop()
    return {order_id: amount}


async def test_workflow_arguments_of_each_type_decode_on_resume(tether_store: Store) -> None:
    ARGS.clear()
    FAIL_ONCE[:] = [ValueError("once")]
    given = (
        Decimal("19.90"),
        UUID(int=7),
        timedelta(minutes=90),
        time(8, 15, tzinfo=UTC),
        PurePosixPath("/srv/orders"),
        Pair(3, "x"),
        {"street": "Main"},
        Flavour.SWEET,
        "s",
        "m",
    )
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(ValueError, match="once"):
            await engine.run(with_args, *given, run_id="typed-args")
        result = await engine.resume("typed-args")
        again = await engine.run(with_args, *given, run_id="typed-args")  # the stored result
    assert len(ARGS) == 2
    for seen in ARGS:
        assert_identical(given, seen)
    for got in (result, again):
        assert_identical({UUID(int=7): Decimal("19.90")}, got)
