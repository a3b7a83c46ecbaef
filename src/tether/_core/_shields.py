"""Tracked shields and parked waits: what the caller's cancellation cuts short.

Layer: the kernel (``_core``).

The base of an execution's :class:`~tether._core._saver.Saver`. A call that
must survive the run's own (framework) cancellation and yield to the caller's
runs in a *tracked shield* (:meth:`Shields.tracked_scope`,
:meth:`Shields.shielded`); a task waiting for a save is *parked*
(:meth:`Shields.park`) on a low-level wait whose abort refuses the run's own
cancellation. The execution's watcher gives the verdict
(:meth:`Shields.cancel_by_caller`): every shield is lifted and every parked
wait ended, now and later. Kept apart from the save queue, which only uses it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar, final

import outcome
import trio

from .._errors import LeaseLostError, SaveTimeoutError, StoreError

__all__ = ("Parked", "Shields")

T = TypeVar("T")


@final
class Parked:
    """A task parked by :meth:`Shields.park`, until :meth:`Shields.wake` or the caller ends it."""

    __slots__ = ("done", "raise_cancel", "saver", "task")

    def __init__(self, saver: Shields) -> None:
        self.saver = saver
        self.task: trio.lowlevel.Task | None = None
        self.raise_cancel: Callable[[], Any] | None = None
        self.done = False

    def abort(self, raise_cancel: Callable[[], Any]) -> trio.lowlevel.Abort:
        saver = self.saver
        if saver.caller_cancelled:
            self.done = True
            saver._parked.pop(self, None)
            return trio.lowlevel.Abort.SUCCEEDED
        # Framework-owned: the wait goes on, as under a shield. Should the
        # caller cancel later, cancel_by_caller raises it with raise_cancel.
        self.raise_cancel = raise_cancel
        return trio.lowlevel.Abort.FAILED


#: What the containers of :class:`Shields` hold until a first write makes them their own
#: (most executions never need them): one empty dict, shared, never written to, so that a
#: held run costs no memory for them.
_NONE_YET: Final[dict[Any, None]] = {}


class Shields:
    """The tracked shields and parked waits of one execution (see the module doc).

    Args:
        run_id: the run they belong to (named in error messages).
        save_timeout: seconds one shielded call may take.
    """

    # (One per held run: no instance dict.)
    __slots__ = ("_parked", "caller_cancelled", "lose", "run_id", "save_timeout", "shields")

    def __init__(self, run_id: str, save_timeout: float) -> None:
        self.run_id = run_id
        self.save_timeout = save_timeout
        #: the caller cancelled (or the lease was lost): set by the watcher,
        #: sticky: saves and shielded calls from now on do not wait at all
        self.caller_cancelled = False
        #: tracked shields open now (cut short by cancel_by_caller; a dict, smaller
        #: than a set while empty, as it is most of the time)
        self.shields: dict[trio.CancelScope, None] = _NONE_YET
        #: the execution's: the store refused a write's token (the lease is gone)
        self.lose: Callable[[LeaseLostError], None] | None = None
        self._parked: dict[Parked, None] = _NONE_YET  # tasks parked now, in order

    def _lost(self, exc: LeaseLostError) -> None:
        # The store refused the write's token: another owner has the run.
        if self.lose is not None:
            self.lose(exc)

    # -- parked tasks ------------------------------------------------------------------

    async def park(self, parked: Parked) -> Any:
        """Wait until :meth:`wake` ends the wait; return what it was woken with.

        The run's own cancellation does not end the wait; the caller's does,
        at once (``trio.Cancelled``). A task parked under a shield of the
        user's own, which the caller's cancellation cannot reach, is woken
        with a :class:`StoreError` instead.
        """
        parked.task = trio.lowlevel.current_task()
        if self._parked is _NONE_YET:
            self._parked = {}
        self._parked[parked] = None
        return await trio.lowlevel.wait_task_rescheduled(parked.abort)

    def keep_waiting(self, task: trio.lowlevel.Task, raise_cancel: Callable[[], Any]) -> Parked:
        """Track a wait of *task* that the run's own cancellation did not end, as :meth:`park` does.

        For a task blocked elsewhere whose abort refused this run's own
        cancellation (a child run's watcher, see ``Execution``):
        :meth:`cancel_by_caller` ends its wait with *raise_cancel*, and
        :meth:`wake` with anything else.
        """
        parked = Parked(self)
        parked.task = task
        parked.raise_cancel = raise_cancel
        if self._parked is _NONE_YET:
            self._parked = {}
        self._parked[parked] = None
        return parked

    def wake(self, parked: Parked, result: outcome.Outcome[Any]) -> None:
        """End *parked*'s wait with *result* (nothing, if its wait has ended already)."""
        if not parked.done:
            parked.done = True
            self._parked.pop(parked, None)
            assert parked.task is not None
            trio.lowlevel.reschedule(parked.task, result)

    # -- caller cancellation -------------------------------------------------------------

    def cancel_by_caller(self) -> None:
        """The caller cancelled: cut every shielded call and every wait short, now and later.

        Call it once the caller's cancellation has been delivered down the
        run's cancel tree (after cancelling the guard nursery). Each tracked
        shield is lifted, so the caller's own cancellation reaches the call
        and propagates from it directly; the scope is cancelled too, so a call
        that user code wrapped in a shield of its own is cut short all the
        same. Parked tasks that the run's own cancellation had reached before
        (they kept waiting through it) are woken with their ``Cancelled``;
        those under a shield of the user's own, which no cancellation
        reaches, with a :class:`StoreError`. (The others were woken by Trio
        already: see :class:`Parked`.)
        """
        self.caller_cancelled = True
        for scope in self.shields:
            scope.shield = False
            scope.cancel()
        for parked in list(self._parked):
            if parked.raise_cancel is not None:
                self.wake(parked, outcome.capture(parked.raise_cancel))
            else:
                self.wake(
                    parked,
                    outcome.Error(
                        StoreError(
                            f"a save of run {self.run_id!r} was cut short by the caller's "
                            "cancellation; the record may not be stored (resuming is safe)"
                        )
                    ),
                )

    def tracked_scope(self, seconds: float) -> trio.CancelScope:
        """A new scope shielded from framework cancellation for *seconds*, tracked.

        :meth:`cancel_by_caller` cuts it short; the caller of this method
        enters it and calls :meth:`untrack` once it has exited.
        """
        scope = trio.CancelScope(
            shield=not self.caller_cancelled, deadline=trio.current_time() + seconds
        )
        if self.caller_cancelled:
            # The verdict is sticky: a scope opened after the caller
            # cancelled does not wait at all.
            scope.cancel()
        if self.shields is _NONE_YET:
            self.shields = {}
        self.shields[scope] = None
        return scope

    def untrack(self, scope: trio.CancelScope) -> None:
        """*scope*, of :meth:`tracked_scope`, has exited."""
        self.shields.pop(scope, None)

    async def shielded(self, what: str, afn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Await ``afn(*args)`` in a tracked shield, bounded by ``save_timeout``.

        *what* names the operation and its run in error messages. A sibling's
        failure cannot interrupt it; the caller's cancellation can (the scope
        is cut short by :meth:`cancel_by_caller`, or starts cut short if the
        caller has already cancelled), and so can ``save_timeout``.

        Raises:
            trio.Cancelled: the caller cancelled.
            SaveTimeoutError: ``save_timeout`` expired first.
            StoreError: cut short by the caller under a shield of the user's own.
            LeaseLostError: the store refused the write's token (the run stops).
        """
        scope = self.tracked_scope(self.save_timeout)
        try:
            with scope:
                return await afn(*args)
        except LeaseLostError as exc:
            self._lost(exc)
            raise
        finally:
            self.untrack(scope)
        # Only reached when the scope caught a cancellation: never pretend the
        # call returned. The caller's cancellation normally propagates through
        # the lifted shield and never gets here; under a shield of the user's
        # own it does, and this checkpoint raises Cancelled if anything can.
        if self.caller_cancelled:
            await trio.lowlevel.checkpoint()
            raise StoreError(
                f"{what} was cut short by the caller's cancellation; "
                "the record may not be stored (resuming is safe)"
            )
        raise SaveTimeoutError(
            f"{what} did not finish within save_timeout="
            f"{self.save_timeout}s; the store may be hung (resuming is safe)"
        )
