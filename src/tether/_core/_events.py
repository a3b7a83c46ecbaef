"""Live events of a run: what :meth:`Engine.open_run <tether.Engine.open_run>` reports.

Layer: the kernel (``_core``).

The engine tells a run's *observer* (a plain callable, set on the run's
``RunState``) what happens, synchronously, from the places where hooks are
called. The observer of a live run appends to an unbounded buffer, so the
engine never waits for the code that reads the events.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from datetime import datetime
from typing import Any, final

import attrs

from .._errors import Request
from ..stores._records import Entry

__all__ = (
    "CheckpointStored",
    "MessageReceived",
    "Observer",
    "RunEvent",
    "RunFinished",
    "RunPaused",
    "RunStarted",
    "StepFinished",
    "StepRetrying",
    "StepStarted",
    "StreamItem",
    "TimerFired",
    "TimerStarted",
    "current_observer",
    "take_observer",
)


@attrs.frozen(kw_only=True)
class RunEvent:
    """Base class of the events :meth:`LiveRun.events <tether.LiveRun.events>` yields."""

    run_id: str


@final
@attrs.frozen(kw_only=True)
class RunStarted(RunEvent):
    """The run is starting (or resuming); the first event of every live run."""

    workflow: str  #: the workflow's registered name


@final
@attrs.frozen(kw_only=True)
class StepStarted(RunEvent):
    """A step (or streaming step) starts executing. Replayed steps report nothing."""

    key: str
    name: str
    stream: bool = False  #: ``True`` for a streaming step


@final
@attrs.frozen(kw_only=True)
class StepFinished(RunEvent):
    """A step (or streaming step) ended; exactly one per :class:`StepStarted`.

    ``exception`` is ``None`` on success (a stream: exhausted), else what ended
    it: the error, ``trio.Cancelled``, or :class:`tether.StreamClosed` for a
    stream its consumer left early.
    """

    key: str
    name: str
    stream: bool = False
    exception: BaseException | None = None


@final
@attrs.frozen(kw_only=True)
class StepRetrying(RunEvent):
    """An attempt of a step (with ``retries`` or a ``retry`` policy) failed, and another
    follows: at ``next_at`` after a policy's backoff, at once with ``retries``."""

    key: str
    name: str
    attempt: int  #: the attempt that failed (1 for the first)
    error: Exception  #: what it raised
    #: when the next attempt is due, on the engine's clock (``None``: at once)
    next_at: datetime | None = None


@final
@attrs.frozen(kw_only=True)
class CheckpointStored(RunEvent):
    """A completed step's (or exhausted stream's) record was stored."""

    key: str
    name: str
    entry: Entry  #: the stored journal entry, with its ``seq``


@final
@attrs.frozen(kw_only=True)
class StreamItem(RunEvent):
    """A streaming step produced an item (already encoded for the journal)."""

    key: str
    name: str
    index: int  #: 0 for the first item of the stream
    item: Any  #: the item as the consumer receives it (decoded from its snapshot)


@final
@attrs.frozen(kw_only=True)
class TimerStarted(RunEvent):
    """A durable timer (``tether.sleep``) was journaled with its due time; it now waits.

    Not reported for a timer replayed from the journal.
    """

    key: str
    due: datetime  #: when it fires, on the engine's clock (UTC)


@final
@attrs.frozen(kw_only=True)
class TimerFired(RunEvent):
    """A durable timer is due: the sleeping code goes on (also for a replayed timer)."""

    key: str
    due: datetime  #: when it was due, on the engine's clock (UTC)


@final
@attrs.frozen(kw_only=True)
class MessageReceived(RunEvent):
    """A ``tether.receive()`` took a message from the run's mailbox and journaled it.

    Not reported for a receive replayed from the journal.
    """

    key: str  #: the receive's key (``receive.approve#0``)
    name: str  #: the message's name
    seq: int  #: its seq in the run's mailbox (1, 2, 3, ... in send order)


@final
@attrs.frozen(kw_only=True)
class RunPaused(RunEvent):
    """The run settled waiting for responses to its requests (``tether.ask``)."""

    requests: tuple[Request, ...] = ()  #: what it waits for, as in ``tether.Paused``


@final
@attrs.frozen(kw_only=True)
class RunFinished(RunEvent):
    """The run ended: the last event of a live run that was not cancelled.

    ``error`` is what the run raised (the workflow's error, a ``StoreError``, ...)
    or ``None``, in which case ``result`` is the workflow's result.
    """

    result: Any = None
    error: BaseException | None = None


#: Receives a run's events; must not block or raise.
Observer = Callable[[RunEvent], None]

#: The observer the next run started in this task reports to (see :func:`take_observer`).
current_observer: ContextVar[Observer | None] = ContextVar("tether_observer", default=None)


def take_observer() -> Observer | None:
    """The observer set for the run starting in this task, cleared so it is used once.

    Cleared so that tasks the run starts (which copy this task's context) and
    any later run started in this task do not report to it.
    """
    observer = current_observer.get()
    if observer is not None:
        current_observer.set(None)
    return observer
