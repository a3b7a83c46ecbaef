"""Streaming steps: ``open_stream`` and the producer task behind it.

Layer: the API of workflow code (``_api``).

A stream follows ``trio.as_safe_channel``: the generator runs in a producer
task, in a nursery the ``async with`` block owns, and items are handed over
one at a time (the producer computes an item only when the consumer asks for
one). Leaving the block, however it is left, cancels the producer and waits
for its cleanup (the generator's ``finally``) before the block exits; the
generator is never left for the garbage collector to close.

Closing a stream does, in order and exactly once:

1. cancel the producer and wait until its generator is closed;
2. journal the stream as ``interrupted`` (or ``failed``) unless it was
   exhausted, which the producer journaled as ``completed`` before the
   consumer saw the end (durable before visible);
3. call ``on_step_end`` and emit ``StepFinished``.

The first error of these wins and is raised by every close; it never replaces
an error that was already stopping the stream (that one propagates, the
superseded one is logged).

The producer task and its state are the stream's base,
:class:`~tether._api._stream_producer.Producer`; this module holds the
consumer's side: the block, the items and the close. ``cleanup_scope`` is in
:mod:`tether._core._cleanup_scope`.
"""

from __future__ import annotations

import collections
import logging
from types import GenericAlias, TracebackType
from typing import Any, TypeVar, final

import attrs
import trio

from .._codec._json import digest
from .._codec._values import codec
from .._core._error_info import note_key
from .._core._events import StepFinished, StepStarted
from .._core._frame import STEP_ALONE, check_key, current_frame
from .._core._hooks import HookEvent
from .._core._nurseries import exit_nursery
from .._core._replay import undecodable
from .._errors import CodecError, StreamClosed, UsageError
from ..stores._records import Entry, EntryKind, EntryStatus, utcnow
from ._stream_producer import END, Failed, Item, Producer
from ._workflow import StreamStep

__all__ = ("Stream", "open_stream")

log = logging.getLogger("tether")

T = TypeVar("T")


@final
class Stream(Producer[T]):
    """The items of a streaming step, made by :func:`open_stream`.

    Use it as ``async with tether.open_stream(s, *args) as items:`` and
    iterate ``items`` with ``async for`` inside the block. Only one task may
    wait for an item at a time.
    """

    #: the journal key, fixed when :func:`open_stream` was called (with its position)
    key: str

    def __init__(self, step: StreamStep[..., T], args: tuple[Any, ...], key: str | None) -> None:
        if not isinstance(step, StreamStep):
            raise UsageError(f"open_stream() takes a @tether.stream_step, not {step!r}")
        if key is not None:
            check_key(key)
        frame = current_frame(f"stream step {step.name!r}", alone=STEP_ALONE)
        # the producer's state (see Producer), with the key fixed now
        super().__init__(frame, step, args, *frame.next_call(step.name, key or step.key))
        self._entered = False
        # replay
        self._replay: collections.deque[T] | None = None
        # live: the producer's nursery
        self._manager: Any = None
        # the consumer's side of the hand-over
        self._asked = False
        self._waiting = False  # a task is waiting in __anext__
        self._ended = False  # the consumer saw the end (or the producer's error)
        # closing
        self._closing = False
        self._closed = trio.Event()
        self._close_error: BaseException | None = None

    def __repr__(self) -> str:
        return f"<tether.Stream {self.key}>"

    # -- the block ---------------------------------------------------------------

    async def __aenter__(self) -> Stream[T]:
        if self._entered:
            raise UsageError(f"the open_stream() block of {self.key} can be entered only once")
        if self._frame.task is not trio.lowlevel.current_task():
            raise UsageError(
                f"enter the open_stream() block of {self.key} in the task that called open_stream()"
            )
        self._entered = True
        run = self._run
        # A cancel point, replayed or not, like a step call.
        entry = await run.reach("stream", self.key, self._position)
        self._digest = digest(codec.encode_args(self._args, {}, what=self._what))
        if entry is not None and entry.status is EntryStatus.COMPLETED:
            self._replay = collections.deque(self._decode(entry))
            return self
        await self._start()
        return self

    def _decode(self, entry: Entry) -> list[T]:
        run = self._run
        run.check_kind(entry, EntryKind.STREAM, "stream", self.key, self._position)
        if entry.args_digest != self._digest:
            raise run.diverged(
                "stream",
                self.key,
                self._position,
                f"it was journaled (seq {entry.seq}) with other arguments than it is opened "
                "with now",
            )
        tp = GenericAlias(list, (self._step.item_type,))
        try:
            items: list[T] = codec.decode(entry.value or "[]", tp, what=self._what)
        except CodecError as exc:
            detail = undecodable(entry, tp, "items", "a list of the stream's item type", self._what)
            raise run.diverged("stream", self.key, self._position, detail) from exc
        return items

    async def _start(self) -> None:
        run = self._run
        hooks = run.hooks
        if hooks.any_step:
            self._event = HookEvent(
                run_id=run.run_id,
                workflow=run.workflow,
                name=self._step.name,
                key=self.key,
                token=run.token,
            )
        run.emit(StepStarted(run_id=run.run_id, key=self.key, name=self._step.name, stream=True))
        if self._event is not None:
            try:
                await hooks.call("on_step_start", self._event)
            except BaseException as exc:
                # Every start is matched by one end, even when the start hook failed.
                note_key(exc, self.key)
                self._producer_done.set()
                self._closing = True
                try:
                    await self._finish(exc)
                finally:
                    self._closed.set()
                raise
        self._started_at = utcnow()
        self._manager = trio.open_nursery()
        nursery: trio.Nursery = await self._manager.__aenter__()
        nursery.start_soon(self._produce, name=f"tether stream {self.key}")
        run.task_started()  # the producer is a task of the run: see RunState.waiting

    async def __aexit__(
        self, etype: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._manager is None:  # replayed: there is no producer
            self._ended = True
            return
        try:
            await self._close(exc)
        finally:
            # The producer has finished (the close waited for it), so this
            # only closes the nursery; *exc* is not passed in, or it would
            # come out wrapped in a group.
            await exit_nursery(self._manager)

    # -- items -------------------------------------------------------------------

    def __aiter__(self) -> Stream[T]:
        return self

    async def __anext__(self) -> T:
        """The next item; a checkpoint.

        Cancellation while waiting loses nothing: the item being produced is
        kept for the next call.

        Raises:
            StopAsyncIteration: the stream is exhausted (and journaled).
            Exception: what the generator raised (once; then the stream is over).
            trio.BusyResourceError: another task is already waiting for an item.
            trio.ClosedResourceError: the stream was closed.
        """
        if self._replay is not None:
            await trio.lowlevel.checkpoint()
            if not self._replay:
                self._ended = True
                raise StopAsyncIteration
            return self._replay.popleft()
        if not self._entered or self._manager is None:
            raise UsageError(f"iterate {self!r} inside its `async with` block")
        if self._ended:
            await trio.lowlevel.checkpoint()
            raise StopAsyncIteration
        if self._closing:
            await trio.lowlevel.checkpoint()
            raise trio.ClosedResourceError(f"{self._what} is closed")
        if self._waiting:
            raise trio.BusyResourceError(f"another task is already waiting for an item of {self}")
        if not self._asked:
            self._asked = True
            self._producer_wait.end()
            self._wanted.set()
        self._waiting = True
        try:
            with self._consumer_wait:  # for the producer: it may be waiting in ask()
                await self._ready.wait()
        finally:
            self._waiting = False
        reply, self._reply = self._reply, None
        self._ready = trio.Event()
        self._asked = False
        if reply is END:
            self._ended = True
            raise StopAsyncIteration
        if isinstance(reply, Failed):
            self._ended = True
            raise reply.error
        assert isinstance(reply, Item)
        value: T = reply.value
        return value

    # -- closing -----------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the stream now: stop the producer and wait for its cleanup.

        Leaving the ``async with`` block does this too. Idempotent: a
        repeated close does nothing more and raises the same error as the
        first, if any. This is a checkpoint when it stops the producer.

        Raises:
            RuntimeError: another task is waiting for an item right now;
                cancel that task instead (the stream is left as it was).
            Exception: the first error while stopping: the generator's
                cleanup raised, storing the ``interrupted`` record failed, or
                an ``on_step_end`` hook raised.
        """
        if self._waiting:
            raise RuntimeError(
                f"{self._what} cannot be closed while another task waits for its next item; "
                "cancel the consuming task instead (leaving its `async with` block closes "
                "the stream)"
            )
        if self._manager is None:  # replayed, or never entered
            self._ended = True
            return
        await self._close(None)

    async def _close(self, propagating: BaseException | None) -> None:
        if self._closing:
            # Someone else closes, or closed: wait for the same outcome.
            if not self._closed.is_set():
                with trio.CancelScope(shield=True):
                    await self._closed.wait()
        else:
            self._closing = True
            try:
                self._scope.cancel()
                if not self._producer_done.is_set():
                    # Bounded by the producer: its own awaits are cancelled,
                    # only a cleanup shield of its own (cleanup_scope) can wait.
                    with trio.CancelScope(shield=True):
                        await self._producer_done.wait()
                await self._finish(propagating)
            finally:
                self._closed.set()
            return
        if propagating is None and self._close_error is not None:
            raise self._close_error

    async def _finish(self, propagating: BaseException | None) -> None:
        """Journal an incomplete stream, call ``on_step_end``; raise the first error."""
        run = self._run
        errors: list[BaseException] = []
        if self._cleanup_error is not None:
            errors.append(self._cleanup_error)
        if not self._exhausted and self._manager is not None:
            failed = self._failure is not None
            reason = self._failure or propagating or self._cleanup_error or _closed(self)
            try:
                status = EntryStatus.FAILED if failed else EntryStatus.INTERRUPTED
                await run.save((self._entry(status, reason),))
            except BaseException as exc:
                errors.append(exc)
        reason = self._reason(propagating, errors)
        if self._event is not None and run.hooks.has("on_step_end"):
            try:
                await run.saver.shielded(
                    f"hook on_step_end for {self.key} in run {run.run_id!r}",
                    run.hooks.call,
                    "on_step_end",
                    attrs.evolve(self._event, exception=reason),
                )
            except BaseException as exc:
                errors.append(exc)
        run.emit(
            StepFinished(
                run_id=run.run_id, key=self.key, name=self._step.name, stream=True, exception=reason
            )
        )
        if propagating is not None:
            for error in errors:
                self._log_superseded(error, propagating)
            return
        if not errors:
            return
        first = errors[0]
        for error in errors[1:]:
            self._log_superseded(error, first)
        if not isinstance(first, trio.Cancelled):
            # A Cancelled belongs to this moment; a later close must not raise it again.
            self._close_error = first
        try:
            raise first
        finally:
            del first, errors

    def _reason(self, propagating: BaseException | None, errors: list[BaseException]) -> Any:
        """What ``on_step_end`` is told ended the stream."""
        if self._exhausted and not errors:
            return None
        if propagating is not None:
            return propagating
        if self._failure is not None:
            return self._failure
        if errors:
            return errors[0]
        return _closed(self)

    def _log_superseded(self, exc: BaseException, winner: BaseException) -> None:
        if exc is winner or isinstance(exc, trio.Cancelled):
            return
        log.error(
            "tether: error while closing %s superseded by %r",
            self._what,
            winner,
            exc_info=exc,
        )


def _closed(stream: Stream[Any]) -> StreamClosed:
    return StreamClosed(f"the consumer of {stream._what} left before it was exhausted")


def open_stream(step: StreamStep[..., T], *args: Any, key: str | None = None) -> Stream[T]:
    """Open a streaming step: ``async with tether.open_stream(s, *args) as items:``.

    The key is fixed now, in program order, like a step call's. Entering the
    block is a checkpoint; it starts the generator in a producer task owned
    by the block (or, when the journal holds the exhausted stream, replays
    its items without running the generator). ``async for item in items``
    asks for one item at a time.

    Leaving the block, by ``break``, an exception or cancellation, cancels
    the producer and waits for the generator's cleanup before the block
    exits; an ``on_step_end`` hook is then called once (see
    :class:`tether.StreamClosed`).

    Args:
        step: a :func:`tether.stream_step`.
        *args: its positional arguments (digested: replaying the stream with
            other arguments raises :class:`NonDeterminismError`).
        key: an explicit key instead of ``name#n``, unique within the parent.

    Raises:
        NotInRunError: not called from a task tether tracks.
        UsageError: *step* is not a stream step, or the key is invalid.
    """
    return Stream(step, args, key)
