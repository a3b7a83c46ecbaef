"""Lease and fencing decisions, shared by every store.

Layer: stores (``tether.stores``).

A store reads what it needs inside one atomic step (a transaction, a lock),
calls one of these pure functions, and writes what it returns in that same
step. So the rules of one owner per run are written once, here, and a
third-party store gets them by calling the same functions:

- :func:`decide_claim`: who may take a run's lease, and what the claim writes;
- :func:`fenced_update`: whether a run record write carries the current
  token, and what is stored (a recorded cancel is never lost);
- :func:`check_append`: whether journal entries carry the current token;
- :func:`decide_cancel`: what ``engine.cancel`` records;
- :func:`check_delete`: whether ``delete_run`` may delete a run (not while it executes);
- :func:`renewal`: what an owner's renewal reports.

A lease is *live* when the record read in the atomic step has an ``owner``
and a ``lease_expires_at`` (stores fill that field only while the owner's
lease has not expired on the store's clock).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Final

import attrs

from .._errors import (
    LeaseLostError,
    RunCancelledError,
    RunConflictError,
    RunNotFoundError,
    UsageError,
)
from ._owners import Renewal
from ._records import Entry, RunRecord, RunStatus, utcnow
from ._run_ids import check_run_id

__all__ = (
    "ClaimDecision",
    "check_append",
    "check_delete",
    "check_held",
    "check_owner",
    "check_ttl",
    "decide_cancel",
    "decide_claim",
    "fenced_update",
    "renewal",
    "renewal_of",
)

#: 1 to 200 characters, none of them ``/`` or a control character.
_OWNER: Final = re.compile(r"[^/\x00-\x1f\x7f]{1,200}")


@attrs.frozen
class ClaimDecision:
    """What a claim stores (``None``: nothing), then returns or raises."""

    store: RunRecord | None
    result: RunRecord | None = None
    error: Exception | None = None
    created: bool = False

    @property
    def claimed(self) -> bool:
        """The claim takes the lease: set the owner's lease expiry in the same step."""
        return self.store is not None and self.error is None

    def outcome(self, lease_expires_at: datetime | None) -> RunRecord:
        """What ``claim`` returns once :attr:`store` is written, or raise :attr:`error`.

        The claimed record with *lease_expires_at* filled in; or, when
        nothing was claimed (a completed run), the stored record as it is.
        """
        if self.error is not None:
            raise self.error
        assert self.result is not None
        if self.store is None:
            return self.result
        return attrs.evolve(self.result, lease_expires_at=lease_expires_at)


def check_owner(owner: object) -> str:
    """An owner name, validated: a non-empty string without ``/`` or control characters.

    Raises:
        UsageError: anything else.
    """
    if not isinstance(owner, str) or _OWNER.fullmatch(owner) is None:
        raise UsageError(f"a lease owner is a short name without '/', not {owner!r:.100}")
    return owner


def check_held(held: object) -> Mapping[str, int]:
    """``renew``'s *held*, validated: a mapping of run ids (:func:`check_run_id`) to tokens.

    Raises:
        UsageError: not a mapping, a key that is not a valid run id, or a token
            that is not a non-negative integer.
    """
    if not isinstance(held, Mapping):
        raise UsageError(f"renew(held=) takes a mapping of run ids to tokens, not {held!r:.100}")
    for run_id, token in held.items():
        check_run_id(run_id)
        if type(token) is not int or token < 0:
            raise UsageError(
                f"renew(held=) maps run {run_id!r} to {token!r:.60}, not a fencing token"
            )
    return held


def check_ttl(ttl: object) -> float:
    """A lease duration in seconds, validated (``0`` is allowed: ends leases now).

    Raises:
        UsageError: not a non-negative number.
    """
    if not isinstance(ttl, int | float) or isinstance(ttl, bool) or not 0 <= ttl < 10**9:
        raise UsageError(f"a lease ttl is a non-negative number of seconds, not {ttl!r}")
    return float(ttl)


def _live(record: RunRecord) -> bool:
    return record.owner is not None and record.lease_expires_at is not None


def _conflict(record: RunRecord) -> RunConflictError:
    when = record.lease_expires_at.isoformat() if record.lease_expires_at else "unknown"
    return RunConflictError(
        f"run {record.run_id!r} is executing elsewhere: owner {record.owner} holds its "
        f"lease until {when}; nothing was executed or written. Retry once that owner "
        "has finished, or after its lease expires.",
        owner=record.owner,
        expires_at=record.lease_expires_at,
    )


def decide_claim(
    current: RunRecord | None,
    *,
    run_id: str,
    owner: str,
    create: RunRecord | None = None,
    takeover: int | None = None,
    now: datetime | None = None,
) -> ClaimDecision:
    """Decide a claim of *run_id* by *owner*, given the record read in the same atomic step.

    - no run: created with token 1 if *create* is given (else RunNotFoundError),
      when its id is valid (else :func:`check_run_id`'s UsageError);
    - *create* names another workflow, version or other arguments: RunConflictError;
    - cancelled, or a cancel recorded: RunCancelledError (a recorded cancel
      without a live owner is stored as ``cancelled`` first);
    - completed: nothing is written; the stored record is returned;
    - held by another live owner (unless its token is *takeover*): RunConflictError;
    - otherwise the token grows by one, the owner is *owner*, and a paused,
      failed, waiting or interrupted run is ``running`` again (error, requests
      and ``wake_at`` cleared).
    """
    now = now or utcnow()
    if current is None:
        if create is None:
            return ClaimDecision(None, error=RunNotFoundError(f"no run {run_id!r} to claim"))
        try:
            check_run_id(create.run_id)
        except UsageError as exc:
            return ClaimDecision(None, error=exc)
        record = attrs.evolve(
            create,
            owner=owner,
            token=1,
            cancel_requested=False,
            lease_expires_at=None,
        )
        return ClaimDecision(record, result=record, created=True)
    if create is not None and (create.workflow != current.workflow or create.args != current.args):
        return ClaimDecision(
            None,
            error=RunConflictError(
                f"run {run_id!r} exists with workflow {current.workflow!r} and arguments "
                f"{current.args:.200}, not {create.workflow!r} with {create.args:.200}; "
                f"resume it with engine.resume({run_id!r}) or choose a new run_id"
            ),
        )
    if create is not None and create.version != current.version:
        return ClaimDecision(None, error=version_conflict(current, create.version))
    live = _live(current) and current.token != takeover
    if current.status is RunStatus.CANCELLED or current.cancel_requested:
        cancelled = RunCancelledError(
            f"run {run_id!r} is cancelled; it never executes again (start a new run)"
        )
        if current.status is RunStatus.CANCELLED or live:
            return ClaimDecision(None, error=cancelled)
        return ClaimDecision(cancelled_record(current, now), error=cancelled)
    if current.status is RunStatus.COMPLETED:
        return ClaimDecision(None, result=current)
    if live and current.owner != owner:
        return ClaimDecision(None, error=_conflict(current))
    status = RunStatus.RUNNING if current.status.may_execute else current.status
    record = attrs.evolve(
        current,
        owner=owner,
        token=current.token + 1,
        status=status,
        error=None,
        requests=(),
        updated_at=now,
        lease_expires_at=None,
        dispatches=0,
        wake_at=None,
    )
    return ClaimDecision(record, result=record)


def version_conflict(current: RunRecord, version: str | None) -> RunConflictError:
    """The refusal to start *current*'s run id again under another workflow *version*."""

    def shown(v: str | None) -> str:
        return "unversioned" if v is None else f"version {v!r}"

    return RunConflictError(
        f"run {current.run_id!r} was started under {shown(current.version)} of workflow "
        f"{current.workflow!r}, not {shown(version)}; nothing was executed. Resume it with "
        f"engine.resume({current.run_id!r}) where its version is registered, or choose a "
        "new run_id"
    )


def cancelled_record(current: RunRecord, now: datetime) -> RunRecord:
    """*current* stored as ``cancelled``: released, its requests and wake-up cleared."""
    return attrs.evolve(
        current,
        status=RunStatus.CANCELLED,
        requests=(),
        owner=None,
        cancel_requested=True,
        updated_at=now,
        lease_expires_at=None,
        wake_at=None,
    )


def _stale(run_id: str, token: int, what: str, current: int, owner: str | None) -> LeaseLostError:
    holder = f"owner {owner}" if owner is not None else "no owner (released)"
    return LeaseLostError(
        f"run {run_id!r}: {what} with fencing token {token} was refused; the run's "
        f"token is {current}, held by {holder}. Nothing was written."
    )


def _fenced(current: int, owner: str | None, token: int) -> bool:
    # Token 0 writes a run that was never claimed (created by create_run and
    # written without leases): only then. Any other write needs the current
    # token and a holder: a released lease takes no more writes.
    if current == 0:
        return token == 0
    return token == current and owner is not None


def fenced_update(current: RunRecord | None, incoming: RunRecord) -> RunRecord:
    """The record to store for ``update_run(incoming)``, given the one read in the same step.

    A recorded cancel is kept; once it is there, a ``failed``, ``paused`` or
    ``waiting`` outcome is stored as ``cancelled`` (a ``completed`` one stands: the cancel
    came too late). A ``cancelled`` record releases the lease.

    Raises:
        RunNotFoundError: no such run.
        LeaseLostError: *incoming* does not carry the run's current token.
    """
    if current is None:
        raise RunNotFoundError(f"run {incoming.run_id!r} is not stored")
    if not _fenced(current.token, current.owner, incoming.token):
        raise _stale(
            current.run_id, incoming.token, "a run record write", current.token, current.owner
        )
    cancel = current.cancel_requested or incoming.cancel_requested
    status = incoming.status
    if status is RunStatus.COMPLETED:
        cancel = False
    elif cancel and status in (RunStatus.FAILED, RunStatus.PAUSED, RunStatus.WAITING):
        return cancelled_record(incoming, incoming.updated_at)
    elif status is RunStatus.CANCELLED:
        return attrs.evolve(
            incoming, owner=None, requests=(), cancel_requested=cancel, lease_expires_at=None
        )
    if cancel is incoming.cancel_requested and incoming.lease_expires_at is None:
        return incoming  # as written (the common case: frozen, nothing to change)
    return attrs.evolve(incoming, cancel_requested=cancel, lease_expires_at=None)


def check_append(run_id: str, entries: Sequence[Entry], *, token: int, owner: str | None) -> None:
    """Refuse an append whose entries do not carry the run's current *token*.

    *token* and *owner* are the stored run's, read in the same atomic step.

    Raises:
        LeaseLostError: an entry's token is stale; nothing may be written.
    """
    for entry in entries:
        if not _fenced(token, owner, entry.token):
            raise _stale(run_id, entry.token, f"appending entry {entry.key}", token, owner)


def decide_cancel(
    current: RunRecord | None,
    *,
    run_id: str,
    takeover: int | None = None,
    now: datetime | None = None,
) -> RunRecord | None:
    """The record ``cancel_run`` stores (``None``: nothing changes).

    Raises:
        RunNotFoundError: no such run.
        RunConflictError: the run has completed.
    """
    if current is None:
        raise RunNotFoundError(f"no run {run_id!r} to cancel")
    if current.status is RunStatus.COMPLETED:
        raise RunConflictError(
            f"run {run_id!r} has completed; a completed run cannot be cancelled (nothing changed)"
        )
    if current.status is RunStatus.CANCELLED:
        return None
    if _live(current) and current.token != takeover:
        if current.cancel_requested:
            return None
        return attrs.evolve(current, cancel_requested=True, lease_expires_at=None)
    return cancelled_record(current, now or utcnow())


def renewal(
    mine: Mapping[str, tuple[int, bool]],
    held: Mapping[str, int],
    released: Mapping[str, int] | None = None,
) -> Renewal:
    """What a renewal reports.

    *mine* maps the runs the store says the owner holds (read in the same
    step) to their ``(token, cancel_requested)``; *held* is what the owner
    believes it holds; *released* maps held runs that no owner holds to their
    stored token (read in the same step; only the held runs missing from
    *mine* need looking up: as a rule none, so no second read). A held run
    released with its held token is reported released, any other one missing
    from *mine* lost; ``None``: none looked up, every one missing is lost.
    """
    lost: set[str] = set()
    cancelled: set[str] = set()
    let_go: set[str] = set()
    for run_id, token in held.items():
        stored = mine.get(run_id)
        if stored is None and released is not None and released.get(run_id) == token:
            let_go.add(run_id)
        elif stored is None or stored[0] != token:
            lost.add(run_id)
        elif stored[1]:
            cancelled.add(run_id)
    return Renewal(lost=frozenset(lost), cancelled=frozenset(cancelled), released=frozenset(let_go))


def renewal_of(owner: str, held: Mapping[str, int], records: Mapping[str, RunRecord]) -> Renewal:
    """What a renewal reports, for a store that reads the held runs' records:
    :func:`renewal` of what *records* (the held runs found, read in the same step,
    by run id) say. Run ids of *held* missing from *records* are not stored."""
    mine: dict[str, tuple[int, bool]] = {}
    released: dict[str, int] = {}
    for run_id, record in records.items():
        if record.owner == owner:
            mine[run_id] = (record.token, record.cancel_requested)
        elif record.owner is None:
            released[run_id] = record.token
    return renewal(mine, held, released)


def check_delete(current: RunRecord | None, *, run_id: str) -> bool:
    """Decide ``delete_run(run_id)`` given the record read in the same atomic step.

    Returns whether there is a run to delete (``False``: no such run, nothing
    to do).

    Raises:
        RunConflictError: an owner holds a live lease on the run; it is
            executing and must not lose its record under it.
    """
    if current is None:
        return False
    if _live(current):
        when = current.lease_expires_at.isoformat() if current.lease_expires_at else "unknown"
        raise RunConflictError(
            f"run {run_id!r} is executing: owner {current.owner} holds its lease until "
            f"{when}; it was not deleted",
            owner=current.owner,
            expires_at=current.lease_expires_at,
        )
    return True
