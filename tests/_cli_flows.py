"""Workflows for tests/test_cli.py's ``tether run`` and ``tether resume`` tests."""

from __future__ import annotations

import tether


@tether.step
async def add(a: int, b: int) -> int:
    return a + b


@tether.workflow(name="tests.cli.sum_then_confirm")
async def sum_then_confirm(a: int, b: int, label: str) -> str:
    total = await add(a, b)
    ok = await tether.ask({"total": total}, bool)
    return f"{label}: {total} {'confirmed' if ok else 'refused'}"


@tether.workflow(name="tests.cli.boom")
async def boom() -> None:
    raise ValueError("boom")


not_a_workflow = 42
