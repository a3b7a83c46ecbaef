"""``tether.parallel()``: a nursery inside a run whose children are tracked and journaled.

Layer: the API of workflow code (``_api``).

A child's key and position are fixed when it is started, in program order,
so replay maps results to the same calls whatever order they finished in.
A step child runs as a step call (:func:`~._steps.execute_step`) in its own
task and may hand its record to the run's saver and end at once: the block
waits for its children's records when it exits, and a handle's result is
readable only after that. A branch (any other async function) runs with a
frame of its own, so its steps key under it; a function marked with
:data:`KEYED_MARKER` (``tether.child``) keys like a step and starts itself.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, final

import attrs
import outcome
import trio

from .._core._error_info import note_key
from .._core._events import CheckpointStored, StepFinished
from .._core._frame import Frame, check_key, current_frame, frame_var
from .._core._run import RunState, Wait
from .._core._shields import Parked
from .._core._unjournaled import watched
from .._errors import UsageError
from ..stores._records import Entry
from ._steps import HANDED_OFF, check_arguments, execute_step

if TYPE_CHECKING:
    from ._workflow import Step

__all__ = ("KEYED_MARKER", "STEP_MARKER", "Handle", "KeyedCall", "Parallel", "parallel")

R = TypeVar("R")

#: Set to ``True`` on step classes (``Step``): ``parallel().start_soon`` journals
#: them under their own name. (A marker, so that this module, below the
#: definitions, never imports them.)
STEP_MARKER = "_tether_is_step"

#: Set on a function that journals a call of its own (``tether.child``), to a
#: :class:`KeyedCall`: ``parallel().start_soon`` keys it in the block like a step.
KEYED_MARKER = "_tether_keyed"


@final
@attrs.frozen
class KeyedCall:
    """How ``start_soon`` starts a function marked with :data:`KEYED_MARKER`."""

    name: str  #: the call's name in keys: ``child`` gives ``child#n``
    #: ``start(run, key, position, *args)``, in the child's task: the call,
    #: its key and position taken (and reached, on replay) when it was started
    start: Callable[..., Awaitable[Any]]


_PENDING: Any = object()


@final
class Handle(Generic[R]):
    """A step (or branch) started by :meth:`Parallel.start_soon`.

    Its :attr:`key` is fixed when it is started; its :attr:`result` can be
    read once the ``parallel()`` block has exited.
    """

    __slots__ = ("_block", "_value", "key")

    def __init__(self, block: Parallel, key: str) -> None:
        self._block = block
        self.key = key
        self._value: Any = _PENDING

    def __repr__(self) -> str:
        state = "pending" if self._value is _PENDING else "done"
        return f"<tether.Handle {self.key} {state}>"

    @property
    def result(self) -> R:
        """The decoded result.

        Raises:
            UsageError: the ``parallel()`` block has not exited yet, or the
                step did not complete (it raised, was cancelled, or its
                record could not be stored).
        """
        if not self._block._closed:
            raise UsageError(
                f"the result of {self.key} is read inside its `async with tether.parallel()` "
                "block; read .result after the block has exited"
            )
        if self._value is _PENDING:
            raise UsageError(f"{self.key} did not complete (it raised or was cancelled)")
        value: R = self._value
        return value


#: The message of the groups trio's nurseries raise, for the groups a block makes.
_GROUP_MESSAGE = "Exceptions from Trio nursery"


def _joined(raised: BaseException, errors: Sequence[BaseException]) -> BaseException:
    """*raised* (what the block's nursery raised) with the failed saves' *errors* added."""
    leaves = [*raised.exceptions] if isinstance(raised, BaseExceptionGroup) else [raised]
    message = raised.message if isinstance(raised, BaseExceptionGroup) else _GROUP_MESSAGE
    joined = BaseExceptionGroup(message, [*leaves, *errors])
    joined.__cause__ = raised.__cause__
    joined.__context__ = raised.__context__
    joined.__suppress_context__ = raised.__suppress_context__
    joined.__traceback__ = raised.__traceback__
    return joined


@final
class Parallel:
    """A nursery inside a run whose children are tracked steps; see :func:`parallel`."""

    def __init__(self) -> None:
        self._frame: Frame | None = None  # the children's keys: the block's place, fixed
        self._manager: Any = None
        self._nursery: trio.Nursery | None = None
        self._closed = False
        self._children = 0  # children not finished yet
        self._exit_wait: Wait | None = None
        self._unsaved = 0  # children's records handed to the saver and not delivered yet
        self._save_errors: list[BaseException] = []  # ...that failed
        self._saves_wait: Parked | None = None  # the block's task, waiting for them

    async def __aenter__(self) -> Parallel:
        if self._manager is not None:
            raise UsageError("a tether.parallel() block can be entered only once")
        frame = current_frame("tether.parallel()")
        if frame.counters is None:
            frame.counters = {}
        # A frame of the block's own, sharing the numbering of the one it was
        # opened in: a step the block's task calls meanwhile borrows that one.
        self._frame = Frame(frame.run, frame.path, frame.task)
        self._frame.counters = frame.counters
        self._exit_wait = self._frame.run.wait()
        self._manager = trio.open_nursery()
        self._nursery = await self._manager.__aenter__()
        return self

    async def __aexit__(
        self, etype: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        """Wait for the children, then for their records; raise what failed.

        The wait for the records is not ended by the run's own cancellation
        (a sibling's failure: completed steps' saves drain); the caller's
        cancellation ends it at once.
        """
        assert self._exit_wait is not None and self._frame is not None
        saver = self._frame.run.saver
        raised: BaseException | None = None
        suppress = False
        try:
            try:
                # Waiting for the children does not keep the run from settling;
                # the last child to finish ends the wait (see _child_done).
                with self._exit_wait if self._children else contextlib.nullcontext():
                    suppress = await self._manager.__aexit__(etype, exc, tb)
            except BaseException as error:
                raised = error  # raised below, once the records are in
            if self._unsaved and not saver.caller_cancelled:
                self._saves_wait = Parked(saver)
                await saver.park(self._saves_wait)
            errors = self._save_errors
            if raised is None and not errors:
                return suppress
            if raised is None:
                raised = BaseExceptionGroup(_GROUP_MESSAGE, list(errors))
            elif errors:
                raised = _joined(raised, errors)
            try:
                raise raised
            finally:
                raised = None
        finally:
            self._closed = True

    @property
    def cancel_scope(self) -> trio.CancelScope:
        """The block's cancel scope (cancelling it is framework-owned: saves drain)."""
        assert self._nursery is not None, "enter the block first"
        return self._nursery.cancel_scope

    def start_soon(
        self, fn: Callable[..., Awaitable[R]], *args: Any, key: str | None = None
    ) -> Handle[R]:
        """Start ``fn(*args)`` as a child of this block and return its handle.

        *fn* is a step (journaled under its key), ``tether.child`` (journaled
        under ``child#n``: ``p.start_soon(tether.child, wf, *args)``), or any
        other async function (a *branch*: its own steps journal under
        ``branch-name#n/``). The key and position are fixed now, in program
        order, so replay maps results to the same calls whatever order they
        finished in.

        Raises:
            UsageError: the block is not open, or this is not the task that
                opened it.
            NonDeterminismError: a branch started where the journal holds
                another call (a step's own divergence raises in its task).
        """
        if self._nursery is None or self._frame is None or self._closed:
            raise UsageError("start_soon() needs an open `async with tether.parallel()` block")
        frame = self._frame
        if frame.task is not trio.lowlevel.current_task():
            raise UsageError(
                "start_soon() must be called from the task that opened the parallel() block"
            )
        if key is not None:
            check_key(key)
        if getattr(type(fn), STEP_MARKER, False):
            step: Step[..., R] = fn  # type: ignore[assignment]
            call = "step"
            child_key, position = frame.next_call(step.name, key or step.key)
            child: Callable[..., Awaitable[None]] = self._child_step
        elif (keyed := getattr(fn, KEYED_MARKER, None)) is not None:
            call = keyed.name
            child_key, position = frame.next_call(keyed.name, key)
            child = self._child_keyed
        else:
            if not callable(fn):
                raise UsageError(f"start_soon() takes a step or an async function, not {fn!r}")
            name = getattr(fn, "name", None) or getattr(fn, "__name__", None) or "branch"
            call = "branch"
            child_key, position = frame.next_call(name, key)
            child = self._child_branch
        # Reached now, in program order (not when the child gets to run): what
        # this parent has reached, and the first call that diverges, are the
        # same in every execution.
        replay = frame.run.replay
        if (
            replay is not None
            and replay.reach(call, child_key, position) is not None
            and call == "step"
        ):
            check_arguments(frame.run, step, child_key, position, args)
        handle: Handle[R] = Handle(self, child_key)
        self._nursery.start_soon(child, fn, handle, position, args, name=child_key)
        self._children += 1
        frame.run.task_started()
        return handle

    def _child_done(self, run: RunState) -> None:
        self._children -= 1
        if not self._children and self._exit_wait is not None:
            self._exit_wait.end()  # the block's task is about to go on
        run.task_done()

    async def _child_step(
        self, step: Step[..., Any], handle: Handle[Any], position: int, args: tuple[Any, ...]
    ) -> None:
        assert self._frame is not None
        run = self._frame.run
        try:

            def hand_off(run: RunState, name: str, decoded: Any, entries: Sequence[Entry]) -> None:
                self._hand_off(run, handle, name, decoded, entries)

            value = await execute_step(run, step, handle.key, position, args, {}, hand_off)
            if value is not HANDED_OFF:
                handle._value = value
        finally:
            self._child_done(run)

    async def _child_keyed(
        self,
        fn: Callable[..., Awaitable[Any]],
        handle: Handle[Any],
        position: int,
        args: tuple[Any, ...],
    ) -> None:
        assert self._frame is not None
        run = self._frame.run
        keyed: KeyedCall = getattr(fn, KEYED_MARKER)
        try:
            handle._value = await keyed.start(run, handle.key, position, *args)
        finally:
            self._child_done(run)

    async def _child_branch(
        self,
        fn: Callable[..., Awaitable[Any]],
        handle: Handle[Any],
        position: int,
        args: tuple[Any, ...],
    ) -> None:
        assert self._frame is not None
        del position  # (a branch is matched when it is started; see start_soon)
        run = self._frame.run
        token = frame_var.set(Frame(run, handle.key, trio.lowlevel.current_task()))
        try:
            value = await watched(fn(*args), f"branch {handle.key!r} of workflow {run.workflow!r}")
            if run.replay is not None:
                run.replay.ended(handle.key, f"branch {handle.key}")
            handle._value = value
        finally:
            frame_var.reset(token)  # no cycle of task, context and frame (see execute_step)
            self._child_done(run)

    # -- the children's records ---------------------------------------------------------

    def _hand_off(
        self,
        run: RunState,
        handle: Handle[Any],
        name: str,
        decoded: Any,
        entries: Sequence[Entry],
    ) -> None:
        """Queue a child's record for the saver: the block's exit waits for it (:meth:`_saved`).

        *entries* end with the child's; patch markers may come before it.
        """
        self._unsaved += 1
        saved = functools.partial(self._saved, run, handle, name, decoded, entries[:-1])
        run.saver.hand_off(entries, saved)

    def _saved(
        self,
        run: RunState,
        handle: Handle[Any],
        name: str,
        decoded: Any,
        markers: Sequence[Entry],
        result: outcome.Outcome[Sequence[Entry]],
    ) -> None:
        """A child's handed-off record was stored, or failed (called by the saver task)."""
        self._unsaved -= 1
        observer = run.observer
        if isinstance(result, outcome.Value):
            stored: Entry = result.value[-1]
            run.journal[handle.key] = stored
            handle._value = decoded
            if observer is not None:
                observer(
                    CheckpointStored(run_id=run.run_id, key=handle.key, name=name, entry=stored)
                )
                observer(StepFinished(run_id=run.run_id, key=handle.key, name=name))
        else:
            assert isinstance(result, outcome.Error)
            error = result.error
            run.put_back(markers)
            note_key(error, handle.key)
            self._save_errors.append(error)
            if observer is not None:
                observer(
                    StepFinished(run_id=run.run_id, key=handle.key, name=name, exception=error)
                )
            # As when a child raises: the others are cancelled (framework-owned,
            # so their saves drain), and the block raises it.
            assert self._nursery is not None
            self._nursery.cancel_scope.cancel()
        if not self._unsaved and self._saves_wait is not None:
            run.saver.wake(self._saves_wait, outcome.Value(None))


def parallel() -> Parallel:
    """Open a nursery inside the run: ``async with tether.parallel() as p:``.

    Children started with ``p.start_soon(step, *args)`` run concurrently; the
    block exits when all have finished and their records are stored. If one
    raises (or its record cannot be stored), the others are cancelled
    (framework-owned: steps that already completed still finish saving their
    records), and the errors propagate as an exception group. Only usable in
    a task tether tracks (the workflow, a step, a branch).
    """
    return Parallel()
