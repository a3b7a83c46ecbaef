"""The save path of one execution, and its other shielded calls.

Layer: the kernel (``_core``).

Every journal entry of an execution is written by one :class:`Saver`, in one
of three ways, cheapest first:

* **At once**, when the store's append completes without blocking (a store
  with ``append_nowait``, such as ``MemoryStore``): no scope, no queue, one
  schedule point for a task that waits for the save.
* **Inline**, when no other save is in flight: the task that completed the
  step appends its entry itself, inside a *tracked shield* (see below).
* **In a batch**, when a save is in flight already: the entry joins the
  queue, and one *saver task* appends everything queued in one ``append``
  call (group commit, for every store). The saver task lives in the
  execution's guard nursery, outside the run's scope: cancellation that
  starts inside the run (a failing sibling, a settlement) never reaches it,
  while the caller's reaches it natively. One batch is bounded by the
  ``save_timeout`` of its oldest save, so no save waits longer than its own
  ``save_timeout`` from the moment it was queued.

A save is *delivered* to whoever waits for it: the task that made it
(:meth:`Saver.save`), or the ``parallel()`` block of a child that handed it
off and ended (:meth:`Saver.hand_off`; the block's exit waits for its
children's saves, so a result is still visible only once it is stored).

A waiting task is *parked* on a low-level wait, a few frames deep: when the
run's own cancellation (framework-owned) reaches it, the wait goes on, as a
shield would; when the caller's does, it ends at once. The two are told
apart without a scope per task: the execution's watcher, which sits above
every task of the run in Trio's cancel tree, marks the caller's cancellation
(:attr:`Saver.caller_cancelled`) while the cancellation is delivered to it,
before Trio delivers it to any task of the run.

*Tracked shields* (:meth:`Saver.tracked_scope`) are for the other calls that
must survive framework cancellation and yield to the caller's: an inline save,
status writes, end hooks. :meth:`Saver.cancel_by_caller` lifts them. Those
shields and the parked waits are the saver's base,
:class:`~tether._core._shields.Shields`; how a store is called (its errors,
its ``append_nowait``) is in ``_store_calls``. This module holds the queue and
the saver task.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from typing import Any, Final, final

import outcome
import trio

from .._errors import LeaseLostError, SaveTimeoutError, StoreError, TetherError
from ..stores._records import Entry, EntryKind
from ..stores._store import Store
from ._shields import Parked, Shields
from ._store_calls import StoreErrors, nowait_append

__all__ = ("Saver",)


def _twin(exc: BaseException) -> BaseException:
    """An exception like *exc* for one more task of a failed batch to raise.

    One exception object is raised in one task only: raised in several, its
    traceback would collect every task's frames, and a group would hold it
    twice. The twin shares the original's traceback (what the store did),
    cause and context; a type that cannot be copied is shared after all.
    """
    try:
        twin = copy.copy(exc)
    except Exception:
        return exc
    if type(twin) is not type(exc):
        return exc
    twin.__cause__ = exc.__cause__
    twin.__context__ = exc.__context__
    twin.__suppress_context__ = exc.__suppress_context__
    twin.__traceback__ = exc.__traceback__
    return twin


def _holds_cancelled(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(trio.Cancelled) is not None
    return isinstance(exc, trio.Cancelled)


class _Pending:
    """One save in the queue: its entries, its deadline, and whom it is delivered to."""

    __slots__ = ("deadline", "entries", "on_done", "parked")

    def __init__(
        self,
        entries: Sequence[Entry],
        deadline: float,
        parked: Parked | None,
        on_done: Callable[[outcome.Outcome[Sequence[Entry]]], None] | None,
    ) -> None:
        self.entries = entries
        self.deadline = deadline
        self.parked = parked
        self.on_done = on_done


#: The saver's queue until a save is queued: one empty list, shared, never written to.
_NO_QUEUE: Final[list[Any]] = []


@final
class Saver(Shields):
    """The saves and shielded calls of one execution (see the module doc).

    Args:
        store: the engine's store.
        run_id: the run whose journal it writes.
        save_timeout: seconds one save (or shielded call) may take.
    """

    __slots__ = ("_busy", "_nowait", "_queue", "next_seq", "nursery", "outer", "store")

    def __init__(self, store: Store, run_id: str, save_timeout: float) -> None:
        super().__init__(run_id, save_timeout)
        self.store = store
        #: where the saver task runs: the execution's guard nursery
        self.nursery: trio.Nursery | None = None
        #: a child run's (tether.child): its parent execution's saver, whose run's
        #: own cancellation reaches this execution's nursery too (see _drain)
        self.outer: Saver | None = None
        #: the store takes entries at once (its append_nowait; a flag, not the bound
        #: method: one per held run)
        self._nowait = nowait_append(store) is not None
        #: the seq the run's next entry gets, when the store takes it at once
        #: (see start_numbering); ``None``: entries are built without one
        self.next_seq: int | None = None
        self._busy = False  # a save is in flight (inline, or the saver task's batch)
        self._queue: list[_Pending] = _NO_QUEUE  # (made by the first save queued)

    def __repr__(self) -> str:
        return f"<tether saver of run {self.run_id!r}: {len(self._queue)} queued>"

    # -- saves -------------------------------------------------------------------

    def start_numbering(self, last_seq: int) -> None:
        """The run's journal ends at *last_seq* (0: empty) as this execution starts.

        For a store that takes entries at once (``append_nowait``), entries
        are then built with the seq they get (:attr:`next_seq`), so the store
        keeps them as they are instead of copying each one. A guess that is
        off (another writer) costs only that copy: the store numbers entries.
        """
        if self._nowait:
            self.next_seq = last_seq + 1

    async def save(self, entries: Sequence[Entry]) -> Sequence[Entry]:
        """Journal *entries* in one append; return them as stored.

        A checkpoint (a schedule point even when the store takes them at
        once). The run's own cancellation (a failing sibling, a settlement, a
        recorded cancel) never cuts it short: it returns once the entries are
        stored, within ``save_timeout``. The caller's cancellation ends it at
        once with ``trio.Cancelled`` (the entries may or may not be stored:
        resuming is safe), and a save begun after the caller cancelled does
        not wait at all.

        Raises:
            trio.Cancelled: the caller cancelled.
            SaveTimeoutError: not stored within ``save_timeout``.
            LeaseLostError: the store refused the run's token (the run stops).
            StoreError: the store failed, or the save was cut short by the
                caller under a shield of the user's own.
        """
        if self.caller_cancelled:
            await self.refuse(entries)
        stored = self.append_now(entries)
        if stored is not None:
            # The one schedule point: a long run of steps must not starve other tasks.
            await trio.lowlevel.cancel_shielded_checkpoint()
            return stored
        if self._busy:
            parked = Parked(self)
            if self._queue is _NO_QUEUE:
                self._queue = []
            self._queue.append(
                _Pending(entries, trio.current_time() + self.save_timeout, parked, None)
            )
            result: Sequence[Entry] = await self.park(parked)
            return result
        self._busy = True
        what = self._what(entries)
        try:
            with StoreErrors(what):
                stored = await self.shielded(what, self.store.append, self.run_id, entries)
        finally:
            self._next()
        return self._checked(stored, entries, what)

    def append_now(self, entries: Sequence[Entry]) -> Sequence[Entry] | None:
        """Journal *entries* at once, when the store can (``append_nowait``); else ``None``.

        Not a checkpoint; the caller checks :attr:`caller_cancelled` first.
        Raises what :meth:`save` raises when the store fails.
        """
        if not self._nowait:
            return None
        try:
            stored: Sequence[Entry] = self.store.append_nowait(  # type: ignore[attr-defined]
                self.run_id, entries
            )
        except LeaseLostError as exc:
            self._lost(exc)
            raise
        except TetherError:
            raise
        except Exception as exc:
            raise StoreError(f"{self._what(entries)} failed: {exc!r}") from exc
        following = self.next_seq
        if following is not None:
            for entry in stored:
                seq = entry.seq
                if seq is not None and seq >= following:
                    following = seq + 1
            self.next_seq = following
        return stored

    def hand_off(
        self,
        entries: Sequence[Entry],
        on_done: Callable[[outcome.Outcome[Sequence[Entry]]], None],
    ) -> None:
        """Queue *entries* for the saver task, without waiting for them.

        *on_done* is called by the saver task, with an ``outcome`` (the stored
        entries, or the error), once they are stored or failed, unless the
        caller cancels first; it must not raise. For a store without
        ``append_nowait`` (see :meth:`append_now`); the caller checks
        :attr:`caller_cancelled` first. Not a checkpoint.
        """
        if self._queue is _NO_QUEUE:
            self._queue = []
        self._queue.append(
            _Pending(entries, trio.current_time() + self.save_timeout, None, on_done)
        )
        if not self._busy:
            self._busy = True
            self._start_saver()

    async def refuse(self, entries: Sequence[Entry]) -> None:
        """A save begun after the caller cancelled: raise at once, saving nothing.

        Raises ``trio.Cancelled`` (a checkpoint), or, under a shield of the
        user's own, a :class:`StoreError`.
        """
        await trio.lowlevel.checkpoint()
        raise StoreError(
            f"{self._what(entries)} was cut short by the caller's cancellation; "
            "the record is not stored (resuming is safe)"
        )

    def _checked(
        self, stored: Sequence[Entry] | None, entries: Sequence[Entry], what: str
    ) -> Sequence[Entry]:
        if stored is None:
            # A store that does not report what it stored (a minimal wrapper
            # that forgot to return): the write succeeded, the seqs are unknown.
            return entries
        if len(stored) != len(entries):
            raise StoreError(f"{what}: the store returned {len(stored)} entries for {len(entries)}")
        return stored

    def _what(self, entries: Sequence[Entry]) -> str:
        keys = ", ".join(e.key for e in entries)
        if entries and all(e.kind is EntryKind.RESPONSE for e in entries):
            return f"saving the responses {keys} in run {self.run_id!r}"
        return f"saving {'step' if len(entries) == 1 else 'steps'} {keys} in run {self.run_id!r}"

    # -- the saver task --------------------------------------------------------------

    def _next(self) -> None:
        """An inline save ended: the saver task takes what queued meanwhile, if anything."""
        if self._queue and not self.caller_cancelled:
            self._start_saver()
        else:
            self._busy = False

    def _start_saver(self) -> None:
        assert self.nursery is not None, "the execution sets the saver's nursery first"
        self.nursery.start_soon(self._drain, name=f"tether saver {self.run_id}")

    async def _drain(self) -> None:
        """The saver task: append what is queued, one batch per call, until nothing is."""
        outer = self.outer
        if outer is None:
            await self._drain_queue()
            return
        # A child run's saver task sits inside its parent's run: shielded from
        # that run's own cancellation, as the parent's saves are, not from the
        # parent's caller (the parent's watcher lifts the shield).
        scope = outer.tracked_scope(math.inf)
        try:
            with scope:
                await self._drain_queue()
        finally:
            outer.untrack(scope)

    async def _drain_queue(self) -> None:
        try:
            while self._queue and not self.caller_cancelled:
                batch, self._queue = self._queue, _NO_QUEUE
                await self._append_batch(batch)
        finally:
            # Cancelled only by the caller: the waits of what is queued are
            # the watcher's to end (cancel_by_caller).
            self._busy = False

    async def _append_batch(self, batch: list[_Pending]) -> None:
        entries = (
            batch[0].entries
            if len(batch) == 1
            else [e for pending in batch for e in pending.entries]
        )
        # Queued in order, each with its own deadline: the oldest is the earliest.
        with trio.CancelScope(deadline=batch[0].deadline) as scope:
            try:
                stored = await self.store.append(self.run_id, entries)
            except BaseException as exc:
                if _holds_cancelled(exc):
                    raise  # the caller's (or the deadline's: the scope catches that one)
                self._fail(batch, exc)
                if isinstance(exc, LeaseLostError):
                    self._lost(exc)
                return
        if self.caller_cancelled:
            return  # the waits are the watcher's to end
        if scope.cancelled_caught:
            for pending in batch:
                self._deliver(
                    pending,
                    outcome.Error(
                        SaveTimeoutError(
                            f"{self._what(pending.entries)} did not finish within save_timeout="
                            f"{self.save_timeout}s; the store may be hung (resuming is safe)"
                        )
                    ),
                )
            return
        if stored is None:
            stored = entries  # see _checked
        elif len(stored) != len(entries):
            what = f"{self._what(entries)}: the store returned {len(stored)} entries"
            self._fail(batch, StoreError(f"{what} for {len(entries)}"))
            return
        start = 0
        for pending in batch:
            end = start + len(pending.entries)
            self._deliver(pending, outcome.Value(stored[start:end]))
            start = end

    def _fail(self, batch: list[_Pending], exc: BaseException) -> None:
        """Deliver the failure of a batch's append to each of its saves, as its own exception."""
        for i, pending in enumerate(batch):
            if isinstance(exc, Exception) and not isinstance(exc, TetherError):
                error: BaseException = StoreError(f"{self._what(pending.entries)} failed: {exc!r}")
                error.__cause__ = exc
            else:
                error = exc if i == 0 else _twin(exc)
            self._deliver(pending, outcome.Error(error))

    def _deliver(self, pending: _Pending, result: outcome.Outcome[Sequence[Entry]]) -> None:
        if pending.parked is not None:
            self.wake(pending.parked, result)
        else:
            assert pending.on_done is not None
            pending.on_done(result)
