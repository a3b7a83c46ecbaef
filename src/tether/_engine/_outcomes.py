"""How an execution ends: each outcome stored by one fenced write that releases the lease.

Layer: the engine (``_engine``). An :class:`Outcome` holds what an
:class:`~._execution.Execution` ends with (the run's record as claimed, the
workflow's result or error, whether the lease was released) and stores it:
a returned or failed workflow (:meth:`Outcome.finish`), a settlement stored
as paused or parked (:meth:`Outcome.settle`), an undone resume (a
divergence, a bad response), a recorded cancel. Each is one write of the
run's record, shielded and fenced, that also releases the lease
(:meth:`Outcome.store_status`), then the ``on_run_end`` hook. The execution,
with its scopes and tasks, decides *which* outcome it is; this class knows
nothing of them. An execution that stored no outcome has its lease released
soon after (:meth:`Outcome.release_later`): as it was after a caller
cancellation, and backing off (:func:`redispatch_delay`) after a status
write that failed.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any, Final

import attrs

from .._api._receive import unseen
from .._api._timers import Waiting
from .._api._workflow import Workflow
from .._core._error_info import error_info
from .._core._hooks import HookEvent, Hooks
from .._core._run import RunState
from .._core._store_calls import StoreErrors, mailbox
from .._errors import (
    LeaseLostError,
    NonDeterminismError,
    Paused,
    Request,
    RunCancelledError,
    RunConflictError,
)
from ..stores._records import RunRecord, RunStatus, request_to_json, utcnow
from ..stores._store import Store
from ._ownership import Leases

__all__ = ("REDISPATCH_FIRST", "REDISPATCH_MAX", "Outcome", "redispatch_delay", "wake_if_sent")

log = logging.getLogger("tether")

#: Seconds a run waits to be claimed again after its first execution that
#: could not store its outcome; doubled with each dispatch, up to
#: :data:`REDISPATCH_MAX`.
REDISPATCH_FIRST: Final = 1.0
REDISPATCH_MAX: Final = 300.0


def redispatch_delay(dispatches: int) -> float:
    """Seconds before a run whose outcome was not stored may be claimed again.

    *dispatches* is the run's count of worker claims, this one included:
    :data:`REDISPATCH_FIRST` after the first, doubled after each further
    one, never more than :data:`REDISPATCH_MAX`.
    """
    return min(REDISPATCH_MAX, REDISPATCH_FIRST * 2.0 ** min(max(0, dispatches - 1), 30))


@attrs.define(eq=False)
class Outcome:
    """What one execution ends with, and how it is stored (see the module doc)."""

    store: Store
    hooks: Hooks
    leases: Leases
    state: RunState
    workflow: Workflow[..., Any]
    record: RunRecord  # the run as claimed by this execution
    original: RunRecord  # as stored before this execution (restored by an undo)
    released: bool = False  # a status write stored the outcome and released the lease
    writing: bool = False  # a status write is in flight (see Execution.lease_released)
    result_text: str | None = None  # the encoded result
    error: Exception | None = None  # what the workflow raised, or the outcome to raise

    async def finish(self) -> None:
        """Store the run's final status and call ``on_run_end``."""
        state = self.state
        if self.error is None:
            record = attrs.evolve(
                self.record,
                status=RunStatus.COMPLETED,
                result=self.result_text,
                error=None,
                owner=None,
                updated_at=utcnow(),
            )
        else:
            await self.flush_markers()
            record = attrs.evolve(
                self.record,
                status=RunStatus.FAILED,
                error=error_info(self.error),
                owner=None,
                updated_at=utcnow(),
            )
        try:
            await self.store_status(record, f"storing the final status of run {state.run_id!r}")
        except Exception as exc:
            if self.error is not None:
                self.error.add_note(
                    f"tether: storing run {state.run_id!r} as failed also failed: {exc!r}"
                )
            else:
                self.error = exc
        await self.run_end_hook(self.error)

    async def pause(self, requests: tuple[Request, ...]) -> None:
        """Store the settled run as paused with its requests; raise :class:`Paused`."""
        await self.settle(
            Paused(self.state.run_id, requests),
            status=RunStatus.PAUSED,
            requests=tuple(request_to_json(r) for r in requests),
        )

    async def park(self, wake_at: datetime | None) -> None:
        """Store the settled run as ``waiting`` until *wake_at*, released; raise :class:`Waiting`.

        *wake_at* ``None``: until a message is sent to it (its tasks wait in
        ``tether.receive``). Parking is an outcome: the dispatches this
        worker's claim counted are given back (see ``max_dispatches``), so a
        run that parks often is never set aside for it. A run parked with
        receives waiting reads its mailbox once more after the write, for a
        send that landed before it (:func:`._receive.wake_if_sent`).
        """
        state = self.state
        parked = Waiting(state.run_id, wake_at)
        await self.settle(
            parked, status=RunStatus.WAITING, wake_at=wake_at, requests=(), dispatches=0
        )
        if state.awaited and self.error is parked:
            woken = await wake_if_sent(state, self.store, self.leases)
            if woken is not None:
                self.error = Waiting(state.run_id, woken)

    async def settle(self, outcome: Exception, **changes: Any) -> None:
        """Store the settled run with *changes*, released, and make *outcome* its result.

        The one path of both settled outcomes (paused, waiting). Markers still
        pending are stored first. When the status write fails, its error is
        the outcome (nothing was stored, so resuming settles again); when a
        cancel was recorded meanwhile, the run was stored cancelled instead
        (see :meth:`_store_status`) and that is the outcome.
        """
        state = self.state
        await self.flush_markers()
        record = attrs.evolve(
            self.record,
            result=None,
            error=None,
            owner=None,
            updated_at=utcnow(),
            **changes,
        )
        status = changes["status"]
        try:
            await self.store_status(record, f"storing run {state.run_id!r} as {status}")
        except Exception as exc:
            outcome = exc
        if self.error is not None:
            outcome = self.error
        await self.run_end_hook(outcome)
        self.error = outcome

    async def undo(self, error: BaseException) -> None:
        """Put the run back as it was stored; raise *error*.

        For a response that did not decode, and for a divergence from the
        journal (the code changed): the run keeps its status and error (a
        failed run stays failed with its own error, a paused one paused), so
        it resumes once the code matches its journal again. A worker's claim
        of a diverging run is the exception: put back, the same code would
        claim it again at once, so it is stored ``failed`` with *error*.
        """
        state = self.state
        assert isinstance(error, Exception)
        if self.record.dispatches and isinstance(error, NonDeterminismError):
            # (a worker's claim counts a dispatch; engine.run and resume do not)
            what = f"storing run {state.run_id!r} as failed"
            record = attrs.evolve(
                self.record,
                status=RunStatus.FAILED,
                error=error_info(error),
                owner=None,
                updated_at=utcnow(),
            )
        else:
            what = f"restoring run {state.run_id!r} as it was"
            # As it was, but written with this execution's token, and released.
            record = attrs.evolve(self.original, owner=None, token=self.record.token)
        try:
            await self.store_status(record, what)
        except Exception as exc:
            error.add_note(f"tether: {what} failed too: {exc!r}; resume it to pause it again")
        await self.run_end_hook(error)
        self.error = error

    async def flush_markers(self) -> None:
        """Store the patch markers no save has carried yet (see ``tether.patched``).

        A run that stops here (paused, failed) then says in its journal which
        path it took, for ``tether runs list --patch``. Best effort: a marker
        that is not stored is made again when the run resumes.
        """
        state = self.state
        if state.markers:
            try:
                await state.save(())
            except Exception as exc:
                log.warning(
                    "tether: run %s: storing its patch markers failed: %r", state.run_id, exc
                )

    async def cancelled(self) -> None:
        """A recorded cancel stopped the run: store ``cancelled``; raise RunCancelledError."""
        state = self.state
        record = attrs.evolve(
            self.record,
            status=RunStatus.CANCELLED,
            requests=(),
            result=None,
            error=None,
            owner=None,
            cancel_requested=True,
            updated_at=utcnow(),
        )
        outcome: Exception = RunCancelledError(
            f"run {state.run_id!r} was cancelled (engine.cancel) while it executed here; "
            "its completed steps keep their records"
        )
        try:
            await self.store_status(record, f"storing run {state.run_id!r} as cancelled")
        except Exception as exc:
            outcome = exc
        await self.run_end_hook(outcome)
        self.error = outcome

    def release_later(self, *, stored_nothing: bool) -> None:
        """Have the lease released soon: this execution stored no outcome.

        After a caller cancellation (*stored_nothing* false) the run is
        released as it is, and the dispatch its claim counted is given back.
        After an execution that ended with an error and stored no outcome
        (the status write failed, or an earlier store call: the store is
        down or refused it), the dispatch counts, as for an owner that vanished, and the run is
        released as ``waiting`` until :func:`redispatch_delay` from now, so
        that no worker executes it again before then: executions that cannot
        store their outcome back off and end in ``dead_letter`` at
        ``max_dispatches``, instead of repeating in a loop.
        """
        record = attrs.evolve(self.record, owner=None, updated_at=utcnow())
        if stored_nothing:
            # An engine's own claim (engine.run, resume) counted no dispatch: this
            # execution is one, so that the wait shows as a backoff and counts.
            dispatches = max(record.dispatches, 1)
            delay = timedelta(seconds=redispatch_delay(dispatches))
            record = attrs.evolve(
                record,
                status=RunStatus.WAITING,
                wake_at=self.state.clock.now() + delay,
                dispatches=dispatches,
            )
        self.leases.release_later(record, counts=stored_nothing)

    async def store_status(self, record: RunRecord, what: str) -> None:
        """Write the run's status and release its lease, in one fenced, shielded write.

        A ``failed``, ``paused`` or ``waiting`` outcome that the store turned into
        ``cancelled`` (a cancel was recorded meanwhile) makes the run's
        outcome :class:`RunCancelledError`.
        """
        self.writing = True
        try:
            with StoreErrors(what):
                stored = await self.state.saver.shielded(what, self.store.update_run, record)
        finally:
            self.writing = False
        self.released = True
        if (
            stored is not None
            and stored.status is RunStatus.CANCELLED
            and record.status is not RunStatus.CANCELLED
        ):
            cancelled = RunCancelledError(
                f"run {self.state.run_id!r} was cancelled (engine.cancel) while it executed "
                f"here; it is stored as cancelled instead of {record.status}"
            )
            if self.error is not None:
                cancelled.__context__ = self.error
            self.error = cancelled

    async def run_end_hook(self, exc: BaseException | None) -> None:
        if self.hooks.has("on_run_end"):
            await self.state.end_hook("on_run_end", self.run_event(exc), exc)

    def run_event(self, exc: BaseException | None) -> HookEvent:
        name = self.workflow.name
        return HookEvent(
            run_id=self.state.run_id,
            workflow=name,
            name=name,
            exception=exc,
            token=self.state.token,
            owner=self.leases.owner,
        )


async def wake_if_sent(run: RunState, store: Store, leases: Leases) -> datetime | None:
    """Make the run just parked due now if a message its receives wait for came meanwhile.

    A send makes a *waiting* run due in its own write; one that landed after
    this execution last read the mailbox but before the park write found the
    run ``running``, and did not. So the mailbox is read once more, after the
    park write: if a message of a name the receives waited for
    (``run.awaited``) is there, the run is claimed again and stored
    ``waiting`` and due now, released, so that any worker claims it at once.
    (The claim is needed: a released lease takes no more writes.) Claimed by
    someone else meanwhile (it executes, or was cancelled): nothing to do.

    Returns the new ``wake_at``, or ``None``. Best effort, each call in a
    tracked shield like a status write: a store error is logged (the run then
    waits for its next message, or a resume); the caller's cancellation
    propagates.
    """
    run_id, saver = run.run_id, run.saver
    what = f"reading the mailbox of run {run_id!r} after parking it"
    try:
        with StoreErrors(what):
            read = await saver.shielded(
                what, lambda: mailbox(store).load_messages(run_id, after=run.mailbox_read)
            )
        if not any(m.name in run.awaited for m in unseen(run, list(read))):
            return None
        what = f"making run {run_id!r} due for its messages"
        with StoreErrors(what):
            claimed = await saver.shielded(what, lambda: leases.claim(run_id, current=None))
            if claimed.status is not RunStatus.RUNNING or claimed.owner != leases.owner:
                return None  # it completed meanwhile
            wake_at = run.clock.now()
            due = attrs.evolve(
                claimed, status=RunStatus.WAITING, wake_at=wake_at, owner=None, updated_at=utcnow()
            )
            try:
                await saver.shielded(what, store.update_run, due)
            except BaseException:
                leases.release_later(due)  # never left claimed by nobody
                raise
    except (RunConflictError, RunCancelledError, LeaseLostError):
        return None  # someone else claimed it, or it is cancelled: not ours to wake
    except Exception as exc:
        log.warning(
            "tether: run %s parked as a message came, and making it due failed: %r", run_id, exc
        )
        return None
    return wake_at
