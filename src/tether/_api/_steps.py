"""A step call: run the step in the calling task and journal it, or replay it.

Layer: the API of workflow code (``_api``). A step call (:func:`call_step`)
runs the step in the calling task, or replays it from the journal; its key
and position are fixed when it is called (or, in a ``parallel()`` block,
when it is started), and a replayed call must match the journal
(:mod:`tether._core._replay`). Its result is snapshotted when it
returns, before any other task runs, and returned only once its record is
stored (durable before visible). A step started in a ``parallel()`` block
runs here too, in its own task (:mod:`._parallel`), and may hand its record
to the run's saver instead of waiting for it. Retries and timeouts run in
:mod:`._step_attempts`.

:func:`execute_step` goes through its phases in order: :func:`_enter` (the
call is this task's, and the first at its key), then :func:`_replayed` (the
journal has it) or :func:`_started`, the step's function (its attempts, or
a call in the caller's frame, or in a frame of its own), :func:`_entries`
(the result snapshotted), the save, :func:`_stored` and :func:`_ended`.
Whole because ``execute_step`` is the hottest path of a run: its phases are
plain functions, and the awaits between them stay in it, so that a step is
one coroutine (each phase as a coroutine of its own cost a trivial step a
tenth more).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

import attrs
import trio

from .._codec._json import digest
from .._codec._values import codec
from .._core._error_info import note_key
from .._core._events import CheckpointStored, StepFinished, StepStarted
from .._core._frame import STEP_ALONE, Frame, current_frame, frame_var
from .._core._hooks import HookEvent
from .._core._replay import undecodable
from .._core._run import RunState
from .._errors import CodecError, NotInRunError
from ..stores._records import Entry, EntryKind
from ._step_attempts import Tries, attempts
from ._step_def import StepDef

#: How a ``parallel()`` child hands its step's record to the block's saver:
#: ``hand_off(run, step name, decoded result, entries)``.
HandOff = Callable[[RunState, str, Any, Sequence[Entry]], None]

__all__ = ("HANDED_OFF", "HandOff", "call_step", "check_arguments", "execute_step")

R = TypeVar("R")


# Looked up once: every step call uses them.
_now = datetime.now
_encode_args = codec.encode_args
_snapshot = codec.snapshot

#: The attempts of a step tried once: it returned from attempt 1 when it returned.
_ONCE: Final = Tries()

#: Names a step call in codec errors: ``(format, key, run_id)``, formatted only then.
_STEP_WHAT = "step {} of run {!r}"


#: What execute_step returns for a parallel() child whose record was handed off.
HANDED_OFF: Any = object()


def call_step(
    step: StepDef[R], args: tuple[Any, ...], kwargs: dict[str, Any], key: str | None
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
        frame = current_frame(f"step {step.name!r}", alone=STEP_ALONE)  # raises NotInRunError
    # (execute_step checks that the task that awaits it is the frame's)
    key, position = frame.next_call(step.name, key)
    return execute_step(frame.run, step, key, position, args, kwargs, None, frame)


async def execute_step(
    run: RunState,
    step: StepDef[Any],
    key: str,
    position: int,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    child: HandOff | None = None,
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
    cannot take at once, the record is handed to the block (*child*) and
    :data:`HANDED_OFF` returned: the block waits for it and reports its end.

    Its phases: see the module docstring.

    Raises:
        NonDeterminismError: the call diverges from the journal (other
            arguments, another position, another call at this one, a result
            that no longer decodes, nested calls it no longer makes); the
            execution stops and is undone.
        CheckpointCorruptError: the journaled result is not JSON.
        Exception: whatever the step raised (after its retries), or its save.
    """
    _enter(run, step, key, position, child, caller)
    if child is None:
        await trio.lowlevel.checkpoint()
    else:  # a task just scheduled: a cancel point is enough
        await trio.lowlevel.checkpoint_if_cancelled()
    args_digest = digest(_encode_args(args, kwargs, what=(_STEP_WHAT, key, run.run_id)))
    entry = run.journal.get(key)
    if entry is not None:
        return _replayed(run, step, key, position, entry, args_digest)
    event = _started(run, step, key)
    propagating: BaseException | None = None
    tries = _ONCE  # its attempts: one, unless it may be tried more than once
    handed_off = False  # the block reports this step's end
    try:
        if event is not None:
            await run.hooks.call("on_step_start", event)
        # A step with a retry policy journals its attempts on the engine's
        # clock (their backoff is measured on it): its record too.
        policy = step.retry is not None
        started = run.clock.now() if policy else _now(UTC)
        if step.retries or step.retry is not None or step.timeout is not None:
            tries = Tries()  # the attempt running now, and the one it returned from
            value = await attempts(run, step, key, position, args, kwargs, args_digest, tries)
        elif caller is not None:  # the common case: the caller's frame is the step's a while
            # Nested calls key under this step: no frame to make per call. (A
            # parallel() block keys its children by its own Frame, see there.)
            path, counters = caller.path, caller.counters
            caller.path, caller.counters = key, None
            try:
                value = await step.fn(*args, **kwargs)
            finally:
                caller.path, caller.counters = path, counters
        else:  # a parallel() child, in a task of its own
            # Reset after: a frame left in the task's context would make a
            # cycle (task, context, frame) that only the cyclic GC frees.
            token = frame_var.set(Frame(run, key, trio.lowlevel.current_task()))
            try:
                value = await step.fn(*args, **kwargs)
            finally:
                frame_var.reset(token)
        finished = run.clock.now() if policy else _now(UTC)
        if policy and tries.started is not None:  # its failed attempts are journaled
            started = tries.started  # with their own starts: this one's too
        decoded, entries = _entries(
            run, step, key, position, value, args_digest, tries.ended or 1, started, finished
        )
        saver = run.saver
        try:
            if saver.caller_cancelled:
                await saver.refuse(entries)
            done = saver.append_now(entries)
            if done is None:
                if child is not None and event is None:  # hooks wait for the save
                    child(run, step.name, decoded, entries)
                    handed_off = True
                    return HANDED_OFF
                done = await saver.save(entries)
        except BaseException:
            if len(entries) > 1:  # the patch markers it carried go with the next save
                run.put_back(entries[:-1])
            raise
        stored = _stored(run, step, key, done[-1])  # (after the markers it carried, if any)
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
        raise
    finally:
        if not handed_off:
            ended = _ended(run, step, key, event, tries, propagating)
            if ended is not None:
                await run.end_hook("on_step_end", ended, propagating)
        del propagating


def _enter(
    run: RunState,
    step: StepDef[Any],
    key: str,
    position: int,
    child: HandOff | None,
    caller: Frame | None,
) -> None:
    """The call is awaited by the task that made it, and is the first at *key*; reach it.

    Raises:
        NotInRunError: another task awaits it (one tether does not track).
        UsageError: a call at *key* was made already in this execution.
        NonDeterminismError: the journal has another call at this position.
    """
    if caller is not None and caller.task is not trio.lowlevel.current_task():
        raise NotInRunError(
            f"step {step.name!r} was used in a task tether does not track (one started in a "
            f"plain trio nursery inside run {run.run_id!r}); start it with tether.parallel() "
            "so its key is fixed and its result journaled"
        )
    seen = run.seen
    if key in seen:
        run.claim(key)  # raises UsageError
    seen[key] = None
    replay = run.replay
    if replay is not None and child is None:  # (a child's was reached when it was started)
        replay.reach("step", key, position)  # reached when called, cancelled or not


def _started(run: RunState, step: StepDef[Any], key: str) -> HookEvent | None:
    """Tell the observer the step starts; the event for its hooks, if any hook has one."""
    observer = run.observer
    if observer is not None:
        observer(StepStarted(run_id=run.run_id, key=key, name=step.name))
    if not run.hooks.any_step:
        return None
    return HookEvent(
        run_id=run.run_id, workflow=run.workflow, name=step.name, key=key, token=run.token
    )


def _entries(
    run: RunState,
    step: StepDef[Any],
    key: str,
    position: int,
    value: Any,
    args_digest: str,
    attempt: int,
    started: datetime,
    finished: datetime,
) -> tuple[Any, tuple[Entry, ...]]:
    """The step's result snapshotted (decoded back), and the entries that store it.

    Synchronous, so no other task runs before the value is encoded and
    nothing can change what is stored. The entries end with the step's;
    patch markers waiting for a save come before it. Also tells the replay
    that every journaled nested call was reached.
    """
    replay = run.replay
    if replay is not None:
        replay.ended(key, f"step {key}")
    what = (_STEP_WHAT, key, run.run_id)
    text, decoded = _snapshot(value, step.signature.return_type, what=what)
    entry = Entry(  # (kind STEP and status COMPLETED by default)
        run_id=run.run_id,
        key=key,
        value=text,
        args_digest=args_digest,
        started_at=started,
        finished_at=finished,
        attempt=attempt,
        token=run.token,
        seq=run.saver.next_seq,  # numbered ahead when the store takes it at once
        position=position,
    )
    if run.markers:
        return decoded, (*run.take_markers(), entry)
    return decoded, (entry,)


def _stored(run: RunState, step: StepDef[Any], key: str, stored: Entry) -> Entry:
    """Journal the stored entry in the run's state, and tell the observer."""
    run.journal[key] = stored
    observer = run.observer
    if observer is not None:
        observer(CheckpointStored(run_id=run.run_id, key=key, name=step.name, entry=stored))
    return stored


def _ended(
    run: RunState,
    step: StepDef[Any],
    key: str,
    event: HookEvent | None,
    tries: Tries,
    propagating: BaseException | None,
) -> HookEvent | None:
    """Tell the observer the step ended (how); the event for ``on_step_end``, if any."""
    observer = run.observer
    if observer is not None:
        observer(StepFinished(run_id=run.run_id, key=key, name=step.name, exception=propagating))
    if event is None:
        return None
    attempt = tries.ended if tries is not _ONCE else (1 if propagating is None else None)
    if attempt is None and (isinstance(propagating, Exception) or not (step.retries or step.retry)):
        attempt = tries.current or step.retries + 1  # it raised out of its last (or only) attempt
    return attrs.evolve(event, exception=propagating, attempt=attempt)


def _replayed(
    run: RunState, step: StepDef[Any], key: str, position: int, entry: Entry, args_digest: str
) -> Any:
    """The result of the step *key* as journaled in *entry*, once the call matches it."""
    run.check_kind(entry, EntryKind.STEP, "step", key, position)
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


def check_arguments(
    run: RunState, step: StepDef[Any], key: str, position: int, args: tuple[Any, ...]
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
