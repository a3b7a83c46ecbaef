"""Workers: claim runs from the store's queue and execute them, at most N at once.

Layer: workers (``_worker``).

The shape of one worker::

    async with open_worker(engine, concurrency=N):   the caller's block
    └─ worker nursery
       ├─ claimer task       takes every free slot (at least one), then one
       │  │                  claim of as many runs (shielded, one write);
       │  │                  when nothing is dispatchable, waits for a change
       │  │                  (the engine's changes), poll_interval, or the wake-up of
       │  │                  a run it parked, whichever is first; after claiming
       │  │                  a run's last chance (max_dispatches), gives the
       │  │                  rest of its batch back and waits until that run ends
       │  ├─ advertiser      says in the store what the worker serves, every
       │  │                  lease_ttl / 3 (see :mod:`tether._engine._serving`)
       │  └─ schedules       one ticker per schedule: submits each tick's run
       │                     (see :mod:`._schedule`)
       └─ runs nursery       one task per claimed run: execute_claimed,
                             its outcome logged, never raised; frees its slot

Leaving the block drains: the claimer is cancelled (claiming stops), the held
runs get ``grace`` seconds to finish, then the runs nursery is cancelled: a
caller cancellation of each run (saves in flight cut, no status written), and
their leases are released at once (bounded by ``save_timeout``) so another
worker takes them over without waiting for ``lease_ttl``.

A run whose tasks all wait on durable timers, the next one due more than
``park_after`` seconds away, *parks*: the execution stores it ``waiting``
with that moment as ``wake_at`` and releases its lease in the same write,
and its slot is free at once. A claim takes it again, here or in any
other worker, once ``wake_at`` has come on the claimer's clock
(``engine.clock``, passed as ``now``); this worker wakes for the runs it
parked at exactly that moment, and finds those others parked by polling.
A run whose tasks wait in ``tether.receive`` (with no timer due within
``park_after``) parks the same way, with no ``wake_at`` when no timer is
pending: it is not due until a send makes it due (``wake_at`` now, in the
send's own write), which is a change like any other.

A claim is one write of the store (``claim_batch``, or ``claim_next`` on a
store without it) that moves up to as many runs as there are free slots to
``running`` with this engine's lease; the lease, its renewal and its fencing
are the engine's, exactly as for ``engine.run``. A run taken over from an
owner whose lease expired, or whose process is gone, is logged at WARNING
with that owner: its steps not stored run again. It takes only runs whose
``(workflow, version)`` the worker serves: a worker with version ``"2"`` of a
workflow never takes a run started under version ``"1"``.

Whole because :func:`open_worker` is the worker's lifetime in one async
context manager: half of it is the reference of its options, and its body
checks them, opens the claimer and the runs nursery, yields, and drains, in
one ``try``/``finally`` whose order (stop claiming, the grace, cancel the
runs, write their releases, withdraw the advertisement) is the drain itself.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, Final

import attrs
import trio

from .._api._timers import Waiting
from .._api._workflow import Workflow
from .._core._changes import Changes, push_wake
from .._core._nurseries import exit_nursery
from .._core._owners import owner_is_gone
from .._engine._engine import Engine, internals
from .._engine._serving import Advertiser
from .._errors import LeaseLostError, Paused, RunCancelledError, UsageError
from ..stores._owners import Served
from ..stores._queue import MAX_BATCH, Claimed, check_max_dispatches
from ..stores._records import RunRecord, RunStatus, utcnow
from ..stores._store import WORKER_METHODS
from ._schedule import Schedule, check_schedules, serve_schedules

__all__ = ("Worker", "open_worker")

log = logging.getLogger("tether.worker")

#: Running runs looked at for dead same-host owners, per look.
_GONE_SCAN: Final = 1000


@attrs.define(eq=False)
class Worker:
    """A worker's state, yielded by :func:`open_worker` (read it; do not change it)."""

    engine: Engine
    concurrency: int
    max_dispatches: int
    poll_interval: float
    grace: float
    #: the workflow names it claims runs of (empty: every one defined in its process)
    workflows: frozenset[str] = frozenset()
    #: the ``(name, version)`` pairs of those workflows (empty: every one defined)
    serves: frozenset[Served] = frozenset()
    #: the schedules it serves (submits each tick's run of)
    schedules: tuple[Schedule, ...] = ()
    #: a run whose next durable timer is more than this many seconds away,
    #: with every task waiting, parks (``waiting``: no lease, no slot)
    park_after: float = 60.0
    #: run ids this worker executes now
    running: set[str] = attrs.field(factory=set)
    #: runs claimed since the worker started
    claimed: int = 0
    #: runs that ended, by how: "completed", "failed", "paused", "waiting"
    #: (parked on a timer), "cancelled", "lease lost", "interrupted"
    outcomes: dict[str, int] = attrs.field(factory=dict)
    _slots: trio.Semaphore = attrs.field(init=False)
    _isolated_from: int = attrs.field(init=False)  # dispatches from which a run runs alone
    _gone: set[str] = attrs.field(factory=set)  # dead owners of running runs, last looked
    _gone_looked: float = -math.inf
    #: (a heap) wake_at of runs parked here, and of runs submitted here to start later
    _wakes: list[datetime] = attrs.field(factory=list)
    _claimed_at: datetime | None = None  # the engine's clock at the last claim

    def __attrs_post_init__(self) -> None:
        self._slots = trio.Semaphore(self.concurrency)
        # Claims that execute alone: a run's last chance, when that is not its
        # first claim (with max_dispatches=1 every claim would be alone).
        self._isolated_from = max(2, self.max_dispatches)

    async def _claim_loop(self, runs: trio.Nursery) -> None:
        """Claim and start runs while slots are free, until cancelled."""
        changes = internals(self.engine).changes
        with changes.keeping_wakes(self._wakes):  # (runs submitted here to start later)
            await self._claim_forever(runs, changes)

    async def _claim_forever(self, runs: trio.Nursery, changes: Changes) -> None:
        while True:
            await self._slots.acquire()
            free = 1 + self._take_free_slots(most=MAX_BATCH - 1)
            seen = changes.generation
            try:
                claimed = await self._claim(free)
            except BaseException:
                self._release_slots(free)
                raise
            self._release_slots(free - len(claimed))
            if not claimed:
                await changes.wait(seen, self._idle_wait())
                continue
            last = next((c for c in claimed if c.record.dispatches >= self._isolated_from), None)
            if last is not None:
                # A run's last chance: workers vanished with it every time
                # before. It executes alone: the others of its batch are given
                # back (their dispatch uncounted) and nothing more is claimed
                # until it ends. Each death of a worker counts against every
                # run it held, so without this the runs claimed beside a
                # poison run die with it each time and are dead-lettered with
                # it. With it, a run beside a poison run that is not at its
                # own last chance survives: its deaths are the poison's, fewer
                # than max_dispatches.
                for other in claimed:
                    if other is not last:
                        self._give_back(other.record)
                self._release_slots(len(claimed) - 1)
                claimed = [last]
                # Given back before it starts, so that they are not held (and
                # charged a death) should it kill this process. Shielded: a
                # cancellation here would leave the last run claimed, unstarted;
                # bounded by save_timeout (a release not written by then expires).
                with trio.CancelScope(shield=True):
                    await internals(self.engine).leases.flush()
            for c in claimed:
                ended = self._start(runs, c)
            if last is not None:
                await ended.wait()

    def _take_free_slots(self, *, most: int) -> int:
        """Take every slot free now, at most *most*, without waiting; how many."""
        taken = 0
        while taken < most:
            try:
                self._slots.acquire_nowait()
            except trio.WouldBlock:
                return taken
            taken += 1
        return taken

    def _release_slots(self, n: int) -> None:
        for _ in range(n):
            self._slots.release()

    def _give_back(self, record: RunRecord) -> None:
        """Release a claimed run unexecuted (soon, by the lease task): the dispatch is uncounted."""
        released = attrs.evolve(record, owner=None, updated_at=utcnow())
        internals(self.engine).leases.release_later(released)

    def _start(self, runs: trio.Nursery, claimed: Claimed) -> trio.Event:
        """Start executing a claimed run in *runs*; the event is set when it ends."""
        record = claimed.record
        previous = claimed.previous_owner
        if previous is not None and previous != self.engine.owner:
            # The steps the previous owner had not stored run again here
            # (at-least-once): the log says so where an operator looks.
            log.warning(
                "tether worker %s: took over run %s from %s (its lease expired, or its "
                "process is gone); steps it had not stored run again",
                self.engine.owner,
                record.run_id,
                previous,
            )
        self.claimed += 1
        self.running.add(record.run_id)
        ended = trio.Event()
        runs.start_soon(self._execute, claimed, ended, name=f"tether worker: run {record.run_id}")
        return ended

    @property
    def free_slots(self) -> int:
        """How many more runs the worker can hold now (``concurrency`` minus those held)."""
        return self._slots.value

    def _idle_wait(self) -> float:
        """Seconds to wait, nothing being dispatchable: ``poll_interval``, or less
        when a run parked here is due sooner (on the engine's clock)."""
        wakes = self._wakes
        claimed = self._claimed_at
        # Those due by the last claim were dispatchable then (taken by it, or
        # by someone else, or gone): forget them. Those due since are not.
        while wakes and claimed is not None and wakes[0] <= claimed:
            heapq.heappop(wakes)
        if not wakes:
            return self.poll_interval
        remaining = (wakes[0] - self.engine.clock.now()).total_seconds()
        return min(self.poll_interval, max(0.0, remaining))

    async def _claim(self, limit: int) -> Sequence[Claimed]:
        """One claim of up to *limit* runs; empty when nothing is dispatchable or the store
        failed.

        Shielded, bounded by ``save_timeout``: a claim cut short by a
        cancellation could land unseen, leaving runs claimed that nobody
        executes until this engine closes. Store errors are logged and
        retried at the next poll, never raised.
        """
        engine = self.engine
        served = self.serving()
        if not served:
            await trio.lowlevel.checkpoint()
            return ()
        gone = await self._gone_owners()
        now = self._claimed_at = engine.clock.now()
        try:
            with trio.CancelScope(shield=True), trio.move_on_after(engine.save_timeout):
                return await internals(engine).leases.claim_batch(
                    served, max_dispatches=self.max_dispatches, limit=limit, gone=gone, now=now
                )
            log.warning("tether worker %s: a claim took over save_timeout", engine.owner)
        except Exception as exc:
            log.warning("tether worker %s: claiming failed (retried): %r", engine.owner, exc)
        return ()

    def serving(self) -> frozenset[Served]:
        """The ``(workflow, version)`` pairs this worker claims runs of, now."""
        return self.serves or internals(self.engine).workflow_keys()

    async def _gone_owners(self) -> frozenset[str]:
        """Owners of running runs that are gone from this machine (taken over at once).

        Looked up at most once per ``poll_interval``: a listing of running
        runs, each owner checked with :func:`owner_is_gone`. Other machines'
        owners are never taken for gone; their leases expire instead.
        """
        now = trio.current_time()
        if now - self._gone_looked < self.poll_interval:
            return frozenset(self._gone)
        self._gone_looked = now
        try:
            records = await self.engine.store.list_runs(
                status=[RunStatus.RUNNING], limit=_GONE_SCAN
            )
        except Exception as exc:
            # Only a speed-up (leases expire anyway): never a reason not to claim.
            log.debug("tether worker: looking for dead owners failed: %r", exc)
            return frozenset(self._gone)
        # Only the owners of runs listed now: the set passed to claims stays small.
        self._gone = {
            r.owner
            for r in records
            if r.owner is not None
            and r.owner != self.engine.owner
            and r.lease_expires_at is not None
            and (r.owner in self._gone or owner_is_gone(r.owner))
        }
        return frozenset(self._gone)

    async def _execute(self, claimed: Claimed, ended: trio.Event) -> None:
        """Execute one claimed run; log its outcome; never raise one (Cancelled propagates).

        A failure is logged at WARNING with its traceback.

        Sets *ended* when the run no longer holds its slot.
        """
        record = claimed.record
        run_id = record.run_id
        how = "interrupted"
        try:
            await internals(self.engine).execute_claimed(
                record, park_after=self.park_after, journal=claimed.entries
            )
            how = "completed"
        except Paused:
            how = "paused"
        except Waiting as parked:
            how = "waiting"
            if parked.wake_at is not None:  # (else a send makes it due: a change)
                push_wake(self._wakes, parked.wake_at)
        except RunCancelledError:
            how = "cancelled"
        except LeaseLostError as exc:
            how = "lease lost"
            log.warning(
                "tether worker %s: run %s: LeaseLostError: %s", self.engine.owner, run_id, exc
            )
        except Exception as exc:
            how = "failed"
            # With its traceback (the step's own frame in it): the log is where
            # an operator looks first.
            log.warning(
                "tether worker %s: run %s failed: %r", self.engine.owner, run_id, exc, exc_info=exc
            )
        finally:
            self.outcomes[how] = self.outcomes.get(how, 0) + 1
            self.running.discard(run_id)
            self._slots.release()
            ended.set()
            internals(self.engine).changes.notify()  # a waiter here sees the outcome at once


def _check(name: str, value: object, *, positive: bool) -> float:
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or math.isnan(value)
        or value < 0
        or (positive and value == 0)
    ):
        kind = "positive" if positive else "non-negative"
        raise UsageError(f"{name} must be a {kind} number of seconds, not {value!r}")
    return float(value)


@asynccontextmanager
async def open_worker(
    engine: Engine,
    *,
    concurrency: int = 16,
    max_dispatches: int = 5,
    poll_interval: float = 1.0,
    grace: float = 0.0,
    workflows: Iterable[Workflow[..., Any]] | None = None,
    schedules: Iterable[Schedule] = (),
    park_after: float = 60.0,
) -> AsyncIterator[Worker]:
    """In the background of the block, claim queued and orphaned runs and execute them.

    The worker claims, oldest first, runs of the workflows defined in this
    process (each run only where its workflow's version is: see
    ``@tether.workflow(version=)``) that are ``queued``, ``waiting`` and due
    (parked on their timers, see *park_after*), or ``running`` without a
    live lease (a
    crashed owner, one gone from this machine, one that released the run
    after a caller cancellation, a worker that left), and executes them in
    *engine*, at most *concurrency* at once. It wakes at once on changes the
    engine learns of (a submit here; anyone's, where the store announces
    changes) and otherwise polls every *poll_interval* seconds.

    Outcomes of the runs (failures, pauses, cancels, lost leases) are logged
    on the ``tether.worker`` logger and never propagate out of the block;
    store errors while claiming are retried.

    The worker advertises in the store what it serves (when it starts, then
    every ``lease_ttl / 3``; withdrawn when it leaves), so that runs no live
    worker serves can be listed (``engine.list_runs(stranded=True)``,
    ``tether runs list --stranded``) instead of waiting silently.

    Args:
        engine: an open engine; its store must have ``claim_next``.
        concurrency: how many runs the worker holds a lease on at once.
        max_dispatches: a run claimed this many times by workers without
            reaching an outcome (its worker died each time, or its outcome
            could not be stored: then it also waits before it is claimed
            again, one second after the first such execution, twice as long
            after each further one, at most five minutes) is stored as
            ``dead_letter`` instead of being claimed again. A run's last
            chance (its claim number *max_dispatches*, from 2 on) executes
            alone: the worker claims nothing more until it ends, so a run
            that kills its workers does not take the runs beside it into
            ``dead_letter`` too.
        poll_interval: seconds between looks at the queue when nothing wakes it.
        grace: on leaving the block, seconds the held runs get to finish
            before they are cancelled (default 0: at once; ``tether worker
            --grace`` has the same default).
        workflows: the workflows this worker executes, and the only ones it
            claims runs of, executed as these objects (even where another
            workflow of the same name and version is defined). Default: every
            workflow defined in this process, found by name and version.
        schedules: ``tether.schedule()`` objects: in the background of the
            block, the worker submits each one's run of every tick (measured
            on ``engine.clock``), exactly one run per tick across all the
            workers that serve it. Their runs are claimed like any queued run
            (here too, unless *workflows* leaves their workflow out). Store
            errors are retried and logged; see ``tether.schedule`` for missed
            ticks.
        park_after: seconds. A run whose every task waits (on durable
            timers, ``tether.sleep`` or a retry's backoff, for messages in
            ``tether.receive``, or for other tasks), none in ``tether.ask``,
            and whose next timer is due more than this far off on
            ``engine.clock`` (or that has none, waiting in ``receive``),
            *parks*: it is stored ``waiting`` with that moment as its
            ``wake_at`` (none when only a message can wake it), its lease
            released in the same write, and its slot freed; any worker
            claims it again once it is due, or once a message is sent to it
            (this one wakes for its timer then). ``math.inf``: never park
            (the run waits holding its slot).

    Leaving the block stops claiming, waits up to *grace*, then cancels the
    runs still held as a caller cancellation (prompt, no status written) and
    releases their leases (bounded by ``save_timeout``), so another worker
    takes them over at once.

    Raises:
        UsageError: invalid arguments, or a store that serves no workers.
    """
    if not isinstance(engine, Engine):
        raise UsageError(f"open_worker() takes an engine from open_engine(), not {engine!r}")
    missing = [m for m in WORKER_METHODS if not callable(getattr(engine.store, m, None))]
    if missing:
        raise UsageError(
            f"{engine.store!r} cannot serve workers: it lacks {', '.join(missing)} "
            "(see tether.stores.Store.claim_next)"
        )
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise UsageError(f"concurrency must be a positive integer, not {concurrency!r}")
    served: list[Workflow[..., Any]] = []
    for wf in workflows or ():
        if not isinstance(wf, Workflow):
            raise UsageError(f"open_worker(workflows=) takes @tether.workflow objects, not {wf!r}")
        served.append(wf)
    if workflows is not None and not served:
        raise UsageError("open_worker(workflows=) names no workflow: it would claim nothing")
    for wf in served:
        internals(engine).define(wf)
    timetable = check_schedules(schedules, "open_worker(schedules=)")
    worker = Worker(
        engine=engine,
        workflows=frozenset(wf.name for wf in served),
        serves=frozenset((wf.name, wf.version) for wf in served),
        concurrency=concurrency,
        max_dispatches=check_max_dispatches(max_dispatches),
        poll_interval=_check("poll_interval", poll_interval, positive=True),
        grace=_check("grace", grace, positive=False),
        schedules=timetable,
        park_after=_check("park_after", park_after, positive=False),
    )
    advertiser = Advertiser(
        engine.store,
        engine.owner,
        ttl=engine.lease_ttl,
        save_timeout=engine.save_timeout,
        serves=worker.serving,
    )
    claiming = trio.CancelScope()
    manager = trio.open_nursery()
    runs = await manager.__aenter__()
    try:

        async def claim() -> None:
            with claiming:
                async with trio.open_nursery() as nursery:
                    # Advertised while it claims: both stop when claiming stops.
                    nursery.start_soon(advertiser.run, name="tether worker: advertises")
                    if timetable:
                        nursery.start_soon(
                            serve_schedules, engine, timetable, name="tether worker: schedules"
                        )
                    await worker._claim_loop(runs)

        runs.start_soon(claim, name="tether worker: claims")
        try:
            # Before the block: a run it serves is never listed as stranded from here on.
            await advertiser.open()
            yield worker
        finally:
            claiming.cancel()
            if worker.running and worker.grace > 0:
                with trio.move_on_after(worker.grace):
                    while worker.running:
                        changes = internals(engine).changes
                        await changes.wait(changes.generation, math.inf)
            runs.cancel_scope.cancel()
            # Run tasks report nothing (outcomes are logged): the block's own
            # error propagates as itself.
            await exit_nursery(manager)
    finally:
        # The cancelled runs asked for their releases: write them now, so
        # another worker takes them over at once (bounded by save_timeout).
        with trio.CancelScope(shield=True):
            await internals(engine).leases.flush()
        await advertiser.withdraw()
