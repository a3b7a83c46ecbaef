"""The store protocols: :class:`Store`, what the engine needs, and its optional extensions.

Layer: stores. :class:`WorkerStore` serves workers, :class:`AdvertisingStore` lets them say
what they serve, :class:`DeletableStore` deletes runs, :class:`WatchableStore`
announces changes. All but the last come with the names of their methods
(:data:`STORE_METHODS`, ...), which the engine and the test tools check a
store by. The protocols say what each call does, atomically and under
cancellation; the records they take and return are in :mod:`._records` and
:mod:`._owners`; which optional parts a store has is :mod:`._capabilities`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

from ._owners import Renewal, Served, WorkerAd

if TYPE_CHECKING:
    # Annotations only (nothing evaluates them at run time: runtime_checkable
    # checks method names): the records' module re-exports these protocols.
    from ._flow import Submission
    from ._queue import Claimed
    from ._records import Entry, RunRecord, RunStatus

__all__ = (
    "ADVERTISE_METHODS",
    "QUEUE_METHODS",
    "QueueingStore",
    "AdvertisingStore",
    "BATCH_METHODS",
    "BatchClaimingStore",
    "ClaimNextFromBatch",
    "DELETE_METHODS",
    "DeletableStore",
    "STORE_METHODS",
    "Store",
    "WORKER_METHODS",
    "WatchableStore",
    "WorkerStore",
)


#: The methods of :class:`Store`, in the order the protocol lists them.
STORE_METHODS: Final = (
    "open",
    "close",
    "create_run",
    "update_run",
    "get_run",
    "list_runs",
    "append",
    "load_entries",
    "claim",
    "renew",
    "cancel_run",
)


@runtime_checkable
class Store(Protocol):
    """What the engine needs from storage.

    Every method is async and a Trio checkpoint unless its store documents
    otherwise; cancelling one leaves the store consistent (the write either
    happened whole or not at all). Reads are strict: a record that cannot be
    read or decoded raises :class:`~tether.CheckpointCorruptError` naming the run
    and location; nothing is skipped to return something older.

    The engine calls :meth:`open` once before use and :meth:`close` once after.

    Run ids follow one rule in every store (:func:`~tether.stores.check_run_id`:
    a ``str`` of 1 to 200 UTF-8 bytes, valid Unicode, without NUL): each
    method that takes one refuses any other with that function's
    :class:`~tether.UsageError` before it touches storage, and keeps every
    valid one exactly, control characters and all.
    """

    async def open(self) -> None:
        """Acquire resources (connections, threads, background tasks)."""

    async def close(self) -> None:
        """Release resources. Called once; pending writes are finished or failed."""

    async def create_run(self, record: RunRecord) -> None:
        """Store a new run record.

        Raises:
            RunConflictError: a run with this id exists.
            UsageError: the run id is not valid (:func:`~tether.stores.check_run_id`).
        """

    async def update_run(self, record: RunRecord) -> RunRecord | None:
        """Replace an existing run record (status, result, error, requests, owner).

        Fenced: in the same atomic step as the write, the store checks the
        record's ``token`` against the run's (see :func:`fenced_update
        <tether.stores.fenced_update>`, which also keeps a recorded cancel).
        Returns the record as stored (the engine tolerates ``None``).

        Raises:
            RunNotFoundError: no run with this id.
            LeaseLostError: the token is not the run's current one; nothing
                was written.
        """

    async def claim(
        self,
        run_id: str,
        owner: str,
        *,
        ttl: float,
        create: RunRecord | None = None,
        takeover: int | None = None,
    ) -> RunRecord:
        """Take the run's lease for *owner* for *ttl* seconds, in one atomic step.

        Reads the run (with its lease), decides with :func:`decide_claim
        <tether.stores.decide_claim>`, writes what it decided, and sets
        *owner*'s lease expiry to now + *ttl* on the store's clock. With
        *create*, a run that is not stored is created already claimed (token
        1). *takeover* is a token whose holder the caller knows to be dead: a
        live lease with exactly that token does not block the claim.

        Returns the claimed record (new token, ``lease_expires_at`` set), or,
        for a completed run, the stored record unchanged.

        Raises:
            RunConflictError: another owner holds a live lease (naming it and
                its expiry), or *create* differs from the stored run.
            RunCancelledError: the run is cancelled or has a recorded cancel.
            RunNotFoundError: no such run and no *create*.
        """

    async def renew(self, owner: str, *, ttl: float, held: Mapping[str, int]) -> Renewal:
        """Extend every lease of *owner* to now + *ttl*: one write, however many runs.

        *held* maps the runs the owner executes to their tokens. Returns which
        of them were lost (another token or owner now) and which have a
        recorded cancel. ``ttl=0`` ends the owner's leases now, so that its
        runs can be claimed at once (tether's engine releases each run in
        its status write instead, but an owner that stops may use it).
        """

    async def cancel_run(self, run_id: str, *, takeover: int | None = None) -> RunRecord:
        """Record a cancel of the run (the one write without a token).

        Decided by :func:`decide_cancel <tether.stores.decide_cancel>` in one
        atomic step: a run held by a live owner gets ``cancel_requested`` (its
        owner stops it); any other unfinished run becomes ``cancelled`` at
        once, its requests cleared. Returns the stored record.

        Raises:
            RunNotFoundError: no run with this id.
            RunConflictError: the run has completed (nothing changes).
        """

    async def get_run(self, run_id: str) -> RunRecord | None:
        """The run record, or ``None`` for an unknown id."""

    async def list_runs(
        self,
        *,
        status: Collection[RunStatus] | None = None,
        workflow: str | None = None,
        after: str | None = None,
        limit: int | None = None,
        version: str | None = None,
        queue: str | None = None,
        key: str | None = None,
    ) -> Sequence[RunRecord]:
        """Run records, oldest first (in creation order), filtered and paged.

        Args:
            status: only runs with one of these statuses.
            workflow: only runs of this workflow.
            after: a run id: only runs created after it (keyset pagination:
                pass the last id of the previous page).
            limit: at most this many records.
            version: only runs started under this workflow version.
            queue: only runs of this queue (``RunRecord.queue``).
            key: only runs submitted with this key (``RunRecord.key``).

        The engine passes *version*, *queue* and *key* only when asked to,
        so a store written before they existed still lists runs.

        Validate the arguments with :func:`check_run_filter
        <tether.stores.check_run_filter>`; stores that scan their records
        apply :meth:`RunFilter.page <tether.stores.RunFilter.page>`.

        Raises:
            UsageError: invalid arguments.
            RunNotFoundError: *after* names no stored run.
        """

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        """Atomically append journal entries to a run; the one journal write.

        Assigns each entry the run's next ``seq`` (distinct and increasing,
        also under concurrent appends) and returns the stored entries. (The
        engine tolerates ``None`` from a store that does not report them:
        the write counts as done, with the seq unknown to hooks.)

        The built-in stores are idempotent: an entry equal to one already
        stored in the run (same :attr:`Entry.idempotency_key`) is not stored
        again; the stored entry is returned in its place. A cancelled append
        either stored its entries whole or stored nothing; when a store cannot
        tell which (a write already handed to a thread), retrying the same
        entries is safe.

        Fenced: every entry's ``token`` must be the run's current one, checked
        in the same atomic step as the write (:func:`check_append
        <tether.stores.check_append>`).

        Raises:
            RunNotFoundError: no run with this id.
            LeaseLostError: an entry's token is not the run's current one;
                nothing was written.
        """

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        """The run's journal in ``seq`` order (empty for an unknown run).

        Strict: a missing seq below the highest, or an entry that does not
        match its checksum, raises :class:`~tether.CheckpointCorruptError`.
        """


@runtime_checkable
class WorkerStore(Store, Protocol):
    """A store that serves workers (``tether.open_worker``): it has :meth:`claim_next`.

    Optional: the engine needs only :class:`Store`; ``open_worker`` refuses a
    store without ``claim_next``. The built-in stores all have it.
    """

    async def claim_next(
        self,
        owner: str,
        *,
        ttl: float,
        workflows: Collection[Served | str],
        max_dispatches: int,
        gone: Collection[str] = (),
        now: datetime | None = None,
    ) -> RunRecord | None:
        """A worker's claim: take the lease of the oldest dispatchable run, in one atomic step.

        *workflows* are the ``(name, version)`` pairs the worker serves (a
        plain name stands for ``(name, None)``, the unversioned workflow;
        :func:`check_served <tether.stores.check_served>` validates them). A
        run matches only its own pair: a worker serving version ``"2"``
        never takes a version ``"1"`` run.

        Dispatchable (:func:`dispatchable
        <tether.stores.dispatchable>`): a run of one of *workflows* that is
        ``queued``, ``waiting`` with a ``wake_at`` no later than *now* (the
        claiming engine's clock, validated by :func:`check_now
        <tether.stores.check_now>`; ``None``: the wall clock), or
        ``running`` without a live lease (no owner, its
        owner's lease expired, or its owner is one of *gone*, owners the
        caller knows to be dead). Candidates are taken oldest first and
        decided by :func:`decide_dispatch <tether.stores.decide_dispatch>`:
        one with a recorded cancel is stored ``cancelled`` and one already
        dispatched *max_dispatches* times is stored ``dead_letter``, and the
        next candidate is tried; otherwise the claim is written (token and
        ``dispatches`` grow by one, status ``running``, owner *owner*) and
        *owner*'s lease expiry set to now + *ttl*, as :meth:`claim` does.

        Concurrent calls, from any process, never claim the same run.

        Returns:
            The claimed record (``lease_expires_at`` set), or ``None`` when
            no run is dispatchable now.
        """


#: Methods a store needs to serve workers (``tether.open_worker``), beyond :data:`STORE_METHODS`.
WORKER_METHODS: Final = ("claim_next",)


@runtime_checkable
class BatchClaimingStore(Protocol):
    """A store whose workers take many runs in one claim (optional; the built-in stores do).

    Workers of a store without it claim one run per :meth:`WorkerStore.claim_next`.
    """

    async def claim_batch(
        self,
        owner: str,
        *,
        ttl: float,
        workflows: Collection[Served | str],
        max_dispatches: int,
        limit: int,
        gone: Collection[str] = (),
        now: datetime | None = None,
    ) -> Sequence[Claimed]:
        """A worker's claim of up to *limit* runs, oldest first, in one atomic step.

        What :meth:`WorkerStore.claim_next` does for one run, for up to
        *limit* (validated by :func:`check_limit <tether.stores.check_limit>`)
        in the same atomic step: candidates are decided by :func:`decide_batch
        <tether.stores.decide_batch>` (so runs with a recorded cancel, or
        dispatched *max_dispatches* times, are stored ``cancelled`` or
        ``dead_letter`` on the way), each claim is written fenced as
        ``claim_next`` writes it, and *owner*'s lease is made to last at least
        until now + *ttl* / 2 (a store may extend it to now + *ttl* every
        time; a store that extends it only when less than *ttl* / 2 is left
        saves a write per claim). Concurrent calls, from any process, never
        claim the same run.

        Returns:
            The claimed runs, oldest first, each with the owner it was taken
            over from (:class:`Claimed <tether.stores.Claimed>`); empty when
            nothing is dispatchable now.
        """


#: Methods of :class:`BatchClaimingStore`.
BATCH_METHODS: Final = ("claim_batch",)


@runtime_checkable
class QueueingStore(Protocol):
    """A store that keeps queues' rules at submit (optional; the built-in stores do).

    ``engine.submit`` with a dedupe id, ``debounce`` or a queue with
    ``max_queued`` needs it; a plain submit of a store without it is its
    ``create_run``.
    """

    async def submit_run(self, submission: Submission) -> str:
        """Keep *submission* (checked by :func:`check_submission
        <tether.stores.check_submission>`) in one atomic step; return the id of
        the run that holds it.

        In that step, read the oldest unfinished run of the submission's queue
        with its dedupe id (:func:`live_dedupe <tether.stores.live_dedupe>`;
        none without a dedupe id) and, when the submission has a
        ``max_queued``, the queue's depth (:func:`pending
        <tether.stores.pending>` runs); decide with :func:`decide_submit
        <tether.stores.decide_submit>`, and write what it says: insert its
        ``create`` (as ``create_run`` does), or store its ``replace``.
        Concurrent submits, from any process, never make two unfinished runs
        of one dedupe id, nor more than ``max_queued`` pending runs.

        Raises:
            QueueFullError: the queue is at ``max_queued``; nothing was stored.
            RunConflictError: a new run's id exists (as ``create_run``); or
                a debounced submit of another workflow than the live run's.
            StoreError: the store failed.
        """


#: Methods of :class:`QueueingStore`.
QUEUE_METHODS: Final = ("submit_run",)


class ClaimNextFromBatch:
    """A store's ``claim_next`` as its ``claim_batch`` of one (a mixin of the built-in stores)."""

    async def claim_next(
        self: BatchClaimingStore,
        owner: str,
        *,
        ttl: float,
        workflows: Collection[Served | str],
        max_dispatches: int,
        gone: Collection[str] = (),
        now: datetime | None = None,
    ) -> RunRecord | None:
        """A worker's claim of the oldest dispatchable run: ``claim_batch`` of one (see
        :meth:`WorkerStore.claim_next`)."""
        got = await self.claim_batch(
            owner,
            ttl=ttl,
            workflows=workflows,
            max_dispatches=max_dispatches,
            limit=1,
            gone=gone,
            now=now,
        )
        return got[0].record if got else None


@runtime_checkable
class AdvertisingStore(Protocol):
    """A store where workers say what they serve, so stranded runs can be found (optional).

    ``open_worker`` advertises through it when the store has these methods,
    and ``engine.list_runs(stranded=True)`` (``tether runs list --stranded``)
    needs them; the built-in stores all have them. Advertisements are kept
    apart from leases: renewing one never extends the other.
    """

    async def advertise(self, owner: str, *, serves: Collection[Served], ttl: float) -> None:
        """Record that worker *owner* serves *serves* until now + *ttl* (store's clock).

        One write, replacing what *owner* advertised before; ``ttl=0``
        withdraws the advertisement. Idempotent. A store may drop expired
        advertisements here.

        Raises:
            UsageError: an invalid owner, ttl, or pair.
        """

    async def list_workers(self) -> Sequence[WorkerAd]:
        """The advertisements that have not expired on the store's clock, by owner.

        Raises:
            CheckpointCorruptError: a stored advertisement cannot be read.
        """


#: Methods of :class:`AdvertisingStore`: what finding stranded runs needs.
ADVERTISE_METHODS: Final = ("advertise", "list_workers")


@runtime_checkable
class DeletableStore(Protocol):
    """A store that can delete a run with its journal (optional).

    Retention (``tether runs prune``) needs it; the engine never calls it,
    so a store without it works everywhere else. The built-in stores all
    have it; :func:`tether.testing.check_store` checks it when present.
    """

    async def delete_run(self, run_id: str) -> bool:
        """Delete the run record and its whole journal, in one atomic step.

        Atomic for every reader, in every process: a read sees the whole run
        or no run (never a record without its journal, never a journal with
        a gap), also after a crash in the middle of the delete. A deleted id
        reads as unknown (``get_run`` returns ``None``, ``load_entries`` an
        empty journal), is gone from ``list_runs``, and can be created again,
        fresh (token 1, an empty journal), by ``create_run`` or ``claim``.
        Whatever the status: choosing which runs may go is the caller's
        (``runs prune`` deletes finished ones).

        Decide with :func:`check_delete <tether.stores.check_delete>` on the
        record read in the same atomic step. Cancelled, it deleted the run
        whole or not at all (a retry is safe).

        Returns:
            ``True`` when the run was deleted, ``False`` when no run has this
            id (nothing changes).

        Raises:
            RunConflictError: an owner holds a live lease on the run (it is
                executing); nothing was deleted.
        """


#: Methods of :class:`DeletableStore`: what deleting runs needs.
DELETE_METHODS: Final = ("delete_run",)


@runtime_checkable
class WatchableStore(Protocol):
    """A store that announces changes, so waiters need not poll (optional).

    ``open_engine`` starts :meth:`watch` in its own nursery when the store
    has it; ``engine.wait`` and workers then wake at once on a change and
    poll only as a fallback.
    """

    async def watch(self, changed: Callable[[], None]) -> None:
        """Call *changed()*, in this Trio run, after changes to runs; never return.

        A change is a committed write of a run record by anyone (a new or
        queued run, a status change, a recorded cancel), in any process.
        Notifications are hints: one may be lost (a dropped connection) or
        stand for several changes, so callers re-read what they wait for.
        Runs until cancelled; store errors are retried, not raised.
        """
