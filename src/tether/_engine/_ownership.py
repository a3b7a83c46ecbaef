"""One owner per run: an engine's leases, their renewal, and their loss.

Layer: the engine (``_engine``).

Each :func:`tether.open_engine` is one *owner*, named ``host:pid:engine-id``
(:mod:`tether._core._owners`). Before it executes a run it claims the run's
lease from the store, which returns a fencing token; every write the execution
makes carries that token, and the store refuses it once someone else has
claimed the run.

:class:`Leases` is the engine's side of that contract:

- :meth:`Leases.claim` takes a lease, taking over at once from an owner on
  this machine whose process is gone (:func:`owner_is_gone`);
- :meth:`Leases.run` is the one task per engine that renews every lease the
  engine holds in one store call per ``lease_ttl / 3``, tells a run when a
  cancel was recorded for it, and tells it its lease is lost when a renewal
  reports so or when no renewal succeeded for ``lease_ttl`` on this
  process's clock (it was paused, or the store was unreachable);
- releases that must not hold up a caller (after a caller cancellation) are
  written by that task soon after, not by the cancelled caller.

This module knows stores only through their protocol and never imports the
engine.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Protocol, cast

import attrs
import trio

from .._core._owners import owner_is_gone
from .._errors import LeaseLostError, RunCancelledError, RunConflictError, RunNotFoundError
from ..stores._capabilities import Capability, has
from ..stores._owners import Served
from ..stores._queue import Claimed
from ..stores._records import RunRecord, utcnow
from ..stores._store import BatchClaimingStore, Store, WorkerStore

__all__ = ("Leases",)

log = logging.getLogger("tether")

#: Seconds past ``lease_ttl`` that runs lost here while the store did not answer
#: are looked at, to be released once it answers (a store down for longer: their
#: owner's row expires when this engine holds nothing more, or closes).
_LOST_RELEASE_HORIZON = 300.0


class Holder(Protocol):
    """What executes a held run, told what happens to its lease (an execution)."""

    def lease_lost(self, exc: LeaseLostError) -> None:
        """The lease is lost (*exc* says how): stop at once."""

    def lease_released(self, exc: LeaseLostError) -> None:
        """A renewal found the run released with the held token (``Renewal.released``:
        by a status write of the holder's own, whose answer may still be on its way, or
        by a cancel recorded after the lease lapsed); *exc* is what a loss raises."""

    def cancel_recorded(self) -> None:
        """A cancel was recorded for the run (``engine.cancel``, from anywhere)."""


@attrs.define(eq=False)
class _Held:
    token: int
    holder: Holder  # (not three bound methods: a worker holds thousands of runs)


class Leases:
    """The leases one engine holds, and the task that keeps them.

    Args:
        store: the engine's store.
        owner: the engine's owner name.
        ttl: ``lease_ttl``, seconds.
        save_timeout: bounds the releases written when the engine closes.
    """

    def __init__(self, store: Store, owner: str, ttl: float, save_timeout: float) -> None:
        self.store = store
        self.owner = owner
        self.ttl = ttl
        self.save_timeout = save_timeout
        self.held: dict[str, _Held] = {}
        #: renewal calls made (one per interval while runs are held)
        self.renewals = 0
        self._confirmed = -math.inf  # Trio time a claim or renewal last confirmed the lease
        self._releases: dict[str, RunRecord] = {}
        #: runs whose claim was cut short, its outcome unknown (token ``None``), or
        #: whose lease with that token was lost here, or whose release failed:
        #: Trio time until which the task looks whether the store still names
        #: this engine their owner (then nobody executes the run: released)
        self._unsure: dict[str, tuple[float, int | None]] = {}
        self._claiming: set[str] = set()  # runs whose claim is awaited now
        self._wake = trio.Event()
        # The task waits with no deadline (nothing held, released or unsure).
        # Otherwise a new hold need not wake it: its next deadline comes first.
        self._idle = False

    # -- used by the engine -------------------------------------------------------------

    async def claim(
        self, run_id: str, *, current: RunRecord | None, create: RunRecord | None = None
    ) -> RunRecord:
        """Claim *run_id*'s lease; *current* is the record the caller read (or ``None``).

        When *current* shows a live lease of an owner that is gone (see
        :func:`owner_is_gone`), the claim takes over from exactly that lease
        at once. A checkpoint; cancellation behaves as the store's ``claim``.

        Raises:
            RunConflictError: another live owner holds the lease.
            RunCancelledError: the run is cancelled.
        """
        takeover = None
        if (
            current is not None
            and current.owner is not None
            and current.owner != self.owner
            and current.lease_expires_at is not None
            and owner_is_gone(current.owner)
        ):
            takeover = current.token
        sent = trio.current_time()
        self._claiming.add(run_id)
        try:
            record = await self.store.claim(
                run_id, self.owner, ttl=self.ttl, create=create, takeover=takeover
            )
        except (RunConflictError, RunCancelledError, RunNotFoundError):
            raise  # refused: nothing of ours was stored
        except BaseException:
            # Cut short (the caller's deadline) or failed without an answer: the
            # claim may land later, and then nobody would execute or release
            # the run. The lease task looks, and releases it if so.
            until = trio.current_time() + self.ttl + min(self.save_timeout, 60.0)
            self._unsure[run_id] = (until, None)
            self._wake.set()
            raise
        finally:
            self._claiming.discard(run_id)
        self._unsure.pop(run_id, None)
        if record.owner == self.owner:
            self._confirmed = max(self._confirmed, sent)
            self._releases.pop(run_id, None)  # superseded by this claim
        return record

    def hold(self, run_id: str, token: int, holder: Holder) -> None:
        """Renew *run_id*'s lease from now on, and tell *holder* what happens to it."""
        self.held[run_id] = _Held(token, holder)
        if self._idle:
            self._wake.set()  # it waits with no deadline: renewals start now

    def drop(self, run_id: str) -> None:
        """Stop renewing *run_id* (its execution ended)."""
        self.held.pop(run_id, None)

    async def claim_batch(
        self,
        workflows: Collection[Served],
        *,
        max_dispatches: int,
        limit: int,
        gone: Collection[str],
        now: datetime,
    ) -> Sequence[Claimed]:
        """A worker's claim of up to *limit* of the oldest dispatchable runs (empty: none).

        ``claim_batch`` where the store has it, else one ``claim_next``.
        *now* is the engine's clock: waiting runs whose ``wake_at`` has come by
        then are dispatchable. A checkpoint; cancellation behaves as the
        store's claim (callers shield it: a claim cut short could land unseen).
        """
        sent = trio.current_time()
        store = self.store
        if has(store, Capability.CLAIM_BATCH):
            got = await cast(BatchClaimingStore, store).claim_batch(
                self.owner,
                ttl=self.ttl,
                workflows=workflows,
                max_dispatches=max_dispatches,
                limit=limit,
                gone=gone,
                now=now,
            )
            # The store made the lease last at least until ttl / 2 from now.
            confirmed = sent - self.ttl / 2
        else:
            record = await cast(WorkerStore, store).claim_next(  # open_worker checked
                self.owner,
                ttl=self.ttl,
                workflows=workflows,
                max_dispatches=max_dispatches,
                gone=gone,
                now=now,
            )
            got = [] if record is None else [Claimed(record, None)]
            confirmed = sent
        if got:
            self._confirmed = max(self._confirmed, confirmed)
            for claimed in got:
                self._releases.pop(claimed.record.run_id, None)
                self._unsure.pop(claimed.record.run_id, None)  # (this claim's execution holds it)
        return got

    def release_later(self, record: RunRecord, *, counts: bool = False) -> None:
        """Have the renewal task write *record* (the run, released) soon, not the caller.

        A release gives back the worker dispatch it counted: only claims
        whose owner vanished without an outcome count toward
        ``max_dispatches``, so a worker that drains does not push its runs
        toward ``dead_letter``. With *counts* it keeps it: the execution
        ended without storing its outcome (the store failed), which counts
        like a vanished owner.
        """
        if record.dispatches and not counts:
            record = attrs.evolve(record, dispatches=record.dispatches - 1)
        self._releases[record.run_id] = record
        self._wake.set()

    # -- the task ---------------------------------------------------------------------

    async def run(self) -> None:
        """Renew, release and watch leases until cancelled (a task of ``open_engine``)."""
        retry_at = -math.inf
        while True:
            if self.held:
                due = max(self._confirmed + self.ttl / 3, retry_at)
                with trio.move_on_at(min(due, self._confirmed + self.ttl)):
                    await self._wait()
            elif self._unsure and not self._releases:
                with trio.move_on_after(self.ttl / 3):
                    await self._wait()
            elif not self._releases:
                self._idle = True
                try:
                    await self._wait()
                finally:
                    self._idle = False
            # Before any store call (a release may take long while the store is
            # down or restarting): leases unconfirmed for lease_ttl are lost at
            # once, so that a process waking from a pause stops its runs before
            # they execute more steps.
            self._lose_expired()
            await self._release_pending()
            await self._release_unsure()
            if not self.held or self._lose_expired():  # (the releases took long)
                continue
            now = trio.current_time()
            if (
                now >= self._confirmed + self.ttl / 3
                and now >= retry_at
                and not await self._renew()
            ):
                retry_at = trio.current_time() + self.ttl / 10

    async def close(self) -> None:
        """Write the pending releases; best effort, bounded by ``save_timeout``.

        Cut short if the caller is cancelled: the leases not released then
        expire after ``lease_ttl`` (on this machine they are taken over at
        once, the engine being closed).
        """
        await self.flush()

    async def flush(self) -> None:
        """Write the pending releases now, in the caller; the engine stays open."""
        with trio.move_on_after(self.save_timeout):
            await self._release_pending()

    async def _wait(self) -> None:
        await self._wake.wait()
        self._wake = trio.Event()

    async def _release_pending(self) -> None:
        """Write the pending releases, each bounded by ``lease_ttl / 3``: a store that hangs
        must not hold up the renewals of the runs still held. A release that failed or
        took longer is looked at again (see :meth:`_release_unsure`)."""
        while self._releases:
            self._lose_expired()
            run_id, record = next(iter(self._releases.items()))
            try:
                with trio.move_on_after(self.ttl / 3) as bounded:
                    await self.store.update_run(record)
                if bounded.cancelled_caught:
                    log.warning(
                        "tether: releasing the lease of run %s took over lease_ttl/3 (retried)",
                        run_id,
                    )
                    self._retry_release(record)
            except LeaseLostError:
                pass  # claimed again since: nothing of ours to release
            except Exception as exc:
                log.warning(
                    "tether: releasing the lease of run %s failed (retried): %r", run_id, exc
                )
                self._retry_release(record)
            if self._releases.get(run_id) is record:
                del self._releases[run_id]

    def _retry_release(self, record: RunRecord) -> None:
        """Look again later whether the store still names this engine *record*'s owner, with
        its token, and release it then: this owner's row lives on while it holds runs, and
        nobody would take the run until that row expired."""
        until = trio.current_time() + self.ttl + _LOST_RELEASE_HORIZON
        self._unsure[record.run_id] = (until, record.token)

    async def _release_unsure(self) -> None:
        """Release each run whose cut-short claim landed after all (see :meth:`claim`), and
        each run whose lease was lost here while the store did not answer."""
        for run_id, entry in list(self._unsure.items()):
            until, token = entry
            if run_id in self.held or run_id in self._claiming:
                continue  # claimed again here: that execution holds it
            try:
                # Bounded like a release: a store that hangs must not hold up renewals.
                record = None
                with trio.move_on_after(self.ttl / 3):
                    record = await self.store.get_run(run_id)
                if (
                    self._unsure.get(run_id) is not entry  # claimed again meanwhile
                    or run_id in self.held
                    or run_id in self._claiming
                ):
                    continue
                if (
                    record is not None
                    and record.owner == self.owner
                    and token in (None, record.token)  # (another token: claimed again here)
                ):
                    # Fenced by the token read: refused if claimed since.
                    with trio.move_on_after(self.ttl / 3):
                        await self.store.update_run(
                            attrs.evolve(record, owner=None, updated_at=utcnow())
                        )
                        self._unsure.pop(run_id, None)
                        continue
                elif token is not None and record is not None:
                    # A lost lease (unlike a cut-short claim) cannot land later.
                    self._unsure.pop(run_id, None)
                    continue
            except LeaseLostError:
                self._unsure.pop(run_id, None)
                continue
            except Exception as exc:
                log.warning("tether: releasing run %s (retried) failed: %r", run_id, exc)
            if trio.current_time() >= until:
                self._unsure.pop(run_id, None)

    async def _renew(self) -> bool:
        """One renewal of every held lease; ``False`` if the store failed."""
        held = {run_id: h.token for run_id, h in self.held.items()}
        sent = trio.current_time()
        self.renewals += 1
        try:
            with trio.move_on_at(self._confirmed + self.ttl):
                renewal = await self.store.renew(self.owner, ttl=self.ttl, held=held)
                self._confirmed = max(self._confirmed, sent)
                for run_id in renewal.lost:
                    self._lose(run_id, held[run_id], "another owner took it over")
                for run_id in renewal.released:
                    self._lose(
                        run_id,
                        held[run_id],
                        "the store holds it released with this token",
                        released=True,
                    )
                for run_id in renewal.cancelled:
                    h = self.held.get(run_id)
                    if h is not None and h.token == held[run_id]:
                        h.holder.cancel_recorded()
                return True
            # Cut short at the leases' expiry (the store hung, or this process was
            # paused in the call): lost now, in this same step, not a loop later.
            self._lose_expired()
        except Exception as exc:
            log.warning("tether: renewing the leases of %s failed: %r", self.owner, exc)
        return False

    def _lose(self, run_id: str, token: int, why: str, *, released: bool = False) -> None:
        h = self.held.get(run_id)
        if h is None or h.token != token:
            return
        del self.held[run_id]
        (h.holder.lease_released if released else h.holder.lease_lost)(
            LeaseLostError(
                f"run {run_id!r}: this engine ({self.owner}) lost the run's lease "
                f"(token {token}): {why}. The run was stopped; nothing more was written."
            )
        )

    def _lose_expired(self) -> bool:
        """Lose every lease held when none was confirmed for ``lease_ttl``; whether it did.

        The runs lost are released once the store answers again, each fenced
        by its stored token (refused if another owner took it over
        meanwhile): this engine's owner row may live on (renewed for the
        runs it holds later, or by its claims), and a run it still names as
        owner would be taken by nobody until that row expired.
        """
        if not self.held or trio.current_time() < self._confirmed + self.ttl:
            return False
        lost = {run_id: h.token for run_id, h in self.held.items()}
        self._lose_all(
            f"no lease renewal succeeded for lease_ttl={self.ttl} s (this process was "
            "paused, or the store did not answer)"
        )
        until = trio.current_time() + self.ttl + _LOST_RELEASE_HORIZON
        for run_id, token in lost.items():
            self._unsure[run_id] = (until, token)
        return True

    def _lose_all(self, why: str) -> None:
        for run_id, h in list(self.held.items()):
            self._lose(run_id, h.token, why)
