"""The engine's wall clock: what durable timers and schedules measure against.

Layer: the kernel (``_core``).

A durable wait (a timer, a retry's backoff, a schedule's tick) is journaled
as a moment in wall-clock time, since it must mean the same thing to the
process that resumes the run, days later. Executing, the wait is a plain
``trio.sleep`` for the time that remains, so it is exactly as cancellable
as one, and under ``trio.testing.MockClock`` it jumps in virtual time when
the engine's clock is :class:`tether.testing.TrioWallClock`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol, final, runtime_checkable

import trio

from .._errors import UsageError

__all__ = ("Clock", "SystemClock", "TrioWallClock", "check_clock", "sleep_until")


@runtime_checkable
class Clock(Protocol):
    """A wall clock: ``open_engine(store, clock=...)`` takes one."""

    def now(self) -> datetime:
        """The current moment, timezone-aware."""
        ...


@final
class SystemClock:
    """The system's wall clock, in UTC (the default)."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def __repr__(self) -> str:
        return "tether.SystemClock()"


@final
class TrioWallClock:
    """Wall-clock time that advances with trio's clock, from *start*.

    ``now()`` is *start* plus ``trio.current_time()`` seconds, so under
    ``trio.testing.MockClock`` (whose time starts at 0) a workflow that
    sleeps three days jumps three virtual days at once. Give the same
    *start* to the engines of one test (and a later *start* to an engine
    standing for a process that starts later) to tell one story.
    Only meaningful inside ``trio.run``.
    """

    def __init__(self, start: datetime) -> None:
        if not isinstance(start, datetime) or start.utcoffset() is None:
            raise UsageError(f"TrioWallClock needs a timezone-aware datetime, not {start!r}")
        self.start = start

    def now(self) -> datetime:
        return self.start + timedelta(seconds=trio.current_time())

    def __repr__(self) -> str:
        return f"tether.testing.TrioWallClock({self.start.isoformat()!r})"


def check_clock(clock: object) -> Clock:
    """*clock* if it is a :class:`Clock`, else :class:`SystemClock` for ``None``.

    Raises:
        UsageError: it is something else.
    """
    if clock is None:
        return SystemClock()
    if not isinstance(clock, Clock):
        raise UsageError(
            f"clock= takes an object with a now() method (a tether Clock), not {clock!r}"
        )
    return clock


async def sleep_until(clock: Clock, when: datetime) -> None:
    """Sleep until *clock* reads *when* (at once, a checkpoint, if it is past).

    The remaining time is measured once, then slept on trio's clock: a plain
    ``trio.sleep``, cancelled like one.
    """
    remaining = (when - clock.now()).total_seconds()
    await trio.sleep(max(0.0, remaining))
