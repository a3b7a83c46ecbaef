"""Live runs: the block of :meth:`Engine.open_run <tether.Engine.open_run>` and its events.

Layer: the engine (``_engine``).

A live run executes in a task of a nursery its block owns, with an observer
that appends the run's events to an unbounded buffer, so the engine never
waits for the code that reads them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Generic, TypeVar, final

import trio

from .._core._events import RunEvent, RunFinished, RunPaused, RunStarted, current_observer
from .._core._nurseries import exit_nursery
from .._errors import Paused, UsageError

R = TypeVar("R")

__all__ = ("LiveRun", "OpenRun", "Starter", "WorkflowOf")


#: Starts (or resumes) the run of a live block and returns its result.
Starter = Callable[[], Awaitable[R]]

#: Finds the name of the workflow a live block runs (a resume reads it from the store).
WorkflowOf = Callable[[], Awaitable[str | None]]


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

    async def _drive(self, workflow_of: WorkflowOf, start: Starter[R]) -> None:
        # A task of its own: the observer set here is taken by this run only.
        current_observer.set(self._emit)
        with self._send:
            try:
                workflow = await workflow_of()
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

    def __init__(self, run_id: str, workflow_of: WorkflowOf, start: Starter[R]) -> None:
        self._workflow_of = workflow_of
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
            self._workflow_of,
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
