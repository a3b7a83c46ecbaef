"""Workflows for tests/test_respond_processes.py, served by a ``tether worker`` process.

Each step returns the pid of the process it ran in, so the journal tells who
executed what.
"""

from __future__ import annotations

import os

import attrs

import tether


@attrs.frozen
class Approval:
    ok: bool
    by: str


@tether.step
async def where(label: str) -> int:
    return os.getpid()


@tether.workflow(name="tests.respond.process")
async def approve_then_cool_off(order: str) -> str:
    await where("before")
    answer = await tether.ask({"order": order}, Approval, key="approve")
    await where("after")
    await tether.sleep(600)  # a cooling-off period: minutes
    await where("late")
    return f"{order}:{answer.ok}:{answer.by}"
