"""What workers serve: their advertisements, and the runs that no live worker serves.

Layer: the engine (``_engine``).

A worker claims only runs whose ``(workflow, version)`` it serves, so a run
of a version that no worker has registered would wait in the queue forever,
silently. To say so instead, each worker *advertises* in the store what it
serves (:meth:`AdvertisingStore.advertise <tether.stores.AdvertisingStore>`,
one small write): when it starts, again every ``lease_ttl / 3`` while it
runs, each advertisement lasting ``lease_ttl``, and it withdraws it when it
leaves. A crashed worker's advertisement expires like its leases.

Advertisements are kept apart from leases on purpose: an idle worker holds
no lease but must still be counted, and refreshing an advertisement must
never extend the leases of runs the worker may have lost. They are per
owner, like leases: several workers on one engine advertise, together, the
union of what they serve.

:func:`stranded_records` reads the live advertisements, then the runs that
wait for a worker (``queued``, ``waiting`` on a timer, or ``running``
without a live lease), and
keeps those whose pair nobody serves (:func:`tether.stores.stranded`). With
no worker alive, every waiting run is stranded: nobody will claim it.

This module knows stores only through their protocol and never imports the
engine.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final, NoReturn, cast

import trio

from .._core._owners import owner_is_gone
from .._core._store_calls import StoreErrors
from .._errors import UsageError
from ..stores._capabilities import Capability, has
from ..stores._owners import Served, WorkerAd
from ..stores._queue import Placed, RunFilter, serves, stranded
from ..stores._records import RunRecord, RunStatus
from ..stores._store import ADVERTISE_METHODS, AdvertisingStore, Store

__all__ = (
    "TAKEN_OVER",
    "Advertiser",
    "is_stranded",
    "live_serves",
    "live_workers",
    "stranded_records",
    "stranded_text",
    "taken_over",
)

log = logging.getLogger("tether.worker")

#: Runs read per ``list_runs`` call while looking for stranded ones.
_PAGE: Final = 1000
_WAITING: Final = frozenset(s for s in RunStatus if s.wants_worker)

#: The advertisers of the workers open in this process, by owner (engine).
_open: dict[str, list[Advertiser]] = {}


def _advertising(store: Store) -> AdvertisingStore | None:
    if has(store, Capability.ADVERTISE):
        return cast(AdvertisingStore, store)
    return None


class Advertiser:
    """One worker's advertisement: written, kept fresh, withdrawn.

    On a store without ``advertise`` every method does nothing (the worker
    still works; only ``--stranded`` cannot be answered there). Store errors
    are logged and retried at the next interval, never raised: an
    advertisement is information, never a reason for a worker to stop.

    An advertiser is open from :meth:`open` to :meth:`withdraw`; each write
    advertises what every open advertiser of its owner serves.

    Args:
        store: the worker's engine's store.
        owner: the worker's engine's owner name.
        ttl: seconds each advertisement lasts (the engine's ``lease_ttl``).
        save_timeout: bounds the withdrawal when the worker leaves.
        serves: what the worker serves, asked at each write (a worker
            serving every workflow defined in its process serves the ones
            defined since).
    """

    def __init__(
        self,
        store: Store,
        owner: str,
        *,
        ttl: float,
        save_timeout: float,
        serves: Callable[[], frozenset[Served]],
    ) -> None:
        self.store = _advertising(store)
        self.owner = owner
        self.ttl = ttl
        self.save_timeout = save_timeout
        self.serves = serves

    async def open(self) -> None:
        """Join the owner's advertisers and write the advertisement. A checkpoint."""
        _open.setdefault(self.owner, []).append(self)
        await self._write()

    async def run(self) -> NoReturn:
        """Write the advertisement every ``ttl / 3`` until cancelled (a task of the worker)."""
        if self.store is None:
            await trio.sleep_forever()  # nothing to keep fresh: no wake-ups either
        while True:
            await trio.sleep(self.ttl / 3)
            await self._write()

    async def withdraw(self) -> None:
        """Leave; remove the advertisement, or shrink it to what the owner's other workers
        serve. Best effort: shielded, bounded by ``save_timeout``; left undone (a
        timeout, a store error), it expires after ``ttl``.
        """
        mine = _open.get(self.owner, [])
        if self in mine:
            mine.remove(self)
        if not mine:
            _open.pop(self.owner, None)
        with trio.CancelScope(shield=True), trio.move_on_after(self.save_timeout):
            await self._write()

    async def _write(self) -> None:
        """One write of the owner's advertisement (none open: withdrawn); errors logged."""
        if self.store is None:
            await trio.lowlevel.checkpoint()
            return
        serves: set[Served] = set()
        advertisers = _open.get(self.owner, [])
        for advertiser in advertisers:
            serves |= advertiser.serves()
        try:
            ttl = self.ttl if advertisers else 0
            await self.store.advertise(self.owner, serves=serves, ttl=ttl)
        except Exception as exc:
            log.warning("tether worker %s: advertising failed (retried): %r", self.owner, exc)


async def live_workers(store: Store) -> list[WorkerAd]:
    """The live advertisements of *store*'s workers, by owner. A checkpoint.

    Raises:
        UsageError: the store keeps no advertisements.
        CheckpointCorruptError: one cannot be read.
        StoreError: the store failed.
    """
    advertising = _advertising(store)
    if advertising is None:
        await trio.lowlevel.checkpoint()
        raise _no_advertisements(store)
    with StoreErrors("reading the workers' advertisements"):
        return list(await advertising.list_workers())


def _no_advertisements(store: Store) -> UsageError:
    return UsageError(
        f"{store!r} keeps no worker advertisements (it lacks "
        f"{' and '.join(ADVERTISE_METHODS)}): it cannot tell which workers are alive"
    )


#: What to say of an interrupted run that a live worker serves: it need not be resumed.
TAKEN_OVER: Final = (
    "a live worker serves its workflow and takes it over once its lease lapses; no need "
    "to resume it"
)


async def live_serves(store: Store) -> frozenset[Served] | None:
    """Every ``(workflow, version)`` some live worker serves; ``None``: the store cannot tell.

    A checkpoint (it reads the advertisements).

    Raises:
        CheckpointCorruptError: an advertisement cannot be read.
        StoreError: the store failed.
    """
    if _advertising(store) is None:
        await trio.lowlevel.checkpoint()
        return None
    served: set[Served] = set()
    for ad in await live_workers(store):
        served |= ad.serves
    return frozenset(served)


def taken_over(run: Placed, *, cancel_requested: bool, served: frozenset[Served] | None) -> bool:
    """Whether a live worker (of those that serve *served*) takes the interrupted *run*
    over (``running``, no live owner): nobody need resume it. A run with a recorded
    cancel is not: its cancel must be finished."""
    return (
        run.status is RunStatus.RUNNING
        and not cancel_requested
        and served is not None
        and serves(served, run)
    )


def is_stranded(run: Placed, served: frozenset[Served] | None) -> bool | None:
    """Whether *run* waits for a worker that none of the live ones (*served*) is;
    ``None``: the store cannot tell (*served* is ``None``)."""
    if served is None:
        return None
    gone = {run.owner} if run.owner is not None and owner_is_gone(run.owner) else set()
    return stranded(run, served=served, gone=gone)


def stranded_text(run: Placed) -> str:
    """What to say of a stranded run: the dashboard's and ``tether runs show``'s one wording."""
    version = "" if run.version is None else f" version {run.version!r}"
    return (
        f"stranded: no live worker serves workflow {run.workflow!r}{version}, so nobody "
        "will execute this run; start a worker that serves it (tether worker --import "
        "MODULE), or resume it by hand (tether resume)"
    )


async def stranded_records(store: Store, selected: RunFilter) -> list[RunRecord]:
    """The runs *selected* picks that wait for a worker no live worker is, oldest first.

    The advertisements are read first, then the waiting runs, page by page:
    a worker that claims a run between the two reads leaves it ``running``
    with a live lease, which is not stranded. A checkpoint.

    Raises:
        UsageError: the store keeps no advertisements.
        RunNotFoundError: ``selected.after`` names no stored run.
        CheckpointCorruptError: a record or an advertisement cannot be read.
    """
    served = await live_serves(store)
    if served is None:
        raise _no_advertisements(store)
    statuses = _WAITING if selected.status is None else _WAITING & selected.status
    if not statuses or selected.limit == 0:
        return []
    found: list[RunRecord] = []
    after = selected.after
    while True:
        page = await store.list_runs(**selected.given(status=statuses, limit=_PAGE, after=after))
        gone = {
            r.owner
            for r in page
            if r.owner is not None and r.lease_expires_at is not None and owner_is_gone(r.owner)
        }
        for record in page:
            if stranded(record, served=served, gone=gone):
                found.append(record)
                if selected.limit is not None and len(found) >= selected.limit:
                    return found
        if len(page) < _PAGE:
            return found
        after = page[-1].run_id
