"""Streaming steps: ``open_stream`` and the producer task behind it.

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
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
from collections.abc import Iterator
from types import GenericAlias, TracebackType
from typing import Any, Generic, TypeVar, final

import attrs
import trio

from ._codec import codec
from ._codec_json import digest
from ._error_info import error_info, note_key
from ._errors import (
    CodecError,
    StreamClosed,
    UsageError,
)
from ._events import CheckpointStored, StepFinished, StepStarted, StreamItem
from ._frame import Frame, check_key, current_frame, frame_var
from ._hooks import HookEvent
from ._nurseries import exit_nursery
from ._replay import undecodable
from ._run import RunState
from ._workflow import StreamStep
from .stores._protocol import Entry, EntryKind, EntryStatus, utcnow

__all__ = ("Stream", "cleanup_scope", "open_stream")

log = logging.getLogger("tether")

T = TypeVar("T")


@attrs.frozen
class _Item:
    value: Any


@attrs.frozen
class _Failed:
    error: Exception


_END: Any = object()


@final
class Stream(Generic[T]):
    """The items of a streaming step, made by :func:`open_stream`.

    Use it as ``async with tether.open_stream(s, *args) as items:`` and
    iterate ``items`` with ``async for`` inside the block. Only one task may
    wait for an item at a time.
    """

    def __init__(self, step: StreamStep[..., T], args: tuple[Any, ...], key: str | None) -> None:
        if not isinstance(step, StreamStep):
            raise UsageError(f"open_stream() takes a @tether.stream_step, not {step!r}")
        if key is not None:
            check_key(key)
        frame = current_frame(f"stream step {step.name!r}")
        self._frame = frame
        self._run: RunState = frame.run
        self._step = step
        self._args = args
        #: the journal key, fixed when :func:`open_stream` was called (with its position)
        self.key: str
        self.key, self._position = frame.next_call(step.name, key or step.key)
        self._what = f"stream {self.key} of run {self._run.run_id!r}"
        self._entered = False
        # replay
        self._replay: collections.deque[T] | None = None
        # live: the producer
        self._manager: Any = None
        self._scope = trio.CancelScope()  # the producer's; cancelled to stop it
        self._producer_done = trio.Event()
        self._event: HookEvent | None = None
        self._digest = ""
        self._started_at = utcnow()
        self._texts: list[str] = []  # the items produced so far, encoded
        # the hand-over: the consumer asks, the producer replies
        self._wanted = trio.Event()
        self._asked = False
        # waits that end when the other side sets the event (see RunState.wait)
        self._producer_wait = self._run.wait()
        self._consumer_wait = self._run.wait()
        self._ready = trio.Event()
        self._reply: Any = None
        self._waiting = False  # a task is waiting in __anext__
        self._ended = False  # the consumer saw the end (or the producer's error)
        # how it ended
        self._exhausted = False  # journaled as completed
        self._failure: Exception | None = None  # the producer's error
        self._cleanup_error: Exception | None = None
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
        if reply is _END:
            self._ended = True
            raise StopAsyncIteration
        if isinstance(reply, _Failed):
            self._ended = True
            raise reply.error
        assert isinstance(reply, _Item)
        value: T = reply.value
        return value

    def _hand_over(self, reply: Any) -> None:
        self._reply = reply
        self._consumer_wait.end()
        self._ready.set()

    async def _produce(self) -> None:
        run = self._run
        step = self._step
        token = frame_var.set(Frame(run, self.key, trio.lowlevel.current_task()))
        try:
            with self._scope:
                try:
                    agen: Any = step.fn(*self._args)
                except Exception as exc:  # wrong arguments, say
                    await self._wait_wanted()
                    self._fail(exc)
                    return
                try:
                    await self._produce_items(agen)
                finally:
                    # The generator's cleanup runs here, in this task, under
                    # this scope's cancellation when the stream was closed.
                    try:
                        await agen.aclose()
                    except Exception as exc:
                        self._note_cleanup_error(exc)
                    except BaseExceptionGroup as group:
                        # A generator that yields inside a nursery of its own
                        # raises the GeneratorExit of aclose() in a group (as
                        # trio.as_safe_channel notes): that part is no error.
                        # Errors are kept as the cleanup error; a Cancelled
                        # in it goes on (to this scope, or further out).
                        _, rest = group.split(GeneratorExit)
                        cancelled, rest = rest.split(trio.Cancelled) if rest else (None, None)
                        if isinstance(rest, Exception):
                            self._note_cleanup_error(rest)
                        elif rest is not None:
                            raise rest from None
                        if cancelled is not None:
                            raise cancelled from None
        finally:
            frame_var.reset(token)  # no cycle of task, context and frame
            self._producer_done.set()
            run.task_done()

    async def _wait_wanted(self) -> None:
        # Waiting for the consumer does not keep the run from settling.
        with self._producer_wait:
            await self._wanted.wait()

    def _note_cleanup_error(self, exc: Exception) -> None:
        note_key(exc, self.key)
        self._cleanup_error = exc

    async def _produce_items(self, agen: Any) -> None:
        run = self._run
        step = self._step
        while True:
            await self._wait_wanted()
            self._wanted = trio.Event()
            index = len(self._texts)
            try:
                item = await agen.__anext__()
                # Snapshot now, synchronously: what is journaled is the item
                # as it was produced, whatever the consumer does with it.
                text, decoded = codec.snapshot(
                    item, step.item_type, what=f"item {index} of {self._what}"
                )
            except StopAsyncIteration:
                try:
                    await self._journal_completed()
                except Exception as exc:
                    self._fail(exc)
                    return
                self._hand_over(_END)
                return
            except Exception as exc:
                self._fail(exc)
                return
            self._texts.append(text)
            run.emit(
                StreamItem(
                    run_id=run.run_id, key=self.key, name=step.name, index=index, item=decoded
                )
            )
            self._hand_over(_Item(decoded))

    def _fail(self, exc: Exception) -> None:
        note_key(exc, self.key)
        self._failure = exc
        self._hand_over(_Failed(exc))

    def _entry(self, status: EntryStatus, reason: BaseException | None) -> Entry:
        return Entry(
            run_id=self._run.run_id,
            key=self.key,
            kind=EntryKind.STREAM,
            status=status,
            value=f"[{','.join(self._texts)}]",
            error=None if reason is None else error_info(reason),
            args_digest=self._digest,
            started_at=self._started_at,
            finished_at=utcnow(),
            token=self._run.token,
            position=self._position,
        )

    async def _journal_completed(self) -> None:
        run = self._run
        [stored] = await run.save((self._entry(EntryStatus.COMPLETED, None),))
        self._exhausted = True
        run.emit(
            CheckpointStored(run_id=run.run_id, key=self.key, name=self._step.name, entry=stored)
        )
        if self._event is not None:
            await run.saver.shielded(
                f"hook on_checkpoint for {self.key} in run {run.run_id!r}",
                run.hooks.call,
                "on_checkpoint",
                attrs.evolve(self._event, entry=stored),
            )

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


@contextlib.contextmanager
def cleanup_scope(timeout: float) -> Iterator[trio.CancelScope]:
    """A bounded shield for cleanup that must await: ``with tether.cleanup_scope(2.0):``.

    A generator's cleanup runs under the cancellation that closed it, so an
    unshielded ``await`` in its ``finally`` raises ``trio.Cancelled`` at once.
    Awaits inside this block are shielded from that, for at most *timeout*
    seconds (then they are cancelled and the block is left, like
    ``trio.move_on_after``). Inside a run, the caller's cancellation (an
    enclosing deadline, ``timeout=``, Ctrl-C) still cuts it short, as it does
    a shielded save: the caller is never held.

    Raises:
        UsageError: *timeout* is not a positive number of seconds.
    """
    if (
        not isinstance(timeout, int | float)
        or isinstance(timeout, bool)
        or math.isnan(timeout)
        or timeout <= 0
    ):
        raise UsageError(f"cleanup_scope() takes a positive number of seconds, not {timeout!r}")
    frame = frame_var.get()
    run = frame.run if frame is not None else None
    if run is None:
        scope = trio.CancelScope(shield=True, deadline=trio.current_time() + timeout)
    else:
        scope = run.saver.tracked_scope(timeout)
    try:
        with scope:
            yield scope
    finally:
        if run is not None:
            run.saver.shields.discard(scope)
