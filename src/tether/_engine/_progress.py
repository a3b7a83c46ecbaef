"""A small progress renderer for live runs: one line per event, as ``tether run`` shows it.

Layer: the engine (``_engine``).

Each line is safe on a terminal: the run id, keys, values and errors in it
have their control characters escaped (:func:`~tether._terminal.escape_controls`).
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

import trio

from .._core._events import (
    CheckpointStored,
    MessageReceived,
    RunEvent,
    RunFinished,
    RunPaused,
    RunStarted,
    StepFinished,
    StepRetrying,
    StepStarted,
    StreamItem,
    TimerFired,
    TimerStarted,
)
from .._errors import LeaseLostError, RunCancelledError, RunConflictError
from .._terminal import escape_controls
from ._live import LiveRun

__all__ = ("describe_event", "show_progress")

_MAX = 60  # characters of a value shown


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _MAX else text[: _MAX - 3] + "..."


def _error(exc: BaseException) -> str:
    if isinstance(exc, trio.Cancelled):
        return "cancelled"
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def describe_event(event: RunEvent) -> str:
    """One line (without newline) describing *event*, as :func:`show_progress` prints it;
    its control characters (a newline too) escaped, so it is one line, safe on a terminal."""
    return escape_controls(_line(event))


def _line(event: RunEvent) -> str:
    match event:
        case RunStarted():
            return f"run {event.run_id}: started ({event.workflow})"
        case StepStarted():
            return f"  {'stream' if event.stream else 'step'} {event.key}: started"
        case StreamItem():
            return f"  stream {event.key}: item {event.index}: {_short(event.item)}"
        case CheckpointStored():
            return f"  {event.key}: stored (seq {event.entry.seq})"
        case StepRetrying():
            when = "at once" if event.next_at is None else f"at {event.next_at.isoformat()}"
            return (
                f"  step {event.key}: attempt {event.attempt} failed: {_error(event.error)}; "
                f"attempt {event.attempt + 1} {when}"
            )
        case StepFinished():
            what = "stream" if event.stream else "step"
            if event.exception is None:
                return f"  {what} {event.key}: finished"
            return f"  {what} {event.key}: ended by {_error(event.exception)}"
        case TimerStarted():
            return f"  timer {event.key}: sleeping until {event.due.isoformat()}"
        case TimerFired():
            return f"  timer {event.key}: due"
        case MessageReceived():
            return f"  receive {event.key}: message {event.name} (seq {event.seq})"
        case RunPaused():
            keys = ", ".join(r.key for r in event.requests)
            return f"run {event.run_id}: paused, waiting for responses to {keys}"
        case RunFinished():
            error = event.error
            if isinstance(error, RunCancelledError):
                return f"run {event.run_id}: cancelled: {error}"
            # Not failures of the run: this execution was refused, or stopped.
            if isinstance(error, RunConflictError):
                return f"run {event.run_id}: not executed here: {_error(error)}"
            if isinstance(error, LeaseLostError):
                return f"run {event.run_id}: stopped here: {_error(error)}"
            if error is not None:
                return f"run {event.run_id}: failed: {_error(error)}"
            return f"run {event.run_id}: completed: {_short(event.result)}"
    return f"run {event.run_id}: {event!r}"


async def show_progress(run: LiveRun[Any], out: TextIO | None = None) -> None:
    """Print one line per event of *run* to *out* (default ``sys.stdout``) until it ends.

    ``async with engine.open_run(wf, ...) as run: await show_progress(run)``.
    A checkpoint; returns when the run has finished (or was cancelled).
    Reads the run's events, so it cannot be combined with another reader.
    """
    stream = sys.stdout if out is None else out
    async for event in run.events():
        print(describe_event(event), file=stream, flush=True)
