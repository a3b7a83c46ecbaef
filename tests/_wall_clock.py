"""The engine clock a test module's workflows read, fresh for each test.

A module's steps are defined at its top level, so they read the clock of the
test that runs them through a module-level :class:`ModuleClock` (``clock()``),
which the module's autouse fixture makes fresh with :func:`fresh_test`. (Such a
module also uses the plugin's ``tether_registry``, for the workflows its tests define.)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from tether.testing import TrioWallClock

#: what the clock reads when a test starts (at trio time 0)
START = datetime(2030, 1, 1, tzinfo=UTC)


class ModuleClock:
    """``clock()``: the current test's :class:`~tether.testing.TrioWallClock`, from START."""

    def __init__(self) -> None:
        self._now = TrioWallClock(START)

    def __call__(self) -> TrioWallClock:
        return self._now

    def reset(self) -> None:
        """A new clock (reading START at trio time 0) for the next ``trio.run``."""
        self._now = TrioWallClock(START)


@contextmanager
def fresh_test(clock: ModuleClock, *logs: list[Any]) -> Iterator[None]:
    """A test's block: *logs* emptied and *clock* reset on entry."""
    for log in logs:
        log.clear()
    clock.reset()
    yield
