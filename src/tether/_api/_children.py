"""``tether.child()``: a workflow that another starts as a run of its own.

Layer: the API of workflow code (``_api``).

A child run has its own journal, lease and status, like any run. The call
that starts it takes a key and a position in its parent like a step
(``child#n``; see :mod:`tether._core._replay`), and journals an entry of kind ``child``
there (the child's run id, workflow and version) *before* the child run is
created. The child's id is ``<parent id>:<key>`` (:func:`child_run_id`), or
the ``run_id=`` given: so a parent that crashed, even before its entry was
stored, never starts a second child, and one that resumes *reattaches* to
the child by its stored status:

- not stored yet, or ``running`` without a live owner (the parent crashed
  while the child executed), ``queued``, ``failed``, ``paused``, ``waiting``:
  the child executes (resumes) here, in the parent's task and under the
  parent's engine, so no task outlives the parent;
- ``completed``: its stored result, executing nothing;
- executing elsewhere (another live owner, such as a worker that took the
  orphaned child over), or in this engine for another parent that shares
  its ``run_id=``: the parent waits for it, as ``engine.wait`` does, and
  executes it itself once that owner's lease lapses without an outcome;
  one that the other parent is still creating (its claim not landed) is
  looked at again until it is stored, or executed here if that failed.

A child whose id is its parent's own, or that of a run the parent executes
inside of (its ancestors in this process), is refused with
:class:`UsageError` before anything is journaled: its call would wait on
itself.

Under a worker, a child parks on its timers as its parent would (the
parent's ``park_after``); the parent's call then waits for the child's
wake-up time as a durable timer's wait does, so the parent parks too when
nothing else of it is busy, and it looks at the child again when due. A
child parked waiting for a message (``tether.receive``, no wake-up time) is
left to the workers, which a send to it wakes; the parent's call waits for
its outcome as ``engine.wait`` does, holding the parent's slot.

Cancellation: the parent's caller cancelling (or the parent losing its
lease) stops the child's execution as a caller cancellation: promptly,
nothing more stored, the child resumable. The parent's own run being
cancelled (a sibling failed, a step's timeout, the workflow's own cancel
scope) stops the child as it stops the parent's tasks: the child's
completed steps' saves drain, no status is stored, and it stays resumable
(see ``Execution``). ``engine.cancel(parent)`` cancels the children too:
every unfinished child the parent's journal names, recursively
(:func:`cancel_children`), and a child executing inside the parent stores
``cancelled`` itself.

A child's failure is the call's: the child's own exception (as
``engine.run`` raises it), or :class:`RunFailedError` when another owner
executed it, naming the call's key; nothing of it is journaled in the
parent, so resuming the parent resumes the failed child. A child that
pauses raises :class:`ChildPausedError` in the parent (the parent does not
pause with its child's requests).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, Final, TypeVar

import trio

from .._codec._json import digest, dumps, loads
from .._core._error_info import note_key
from .._core._frame import current_frame
from .._core._host import Host
from .._core._owners import owner_is_gone
from .._core._run import RunState
from .._core._store_calls import StoreErrors
from .._errors import (
    CheckpointCorruptError,
    ChildPausedError,
    CodecError,
    LeaseLostError,
    Paused,
    RunCancelledError,
    RunConflictError,
    RunNotFoundError,
    TetherError,
    UsageError,
)
from ..stores._records import Entry, EntryKind, EntryStatus, RunRecord, RunStatus, utcnow
from ..stores._run_ids import check_run_id
from ..stores._store import Store
from ._parallel import KEYED_MARKER, KeyedCall
from ._timers import Waiting
from ._workflow import Workflow, encode_args

__all__ = ("cancel_children", "child", "child_run_id", "take_parent")

log = logging.getLogger("tether")

R = TypeVar("R")

#: What a key's characters are written as in a child's run id (``:`` ends the parent's id).
_ESCAPES: Final = (("%", "%25"), (":", "%3A"), ("/", "%2F"))

#: Seconds before a child being created by another call in this engine is looked at again
#: (doubling up to _NOT_STORED_MAX while it is still not stored).
_NOT_STORED_FIRST: Final = 0.01
_NOT_STORED_MAX: Final = 1.0

#: The run that starts a child run in this task, for the engine's execution of it.
_starting: ContextVar[RunState | None] = ContextVar("tether_child_of", default=None)


def take_parent() -> RunState | None:
    """The parent of the run starting in this task (``tether.child``), cleared so it is used once.

    For the engine, where it builds a run's state: tasks the child run starts
    (which copy this task's context) are not children of it.
    """
    parent = _starting.get()
    if parent is not None:
        _starting.set(None)
    return parent


def child_run_id(parent_id: str, key: str) -> str:
    """The run id of the child started at *key* in run *parent_id*: ``<parent_id>:<key>``.

    The key's ``%``, ``:`` and ``/`` are escaped, so different parents and
    keys never give the same id.
    """
    for char, escaped in _ESCAPES:
        key = key.replace(char, escaped)
    return f"{parent_id}:{key}"


async def child(wf: Workflow[..., R], *args: Any, run_id: str | None = None) -> R:
    """Run ``wf(*args)`` as a child run of this run, and return its result.

    The child is a run of its own (journal, lease, status), executed in this
    task by this run's engine. Its id, ``<this run's id>:child#n`` or
    *run_id*, is journaled here under the key ``child#n`` before the child
    is created, so a resumed parent reattaches to the same child (see the
    module doc). In a ``parallel()`` block: ``p.start_soon(tether.child, wf,
    *args)``, the handle's result is the child's.

    Use inside a workflow, a step or a ``parallel()`` branch. A checkpoint.
    The caller's cancellation stops the child promptly, leaving it
    resumable; the run's own cancellation (a failing sibling) lets the
    child's completed saves drain; ``engine.cancel`` of this run cancels it.

    Raises:
        UsageError: *wf* is not a workflow, the arguments do not fit it,
            *run_id* is not a valid run id, or it is this run's own id or
            that of a run this one executes inside of.
        NotInRunError: outside a run, or in a task tether does not track.
        NonDeterminismError: the journal holds another call here, or this
            call with other arguments, another workflow or another run id.
        Exception: what the child raised when it executed here (as
            ``engine.run`` raises it), or :class:`RunFailedError` when another
            owner executed it; the parent's error names this call's key.
        ChildPausedError: the child paused, waiting for responses.
        RunCancelledError: the child is cancelled.
        RunConflictError: *run_id* names a run of another workflow or with
            other arguments.
    """
    frame = current_frame("tether.child()")
    key, position = frame.next_call("child", None)
    run = frame.run
    if run.replay is not None:
        run.replay.reach("child", key, position)  # reached when called, cancelled or not
    await trio.lowlevel.checkpoint()
    return await _start(run, key, position, wf, args, run_id)  # type: ignore[no-any-return]


async def _start_keyed(run: RunState, key: str, position: int, wf: Any, *args: Any) -> Any:
    """``p.start_soon(tether.child, wf, *args)``: keyed and reached by ``start_soon``."""
    await trio.lowlevel.checkpoint_if_cancelled()  # a task just scheduled
    return await _start(run, key, position, wf, args, None)


setattr(child, KEYED_MARKER, KeyedCall(name="child", start=_start_keyed))


async def _start(
    run: RunState,
    key: str,
    position: int,
    wf: object,
    args: tuple[Any, ...],
    run_id: str | None,
) -> Any:
    """Start the child run at *key* (or reattach to it) and return its result."""
    if not isinstance(wf, Workflow):
        raise UsageError(f"tether.child() takes a @tether.workflow, not {wf!r}")
    if run_id is not None:
        check_run_id(run_id)
    engine = run.live_host()
    run.claim(key)
    args_text, _ = encode_args(wf, args)
    args_digest = digest(args_text)
    entry = run.journal.get(key)
    if entry is None:
        child_id = run_id or _derived_id(run, key)
        _check_not_ancestor(run, key, child_id)
        await _journal(run, key, position, wf, child_id, args_digest)
    else:
        child_id = _journaled(run, key, position, wf, run_id, entry, args_digest)
        _check_not_ancestor(run, key, child_id)  # (journaled by an older tether)
    try:
        return await _reattach(run, engine, key, wf, args, args_text, child_id)
    except BaseException as exc:
        note_key(exc, key, replace=True)
        if run.cancel_requested and not run.saver.caller_cancelled:
            await _cancel_child(run, engine, child_id)
        raise


def _derived_id(run: RunState, key: str) -> str:
    """The id of the child at *key* given no ``run_id=`` (:func:`child_run_id`), checked.

    Raises:
        UsageError: it is not a valid run id (this run's id is too long for it).
    """
    child_id = child_run_id(run.run_id, key)
    try:
        return check_run_id(child_id)
    except UsageError as exc:
        raise UsageError(
            f"run {run.run_id!r} cannot start its child run at {key} under the id it derives "
            f"from its own: {exc}; give the child a run_id="
        ) from None


def _check_not_ancestor(run: RunState, key: str, child_id: str) -> None:
    """Refuse a child whose id is *run*'s own, or that of a run it executes inside of.

    Its call would wait on its own outcome forever. The ancestors known are
    the parents this run executes inside of, in this process (a child that a
    worker took over executes with no parent known).

    Raises:
        UsageError: *child_id* is *run*'s id or an ancestor's.
    """
    chain: list[str] = []
    ancestor: RunState | None = run
    while ancestor is not None:
        chain.append(repr(ancestor.run_id))
        if ancestor.run_id == child_id:
            which = (
                "its own id"
                if ancestor is run
                else f"the id of a run it executes inside of (as a child: {' in '.join(chain)})"
            )
            raise UsageError(
                f"run {run.run_id!r} cannot start run {child_id!r} as its child at {key}: "
                f"that is {which}, so the call would wait on itself forever; give the "
                "child another run_id"
            )
        ancestor = ancestor.parent


async def _journal(
    run: RunState, key: str, position: int, wf: Workflow[..., Any], child_id: str, args: str
) -> None:
    """Journal the child call (durable before the child run is created)."""
    value = dumps({"run_id": child_id, "workflow": wf.name, "version": wf.version})
    entry = run.call_entry(EntryKind.CHILD, key, position, value, at=utcnow(), args_digest=args)
    await run.save([entry])


def _child_of(entry: Entry) -> dict[str, Any]:
    """The value of a ``child`` entry: ``{"run_id", "workflow", "version"}``, checked.

    Raises:
        CheckpointCorruptError: it is not that.
    """
    try:
        data = loads(entry.value or "null")
    except (ValueError, CodecError) as exc:
        data = exc
    if (
        not isinstance(data, dict)
        or set(data) != {"run_id", "workflow", "version"}
        or not isinstance(data["run_id"], str)
        or not data["run_id"]
        or not isinstance(data["workflow"], str)
        or not (data["version"] is None or isinstance(data["version"], str))
    ):
        raise CheckpointCorruptError(
            f"run {entry.run_id!r}: journal entry seq {entry.seq} ({entry.key}) is a child "
            f"run call whose value is not one: {entry.value!r:.200}"
        )
    return data


def _journaled(
    run: RunState,
    key: str,
    position: int,
    wf: Workflow[..., Any],
    run_id: str | None,
    entry: Entry,
    args_digest: str,
) -> str:
    """The id of the child journaled in *entry*, once the call matches it."""

    def diverged(detail: str) -> Exception:
        return run.diverged("child", key, position, detail)

    where = f"it was journaled (seq {entry.seq})"
    run.check_kind(entry, EntryKind.CHILD, "child", key, position)
    if entry.args_digest != args_digest:
        raise diverged(f"{where} with other arguments than it is called with now")
    data = _child_of(entry)
    if data["workflow"] != wf.name:
        raise diverged(f"{where} as a child run of workflow {data['workflow']!r}, not {wf.name!r}")
    if run_id is not None and run_id != data["run_id"]:
        raise diverged(f"{where} as child run {data['run_id']!r}, not {run_id!r}")
    child_id: str = data["run_id"]
    return child_id


def _awaits_message(record: RunRecord) -> bool:
    """Whether the run of *record* is parked until a message is sent to it."""
    return record.status is RunStatus.WAITING and record.wake_at is None


def _elsewhere(engine: Host, record: RunRecord) -> bool:
    """Whether another live owner executes the run of *record* (its lease is not ours)."""
    return (
        record.owner is not None
        and record.lease_expires_at is not None
        and record.owner != engine.owner
        and not owner_is_gone(record.owner)
    )


async def _reattach(
    run: RunState,
    engine: Host,
    key: str,
    wf: Workflow[..., Any],
    args: tuple[Any, ...],
    args_text: str,
    child_id: str,
) -> Any:
    """The child's result: stored, executed here, or waited for (see the module doc)."""
    engine.define(wf)  # its result is decoded by its return annotation, whoever executes it
    not_stored = _NOT_STORED_FIRST
    while True:
        with StoreErrors(f"reading child run {child_id!r}"):
            record = await run.store.get_run(child_id)
        if record is not None:
            _check_same(run, key, wf, args_text, record)
        if record is None or not (_elsewhere(engine, record) or _awaits_message(record)):
            try:
                return await _execute_here(run, engine, wf, args, child_id, record)
            except (RunConflictError, LeaseLostError):
                # Another owner claimed it first, or took it over from us: its
                # outcome is the child's, if it is this very child. Another call
                # may have stored another run under this id since it was read
                # (the conflict was then about that): read it again and check.
                with StoreErrors(f"reading child run {child_id!r}"):
                    again = await run.store.get_run(child_id)
                if again is not None:
                    _check_same(run, key, wf, args_text, again)
            except Waiting as parked:
                if parked.wake_at is not None:
                    # Under a worker, the child parked on its timers: this task waits
                    # for the same moment as a timer does, so the parent may park too.
                    await run.sleep_until(parked.wake_at)
                    continue
                # Parked until a message is sent to it: nothing here can tell
                # when, and a worker executes it then. Wait for its outcome.
        with trio.move_on_after(engine.lease_ttl):
            seen = engine.changes.generation
            try:
                return await engine.wait(child_id)
            except Paused as paused:
                raise _paused(run, paused) from None
            except RunNotFoundError:
                # Not stored yet: another call in this engine (a parent sharing
                # this run_id) is creating it and its claim has not landed, or
                # that creation failed. Look again after a while.
                await engine.changes.wait(seen, not_stored)
                not_stored = min(not_stored * 2, _NOT_STORED_MAX)
        # Still executing elsewhere, being created, or left without an outcome: look again.


async def _execute_here(
    run: RunState,
    engine: Host,
    wf: Workflow[..., Any],
    args: tuple[Any, ...],
    child_id: str,
    record: RunRecord | None,
) -> Any:
    """Run (or resume) the child in this task, with *run* as its parent."""
    token = _starting.set(run)
    try:
        if record is not None and record.version != wf.version:
            # Started under another version: it goes on under that one, if defined here.
            return await engine.resume(child_id)
        return await engine.run(wf, *args, run_id=child_id)
    except Paused as paused:
        raise _paused(run, paused) from None
    finally:
        _starting.reset(token)


def _check_same(
    run: RunState, key: str, wf: Workflow[..., Any], args_text: str, record: RunRecord
) -> None:
    """The stored run *record* is the child this call starts, and not cancelled.

    Raises:
        RunConflictError: it is a run of another workflow or with other arguments.
        RunCancelledError: it is cancelled.
    """
    if record.workflow != wf.name or record.args != args_text:
        raise RunConflictError(
            f"run {record.run_id!r} exists with workflow {record.workflow!r} and arguments "
            f"{record.args:.200}, so it is not the child run of {wf.name!r} with "
            f"{args_text:.200} that run {run.run_id!r} starts at {key}; give the child "
            "another run_id"
        )
    if record.status is RunStatus.CANCELLED:
        raise RunCancelledError(
            f"child run {record.run_id!r} (started by run {run.run_id!r} at {key}) is "
            "cancelled; it never executes again, so this call has no result"
        )


def _paused(run: RunState, paused: Paused) -> ChildPausedError:
    keys = ", ".join(r.key for r in paused.requests) or "none"
    return ChildPausedError(
        f"child run {paused.run_id!r} of run {run.run_id!r} paused on {keys}: respond to it with "
        f"engine.resume({paused.run_id!r}, responses=...), then resume run {run.run_id!r} "
        "(its call returns the child's result then)",
        run_id=paused.run_id,
        requests=tuple(paused.requests),
    )


async def _cancel_child(run: RunState, engine: Host, child_id: str) -> None:
    """The parent is being cancelled: record a cancel for its child too (best effort).

    Under the parent's tracked shield, bounded by ``save_timeout``. (A child
    this engine stopped executing is ``cancelled`` at once.)
    """
    try:
        await run.saver.shielded(f"cancelling child run {child_id!r}", engine.cancel, child_id)
    except (RunNotFoundError, RunConflictError):
        pass  # never created, or completed
    except TetherError as exc:
        log.warning("tether: cancelling child run %s failed: %r", child_id, exc)


async def cancel_children(
    store: Store, run_id: str, cancel: Callable[[str], Awaitable[None]]
) -> None:
    """Record a cancel (*cancel*) for every child run *run_id* started, and theirs.

    For ``engine.cancel``: the children are the runs its journal names in
    ``child`` entries. A child never created (the parent stopped first) or
    completed is left as it is. A checkpoint.

    Raises:
        StoreError, CheckpointCorruptError: a journal cannot be read.
    """
    seen = {run_id}
    todo = [run_id]
    while todo:
        parent = todo.pop()
        with StoreErrors(f"loading the journal of run {parent!r}"):
            entries = await store.load_entries(parent)
        for entry in entries:
            if entry.kind is not EntryKind.CHILD or entry.status is not EntryStatus.COMPLETED:
                continue
            child_id: str = _child_of(entry)["run_id"]
            if child_id in seen:
                continue
            seen.add(child_id)
            try:
                await cancel(child_id)
            except RunNotFoundError:
                continue  # never created
            except RunConflictError:
                pass  # completed: its own children may not be
            todo.append(child_id)
