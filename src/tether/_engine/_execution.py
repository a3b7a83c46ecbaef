"""One execution of a claimed run: its scopes, its lease, and its outcome.

Layer: the engine (``_engine``). How it ends is stored by its
:class:`~._outcomes.Outcome`; this module decides which outcome it is.

The shape of one execution (see docs/explanation/cancellation.md)::

    engine.run(...)                         caller's task and cancel scopes
    └─ outer scope (timeout=)               the caller's deadline
       └─ lease scope                       cancelled when the run's lease is lost
          └─ guard nursery                  the caller's task waits here: it is the
             │                              watcher, and sees only *caller* cancellation
             ├─ saver task                  (while saves queue) batches of records
             └─ runner task
                └─ run scope                framework-owned
                   └─ the workflow          steps, parallel() blocks and children, ...

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
what ``engine.run`` raises. A lost lease cancels the lease scope, which the
watcher sees exactly as a caller cancellation; ``engine.run`` then raises
:class:`LeaseLostError`.

Every outcome is stored by one fenced write that also releases the lease
(:meth:`Outcome.store_status <tether._engine._outcomes.Outcome.store_status>`);
an execution that stored none (a caller cancellation, a status write that
failed) has its lease released soon after by the engine's lease task (after
a failure, the run backs off before it is claimed again: see
:meth:`Outcome.release_later <tether._engine._outcomes.Outcome.release_later>`).
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import trio
from outcome import Value

from .._codec._values import codec
from .._core._frame import Frame, frame_var
from .._core._nurseries import unwrap_single
from .._core._replay import Replay
from .._core._shields import Parked
from .._core._store_calls import StoreErrors
from .._core._unjournaled import watched
from .._errors import LeaseLostError, RunCancelledError
from ..stores._records import EntryKind, EntryStatus, RunStatus
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
    created: bool = False  # the claim created the run: its journal is empty, not read
    runner_done: bool = False  # the runner task has finished
    _watcher: trio.lowlevel.Task | None = None  # the caller's task, parked until then
    #: a child run's watcher, kept waiting through its parent's run's cancellation
    _parent_wait: Parked | None = None
    lease_scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    lost: LeaseLostError | None = None  # the lease was lost: what engine.run raises
    finished: bool = False  # the workflow returned or raised an Exception
    value: Any = None  # the decoded result

    async def execute(self) -> Any:
        """Execute the claimed run, holding its lease throughout; return or raise its outcome.

        A checkpoint. Caller cancellation is prompt (saves in flight are cut,
        no status is written, the lease is released soon after by the
        engine's lease task); a lost lease stops the run the same way and
        raises :class:`LeaseLostError` (or :class:`RunCancelledError`, when
        the run turns out cancelled).
        """
        state, record = self.outcome.state, self.outcome.record
        state.saver.lose = self._lose
        if state.parent is not None:  # a child run (tether.child): see Saver.outer
            state.saver.outer = state.parent.saver
        self.outcome.leases.hold(
            record.run_id, record.token, lost=self._lose, cancelled=state.request_cancel
        )
        ending: BaseException | None = None
        try:
            with self.lease_scope:
                if self.created:
                    state.saver.start_numbering(0)
                else:
                    await self._load_journal(record.run_id)
                return await self._watch()
        except BaseException as exc:
            ending = exc
            raise
        finally:
            self.outcome.leases.drop(record.run_id)
            if not self.outcome.released and self.lost is None and _releasable(ending):
                # No status was written (a caller cancellation, a store that
                # failed): release the lease without holding up the caller;
                # after a failure, backing off (see Outcome.release_later).
                self.outcome.release_later(stored_nothing=isinstance(ending, Exception))
            del ending
        # Only a lost lease makes the lease scope catch a cancellation.
        assert self.lost is not None
        raise await self._lost_or_cancelled(record.run_id, self.lost)

    def _lose(self, exc: LeaseLostError) -> None:
        """The lease is gone: stop like a caller cancellation (the watcher cuts saves
        short and nothing more is written); ``engine.run`` raises *exc*."""
        if self.lost is None and not self.outcome.released:
            self.lost = exc
            self.lease_scope.cancel()

    async def _load_journal(self, run_id: str) -> None:
        """Load the run's journal for replay (see :mod:`._replay`)."""
        state = self.outcome.state
        with StoreErrors(f"loading the journal of run {run_id!r}"):
            entries = await self.outcome.store.load_entries(run_id)
        state.saver.start_numbering(max((e.seq or 0 for e in entries), default=0))
        for entry in entries:  # in seq order: the last failed attempt of each step wins
            if entry.status is EntryStatus.FAILED and entry.kind is EntryKind.STEP:
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

    async def _watch(self) -> Any:
        """Run the execution's guard nursery; the calling task is its watcher."""
        saver = self.outcome.state.saver
        caller_exc: BaseException | None = None
        try:
            async with trio.open_nursery() as guard:
                saver.nursery = guard  # the saver task runs here, outside the run scope
                guard.start_soon(self._runner, name=f"tether run {self.outcome.record.run_id}")
                # This task is the watcher: it lives outside the run scope, so
                # the only cancellation that reaches it is the caller's.
                try:
                    await self._wait_for_runner()
                except BaseException as exc:  # Cancelled, or KeyboardInterrupt
                    caller_exc = exc
                    # First the cancellation reaches every task of the run (a
                    # KeyboardInterrupt has not yet), then what it cannot reach.
                    guard.cancel_scope.cancel()
                    self.outcome.state.saver.cancel_by_caller()
        except BaseExceptionGroup as group:
            # The runner only lets through what it cannot turn into an outcome
            # (KeyboardInterrupt, SystemExit, an engine bug): raise it as itself.
            raise unwrap_single(group) from None
        if caller_exc is not None:
            # The caller's cancellation wins over whatever the run was doing.
            try:
                raise caller_exc
            finally:
                caller_exc = None
        assert self.finished or self.outcome.error is not None
        if self.outcome.error is not None:
            try:
                raise self.outcome.error
            finally:
                self.outcome.error = None
        return self.value

    async def _wait_for_runner(self) -> None:
        """Wait until the runner is done; the caller's cancellation ends the wait at once.

        A low-level wait, so that the caller's cancellation is recognised
        while Trio delivers it down the cancel tree: this task is above every
        task of the run, so its abort runs before theirs, and marks the
        saver's verdict first; their waits for saves then end at once,
        delivered by Trio itself.
        """
        if self.runner_done:
            await trio.lowlevel.checkpoint()
            return
        saver = self.outcome.state.saver
        parent = self.outcome.state.parent

        def abort(raise_cancel: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
            if (
                parent is not None
                and not parent.saver.caller_cancelled
                and not self.lease_scope.cancel_called
                and self._watcher is not None
            ):
                # A child run (tether.child) whose parent's run was cancelled:
                # framework-owned for this run too, so its saves drain while
                # this waits on; should the parent's caller cancel too, the
                # parent's saver ends the wait (see Saver.keep_waiting).
                self._parent_wait = parent.saver.keep_waiting(self._watcher, raise_cancel)
                return trio.lowlevel.Abort.FAILED
            saver.caller_cancelled = True
            self._watcher = None
            return trio.lowlevel.Abort.SUCCEEDED

        self._watcher = trio.lowlevel.current_task()
        try:
            await trio.lowlevel.wait_task_rescheduled(abort)
        except BaseException:
            if self._parent_wait is not None:  # the parent's caller cancelled
                saver.caller_cancelled = True
                self._watcher = None
            raise

    async def _runner(self) -> None:
        state = self.outcome.state
        try:
            # The run's own scope: what cancels it is framework-owned (a
            # settlement, a recorded cancel, an undo). The workflow runs in
            # this task, under it; its parallel() children in nurseries of
            # their own below.
            with trio.CancelScope() as run_scope:
                state.run_scope = run_scope
                if state.cancel_requested:
                    run_scope.cancel()
                await self._workflow()
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

    async def _workflow(self) -> None:
        """Run the workflow function (a tracked task: the runner, for the while)."""
        state = self.outcome.state
        wf = self.outcome.workflow
        token = frame_var.set(Frame(state, "", trio.lowlevel.current_task()))
        state.task_started()
        try:
            if self.outcome.hooks.has("on_run_start"):
                await self.outcome.hooks.call("on_run_start", self.outcome.run_event(None))
            value = await watched(wf.fn(*self.args), f"workflow {wf.name!r}")
            if state.replay is not None:
                state.replay.ended("", f"workflow {wf.name}")  # every journaled call was reached
            # Encoded at once, like a step's result.
            self.outcome.result_text, decoded = codec.snapshot(
                value,
                wf.signature.return_type,
                what=f"result of workflow {wf.name} (run {state.run_id!r})",
            )
            self.value = decoded
        except Exception as exc:
            self.outcome.error = exc
        finally:
            state.task_done()
            frame_var.reset(token)
        self.finished = True
