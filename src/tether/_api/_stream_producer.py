"""The producer side of a streaming step: the task that runs the generator.

Layer: the API of workflow code (``_api``).

:class:`Producer` is the base of :class:`~tether._api._stream.Stream`: its
state, the producer task (which computes an item only when the consumer asks
for one, snapshots it and hands it over), and the journaling of an exhausted
stream as ``completed`` before the consumer sees the end. The consumer's side,
the ``async with`` block and closing, are the stream's own.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import attrs
import trio

from .._codec._values import codec
from .._core._error_info import error_info, note_key
from .._core._events import CheckpointStored, StreamItem
from .._core._frame import Frame, frame_var
from .._core._hooks import HookEvent
from .._core._run import RunState
from ..stores._records import Entry, EntryKind, EntryStatus, utcnow
from ._workflow import StreamStep

__all__ = ("END", "Failed", "Item", "Producer")

T = TypeVar("T")


@attrs.frozen
class Item:
    """A reply of the producer: the next item."""

    value: Any


@attrs.frozen
class Failed:
    """A reply of the producer: the generator (or its journaling) raised *error*."""

    error: Exception


#: A reply of the producer: the stream is exhausted (and journaled).
END: Any = object()


class Producer(Generic[T]):
    """The producer of one stream: its task, the hand-over, and how it ended.

    Args:
        frame: the frame :func:`~tether.open_stream` was called in.
        step: the stream step.
        args: its positional arguments.
        key: the journal key.
        position: the key's position in the parent.
    """

    def __init__(
        self, frame: Frame, step: StreamStep[..., T], args: tuple[Any, ...], key: str, position: int
    ) -> None:
        self._frame = frame
        self._run: RunState = frame.run
        self._step = step
        self._args = args
        self.key = key
        self._position = position
        self._what = f"stream {self.key} of run {self._run.run_id!r}"
        # live: the producer
        self._scope = trio.CancelScope()  # the producer's; cancelled to stop it
        self._producer_done = trio.Event()
        self._event: HookEvent | None = None
        self._digest = ""
        self._started_at = utcnow()
        self._texts: list[str] = []  # the items produced so far, encoded
        # the hand-over: the consumer asks, the producer replies
        self._wanted = trio.Event()
        # waits that end when the other side sets the event (see RunState.wait)
        self._producer_wait = self._run.wait()
        self._consumer_wait = self._run.wait()
        self._ready = trio.Event()
        self._reply: Any = None
        # how it ended
        self._exhausted = False  # journaled as completed
        self._failure: Exception | None = None  # the producer's error
        self._cleanup_error: Exception | None = None

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
                self._hand_over(END)
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
            self._hand_over(Item(decoded))

    def _fail(self, exc: Exception) -> None:
        note_key(exc, self.key)
        self._failure = exc
        self._hand_over(Failed(exc))

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
