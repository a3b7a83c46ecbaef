"""Step calls, ``parallel()`` and ``ask()``: what workflow code calls inside a run.

A step call (:func:`call_step`) runs the step in the calling task, or
replays it from the journal; its key and position are fixed when it is
called (or, in a ``parallel()`` block, when it is started), and a replayed
call must match the journal (:mod:`._replay`). Its result is snapshotted when it
returns, before any other task runs, and returned only once its record is
stored (durable before visible). A step started in a ``parallel()`` block
hands its record to the run's saver and ends at once: the block waits for
its children's records when it exits, and a handle's result is readable
only after that. The state these share is :class:`~._run.RunState`; saves
go through its :class:`~._saver.Saver`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, final, overload

import attrs
import outcome
import trio

from ._codec import codec
from ._codec_json import digest
from ._errors import (
    CodecError,
    NotInRunError,
    UsageError,
)
from ._events import CheckpointStored, StepFinished, StepStarted
from ._hooks import HookEvent
from ._replay import undecodable
from ._retry import journal_failure, next_attempt_at
from ._run import Frame, RunState, Wait, current_frame, error_info, frame_var, note_key
from ._saver import Parked, StoreErrors
from .stores._protocol import Entry, EntryKind

if TYPE_CHECKING:
    from ._workflow import Step

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


__all__ = (
    "Handle",
    "KeyedCall",
    "Parallel",
    "RunState",
    "StoreErrors",
    "ask",
    "call_step",
    "check_key",
    "error_info",
    "execute_step",
    "parallel",
)

log = logging.getLogger("tether")

T = TypeVar("T")
R = TypeVar("R")


def check_key(key: object) -> str:
    """An explicit step key, validated: a non-empty string without ``/``."""
    if not isinstance(key, str) or not key or "/" in key:
        raise UsageError(f"a step key is a non-empty string without '/', not {key!r}")
    return key


# -- steps ------------------------------------------------------------------------


# Looked up once: every step call uses them.
_now = datetime.now
_encode_args = codec.encode_args
_snapshot = codec.snapshot

#: Names a step call in codec errors: ``(format, key, run_id)``, formatted only then.
_STEP_WHAT = "step {} of run {!r}"


#: What execute_step returns for a parallel() child whose record was handed off.
_HANDED_OFF: Any = object()


def call_step(
    step: Step[..., R], args: tuple[Any, ...], kwargs: dict[str, Any], key: str | None
) -> Coroutine[Any, Any, R]:
    """What calling ``step(*args)`` does: :func:`execute_step` under the next key here.

    The key and position are taken when the step is called (in program
    order), and the coroutine returned is the step's execution, one frame
    less to unwind.

    Raises:
        NotInRunError: outside a run (and, when awaited, in a task tether
            does not track).
    """
    frame = frame_var.get()
    if frame is None:
        frame = current_frame(f"step {step.name!r}")  # raises NotInRunError
    # (execute_step checks that the task that awaits it is the frame's)
    key, position = frame.next_call(step.name, key)
    return execute_step(frame.run, step, key, position, args, kwargs, None, frame)


async def execute_step(
    run: RunState,
    step: Step[..., Any],
    key: str,
    position: int,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    child: Handle[Any] | None = None,
    caller: Frame | None = None,
) -> Any:
    """Replay the step with *key* (at *position*) from the journal, or run and journal it.

    *caller* is the frame of the task that called the step, which must be
    the one that awaits it (trio's ``start_soon`` calls a function in the
    spawning task and runs the coroutine in a new one, which tether does not
    track); while the step runs, that frame is the step's.

    A checkpoint, before anything runs: a cancel point, and for a call from
    workflow code a schedule point too (a ``parallel()`` *child* was just
    scheduled). The save that follows does not yield to the run's own
    cancellation. For a child without step hooks whose record the store
    cannot take at once, the record is handed to the saver and
    :data:`_HANDED_OFF` returned: the block waits for it and reports its end.

    Raises:
        NonDeterminismError: the call diverges from the journal (other
            arguments, another position, another call at this one, a result
            that no longer decodes, nested calls it no longer makes); the
            execution stops and is undone.
        CheckpointCorruptError: the journaled result is not JSON.
        Exception: whatever the step raised (after its retries), or its save.
    """
    task = trio.lowlevel.current_task()
    if caller is not None and caller.task is not task:
        raise NotInRunError(
            f"step {step.name!r} was used in a task tether does not track (one started in a "
            f"plain trio nursery inside run {run.run_id!r}); start it with tether.parallel() "
            "so its key is fixed and its result journaled"
        )
    seen = run.seen
    if key in seen:
        run.claim(key)  # raises UsageError
    seen.add(key)
    replay = run.replay
    if replay is not None and child is None:  # (a child's was reached when it was started)
        replay.reach("step", key, position)  # reached when called, cancelled or not
    if child is None:
        await trio.lowlevel.checkpoint()
    else:  # a task just scheduled: a cancel point is enough
        await trio.lowlevel.checkpoint_if_cancelled()
    what = (_STEP_WHAT, key, run.run_id)
    args_digest = digest(_encode_args(args, kwargs, what=what))
    entry = run.journal.get(key)
    if entry is not None:
        return _replayed(run, step, key, position, entry, args_digest)
    observer = run.observer
    event = (
        HookEvent(
            run_id=run.run_id, workflow=run.workflow, name=step.name, key=key, token=run.token
        )
        if run.hooks.any_step
        else None
    )
    propagating: BaseException | None = None
    attempt: int | None = None  # the attempt the step ended on, once known
    tried = [0]  # the attempt running now (the retry loop's)
    handed_off = False  # the block reports this step's end
    marked: Sequence[Entry] = ()  # patch markers this step's save carries
    try:
        if observer is not None:
            observer(StepStarted(run_id=run.run_id, key=key, name=step.name))
        if event is not None:
            await run.hooks.call("on_step_start", event)
        # A step with a retry policy journals its attempts on the engine's
        # clock (their backoff is measured on it): its record too.
        policy = step.retry is not None
        started = run.clock.now() if policy else _now(UTC)
        if step.retries or policy or step.timeout is not None:
            value, attempt = await _attempts(
                run, step, key, position, args, kwargs, args_digest, tried
            )
        elif caller is not None:  # the common case: the caller's frame is the step's a while
            # Nested calls key under this step: no frame to make per call. (A
            # parallel() block keys its children by its own Frame, see there.)
            path, counters = caller.path, caller.counters
            caller.path, caller.counters = key, None
            try:
                value = await step.fn(*args, **kwargs)
            finally:
                caller.path, caller.counters = path, counters
            attempt = 1
        else:  # a parallel() child, in a task of its own
            # Reset after: a frame left in the task's context would make a
            # cycle (task, context, frame) that only the cyclic GC frees.
            token = frame_var.set(Frame(run, key, task))
            try:
                value = await step.fn(*args, **kwargs)
            finally:
                frame_var.reset(token)
            attempt = 1
        if replay is not None:
            replay.ended(key, f"step {key}")  # every journaled nested call was reached
        # Snapshot now, synchronously: no other task runs before the value
        # is encoded, so nothing can change what is stored.
        text, decoded = _snapshot(value, step.signature.return_type, what=what)
        saver = run.saver
        entries: tuple[Entry, ...] = (
            # (kind STEP and status COMPLETED by default)
            Entry(
                run_id=run.run_id,
                key=key,
                value=text,
                args_digest=args_digest,
                started_at=started,
                finished_at=run.clock.now() if policy else _now(UTC),
                attempt=attempt,
                token=run.token,
                seq=saver.next_seq,  # numbered ahead when the store takes it at once
                position=position,
            ),
        )
        if run.markers:
            marked = run.take_markers()
            entries = (*marked, *entries)
        if saver.caller_cancelled:
            await saver.refuse(entries)
        done = saver.append_now(entries)
        if done is None:
            if child is not None and event is None:
                child._block._hand_off(run, child, step.name, decoded, entries)
                handed_off = True
                return _HANDED_OFF
            done = await saver.save(entries)
        stored = done[-1]  # after the markers it carried, if any
        marked = ()
        run.journal[key] = stored
        if observer is not None:
            observer(CheckpointStored(run_id=run.run_id, key=key, name=step.name, entry=stored))
        if event is not None:
            await saver.shielded(
                f"hook on_checkpoint for {key} in run {run.run_id!r}",
                run.hooks.call,
                "on_checkpoint",
                attrs.evolve(event, entry=stored),
            )
        return decoded
    except BaseException as exc:
        propagating = exc
        note_key(exc, key)
        if marked:
            run.put_back(marked)
        raise
    finally:
        if not handed_off:
            if event is not None:
                if attempt is None and (
                    isinstance(propagating, Exception) or not (step.retries or step.retry)
                ):
                    # it raised out of its last (or only) attempt
                    attempt = tried[0] or step.retries + 1
                ended = attrs.evolve(event, exception=propagating, attempt=attempt)
                await run.end_hook("on_step_end", ended, propagating)
            if observer is not None:
                observer(
                    StepFinished(run_id=run.run_id, key=key, name=step.name, exception=propagating)
                )
        del propagating


def _replayed(
    run: RunState, step: Step[..., Any], key: str, position: int, entry: Entry, args_digest: str
) -> Any:
    """The result of the step *key* as journaled in *entry*, once the call matches it."""
    if entry.kind is not EntryKind.STEP:
        raise run.diverged(
            "step",
            key,
            position,
            f"the journal holds a {entry.kind} entry (seq {entry.seq}) under this key",
        )
    if entry.args_digest != args_digest:
        raise run.diverged(
            "step",
            key,
            position,
            f"it was journaled (seq {entry.seq}) with other arguments than it is called with now",
        )
    tp = step.signature.return_type
    what = _STEP_WHAT.format(key, run.run_id)
    try:
        return codec.decode(entry.value or "null", tp, what=what)
    except CodecError as exc:
        detail = undecodable(entry, tp, "result", "the step's return type", what)
        raise run.diverged("step", key, position, detail) from exc


def _check_arguments(
    run: RunState, step: Step[..., Any], key: str, position: int, args: tuple[Any, ...]
) -> None:
    """A replayed parallel() child's arguments, checked in program order, when it is started."""
    entry = run.journal.get(key)
    try:
        args_digest = digest(_encode_args(args, {}, what=(_STEP_WHAT, key, run.run_id)))
    except CodecError:
        return  # the child raises it, as it would have without a journal
    if entry is not None and entry.args_digest != args_digest:
        raise run.diverged(
            "step",
            key,
            position,
            f"it was journaled (seq {entry.seq}) with other arguments than it is called with now",
        )


async def _attempts(
    run: RunState,
    step: Step[..., Any],
    key: str,
    position: int,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    args_digest: str,
    tried: list[int],
) -> tuple[Any, int]:
    """Run the step's attempts (``retries``, or its ``retry`` policy); its value and attempt.

    With ``retries``, a failed attempt is retried at once, and nothing of it
    is journaled. With a policy, each failed attempt is journaled (a
    ``failed`` entry with its attempt number, its error, and ``{"next_at":
    ...}``, the moment the next attempt is due, ``null`` when none follows),
    and the next attempt waits for that moment as a durable timer (it may
    park the run). An execution that finds the step's last failed attempt
    in the journal with a ``next_at`` (a crash or a restart mid-backoff, a
    run parked on its backoff) waits until then and goes on with the next
    attempt; one whose last failed attempt has none (the step gave up, and
    the run failed) starts a new round from attempt 1. *tried* holds the
    attempt running now.
    """
    policy = step.retry
    total = step.retries + 1 if policy is None else policy.attempts
    attempt = 1
    if policy is not None:
        last = run.failures.get(key)
        next_at = None if last is None else next_attempt_at(run.run_id, last)
        if last is not None and next_at is not None:
            attempt = last.attempt + 1
            await run.sleep_until(next_at)
    while True:
        tried[0] = attempt
        started = run.clock.now()
        failure: Exception | None = None
        # A fresh frame per attempt: nested steps get keys under this step,
        # and a retry replays the nested steps an earlier attempt stored.
        token = frame_var.set(Frame(run, key, trio.lowlevel.current_task()))
        try:
            if step.timeout is None:
                value = await step.fn(*args, **kwargs)
            else:
                with trio.fail_after(step.timeout):
                    value = await step.fn(*args, **kwargs)
            return value, attempt
        except Exception as exc:
            failure = exc
        finally:
            frame_var.reset(token)
        assert failure is not None
        next_at = None
        if policy is None:
            if attempt >= total:
                raise failure
        else:
            retried = policy.retries(failure, attempt)
            if retried:
                next_at = run.clock.now() + timedelta(seconds=policy.delay(attempt))
            if not await journal_failure(
                run, key, position, args_digest, attempt, failure, started, next_at
            ):
                retried = False
            if not retried:
                raise failure
        log.info(
            "tether: step %s of run %s failed (attempt %d of %d), retrying%s: %r",
            key,
            run.run_id,
            attempt,
            total,
            "" if next_at is None else f" at {next_at.isoformat()}",
            failure,
        )
        failure = None
        attempt += 1
        # The retry calls the nested steps again: those the failed attempt
        # stored replay from the journal, the rest run.
        prefix = key + "/"
        run.seen = {k for k in run.seen if not k.startswith(prefix)}
        if next_at is not None:
            await run.sleep_until(next_at)


# -- parallel() ------------------------------------------------------------


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
            _check_arguments(frame.run, step, child_key, position, args)
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
            value = await execute_step(run, step, handle.key, position, args, {}, handle)
            if value is not _HANDED_OFF:
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
            value = await fn(*args)
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


@overload
async def ask(payload: Any, response_type: type[T], key: str | None = None) -> T: ...
@overload
async def ask(payload: Any, response_type: Any, key: str | None = None) -> Any: ...
async def ask(payload: Any, response_type: Any, key: str | None = None) -> Any:
    """Ask a human (or any outside party) and wait for the response.

    Use inside a workflow, a step or a ``parallel()`` branch. The request's
    key is fixed at call time like a step key (``path/ask#n``, or
    ``path/<key>`` with ``key=``), so it is stable across replays. With a
    journaled response (given to an earlier ``resume``), that response is
    returned at once, decoded strictly into *response_type*. Otherwise the
    asking task waits; when every live task of the run is finished or
    waiting in ``ask``, the run *settles*: completed steps' saves drain, the
    pending requests are stored with the run, the run's tasks are cancelled
    (framework-owned), and ``engine.run``/``engine.resume`` raise
    :class:`tether.Paused` listing every pending request.

    A checkpoint. The pause reaches the asking code as ``trio.Cancelled``,
    which ``except Exception`` cannot swallow; a step that asks is not
    failed by the pause, it runs again on resume and its nested steps that
    completed replay from the journal.

    Args:
        payload: what to ask; any value tether can encode to JSON (it is
            stored and shown as JSON values in ``Paused.requests``).
        response_type: the type the response is decoded into, strictly.
        key: an explicit key instead of ``ask#n`` (no ``/``).

    Raises:
        NotInRunError: outside a run, or in a task tether does not track.
        CodecError: the payload cannot be encoded to JSON.
        NonDeterminismError: the journal holds another payload for this key.
    """
    if key is not None:
        check_key(key)
    frame = current_frame("tether.ask()")
    ask_key, position = frame.next_call("ask", key)
    return await frame.run.ask(ask_key, position, payload, response_type)


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
