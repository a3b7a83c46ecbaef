"""Acting on a run through the store without executing it: submit, wait and cancel.

Layer: the engine (``_engine``).

These are the engine calls that work from any process sharing the store:
``submit`` stores a ``queued`` run for a worker, ``wait`` reads a run until
it finishes or pauses, ``cancel`` records a cancel that the run's owner (or
nobody, when the owner is gone) acts on. None of them claims a lease or
starts a task; the engine's methods check their arguments and call these.
"""

from __future__ import annotations

from collections.abc import Set
from datetime import datetime, timedelta
from typing import Any, Final, cast

import attrs

from .._api._children import cancel_children
from .._api._workflow import Workflow
from .._core._changes import Changes
from .._core._owners import owner_is_gone
from .._core._store_calls import StoreErrors
from .._errors import (
    ErrorInfo,
    Paused,
    RunConflictError,
    RunFailedError,
    RunNotFoundError,
    UsageError,
)
from ..stores._capabilities import Capability, has
from ..stores._flow import MAX_DEBOUNCE, Queue, Submission, is_seconds
from ..stores._leases import version_conflict
from ..stores._records import DEFAULT_QUEUE, RunRecord, RunStatus, utcnow
from ..stores._run_ids import check_identifier
from ..stores._store import QueueingStore, Store
from ._info import Defined, check_not_cancelled, decode_result, pending_requests
from ._ownership import Leases

__all__ = ("Placement", "check_placement", "record_cancel", "submit_run", "wait_for_run")

#: engine.wait reads a waiting run again after this long at first, doubling to _MAX_POLL.
_FIRST_POLL: Final = 0.01
_MAX_POLL: Final = 1.0


@attrs.frozen
class Placement:
    """Where ``engine.submit`` puts a run: its queue and the flow-control options, checked."""

    queue: Queue | None = None
    key: str | None = None
    dedupe: str | None = None
    debounce: float | None = None
    not_before: datetime | None = None

    @property
    def needs_rules(self) -> bool:
        """Whether only a store that keeps queues' rules at submit can store it (else the
        submit is a plain ``create_run``)."""
        limited = self.queue is not None and self.queue.max_queued is not None
        return self.dedupe is not None or limited


def check_placement(
    queue: object, key: object, dedupe: object, debounce: object, not_before: object
) -> Placement:
    """``engine.submit``'s flow-control arguments, checked.

    Raises:
        UsageError: *queue* not a :class:`tether.Queue`; a *key* or *dedupe*
            id that breaks the rule of names; *debounce* without *dedupe*, with
            *not_before*, or not positive seconds; *not_before* not a
            timezone-aware datetime.
    """
    if queue is not None and not isinstance(queue, Queue):
        raise UsageError(f"queue= takes a tether.Queue or None, not {queue!r:.100}")
    if key is not None:
        check_identifier(key, "key")
    if dedupe is not None:
        check_identifier(dedupe, "dedupe id")
    if debounce is not None:
        if dedupe is None:
            raise UsageError("debounce= needs dedupe=: it debounces the submits of one dedupe id")
        if not_before is not None:
            raise UsageError("debounce= and not_before= both set the start: give one of them")
        if not is_seconds(debounce, MAX_DEBOUNCE):
            raise UsageError(
                f"debounce= must be positive seconds, at most {MAX_DEBOUNCE:.0f}, not "
                f"{debounce!r:.100}"
            )
    if not_before is not None and not (
        isinstance(not_before, datetime) and not_before.utcoffset() is not None
    ):
        raise UsageError(f"not_before= must be a timezone-aware datetime, not {not_before!r:.100}")
    return Placement(queue, key, dedupe, debounce, not_before)  # type: ignore[arg-type]


async def submit_run(
    store: Store,
    changes: Changes,
    wf: Workflow[..., Any],
    run_id: str,
    args_text: str,
    placement: Placement,
    now: datetime,
) -> str:
    """Store the run *run_id* of *wf* for a worker, and return its id, or the id of the
    run that holds its dedupe id; or find it stored with these arguments.

    The run is ``queued``; or ``waiting`` until its start (*placement*'s
    ``not_before``, or *now* + ``debounce``: *now* is the engine's clock, which
    workers compare ``wake_at`` with), claimed by workers once due.
    What :meth:`Engine.submit <tether.Engine.submit>` does once its arguments
    are checked and encoded (*args_text*); see there for cancellation and errors.
    """
    created = utcnow()
    start = None
    if placement.debounce is not None:
        start = now + timedelta(seconds=placement.debounce)
    elif placement.not_before is not None and placement.not_before > now:
        start = placement.not_before
    record = RunRecord(
        run_id=run_id,
        workflow=wf.name,
        version=wf.version,
        args=args_text,
        status=RunStatus.QUEUED if start is None else RunStatus.WAITING,
        wake_at=start,
        created_at=created,
        updated_at=created,
        queue=DEFAULT_QUEUE if placement.queue is None else placement.queue.name,
        key=placement.key,
        dedupe=placement.dedupe,
    )
    # A submit without rules to keep is a plain create_run, on every store.
    if placement.needs_rules and not has(store, Capability.QUEUES):
        raise UsageError(
            f"{store!r} does not keep queues' rules at submit (submit_run): it cannot "
            "take a dedupe id or a queue with max_queued"
        )
    with StoreErrors(f"submitting run {run_id!r}"):
        try:
            if placement.needs_rules:
                submission = Submission(
                    record,
                    max_queued=None if placement.queue is None else placement.queue.max_queued,
                    debounce=placement.debounce is not None,
                )
                run_id = await cast(QueueingStore, store).submit_run(submission)
            else:
                await store.create_run(record)
        except RunConflictError:
            existing = await store.get_run(run_id)
            if existing is None:
                raise
            if (existing.workflow, existing.args) != (wf.name, args_text):
                raise RunConflictError(
                    f"run {run_id!r} exists with workflow {existing.workflow!r} and "
                    f"arguments {existing.args:.200}, not {wf.name!r} with "
                    f"{args_text:.200}; choose a new run_id"
                ) from None
            if existing.version != wf.version:
                raise version_conflict(existing, wf.version) from None
            return run_id
    if start is None:
        changes.notify()
    else:
        changes.due_at(start)  # (a debounced run's start moved: the latest counts)
    return run_id


async def wait_for_run(store: Store, changes: Changes, run_id: str, defined: Defined) -> Any:
    """Read the run until it finishes or pauses; its result (decoded when *defined* knows it).

    What :meth:`Engine.wait <tether.Engine.wait>` does inside its deadline;
    see there for what it raises. Waits forever: the caller bounds it.
    """
    poll = _FIRST_POLL
    while True:
        seen = changes.generation
        with StoreErrors(f"reading run {run_id!r}"):
            record = await store.get_run(run_id)
        if record is None:
            raise RunNotFoundError(f"no run {run_id!r} in {store!r}")
        if record.status is RunStatus.COMPLETED:
            return decode_result(record, defined(record))
        if record.status in (RunStatus.FAILED, RunStatus.DEAD_LETTER):
            error = record.error or ErrorInfo(type="unknown", message="(no error stored)")
            where = f" in step {error.key}" if error.key else ""
            raise RunFailedError(
                f"run {run_id!r} {record.status.value.replace('_', '-')}{where}: "
                f"{error.type}: {error.message}",
                run_id=run_id,
                error=error,
            )
        if record.status is RunStatus.CANCELLED:
            check_not_cancelled(record)
        if record.status is RunStatus.PAUSED:
            raise Paused(run_id, pending_requests(record))
        await changes.wait(seen, poll)
        poll = min(poll * 2, _MAX_POLL)


async def record_cancel(store: Store, leases: Leases, active: Set[str], run_id: str) -> None:
    """Record the cancel of *run_id*, then of its unfinished child runs (and theirs).

    What :meth:`Engine.cancel <tether.Engine.cancel>` does; see there for
    cancellation and errors. *leases* are the cancelling engine's, *active*
    the runs executing in it now.
    """

    async def cancel_one(run_id: str) -> None:
        with StoreErrors(f"cancelling run {run_id!r}"):
            record = await store.get_run(run_id)
            if record is None:
                raise RunNotFoundError(f"no run {run_id!r} in {store!r}")
            takeover = None
            if (
                record.owner is not None
                and record.lease_expires_at is not None
                and (
                    owner_is_gone(record.owner)
                    # ours, and no longer executing here (a caller cancelled it;
                    # its release is pending): nobody executes it either
                    or (record.owner == leases.owner and run_id not in active)
                )
            ):
                takeover = record.token  # its owner is gone: cancelled at once
            stored = await store.cancel_run(run_id, takeover=takeover)
        held = leases.held.get(run_id)
        if held is not None and stored.cancel_requested and stored.token == held.token:
            held.holder.cancel_recorded()

    await cancel_one(run_id)
    await cancel_children(store, run_id, cancel_one)
