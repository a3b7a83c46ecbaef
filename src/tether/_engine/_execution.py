"""One execution of a claimed run: its scopes, its lease, and its outcome.

Layer: the engine (``_engine``). How it ends is stored by its
:class:`~._outcomes.Outcome`; this module decides which outcome it is.

The shape of one execution (see docs/explanation/cancellation.md)::

    engine.run(...)                         caller's task and cancel scopes
    └─ outer scope (timeout=)               the caller's deadline
       └─ guard nursery                     the caller's task waits here: it is the
          │                                 watcher, and sees only *caller* cancellation
          │                                 (and a lost lease's, which cancels this nursery)
          ├─ saver task                     (while saves queue) batches of records
          └─ runner task
             └─ run scope                   framework-owned
                └─ the workflow             steps, parallel() blocks and children, ...

Every record is written by the execution's :class:`~tether._core._saver.Saver`: at once
when the store can, inline in a tracked shield when no other save is in
flight, else in a batch by the saver task, outside the run scope. A task
waiting for its records (a step, or a ``parallel()`` block waiting for its
children's) is parked on a wait that the run's own cancellation (a failing
sibling, a step timeout, a settlement, a recorded cancel) does not end.

The caller's cancellation reaches the watcher first: Trio delivers it down
the cancel tree, and the watcher is above every task of the run, so its
abort marks the saver's verdict before any of the run's tasks sees the
cancellation; their waits then end at once, delivered by Trio itself. The
watcher then cuts every tracked shield short and ends what the
cancellation could not reach, so the run unwinds within Trio's own delivery
latency even when the store hangs, and the caller's own ``Cancelled`` is
what ``engine.run`` raises. A lost lease cancels the guard nursery (or the
journal's load, before it), which the watcher sees exactly as a caller
cancellation; ``engine.run`` then raises :class:`LeaseLostError`. (A scope of
its own for the lease would cost memory for as long as the run is held.)

Every outcome is stored by one fenced write that also releases the lease
(:meth:`Outcome.store_status <tether._engine._outcomes.Outcome.store_status>`);
an execution that stored none (a caller cancellation, a status write that
failed) has its lease released soon after by the engine's lease task (after
a failure, the run backs off before it is claimed again: see
:meth:`Outcome.release_later <tether._engine._outcomes.Outcome.release_later>`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import attrs
import trio
from outcome import Value

from .._codec._values import codec
from .._core._frame import Frame, frame_var
from .._core._nurseries import unwrap_single
from .._core._replay import Replay
from .._core._run import own
from .._core._shields import Parked
from .._core._store_calls import StoreErrors
from .._core._unjournaled import watched
from .._errors import LeaseLostError, RunCancelledError
from ..stores._records import Entry, EntryKind, EntryStatus, RunStatus
from ._outcomes import Outcome

__all__ = ("Execution",)

log = logging.getLogger("tether")


def _first_cancelled(exc: BaseException) -> BaseException:
    """The first ``Cancelled`` inside *exc* (usually a group of them), else *exc*."""
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            found = _first_cancelled(sub)
            if isinstance(found, trio.Cancelled):
                return found
    return exc


def _only_cancelled(exc: BaseException) -> bool:
    """Whether *exc* is ``Cancelled``, or a group of nothing else."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_cancelled(e) for e in exc.exceptions)
    return isinstance(exc, trio.Cancelled)


def _releasable(exc: BaseException | None) -> bool:
    """Whether an execution that ended with *exc* releases its lease.

    After an outcome, an error or a cancellation, yes. Not after what ends
    the process (KeyboardInterrupt, SystemExit, a simulated crash): a
    process that is going away writes nothing more, and its lease expires
    (on this machine, it is taken over at once once the process is gone).
    """
    if exc is None:
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(_releasable(e) for e in exc.exceptions)
    return isinstance(exc, Exception | trio.Cancelled)


@attrs.define(eq=False)
class Execution:
    """One execution of a claimed run, from its lease to its outcome (see the module doc)."""

    #: what it ends with, and how that is stored; it holds the run's state,
    #: workflow, store, hooks and leases, which the execution uses too
    outcome: Outcome
    args: tuple[Any, ...]
    #: the runs executing in this engine (the launcher's): this one leaves it when it ends
    active: set[str]
    created: bool = False  # the claim created the run: its journal is empty, not read
    #: the run's journal as its claim read it (a worker's batched claim), not read again
    journal: Sequence[Entry] | None = None
    runner_done: bool = False  # the runner task has finished
    _watcher: trio.lowlevel.Task | None = None  # the caller's task, parked until then
    #: a child run's watcher, kept waiting through its parent's run's cancellation
    _parent_wait: Parked | None = None
    #: what a lost lease cancels: a scope of the journal's load, then the guard
    #: nursery's (no scope of its own for the whole execution: it would cost
    #: memory for as long as the run is held)
    _lease_scope: trio.CancelScope | None = None
    lost: LeaseLostError | None = None  # the lease was lost: what engine.run raises
    finished: bool = False  # the workflow returned or raised an Exception
    value: Any = None  # the decoded result

    async def execute(self) -> Any:
        """Execute the claimed run, holding its lease throughout; return or raise its outcome.

        A checkpoint. Caller cancellation is prompt (saves in flight are cut,
        no status is written, the lease is released soon after by the
        engine's lease task); a lost lease stops the run the same way and
        raises :class:`LeaseLostError` (or :class:`RunCancelledError`, when
        the run turns out cancelled). The run leaves :attr:`active` however this ends.

        The calling task runs the guard nursery and is its watcher (one frame for
        both, held as long as the run). Its low-level wait sees the caller's
        cancellation while Trio delivers it down the cancel tree: this task is above
        every task of the run, so its abort (:meth:`_abort`) runs first, and marks the
        saver's verdict; their waits for saves then end at once, delivered by Trio
        itself. A lost lease cancels the guard nursery: the watcher sees it exactly as
        a caller cancellation.
        """
        state, record = self.outcome.state, self.outcome.record
        saver = state.saver
        try:
            self._hold()
            ending: BaseException | None = None
            caller_exc: BaseException | None = None
            try:
                if self.created:
                    saver.start_numbering(0)
                elif self.journal is not None:
                    await self._claimed_journal(record.run_id)
                else:
                    with trio.CancelScope() as self._lease_scope:
                        await self._load_journal(record.run_id)
                    self._lease_scope = None
                if self.lost is None:
                    try:
                        async with trio.open_nursery() as guard:
                            self._lease_scope = guard.cancel_scope
                            saver.nursery = guard  # the saver task runs here, not in the run
                            guard.start_soon(self._runner, name=f"tether run {record.run_id}")
                            # This task is the watcher: it lives outside the run scope, so
                            # the only cancellation that reaches it is the caller's (or the
                            # lost lease's, on the guard's scope).
                            try:
                                if self.runner_done:
                                    await trio.lowlevel.checkpoint()
                                else:
                                    self._watcher = trio.lowlevel.current_task()
                                    await trio.lowlevel.wait_task_rescheduled(self._abort)
                            except BaseException as exc:  # Cancelled, or KeyboardInterrupt
                                if self._parent_wait is not None:  # the parent's caller
                                    saver.caller_cancelled = True  # cancelled
                                    self._watcher = None
                                caller_exc = exc
                                # First the cancellation reaches every task of the run (a
                                # KeyboardInterrupt has not yet), then what it cannot reach.
                                guard.cancel_scope.cancel()
                                saver.cancel_by_caller()
                    except BaseExceptionGroup as group:
                        # The runner only lets through what it cannot turn into an outcome
                        # (KeyboardInterrupt, SystemExit, an engine bug): raise it as itself.
                        raise unwrap_single(group) from None
                    finally:
                        self._lease_scope = None
                    if not self._lease_stopped(caller_exc, guard.cancel_scope):
                        if caller_exc is not None:
                            # The caller's cancellation wins over whatever the run was doing.
                            raise caller_exc
                        return self._outcome_of_run()
            except BaseException as exc:
                ending = exc
                raise
            finally:
                caller_exc = None
                self._release(ending)
                del ending
            # Only a lost lease stops the execution without an outcome or an error.
            assert self.lost is not None
            raise await self._lost_or_cancelled(record.run_id, self.lost)
        finally:
            self.active.discard(record.run_id)
            self._unlink()

    def _unlink(self) -> None:
        """The execution has ended: cut the references that make the run's objects a
        cycle (the saver's ``lose`` is this execution's, its nursery holds the task that
        awaited it; a lost lease's error, raised, holds this frame), so that they are
        freed at once, not left to the cyclic garbage collector, whose collections cost a
        worker more the more runs it executes."""
        saver = self.outcome.state.saver
        saver.lose = None
        saver.nursery = None
        self.lost = None

    def _hold(self) -> None:
        """Renew the run's lease from now on (the engine's lease task does)."""
        state, record = self.outcome.state, self.outcome.record
        state.saver.lose = self.lease_lost
        if state.parent is not None:  # a child run (tether.child): see Saver.outer
            state.saver.outer = state.parent.saver
        self.outcome.leases.hold(record.run_id, record.token, self)

    def _release(self, ending: BaseException | None) -> None:
        """The execution ends with *ending* (``None``: with a value, or a lost lease): stop
        renewing the lease, and release it if no outcome did."""
        self.outcome.leases.drop(self.outcome.record.run_id)
        if not self.outcome.released and self.lost is None and _releasable(ending):
            # No status was written (a caller cancellation, a store that
            # failed): release the lease without holding up the caller;
            # after a failure, backing off (see Outcome.release_later).
            self.outcome.release_later(stored_nothing=isinstance(ending, Exception))

    def _lease_stopped(self, caller_exc: BaseException | None, guard: trio.CancelScope) -> bool:
        """Whether the lost lease stopped the run: it cancelled the *guard* scope, whose
        cancellation ended the watcher's wait (*caller_exc*) or the nursery's. A caller
        whose own scope is cancelled too gets its cancellation, as if no lease was lost.
        Not once this execution's outcome is stored: the write that stored it released
        the lease, so a renewal answered meanwhile reports that release as a loss."""
        return (
            self.lost is not None
            and not self.outcome.released
            and (
                (
                    isinstance(caller_exc, trio.Cancelled)
                    and trio.current_effective_deadline() != -math.inf
                )
                or (caller_exc is None and guard.cancelled_caught)
            )
        )

    def _outcome_of_run(self) -> Any:
        """The workflow's decoded result, once the runner is done; or raise its error."""
        assert self.finished or self.outcome.error is not None
        if self.outcome.error is not None:
            try:
                raise self.outcome.error
            finally:
                self.outcome.error = None
        return self.value

    def lease_lost(self, exc: LeaseLostError) -> None:
        """The lease is gone: stop like a caller cancellation (the watcher cuts saves
        short and nothing more is written); ``engine.run`` raises *exc*."""
        if self.lost is None and not self.outcome.released:
            self.lost = exc
            if self._lease_scope is not None:
                self._lease_scope.cancel()

    def lease_released(self, exc: LeaseLostError) -> None:
        """A renewal found the run released with this execution's token. While a status
        write is in flight, that write did it (the renewal's answer came before the
        write's) or, if a cancel was recorded after the lease lapsed, the write's fence
        refuses it: either way the write's answer, on its way, decides, and cutting it
        short would end a run whose outcome is stored with a :class:`LeaseLostError`.
        Otherwise the lease is lost (*exc*)."""
        if not self.outcome.writing:
            self.lease_lost(exc)

    def cancel_recorded(self) -> None:
        """A cancel was recorded for the run: stop it (framework-owned, saves drain)."""
        self.outcome.state.request_cancel()

    async def _load_journal(self, run_id: str) -> None:
        """Load the run's journal for replay (see :mod:`._replay`)."""
        with StoreErrors(f"loading the journal of run {run_id!r}"):
            entries = await self.outcome.store.load_entries(run_id)
        self._use_journal(run_id, entries)

    async def _claimed_journal(self, run_id: str) -> None:
        """Replay from the journal the worker's claim read (see :mod:`._replay`).

        Nothing to wait for: no scope for a lost lease, no schedule point (the
        guard nursery's wait is the execution's); a cancelled caller stops here.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        entries, self.journal = self.journal, None  # (not kept while the run is held)
        assert entries is not None
        self._use_journal(run_id, entries)

    def _use_journal(self, run_id: str, entries: Sequence[Entry]) -> None:
        """Replay from the run's journal *entries* (see :mod:`._replay`)."""
        state = self.outcome.state
        state.saver.start_numbering(max((e.seq or 0 for e in entries), default=0))
        for entry in entries:  # in seq order: the last failed attempt of each step wins
            if entry.status is EntryStatus.FAILED and entry.kind is EntryKind.STEP:
                state.failures = own(state.failures)
                state.failures[entry.key] = entry
        replay = Replay(run_id, entries, state.abort)
        state.journal = replay.journal
        if replay:
            state.replay = replay

    async def _lost_or_cancelled(self, run_id: str, lost: LeaseLostError) -> Exception:
        """What a lost lease raises: RunCancelledError when the run turns out cancelled.

        One read, bounded by a renewal interval so a lost lease stays prompt
        when the store does not answer (then it is the LeaseLostError).
        """
        record = None
        with trio.move_on_after(self.outcome.leases.ttl / 3):
            try:
                record = await self.outcome.store.get_run(run_id)
            except Exception as exc:
                lost.add_note(f"tether: reading run {run_id!r} afterwards failed too: {exc!r}")
        if record is not None and record.status is RunStatus.CANCELLED:
            cancelled = RunCancelledError(
                f"run {run_id!r} was cancelled (engine.cancel) while it executed here; "
                "its completed steps keep their records"
            )
            cancelled.__cause__ = lost
            return cancelled
        return lost

    def _abort(self, raise_cancel: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        """The watcher's wait is cancelled (see :meth:`execute`)."""
        parent = self.outcome.state.parent
        if (
            parent is not None
            and not parent.saver.caller_cancelled
            and self.lost is None
            and self._watcher is not None
        ):
            # A child run (tether.child) whose parent's run was cancelled:
            # framework-owned for this run too, so its saves drain while
            # this waits on; should the parent's caller cancel too, the
            # parent's saver ends the wait (see Saver.keep_waiting).
            self._parent_wait = parent.saver.keep_waiting(self._watcher, raise_cancel)
            return trio.lowlevel.Abort.FAILED
        self.outcome.state.saver.caller_cancelled = True
        self._watcher = None
        return trio.lowlevel.Abort.SUCCEEDED

    async def _runner(self) -> None:
        """The runner task: the workflow, under the run's scope (one frame for both: it is
        held as long as the run), then its outcome."""
        state = self.outcome.state
        try:
            # The run's own scope: what cancels it is framework-owned (a
            # settlement, a recorded cancel, an undo). The workflow runs in
            # this task, under it, as a tracked task; its parallel() children
            # in nurseries of their own below.
            with trio.CancelScope() as run_scope:
                state.run_scope = run_scope
                if state.cancel_requested:
                    run_scope.cancel()
                wf = self.outcome.workflow
                token = frame_var.set(Frame(state, "", trio.lowlevel.current_task()))
                state.task_started()
                try:
                    if self.outcome.hooks.has("on_run_start"):
                        await self.outcome.hooks.call("on_run_start", self.outcome.run_event(None))
                    value = await watched(wf.fn(*self.args), _what(wf.name))
                    if state.replay is not None:
                        state.replay.ended("", f"workflow {wf.name}")  # every call was reached
                    # Encoded at once, like a step's result.
                    self.outcome.result_text, self.value = codec.snapshot(
                        value,
                        wf.signature.return_type,
                        what=f"result of workflow {wf.name} (run {state.run_id!r})",
                    )
                except Exception as exc:
                    self.outcome.error = exc
                finally:
                    state.task_done()
                    frame_var.reset(token)
                    del token
                self.finished = True
            if state.aborted is not None:
                await self.outcome.undo(state.aborted)
            elif state.cancel_requested and not self.finished:
                await self.outcome.cancelled()
            elif not self.finished and state.parked:
                await self.outcome.park(
                    state.wake_at
                )  # settled on timers or receives, under a worker
            elif not self.finished:
                # Only a settlement cancels the run's scope and leaves the
                # workflow unfinished.
                assert state.settled is not None
                await self.outcome.pause(state.settled)
            else:
                await self.outcome.finish()
        except BaseException as exc:
            if state.saver.caller_cancelled:
                # The caller's task raises the caller's cancellation; what the
                # run was unwinding (Cancelled, a sibling's error) ends here.
                await self.outcome.run_end_hook(_first_cancelled(exc))
                return
            if state.parent is not None and _only_cancelled(exc):
                # A child run stopped by its parent's run (framework-owned: its
                # saves drained): no status, so it stays resumable; unless the
                # parent is being cancelled (engine.cancel): then so is this run.
                if state.cancel_requested or state.parent.cancel_requested:
                    await self.outcome.cancelled()
                else:
                    await self.outcome.run_end_hook(_first_cancelled(exc))
            raise
        finally:
            self.runner_done = True
            if self._watcher is not None:
                watcher, self._watcher = self._watcher, None
                if self._parent_wait is not None:  # parked on the parent's saver: once
                    self._parent_wait.saver.wake(self._parent_wait, Value(None))
                else:
                    trio.lowlevel.reschedule(watcher)


#: ``workflow 'name'``, by workflow name: what the unjournaled-await warning calls a
#: workflow's body (one string per workflow, not one per run)
_whats: dict[str, str] = {}


def _what(name: str) -> str:
    what = _whats.get(name)
    if what is None:
        what = _whats[name] = f"workflow {name!r}"
    return what
