"""Durable timers: ``tether.sleep`` and ``tether.sleep_until``.

Layer: the API of workflow code (``_api``).

A timer is a call like a step: it takes its key (``path/sleep#n``) and
position when it is called, and the first execution that reaches it
journals one entry of kind ``timer`` whose value is the moment it is due,
read from the engine's clock (``{"due": "2026-12-04T10:00:00+00:00"}``),
*before* it starts to sleep. That entry is all a timer ever journals: when
it has fired is told by the calls after it, and a resumed run that finds
the entry sleeps only until that moment (a timer already due completes at
once, as a checkpoint). A timer inserted, removed or moved before a run's
journaled calls is a divergence, exactly as for a step.

Executing, the wait is a plain ``trio.sleep`` of what remains
(:meth:`RunState.sleep_until <tether._core._run.RunState.sleep_until>`),
cancelled like one. It does not keep the run busy: with ``tether.ask`` pending
too, the run pauses only once no timer is left to wake a task; under a worker
(``open_worker(park_after=...)``), a run whose every task waits and whose next
timer is due more than ``park_after`` seconds from now *parks*: it is stored
``waiting`` with that moment as ``wake_at``, its lease released in the same
write, and any worker claims it once it is due.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from .._codec._json import dumps, loads
from .._core._events import TimerFired, TimerStarted
from .._core._frame import check_key, current_frame
from .._errors import CheckpointCorruptError, CodecError, UsageError
from ..stores._records import Entry, EntryKind

__all__ = ("Waiting", "due_of", "sleep", "sleep_until")


class Waiting(Exception):
    """A worker's execution parked the run until *wake_at* (status ``waiting``).

    *wake_at* ``None``: until a message is sent to it (``tether.receive``).
    The outcome ``engine.execute_claimed`` raises for the worker; ``engine.run``
    never parks a run, so user code never sees it.
    """

    def __init__(self, run_id: str, wake_at: datetime | None) -> None:
        until = (
            "for a message" if wake_at is None else f"for its timers until {wake_at.isoformat()}"
        )
        super().__init__(f"run {run_id!r} is waiting {until}")
        self.run_id = run_id
        self.wake_at = wake_at

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.run_id, self.wake_at))


def _aware(when: object, what: str) -> datetime:
    if not isinstance(when, datetime) or when.utcoffset() is None:
        raise UsageError(
            f"{what} takes a timezone-aware datetime (datetime.now(UTC) + ..., or "
            f"engine.clock.now() + ...), not {when!r:.100}"
        )
    return when.astimezone(UTC)


def due_of(entry: Entry, run_id: str) -> datetime:
    """The due time journaled in a timer *entry* (its value: ``{"due": ISO 8601}``).

    Raises:
        CheckpointCorruptError: the value is not such a record.
    """
    try:
        data = loads(entry.value or "null")
        if isinstance(data, dict) and set(data) == {"due"} and isinstance(data["due"], str):
            due = datetime.fromisoformat(data["due"])
            if due.utcoffset() is not None:
                return due
    except (ValueError, CodecError):
        pass
    raise CheckpointCorruptError(
        f"run {run_id!r}: timer {entry.key} (seq {entry.seq}): the journaled value "
        f"{entry.value!r:.100} is not a due time ({{'due': ISO 8601 with a timezone}})"
    )


async def _timer(api: str, key: str | None, due: Callable[[datetime], datetime]) -> None:
    """The timer called through *api*: journal its due time (``due(now)``), then sleep."""
    if key is not None:
        check_key(key)
    frame = current_frame(api)
    run = frame.run
    key, position = frame.next_call("sleep", key)
    entry = await run.reach("timer", key, position)
    if entry is not None:
        run.check_kind(entry, EntryKind.TIMER, "timer", key, position)
        when = due_of(entry, run.run_id)
    else:
        now = run.clock.now()
        try:
            when = due(now).astimezone(UTC)
        except OverflowError:
            raise UsageError(f"{api}: the timer {key} would be due past the year 9999") from None
        # Durable before it sleeps: a crash from here on finds the due time.
        value = dumps({"due": when.isoformat()})
        await run.save([run.call_entry(EntryKind.TIMER, key, position, value, at=now)])
        if run.observer is not None:
            run.observer(TimerStarted(run_id=run.run_id, key=key, due=when))
    await run.sleep_until(when)
    if run.observer is not None:
        run.observer(TimerFired(run_id=run.run_id, key=key, due=when))


async def sleep(seconds: float, *, key: str | None = None) -> None:
    """Sleep *seconds* durably: a resumed run sleeps only what remains.

    Use inside a workflow or a ``parallel()`` branch (inside a step it works
    too, keyed under the step like a nested step: a retry of the step finds
    it journaled and does not sleep again). The first time the call is
    reached, its due time (``engine.clock.now()`` plus *seconds*) is
    journaled, then the task sleeps until then. A run resumed after a crash
    or a restart reads that due time back and sleeps only until it, at once
    if it has passed. The timer's key is ``sleep#n`` among its parent's
    calls, like a step's (or *key*, a string without ``/``).

    A checkpoint. In one process it is a plain ``trio.sleep`` of what
    remains, cancelled like one (the journaled due time stays: a resume
    sleeps until then). Under a worker whose ``park_after`` is exceeded, the
    run parks instead (see :func:`tether.open_worker`): this task is
    cancelled, framework-owned, and the run goes on from its journal when
    it is due.

    Raises:
        UsageError: *seconds* is not a finite, non-negative number.
        NotInRunError: outside a run, or in a task tether does not track.
        NonDeterminismError: the journal holds another call at this place.
        StoreError: the due time could not be journaled (nothing slept).
    """
    if (
        not isinstance(seconds, int | float)
        or isinstance(seconds, bool)
        or not math.isfinite(seconds)
        or seconds < 0
    ):
        raise UsageError(
            f"tether.sleep() takes a finite, non-negative number of seconds, not {seconds!r}"
        )
    await _timer("tether.sleep()", key, lambda now: now + timedelta(seconds=seconds))


async def sleep_until(when: datetime, *, key: str | None = None) -> None:
    """Sleep durably until the engine's clock reads *when* (timezone-aware).

    Like :func:`sleep`, with the moment given: it is journaled (in UTC) the
    first time the call is reached, and what a later execution's code passes
    here no longer matters for this call. A moment already past completes
    at once, as a checkpoint.

    Raises:
        UsageError: *when* is not a timezone-aware datetime.
        NotInRunError, NonDeterminismError, StoreError: as :func:`sleep`.
    """
    moment = _aware(when, "tether.sleep_until()")
    await _timer("tether.sleep_until()", key, lambda now: moment)
