"""Queue and listing rules, shared by every store.

Layer: stores (``tether.stores``).

As with :mod:`._leases`, a store reads inside one atomic step, calls one of
these pure functions, and writes what it returns in that same step:

- :func:`check_run_filter` validates ``list_runs``'s filters into a
  :class:`RunFilter`, whose :meth:`~RunFilter.page` serves stores that scan
  their records in creation order (stores with indexes query instead, with
  the same meaning);
- :func:`check_served` validates the ``(workflow, version)`` pairs a worker
  serves; :func:`serves` says whether a run is one of them (a run matches
  only its own version);
- :func:`dispatchable` says which runs a worker's ``claim_next`` may take
  (a ``waiting`` run once :func:`due`), and :func:`stranded` which waiting
  runs no live worker serves;
- :func:`decide_dispatch` what taking one writes: the claim, or, for a run
  with a recorded cancel or one that keeps killing its workers, its final
  ``cancelled`` or ``dead_letter`` record; :func:`decide_batch` the same for
  the candidates of one batched claim, oldest first, up to its limit.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from typing import Any, Final, Protocol

import attrs

from .._errors import ErrorInfo, RunNotFoundError, UsageError
from ._leases import cancelled_record
from ._owners import Served
from ._records import Entry, RunRecord, RunStatus, utcnow
from ._run_ids import check_identifier, check_run_id

__all__ = (
    "DEAD_LETTER_ERROR",
    "Claimed",
    "Dispatch",
    "Placed",
    "RunFilter",
    "MAX_BATCH",
    "check_limit",
    "check_max_dispatches",
    "check_now",
    "check_run_filter",
    "claimed_from",
    "check_served",
    "decide_batch",
    "decide_dispatch",
    "dispatchable",
    "due",
    "serves",
    "stranded",
    "waiting",
)

#: ``ErrorInfo.type`` of a run set aside as ``dead_letter``.
DEAD_LETTER_ERROR: Final = "tether.DeadLetter"

#: The largest page ``list_runs`` returns in one call (and the default).
_MAX_LIMIT: Final = 10**6


@attrs.frozen
class RunFilter:
    """Validated ``list_runs`` arguments (see :meth:`tether.stores.Store.list_runs`)."""

    status: frozenset[RunStatus] | None = None
    workflow: str | None = None
    after: str | None = None
    limit: int | None = None
    version: str | None = None
    queue: str | None = None
    key: str | None = None

    def given(self, **changes: Any) -> dict[str, Any]:
        """These filters, with *changes*, as ``list_runs`` keyword arguments: only those
        given (not ``None``), as stores written before some of them existed take them."""
        fields = attrs.asdict(self, recurse=False) | changes
        return {name: value for name, value in fields.items() if value is not None}

    def matches(self, record: RunRecord) -> bool:
        """Whether *record* passes the status, workflow, version, queue and key filters."""
        return (
            (self.status is None or record.status in self.status)
            and (self.workflow is None or record.workflow == self.workflow)
            and (self.version is None or record.version == self.version)
            and (self.queue is None or record.queue == self.queue)
            and (self.key is None or record.key == self.key)
        )

    def page(self, records: Iterable[RunRecord]) -> list[RunRecord]:
        """The page of *records* (all runs, in creation order) these filters select.

        Raises:
            RunNotFoundError: :attr:`after` is not among *records*.
        """
        it = iter(records)
        if self.after is not None:
            for record in it:
                if record.run_id == self.after:
                    break
            else:
                raise RunNotFoundError(f"list_runs(after={self.after!r}): no such run to page from")
        limit = _MAX_LIMIT if self.limit is None else self.limit
        page: list[RunRecord] = []
        if limit == 0:
            return page
        for record in it:
            if self.matches(record):
                page.append(record)
                if len(page) >= limit:
                    break
        return page


def check_run_filter(
    status: RunStatus | str | Collection[RunStatus | str] | None = None,
    workflow: str | None = None,
    after: str | None = None,
    limit: int | None = None,
    version: str | None = None,
    queue: str | None = None,
    key: str | None = None,
) -> RunFilter:
    """``list_runs``'s arguments, validated (one status or several).

    Raises:
        UsageError: an unknown status, a non-string workflow or version, an
            *after* that is not a valid run id (:func:`check_run_id`), a
            queue name or key that breaks the same rule, or a limit that is
            not a non-negative integer.
    """
    statuses: frozenset[RunStatus] | None = None
    if status is not None:
        values = [status] if isinstance(status, str | enum.Enum) else list(status)
        try:
            statuses = frozenset(RunStatus(v) for v in values)
        except ValueError:
            known = ", ".join(s.value for s in RunStatus)
            raise UsageError(f"status must be among {known}, not {status!r}") from None
    if workflow is not None and (not isinstance(workflow, str) or not workflow):
        raise UsageError(f"workflow must be a workflow name, not {workflow!r}")
    if version is not None and (not isinstance(version, str) or not version):
        raise UsageError(f"version must be a workflow version, not {version!r}")
    if after is not None:
        try:
            check_run_id(after)
        except UsageError as exc:
            raise UsageError(f"after= names no possible run: {exc}") from None
    if limit is not None and (
        not isinstance(limit, int) or isinstance(limit, bool) or not 0 <= limit <= _MAX_LIMIT
    ):
        raise UsageError(f"limit must be an integer from 0 to {_MAX_LIMIT}, not {limit!r}")
    if queue is not None:
        check_identifier(queue, "queue name")
    if key is not None:
        check_identifier(key, "key")
    return RunFilter(
        status=statuses,
        workflow=workflow,
        after=after,
        limit=limit,
        version=version,
        queue=queue,
        key=key,
    )


def check_served(workflows: object) -> frozenset[Served]:
    """The ``(workflow, version)`` pairs of a ``claim_next`` or an advertisement, validated.

    A plain name stands for ``(name, None)``: the unversioned workflow (what
    every run was before versions existed).

    Raises:
        UsageError: not a collection of names and pairs of a non-empty name
            and a non-empty version or ``None``.
    """
    if isinstance(workflows, str | bytes) or not isinstance(workflows, Collection):
        raise UsageError(
            f"workflows must be a collection of (name, version) pairs, not {workflows!r:.100}"
        )
    pairs: set[Served] = set()
    for item in workflows:
        pair = (item, None) if isinstance(item, str) else item
        if not (
            isinstance(pair, tuple)
            and len(pair) == 2
            and isinstance(pair[0], str)
            and pair[0]
            and (pair[1] is None or (isinstance(pair[1], str) and pair[1]))
        ):
            raise UsageError(
                "a served workflow is a name or a (name, version) pair with a non-empty "
                f"name and a non-empty version or None, not {item!r:.100}"
            )
        pairs.add(pair)
    return frozenset(pairs)


class Placed(Protocol):
    """What the queue's rules read of a run: a :class:`RunRecord`, or ``engine.get_run``'s info."""

    @property
    def workflow(self) -> str: ...
    @property
    def version(self) -> str | None: ...
    @property
    def status(self) -> RunStatus: ...
    @property
    def owner(self) -> str | None: ...
    @property
    def lease_expires_at(self) -> datetime | None: ...


def serves(workflows: Collection[Served | str], record: Placed) -> bool:
    """Whether *record*'s workflow and version are among *workflows*.

    A run matches only its own ``(workflow, version)``; a plain name in
    *workflows* matches the unversioned runs of that name.
    """
    return (record.workflow, record.version) in workflows or (
        record.version is None and record.workflow in workflows
    )


def waiting(record: Placed, *, gone: Collection[str]) -> bool:
    """Whether *record* waits for a worker: ``queued``, ``waiting`` (parked on
    timers or messages, due or not), or ``running`` without a live lease.

    Released, its owner's lease expired (``lease_expires_at`` unset), or its
    owner among *gone* (known dead). Never a paused, failed, completed,
    cancelled or dead-letter run: those need ``resume``.
    """
    status = record.status
    if status is RunStatus.QUEUED or status is RunStatus.WAITING:
        return True
    return status is RunStatus.RUNNING and (
        record.owner is None or record.lease_expires_at is None or record.owner in gone
    )


def due(record: RunRecord, now: datetime) -> bool:
    """Whether *record* may be claimed at *now*: any run but a ``waiting`` one whose
    ``wake_at`` is later than *now*, or that has none: it waits for a message, and
    the send that stores one makes it due (:func:`decide_send
    <tether.stores.decide_send>`)."""
    if record.status is not RunStatus.WAITING:
        return True
    return record.wake_at is not None and record.wake_at <= now


def dispatchable(
    record: RunRecord,
    *,
    workflows: Collection[Served | str],
    gone: Collection[str],
    now: datetime | None = None,
) -> bool:
    """Whether a worker's ``claim_next`` may take *record* (read in the atomic step).

    A run that :func:`waiting` says waits for a worker, whose workflow and
    version are among *workflows* (:func:`serves`), and that is :func:`due`
    at *now*: the claiming worker's clock, as ``claim_next(now=)`` got it
    (``None``: the wall clock).
    """
    return (
        serves(workflows, record)
        and waiting(record, gone=gone)
        and due(record, utcnow() if now is None else now)
    )


def stranded(record: Placed, *, served: Collection[Served | str], gone: Collection[str]) -> bool:
    """Whether *record* waits for a worker that no live worker is: a stranded run.

    *served* is every pair some live worker advertises (empty when no
    worker lives: then every waiting run is stranded).
    """
    return waiting(record, gone=gone) and not serves(served, record)


@attrs.frozen
class Dispatch:
    """What ``claim_next`` stores for one candidate; :attr:`claimed`: the lease was taken."""

    store: RunRecord
    claimed: bool


def decide_dispatch(
    current: RunRecord,
    *,
    owner: str,
    max_dispatches: int,
    now: datetime | None = None,
) -> Dispatch:
    """Decide what a worker's claim of the :func:`dispatchable` run *current* writes.

    - a recorded cancel: the run is stored ``cancelled`` (not claimed);
    - dispatched *max_dispatches* times already (each time its worker
      vanished before an outcome, or its execution could not store one):
      stored ``dead_letter``, released, with an error saying so (not claimed);
    - otherwise claimed: the token and ``dispatches`` grow by one, the owner
      is *owner*, the status ``running``.
    """
    now = now or utcnow()
    if current.cancel_requested:
        return Dispatch(cancelled_record(current, now), claimed=False)
    if current.dispatches >= max_dispatches:
        error = ErrorInfo(
            type=DEAD_LETTER_ERROR,
            message=(
                f"run {current.run_id!r} was claimed by workers {current.dispatches} times "
                "and never reached an outcome (each time its worker died, or could not "
                "store the outcome); it was set aside. Fix the cause, then resume it by "
                "hand (engine.resume or `tether resume`)."
            ),
        )
        dead = attrs.evolve(
            current,
            status=RunStatus.DEAD_LETTER,
            owner=None,
            error=error,
            updated_at=now,
            lease_expires_at=None,
        )
        return Dispatch(dead, claimed=False)
    claimed = attrs.evolve(
        current,
        owner=owner,
        token=current.token + 1,
        dispatches=current.dispatches + 1,
        status=RunStatus.RUNNING,
        error=None,
        requests=(),
        updated_at=now,
        lease_expires_at=None,
        wake_at=None,
    )
    return Dispatch(claimed, claimed=True)


@attrs.frozen
class Claimed:
    """A run taken by a worker's batched claim (``claim_batch``).

    Attributes:
        record: the run as stored by the claim (``running``, the claimer's
            lease; ``lease_expires_at`` set).
        previous_owner: the owner whose lease the claim took over (a
            ``running`` run whose owner's lease had expired or who is gone),
            or ``None`` (a queued, released or due waiting run).
        entries: the run's journal in ``seq`` order, read in the claim's
            atomic step (as strictly as ``load_entries`` reads it), so that
            its executor need not load it; ``None``: not read.
    """

    record: RunRecord
    previous_owner: str | None
    entries: Sequence[Entry] | None = None


def decide_batch(
    candidates: Iterable[RunRecord],
    *,
    owner: str,
    limit: int,
    max_dispatches: int,
    workflows: Collection[Served | str],
    gone: Collection[str],
    now: datetime,
) -> list[tuple[RunRecord, Dispatch]]:
    """Decide a batched claim: each candidate read in the atomic step, oldest first.

    Every :func:`dispatchable` candidate is decided by :func:`decide_dispatch`
    until *limit* are claimed (candidates that are not dispatchable, read
    again under the step's lock, are passed over). Returns each decided
    candidate as read with its decision, for the store to write all of them
    in the same atomic step.
    """
    decided: list[tuple[RunRecord, Dispatch]] = []
    claimed = 0
    for current in candidates:
        if claimed >= limit:
            break
        if not dispatchable(current, workflows=workflows, gone=gone, now=now):
            continue
        decision = decide_dispatch(current, owner=owner, max_dispatches=max_dispatches)
        decided.append((current, decision))
        claimed += decision.claimed
    return decided


def claimed_from(current: RunRecord, decision: Dispatch, expires: datetime) -> Claimed:
    """What a batched claim returns for a candidate it claimed, with the lease *expires*."""
    previous = current.owner if current.status is RunStatus.RUNNING else None
    return Claimed(attrs.evolve(decision.store, lease_expires_at=expires), previous)


#: The most runs one batched claim takes (``claim_batch(limit=)``).
MAX_BATCH: Final = 1000


def check_limit(value: object) -> int:
    """``claim_batch``'s *limit*, validated: an integer from 1 to :data:`MAX_BATCH`.

    Raises:
        UsageError: anything else.
    """
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_BATCH:
        raise UsageError(f"limit must be an integer from 1 to {MAX_BATCH}, not {value!r:.100}")
    return value


def check_now(now: object) -> datetime:
    """``claim_next``'s *now*, validated: a timezone-aware datetime (``None``: the wall clock).

    Raises:
        UsageError: anything else.
    """
    if now is None:
        return utcnow()
    if not isinstance(now, datetime) or now.utcoffset() is None:
        raise UsageError(f"now must be a timezone-aware datetime or None, not {now!r:.100}")
    return now


def check_max_dispatches(value: object) -> int:
    """``max_dispatches``, validated: a positive integer.

    Raises:
        UsageError: anything else.
    """
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UsageError(f"max_dispatches must be a positive integer, not {value!r}")
    return value
