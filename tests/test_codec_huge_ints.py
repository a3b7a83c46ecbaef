"""Ints too long for Python's int-text limit fail as the documented errors, naming where.

Python converts ints of at most ``sys.get_int_max_str_digits()`` digits (4300
by default) to and from text; beyond, it raises a bare ``ValueError`` that
escaped ``except tether.TetherError`` at every entry point (issue 25, item
3). Now the codec's JSON text says so as a :class:`CodecError`, so a step
result or workflow argument is a ``CodecError``, a sent value a
``MessageRejectedError``, a response an ``InvalidResponseError``, and a
stored huge int (written where the limit was raised) reads as a clear error.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import trio

import tether
from tether._codec._json import dumps, json_text, loads
from tether._codec._values import codec
from tether.stores import RunStatus, Store

HUGE = 10**5000  # 5001 digits
HUGE_TEXT = "1" + "0" * 5000
LIMIT = "Python converts ints of at most 4300 digits to and from text"
WHAT = "step x#0 of run 'r'"


@pytest.fixture(autouse=True)
def _default_limit() -> Iterator[None]:
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(4300)
    yield
    sys.set_int_max_str_digits(before)


@pytest.mark.parametrize(
    "call",
    [
        lambda: codec.snapshot(HUGE, int, what=WHAT),
        lambda: codec.snapshot(HUGE, Any, what=WHAT),
        lambda: codec.snapshot([{"n": 1}, {"n": HUGE}], list[dict[str, int]], what=WHAT),
        lambda: codec.to_primitive({"n": [HUGE]}, what=WHAT),
        lambda: codec.encode_args((HUGE,), {}, what=WHAT),
        lambda: codec.encode_args((1,), {"n": HUGE}, what=WHAT),
        lambda: codec.decode(HUGE_TEXT, int, what=WHAT),
        lambda: codec.decode(f'{{"n":[-{HUGE_TEXT}]}}', Any, what=WHAT),
    ],
    ids=["snapshot", "snapshot-any", "nested", "to_primitive", "args", "kwargs", "decode", "deep"],
)
def test_the_codec_refuses_huge_ints_as_a_codec_error_naming_what(
    call: Callable[[], object],
) -> None:
    with pytest.raises(tether.CodecError) as info:
        call()
    message = str(info.value)
    assert message.startswith(WHAT)
    assert "an int of" in message and LIMIT in message
    assert "Supported:" not in message  # the type is fine: the value is not


@pytest.mark.parametrize(
    "call",
    [lambda: dumps([HUGE]), lambda: loads(HUGE_TEXT), lambda: json_text({"n": [HUGE]})],
    ids=["dumps", "loads", "json_text"],
)
def test_json_text_refuses_huge_ints_as_a_value_error_too(call: Callable[[], object]) -> None:
    # (Its callers that catch ValueError, such as the stores' record readers, go on working.)
    with pytest.raises(ValueError, match=LIMIT) as info:
        call()
    assert isinstance(info.value, tether.CodecError)


def test_other_refusals_of_json_text_are_unchanged() -> None:
    with pytest.raises(ValueError, match="NaN is not valid JSON") as nan:
        loads("[NaN]")
    assert not isinstance(nan.value, tether.CodecError)
    with pytest.raises(ValueError, match="Out of range float") as inf:
        dumps([float("inf")])
    assert not isinstance(inf.value, tether.CodecError)
    assert loads(dumps([10**4299, -(10**4299)])) == [10**4299, -(10**4299)]  # the limit is exact


@tether.step
async def big() -> int:
    return HUGE


@tether.workflow(name="tests.huge.result")
async def returns_huge() -> int:
    return await big()


@tether.workflow(name="tests.huge.arg")
async def takes(n: int) -> int:
    return 1


@tether.workflow(name="tests.huge.message", messages={"n": int})
async def receives() -> int:
    return await tether.receive("n", int)


@tether.workflow(name="tests.huge.ask")
async def asks() -> int:
    return await tether.ask("how many?", int)


async def test_a_huge_step_result_is_a_codec_error_naming_the_step(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.CodecError, match=r"^step big#0 of run 'h'.*" + LIMIT):
            await engine.run(returns_huge, run_id="h")
        info = await engine.get_run("h")
        assert info is not None and info.status is RunStatus.FAILED
        assert info.error is not None and info.error.type == "tether.CodecError"
        assert [e.key for e in info.entries if e.value is not None] == []  # nothing journaled


async def test_a_huge_workflow_argument_is_a_codec_error_before_anything_is_stored(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        for call in (
            lambda: engine.run(takes, HUGE, run_id="a"),
            lambda: engine.submit(takes, HUGE, run_id="a"),
        ):
            with pytest.raises(tether.CodecError, match=r"^arguments of workflow tests\.huge\.arg"):
                await call()
        assert await engine.list_runs() == []


async def test_a_huge_sent_value_is_a_rejected_message(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        await engine.submit(receives, run_id="m")
        with pytest.raises(tether.MessageRejectedError, match="refused message 'n'") as info:
            await engine.send("m", "n", HUGE)
        assert LIMIT in str(info.value)
        assert "too long to show" in str(info.value)  # its repr, which Python refuses too


async def test_a_huge_response_is_an_invalid_response(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.Paused):
            await engine.run(asks, run_id="q")
        with pytest.raises(tether.InvalidResponseError, match="the response to ask#0") as info:
            await engine.resume("q", responses={"ask#0": HUGE})
        assert LIMIT in str(info.value)
        info_after = await engine.get_run("q")
        assert info_after is not None and info_after.status is RunStatus.PAUSED


async def test_a_stored_huge_int_reads_as_a_clear_error(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        sys.set_int_max_str_digits(0)  # a process that writes it: no limit
        assert await engine.run(returns_huge, run_id="w") == HUGE
        sys.set_int_max_str_digits(4300)  # one that reads it: the default limit
        for call in (lambda: engine.wait("w"), lambda: engine.get_run("w")):
            with pytest.raises(tether.CheckpointCorruptError) as info:
                await call()
            message = str(info.value)
            assert "run 'w'" in message and "an int of 5001 digits" in message
            assert "sys.set_int_max_str_digits()" in message  # how to read it
