"""Flow-control rules, shared by every store: queues, keys, dedupe ids, debounce, ``max_queued``.

Layer: stores (``tether.stores``).

As with :mod:`._queue` and :mod:`._leases`, a store reads inside one atomic
step, calls one of these pure functions, and writes what it returns in that
same step:

- :class:`Queue` and :class:`Rate` are the user's definitions, validated when
  they are made; a :class:`Submission` is what ``engine.submit`` asks a store
  to keep, checked again by :func:`check_submission` in the store;
- :func:`decide_submit` decides a submission from what the store read in the
  submit's own atomic step: the unfinished run of the submission's queue with
  its dedupe id (:func:`live_dedupe` says which runs count), and the queue's
  depth (:func:`pending` says which runs count) when it has ``max_queued``.

A run submitted with ``not_before`` or ``debounce`` is stored ``waiting``, with
its start as ``wake_at`` and token 0: workers claim it when it is due, as any
parked run, so a scheduled start needs nothing new in the claim.
"""

from __future__ import annotations

import math
from typing import Final

import attrs

from .._errors import QueueFullError, RunConflictError, UsageError
from ._records import DEFAULT_QUEUE, RunRecord, RunStatus
from ._run_ids import check_identifier

__all__ = (
    "DEFAULT_QUEUE",
    "Queue",
    "Rate",
    "SubmitDecision",
    "Submission",
    "check_submission",
    "decide_submit",
    "is_seconds",
    "live_dedupe",
    "not_started",
    "pending",
)

#: The longest ``debounce``, in seconds (a year: anything longer is a mistake).
MAX_DEBOUNCE: Final = 365 * 24 * 3600.0


def _positive_int(value: object, what: str) -> None:
    if value is not None and (type(value) is not int or value < 1):
        raise UsageError(f"{what} must be a positive int or None, not {value!r:.100}")


def is_seconds(value: object, maximum: float = math.inf) -> bool:
    """Whether *value* is a number of seconds (an int or float, not a bool), positive,
    finite and at most *maximum*."""
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and 0 < value < math.inf
        and value <= maximum
    )


def _positive_seconds(value: object, what: str) -> None:
    if not is_seconds(value):
        raise UsageError(f"{what} must be a positive, finite number of seconds, not {value!r:.100}")


@attrs.frozen
class Rate:
    """At most *limit* run starts in any window of *per* seconds (a sliding window)."""

    limit: int
    per: float = attrs.field(kw_only=True)

    def __attrs_post_init__(self) -> None:
        _positive_int(self.limit, "Rate's limit")
        _positive_seconds(self.per, "Rate's per")


#: What no worker checks yet: the limits of a queue that a claim must check.
_CLAIM_LIMITS: Final = ("concurrency", "per_key", "rate", "key_rate")


@attrs.frozen
class Queue:
    """A named queue of runs, with its limits (``engine.submit(queue=)``).

    Every limit holds across every process sharing the store, checked in
    the same atomic step as the write it limits. ``max_queued`` is checked by
    each submit: a submit that would make more than ``max_queued`` runs of the
    queue wait to start raises :class:`~tether.QueueFullError` and stores
    nothing. The limit is the one each submit's ``Queue`` carries: define a
    queue once, in code every producer imports.

    The limits a claim must check (``concurrency``, ``per_key``, ``rate``,
    ``key_rate``) are not checked by this version's workers: a queue that sets
    one is refused (:class:`~tether.UsageError`) rather than left unchecked.

    Raises:
        UsageError: a name that breaks the rule of names (that of run ids),
            the default queue's name, or a limit that is not a positive int
            (a :class:`Rate` for the rates, positive seconds for *aging*).
    """

    name: str
    concurrency: int | None = attrs.field(default=None, kw_only=True)
    per_key: int | None = attrs.field(default=None, kw_only=True)
    rate: Rate | None = attrs.field(default=None, kw_only=True)
    key_rate: Rate | None = attrs.field(default=None, kw_only=True)
    max_queued: int | None = attrs.field(default=None, kw_only=True)
    aging: float = attrs.field(default=3600.0, kw_only=True)

    def __attrs_post_init__(self) -> None:
        check_identifier(self.name, "queue name")
        if self.name == DEFAULT_QUEUE:
            raise UsageError(
                f"{DEFAULT_QUEUE!r} is the queue of runs submitted without queue=, and it is "
                "unlimited; give your queue a name of its own"
            )
        for what in ("concurrency", "per_key", "max_queued"):
            _positive_int(getattr(self, what), f"Queue({self.name!r}).{what}")
        for what in ("rate", "key_rate"):
            value = getattr(self, what)
            if value is not None and not isinstance(value, Rate):
                raise UsageError(
                    f"Queue({self.name!r}).{what} must be a tether.Rate or None, not {value!r:.100}"
                )
        _positive_seconds(self.aging, f"Queue({self.name!r}).aging")
        unchecked = [what for what in _CLAIM_LIMITS if getattr(self, what) is not None]
        if unchecked:
            raise UsageError(
                f"Queue({self.name!r}) sets {', '.join(unchecked)}: limits that workers check "
                "when they claim are not built in this version of tether (only max_queued, "
                "checked when a run is submitted, is); refusing rather than leaving them "
                "unchecked"
            )


@attrs.frozen
class Submission:
    """What ``engine.submit`` asks a store to keep (``submit_run``).

    Attributes:
        record: the new run: ``queued``, or ``waiting`` with its start as
            ``wake_at`` (``not_before``, ``debounce``); token 0, never claimed.
        max_queued: the queue's ``max_queued``, or ``None``.
        debounce: a submit with a dedupe id and ``debounce``: it replaces the
            arguments and the start of its dedupe id's run while that run has
            not started (:func:`not_started`).
    """

    record: RunRecord
    max_queued: int | None = None
    debounce: bool = False


def check_submission(submission: object) -> Submission:
    """*submission*, checked as a store checks what it is asked to keep; else raise.

    Raises:
        UsageError: not a :class:`Submission`; a run that is not new
            (``queued``, or ``waiting`` with ``wake_at``, token 0); a queue
            name, key or dedupe id that breaks the rule of names; a
            ``max_queued`` that is not a positive int; ``debounce`` without a
            dedupe id.
    """
    if not isinstance(submission, Submission):
        raise UsageError(f"submit_run takes a Submission, not {submission!r:.100}")
    record = submission.record
    if record.token != 0 or not (
        record.status is RunStatus.QUEUED
        or (record.status is RunStatus.WAITING and record.wake_at is not None)
    ):
        raise UsageError(
            f"run {record.run_id!r} is not new: a submitted run is queued, or waiting with "
            f"wake_at, with token 0 (it is {record.status.value}, token {record.token})"
        )
    check_identifier(record.queue, "queue name")
    if record.key is not None:
        check_identifier(record.key, "key")
    if record.dedupe is not None:
        check_identifier(record.dedupe, "dedupe id")
    _positive_int(submission.max_queued, "max_queued")
    if submission.debounce and record.dedupe is None:
        raise UsageError(f"run {record.run_id!r}: debounce needs a dedupe id")
    return submission


def pending(record: RunRecord) -> bool:
    """Whether *record* counts in its queue's depth: it waits to start, ``queued``, or
    ``waiting`` and never claimed (a scheduled start)."""
    return record.status is RunStatus.QUEUED or (
        record.status is RunStatus.WAITING and record.token == 0
    )


def not_started(record: RunRecord) -> bool:
    """Whether *record* never started: :func:`pending`, and never claimed."""
    return pending(record) and record.token == 0


def live_dedupe(record: RunRecord, queue: str, dedupe: str) -> bool:
    """Whether *record* holds *dedupe* in *queue*: submitted with it, and unfinished."""
    return record.dedupe == dedupe and record.queue == queue and not record.status.finished


@attrs.frozen
class SubmitDecision:
    """What a store writes for a submission, in the submit's atomic step.

    Attributes:
        run_id: what ``submit_run`` returns: the new run's id, or the live run's.
        create: the run to insert (its id free, as read in the step), or ``None``.
        replace: the live run as a debounced submit rewrites it, or ``None``.
    """

    run_id: str
    create: RunRecord | None = None
    replace: RunRecord | None = None


def decide_submit(
    submission: Submission, *, live: RunRecord | None, exists: bool, depth: int | None
) -> SubmitDecision:
    """Decide *submission* from what the store read in the submit's atomic step.

    *live* is the oldest unfinished run of the submission's queue with its
    dedupe id (:func:`live_dedupe`), ``None`` when there is none or no dedupe
    id; *exists* whether a run with the submission's run id is stored; *depth*
    the queue's :func:`pending` runs, read when the submission has a
    ``max_queued`` (else ``None``).

    - a live run: its id, and nothing new; a debounced submit while it has
      not started rewrites its arguments, version, key and start;
    - else, the run id taken: :class:`~tether.RunConflictError`, as
      ``create_run`` (``engine.submit`` then finds a resubmitted run there,
      however full its queue);
    - else, a queue at ``max_queued``: :class:`~tether.QueueFullError`;
    - else the new run.

    Raises:
        QueueFullError: the queue holds ``max_queued`` runs waiting to start.
        RunConflictError: the run id is taken; or a debounced submit of
            another workflow than its dedupe id's live run.
    """
    record = submission.record
    if live is not None:
        if not (submission.debounce and not_started(live)):
            return SubmitDecision(live.run_id)
        if live.workflow != record.workflow:
            raise RunConflictError(
                f"dedupe id {record.dedupe!r} of queue {record.queue!r} is held by run "
                f"{live.run_id!r} of workflow {live.workflow!r}; a debounced submit of "
                f"{record.workflow!r} cannot replace its arguments"
            )
        replaced = attrs.evolve(
            live,
            args=record.args,
            version=record.version,
            key=record.key,
            status=record.status,
            wake_at=record.wake_at,
            updated_at=record.updated_at,
        )
        return SubmitDecision(live.run_id, replace=replaced)
    if exists:
        raise RunConflictError(f"run {record.run_id!r} already exists")
    if submission.max_queued is not None:
        assert depth is not None, "a submission with max_queued is decided with its depth"
        if depth >= submission.max_queued:
            raise QueueFullError(
                f"queue {record.queue!r} holds {depth} runs waiting to start, its max_queued "
                f"is {submission.max_queued}: run {record.run_id!r} was not stored",
                queue=record.queue,
                depth=depth,
                max_queued=submission.max_queued,
            )
    return SubmitDecision(record.run_id, create=record)
