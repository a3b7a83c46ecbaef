"""Responses recorded for the workers: the rule of ``respond``, written once for every store.

Layer: stores (``tether.stores``).

``engine.respond`` answers a paused run's requests without executing it: the
store journals the responses **and** queues the run for the workers, in one
atomic step (a :class:`RespondingStore`: every built-in one). As with
:mod:`._leases` and :mod:`._mailbox`, the rules are written once, here, and
each store calls them inside its atomic step:

- :func:`check_respond` validates the arguments before anything is read;
- :func:`decide_respond` decides on the run record read in the step: the run
  must be waiting for these very requests, and nobody may be executing it.

Responses are the one journal write besides a lease holder's: the run is
paused and released, so nobody holds a token. Their entries carry token 0
("written without a lease"), and the rule takes the place of the fence: it
refuses while an owner holds a live lease, and two responds racing for one
request cannot both find it pending.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final, Protocol, runtime_checkable

import attrs

from .._errors import (
    CheckpointCorruptError,
    RunConflictError,
    RunNotFoundError,
    UnknownRequestError,
    UsageError,
)
from ._records import Entry, EntryKind, RunRecord, RunStatus, request_from_json
from ._run_ids import check_run_id

__all__ = ("RESPOND_METHODS", "RespondingStore", "check_respond", "decide_respond")


@runtime_checkable
class RespondingStore(Protocol):
    """A store that takes responses for the workers (``engine.respond``): it has :meth:`respond`.

    Optional: only ``engine.respond`` needs it (``engine.resume`` journals
    responses as it executes). The built-in stores all have it.
    """

    async def respond(self, run_id: str, entries: Sequence[Entry], *, now: datetime) -> RunRecord:
        """Journal the response *entries* and queue the run, in one atomic step.

        Reads the run, decides with :func:`decide_respond`, then appends
        *entries* (each gets the run's next ``seq``, as :meth:`Store.append
        <tether.stores.Store.append>` gives it) and stores the decided record
        (``queued``, the answered requests gone), all or nothing. Validate
        the arguments with :func:`check_respond` first. Watchers are told, as
        for any run record write. Cancelled, the store either did it all or
        nothing (a retry then finds the requests answered: ``RunConflictError``).

        Returns:
            The stored record.

        Raises:
            RunNotFoundError, RunConflictError, UnknownRequestError: as
                :func:`decide_respond` decides; nothing is written.
            UsageError: invalid arguments.
        """
        ...


#: Methods of :class:`RespondingStore`: what ``engine.respond`` needs.
RESPOND_METHODS: Final = ("respond",)


def check_respond(run_id: object, entries: object, now: object) -> datetime:
    """``respond``'s arguments, validated; returns *now*.

    *entries* must be a non-empty sequence of unstored (``seq=None``)
    :class:`Entry` records of kind ``response``, of run *run_id*, written
    without a lease (token 0), with distinct keys; *now* a timezone-aware
    datetime.

    Raises:
        UsageError: anything else, naming it.
    """
    check_run_id(run_id)
    if not isinstance(now, datetime) or now.utcoffset() is None:
        raise UsageError(f"respond(now=) takes a timezone-aware datetime, not {now!r:.100}")
    if not isinstance(entries, Sequence) or not entries:
        raise UsageError(f"respond() takes a non-empty sequence of entries, not {entries!r:.100}")
    keys: set[str] = set()
    for entry in entries:
        if (
            not isinstance(entry, Entry)
            or entry.kind is not EntryKind.RESPONSE
            or entry.run_id != run_id
            or entry.seq is not None
            or entry.token != 0
        ):
            raise UsageError(
                f"respond() to run {run_id!r} takes unstored response entries of that run "
                f"with token 0, not {entry!r:.200}"
            )
        if entry.key in keys:
            raise UsageError(f"respond() to run {run_id!r} got two responses to {entry.key}")
        keys.add(entry.key)
    return now


def decide_respond(
    current: RunRecord | None, *, run_id: str, keys: Sequence[str], now: datetime
) -> RunRecord:
    """The record ``respond`` stores for responses to *keys*, given the one read in the same step.

    - no run: RunNotFoundError;
    - completed, failed, dead-lettered, cancelled, or a cancel recorded:
      RunConflictError (it takes no responses);
    - held by a live owner (``lease_expires_at`` set by the read): executing,
      RunConflictError;
    - a key that is not among the run's pending requests: a paused run
      refuses it as UnknownRequestError (naming the pending keys); any other
      run as RunConflictError, since its requests were answered already (two
      responds racing for one request: the second finds it gone) or it asks
      nothing now;
    - otherwise the run is ``queued`` for the workers, the answered requests
      removed (the others stay pending: a later respond may answer them
      before a worker takes the run), its dispatch count reset (a pause was
      an outcome).
    """
    if current is None:
        raise RunNotFoundError(f"no run {run_id!r}: nothing was journaled")
    shown = ", ".join(map(repr, keys))
    status = current.status
    if status.finished or current.cancel_requested:
        what = "has a cancel recorded" if current.cancel_requested else f"is {status.value}"
        raise RunConflictError(
            f"run {run_id!r} {what.replace('_', '-')}: it takes no responses (got {shown}); "
            "nothing was journaled"
        )
    if current.owner is not None and current.lease_expires_at is not None:
        raise RunConflictError(
            f"run {run_id!r} is executing: owner {current.owner} holds its lease until "
            f"{current.lease_expires_at.isoformat()} (got responses {shown}); nothing was "
            "journaled. Respond again once the run has paused.",
            owner=current.owner,
            expires_at=current.lease_expires_at,
        )
    try:
        pending = {request_from_json(text).key: text for text in current.requests}
    except ValueError as exc:
        raise CheckpointCorruptError(
            f"run {run_id!r}: a stored pending request cannot be read ({exc}); nothing was "
            "journaled"
        ) from None
    unknown = [k for k in keys if k not in pending]
    if unknown and status is RunStatus.PAUSED:
        raise UnknownRequestError(
            f"run {run_id!r} has no pending request with key {', '.join(map(repr, unknown))}; "
            f"its pending requests: {', '.join(map(repr, pending)) or 'none'}. "
            "Nothing was journaled."
        )
    if unknown:
        raise RunConflictError(
            f"run {run_id!r} is {status.value} and does not wait for "
            f"{', '.join(map(repr, unknown))}: responded to already, or not asked yet; nothing "
            "was journaled"
        )
    return attrs.evolve(
        current,
        status=RunStatus.QUEUED,
        requests=tuple(text for key, text in pending.items() if key not in keys),
        owner=None,
        error=None,
        updated_at=now,
        lease_expires_at=None,
        dispatches=0,
        wake_at=None,
    )
