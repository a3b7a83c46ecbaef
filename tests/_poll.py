"""Waiting, in real time, for what other processes and threads do.

:data:`PATIENCE` is how long any one thing a test waits for may take before the
test fails (generous: the machine may be loaded). :func:`poll` asks a condition
again and again until it holds; :func:`apoll` is the same inside Trio, sleeping
in a thread so that an autojumping ``MockClock`` does not race ahead meanwhile.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

import trio

#: How long any one thing a test waits for may take before the test fails.
PATIENCE: Final = 60.0


class _Tailed(Protocol):
    def tail(self) -> str: ...


def _timed_out(what: str, processes: tuple[_Tailed, ...]) -> AssertionError:
    tails = "".join(f"\n{p.tail()}" for p in processes)
    return AssertionError(f"timed out after {PATIENCE} s waiting for {what}{tails}")


def poll(
    condition: Callable[[], bool], what: str, *processes: _Tailed, interval: float = 0.05
) -> None:
    """Ask *condition()* until it is true; fail after :data:`PATIENCE` seconds, naming
    *what* and showing the tail of each of *processes*' output."""
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            raise _timed_out(what, processes)
        time.sleep(interval)


async def apoll(
    condition: Callable[[], bool | Awaitable[bool]],
    what: str,
    *processes: _Tailed,
    interval: float = 0.02,
) -> None:
    """:func:`poll` inside Trio: *condition* may be async; the real-time sleeps between
    tries run in a thread, so other tasks go on and a mock clock stays put."""
    deadline = time.monotonic() + PATIENCE
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return
        if time.monotonic() > deadline:
            raise _timed_out(what, processes)
        await trio.to_thread.run_sync(time.sleep, interval)
