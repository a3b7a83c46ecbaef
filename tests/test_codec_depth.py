"""Values nested too deeply fail as a CodecError naming what, never a RecursionError."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

import tether
from tether._codec._values import MAX_DEPTH, codec, dumps, loads
from tether.stores import RunStatus

WHAT = "step x#0 of run 'r'"


def nested(levels: int) -> list[Any]:
    """A list of a list of ... an empty list: *levels* levels, built without recursion."""
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


@dataclasses.dataclass
class Node:
    child: Node | None


def chain(levels: int) -> dict[str, Any] | None:
    """``{"child": {"child": ... None}}``, a :class:`Node` chain as JSON values."""
    value: dict[str, Any] | None = None
    for _ in range(levels):
        value = {"child": value}
    return value


DEEP = nested(200_000)
DEEP_TEXT = "[" * 200_000 + "]" * 200_000


def assert_too_deep(exc: BaseException, what: str) -> None:
    message = str(exc)
    assert message.startswith(what)
    assert f"nested too deeply: the limit is {MAX_DEPTH} levels" in message
    assert len(message) < 400  # no repr of the value, nor a line per level


@pytest.mark.parametrize(
    "call",
    [
        lambda: codec.snapshot(DEEP, Any, what=WHAT),
        lambda: codec.snapshot(DEEP, list[Any], what=WHAT),
        lambda: codec.to_primitive(DEEP, what=WHAT),
        lambda: codec.encode_args((1, DEEP), {}, what=WHAT),
        lambda: codec.decode(DEEP_TEXT, Any, what=WHAT),
        lambda: codec.structure(chain(200_000), Node, what=WHAT),
    ],
    ids=["snapshot", "snapshot-typed", "to_primitive", "encode_args", "decode", "structure"],
)
def test_codec_refuses_deep_values(call: Callable[[], object]) -> None:
    with pytest.raises(tether.CodecError) as caught:
        call()
    assert_too_deep(caught.value, WHAT)


@pytest.mark.parametrize(
    "call", [lambda: dumps(DEEP), lambda: loads(DEEP_TEXT)], ids=["dumps", "loads"]
)
def test_json_text_refuses_deep_values_as_a_value_error_too(call: Callable[[], object]) -> None:
    with pytest.raises(tether.CodecError) as caught:
        call()
    assert isinstance(caught.value, ValueError)  # what their callers catch
    assert_too_deep(caught.value, "nested too deeply")


def test_the_limit_is_exact_and_deep_values_round_trip() -> None:
    for levels in (500, MAX_DEPTH):
        text, back = codec.snapshot(nested(levels), list[Any], what=WHAT)
        assert text == "[" * levels + "]" * levels
        assert back == nested(levels) == codec.decode(text, list[Any], what=WHAT)
    with pytest.raises(tether.CodecError) as caught:
        codec.snapshot(nested(MAX_DEPTH + 1), list[Any], what=WHAT)
    assert_too_deep(caught.value, WHAT)


async def deep_result() -> list[Any]:
    return DEEP


@tether.workflow(name="tests.test_codec_depth.returns_deep")
async def returns_deep() -> None:
    await tether.step(deep_result)()


@tether.workflow(name="tests.test_codec_depth.takes_list")
async def takes_list(items: list[Any]) -> int:
    return len(items)


async def test_deep_step_result_fails_naming_the_step_and_is_not_journaled() -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(tether.CodecError) as caught:
            await engine.run(returns_deep, run_id="deep")
        info = await engine.get_run("deep")
    assert_too_deep(caught.value, "step deep_result#0 of run 'deep'")
    assert info is not None
    assert info.status is RunStatus.FAILED
    assert not [e for e in info.entries if e.key == "deep_result#0"]


async def test_deep_workflow_argument_fails_naming_the_workflow() -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(tether.CodecError) as caught:
            await engine.run(takes_list, DEEP, run_id="deep-args")
        assert await engine.get_run("deep-args") is None
        # The arguments array is a level: its one item may nest MAX_DEPTH - 1.
        assert await engine.run(takes_list, nested(MAX_DEPTH - 1), run_id="ok") == 1
    assert_too_deep(caught.value, "arguments of workflow tests.test_codec_depth.takes_list")
