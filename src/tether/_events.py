"""Live events of a run: what :meth:`Engine.open_run <tether.Engine.open_run>` reports.

The engine tells a run's *observer* (a plain callable, set on the run's
``RunState``) what happens, synchronously, from the places where hooks are
called. The observer of a live run appends to an unbounded buffer, so the
engine never waits for the code that reads the events.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, final

import attrs
import trio

from ._errors import UsageError
from ._nurseries import exit_nursery
from ._requests import Paused, Request
from .stores._protocol import Entry

if TYPE_CHECKING:
    from ._engine import Engine

R = TypeVar("R")

__all__ = (
    "CheckpointStored",
    "LiveRun",
    "MessageReceived",
    "Observer",
    "RunEvent",
    "RunFinished",
    "RunPaused",
    "RunStarted",
    "StepFinished",
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
    """The run settled waiting for answers to its requests (``tether.ask``)."""

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


#: Starts (or resumes) the run of a live block and returns its result.
Starter = Callable[[], Awaitable[R]]

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


@final
class LiveRun(Generic[R]):
    """A run executing inside an ``async with engine.open_run(...) as run:`` block.

    The run executes in a task of a nursery the block owns. Leaving the block
    while the run is still executing cancels it as a *caller* cancellation
    (prompt even when the store hangs; nothing more is stored and the run
    stays ``running``, resumable). To wait for the run, await
    :meth:`result` or iterate :meth:`events` to the end inside the block.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id: str = run_id  #: the run's id (generated when not given)
        # Unbounded: the engine reports synchronously and never waits for the
        # reader; a run whose events nobody reads keeps them until the block exits.
        self._send, self._receive = trio.open_memory_channel[RunEvent](math.inf)
        self._events_taken = False
        self._done = trio.Event()
        self._finished = False
        self._value: Any = None
        self._error: Exception | None = None

    def __repr__(self) -> str:
        state = "finished" if self._finished else "executing"
        return f"<tether.LiveRun {self.run_id} {state}>"

    def events(self) -> trio.MemoryReceiveChannel[RunEvent]:
        """The run's events, in order: ``async for event in run.events():``.

        Starts with :class:`RunStarted`; after :class:`RunFinished` or
        :class:`RunPaused` (or when the run is cancelled) the iteration ends.
        Each event is delivered once; only one loop may read them.

        Raises:
            UsageError: called a second time.
        """
        if self._events_taken:
            raise UsageError(f"the events of run {self.run_id!r} can be read by one loop only")
        self._events_taken = True
        return self._receive

    async def result(self) -> R:
        """Wait for the run to end; return its result or raise its error.

        A checkpoint. Cancelling it does not cancel the run (leaving the block
        does).

        Raises:
            Exception: what :meth:`Engine.run <tether.Engine.run>` raised for the run.
            UsageError: the run did not finish (its block was left first).
        """
        await self._done.wait()
        if not self._finished:
            raise UsageError(
                f"run {self.run_id!r} did not finish: its open_run() block was left (or "
                "cancelled) while it executed; resume it with engine.resume()"
            )
        if self._error is not None:
            raise self._error
        value: R = self._value
        return value

    def _emit(self, event: RunEvent) -> None:
        # A reader that closed its channel does not concern the run.
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            self._send.send_nowait(event)

    async def _drive(self, engine: Engine, workflow: str | None, start: Starter[R]) -> None:
        # A task of its own: the observer set here is taken by this run only.
        current_observer.set(self._emit)
        with self._send:
            try:
                if workflow is None:  # a resume: the run names its workflow
                    info = await engine.get_run(self.run_id)
                    workflow = info.workflow if info is not None else None
                if workflow is not None:
                    self._emit(RunStarted(run_id=self.run_id, workflow=workflow))
                try:
                    value = await start()
                except Paused as exc:
                    self._error = exc
                    self._emit(RunPaused(run_id=self.run_id, requests=exc.requests))
                except Exception as exc:
                    self._error = exc
                    self._emit(RunFinished(run_id=self.run_id, error=exc))
                else:
                    self._value = value
                    self._emit(RunFinished(run_id=self.run_id, result=value))
                self._finished = True
            finally:
                self._done.set()


@final
class OpenRun(Generic[R]):
    """The ``async with`` block of :meth:`Engine.open_run <tether.Engine.open_run>`."""

    def __init__(
        self, engine: Engine, run_id: str, workflow: str | None, start: Starter[R]
    ) -> None:
        self._engine = engine
        self._workflow = workflow
        self._start = start
        self._run: LiveRun[R] = LiveRun(run_id)
        self._manager: Any = None
        self._nursery: trio.Nursery | None = None

    async def __aenter__(self) -> LiveRun[R]:
        if self._manager is not None:
            raise UsageError("an open_run() block can be entered only once")
        self._manager = trio.open_nursery()
        self._nursery = await self._manager.__aenter__()
        self._nursery.start_soon(
            self._run._drive,
            self._engine,
            self._workflow,
            self._start,
            name=f"tether live run {self._run.run_id}",
        )
        return self._run

    async def __aexit__(
        self, etype: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._nursery is not None
        # Leaving early is the caller cancelling the run: the run's watcher
        # sees it, cuts its saves short and leaves it `running`.
        self._nursery.cancel_scope.cancel()
        await exit_nursery(self._manager)
