"""The explorer's ownership faults: a takeover, a paused owner, two engines racing.

Layer: testing (``tether.testing``).

:mod:`._explore_plan` decides *where* a fault applies, :mod:`._explore_trial`
injects it; this module holds what an ownership fault *does*, and the invariant
(f) that checks the outcome: one owner at a time. After another owner took the
run over, the old owner stores nothing more (every entry and record written
after the takeover carries a newer token) and ``engine.run`` stops promptly
with ``LeaseLostError``; of two engines racing to run it, exactly one executes
it and the other gets ``RunConflictError`` at once; and every step record an
execution stored is of a step it ran once, stored once. The faults:

``lease_lost``
    while the owner's write is held, another owner takes the run over
    (``claim(takeover=token)``, as an engine that took the first for gone
    would); the owner's renewals do not get through meanwhile, so the held
    write is what tells it, and must be refused.
``pause``
    the owner process stops past its lease: its held write, its renewals and
    its other writes wait. The write was already on its way: it reaches the
    store late, after a second owner has claimed the run, and must be
    refused; the engine, seeing no renewal succeed for ``lease_ttl``, must
    have stopped by then.
``race``
    a second engine calls ``engine.run`` of the run when the first reaches
    the point: at the first's claim, both read the run before either claims
    it; at a later write, the second finds it executing. Exactly one
    executes it.

After a takeover the other owner's lease is ended (:func:`hand_back`) and
the explorer resumes with a fresh engine, as the new owner would.

Each engine is opened as :func:`tether.open_engine` opens one (an owner of
this process, its lease task renewing), but on the trial's store, which stays
open across the trial's executions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from datetime import UTC, datetime
from typing import Any, Final, TypeVar, final

import attrs
import trio

from .._api._workflow import Workflow
from .._core._clock import TrioWallClock
from .._core._owners import engine_closed, engine_opened
from .._engine._engine import Engine, internals
from ..stores._records import Entry, EntryKind, EntryStatus, RunRecord
from ..stores._store import Store
from ._faults import Call, SimulatedCrash

__all__ = (
    "EPOCH",
    "OTHER",
    "OWNERSHIP_KINDS",
    "OwnerFaults",
    "Race",
    "Takeover",
    "check_once",
    "check_race",
    "check_takeover",
    "hand_back",
    "open_owner",
    "take_over",
)

#: The ownership fault kinds, as the explorer names them.
OWNERSHIP_KINDS: Final = ("lease_lost", "pause", "race")

T = TypeVar("T")

#: The owner that takes runs over: on another machine, so never taken for gone.
OTHER: Final = "elsewhere:1:explorer"

#: Where the engines' clock starts in each trial (a TrioWallClock: virtual time).
EPOCH: Final = datetime(2030, 1, 1, tzinfo=UTC)


@asynccontextmanager
async def open_owner(
    store: Store,
    workflow: Workflow[..., Any],
    nursery: trio.Nursery,
    *,
    save_timeout: float,
    lease_ttl: float,
    crashed: Callable[[], bool],
) -> AsyncIterator[Engine]:
    """An engine as :func:`tether.open_engine` makes it, on the already open *store*.

    It is an owner of this process while the block runs (so another engine
    does not take its runs for abandoned), its lease task runs in *nursery*,
    and leaving the block normally closes it as ``open_engine`` does
    (pending releases written). A crashed process (``crashed()``) writes
    nothing more: its lease task dies, and it is not closed, only gone.
    """
    # Durable timers measure virtual time (each trial is a trio.run of its own).
    clock = TrioWallClock(EPOCH)
    engine = Engine(store, hooks=(), save_timeout=save_timeout, lease_ttl=lease_ttl, clock=clock)
    internals(engine).define(workflow)
    scope = trio.CancelScope()

    async def keep_leases() -> None:
        # A crashed process's lease task dies with it: SimulatedCrash ends it quietly.
        with scope, suppress(SimulatedCrash):
            await internals(engine).leases.run()

    engine_opened(internals(engine).engine_id)
    nursery.start_soon(keep_leases, name="tether leases")
    try:
        yield engine
        if not crashed():
            internals(engine).mark_closed()
            with suppress(SimulatedCrash):
                await internals(engine).leases.close()
    finally:
        internals(engine).mark_closed()
        scope.cancel()
        engine_closed(internals(engine).engine_id)


# -- takeovers --------------------------------------------------------------------


@final
@attrs.frozen
class Takeover:
    """Another owner claimed the run."""

    token: int  #: its fencing token
    seq: int  #: the highest journal seq stored once it had claimed
    at: float  #: when (virtual time)


async def take_over(store: Store, run_id: str, *, ttl: float) -> Takeover:
    """:data:`OTHER` claims *run_id* now, taking over a live lease (shielded: it completes)."""
    with trio.CancelScope(shield=True):
        record = await store.get_run(run_id)
        assert record is not None, "a takeover of a run that is not stored"
        live = record.owner is not None and record.lease_expires_at is not None
        claimed = await store.claim(run_id, OTHER, ttl=ttl, takeover=record.token if live else None)
        entries = await store.load_entries(run_id)
    return Takeover(
        claimed.token, max((e.seq or 0 for e in entries), default=0), trio.current_time()
    )


async def hand_back(store: Store) -> None:
    """:data:`OTHER` stops: its leases end, and the run can be resumed at once."""
    with trio.CancelScope(shield=True):
        await store.renew(OTHER, ttl=0, held={})


@attrs.define
class _Late:
    """The paused owner's held write, reaching the store late."""

    done: trio.Event = attrs.field(factory=trio.Event, repr=False)
    error: Exception | None = None  # what the store answered it (refused: LeaseLostError)


@final
class OwnerFaults:
    """What one trial's ownership faults hold: the owner's renewals and writes.

    Args:
        store: the store the other owner and the late writes use (the
            trial's store under the :class:`FaultyStore`).
        run_id: the explored run.
        lease_ttl, slow: the explorer's options.
    """

    def __init__(self, store: Store, run_id: str, *, lease_ttl: float, slow: float) -> None:
        self.store = store
        self.run_id = run_id
        self.ttl = lease_ttl
        self.slow = slow
        self.takeover: Takeover | None = None
        self._renewals: trio.Event | None = None  # set: the owner's renewals go on
        self._stopped: trio.Event | None = None  # set: the paused process continues
        self._late: _Late | None = None

    def reset(self) -> None:
        """A new execution: nothing is held."""
        for event in (self._renewals, self._stopped):
            if event is not None:
                event.set()
        self._renewals = self._stopped = self._late = None
        self.takeover = None

    async def settle(self) -> None:
        """Wait until a late write has reached the store (a ``pause``)."""
        if self._late is not None:
            await self._late.done.wait()

    # -- faults: Do(...) of the trial's FaultyStore --------------------------------

    async def renew(self, call: Call) -> None:
        """Before each renewal: it does not get through while the owner's are held."""
        if self._renewals is not None:
            await self._renewals.wait()

    async def write(self, call: Call) -> None:
        """Before each write: it waits while the owner's process is stopped."""
        if self._stopped is not None:
            await self._stopped.wait()

    async def lease_lost(self, call: Call) -> None:
        """At the point: another owner takes over; the write is held *slow* s, then goes on."""
        self._renewals = trio.Event()
        self.takeover = await take_over(self.store, self.run_id, ttl=self.ttl)
        await call.store.sleep(self.slow)

    async def pause(self, call: Call, spawn: Callable[..., None]) -> None:
        """At the point: the process stops past its lease; its write arrives late.

        The write travels in a task of its own, started with *spawn*
        (``spawn(afn, *args, name=...)``); its caller waits for the store's
        answer (the engine stops waiting once it knows its lease is lost).
        Raises what the store answered the late write; returns when it stored
        it (fencing is broken: the caller's own call then stores its twin,
        idempotently).
        """
        self._renewals = trio.Event()
        self._stopped = trio.Event()
        late = self._late = _Late()
        spawn(self._arrive_late, call, late, name="tether.explore late write")
        await late.done.wait()
        if late.error is not None:
            raise late.error

    async def _arrive_late(self, call: Call, late: _Late) -> None:
        # Virtual time runs on while the process is stopped: its lease expires
        # (on the engine's clock, and on MemoryStore's, which is trio's).
        await trio.sleep(self.ttl + self.slow)
        # A second engine claims the run, as it may once the lease expired
        # (taking it over where the store's clock is the wall clock).
        self.takeover = await take_over(self.store, self.run_id, ttl=self.ttl)
        assert self._stopped is not None
        self._stopped.set()  # the process continues
        with trio.CancelScope(shield=True):
            try:
                await getattr(self.store, call.method)(*call.args, **call.kwargs)
            except Exception as exc:
                late.error = exc
        late.done.set()


# -- invariant (f) ------------------------------------------------------------------


def check_takeover(
    takeover: Takeover,
    entries: Sequence[Entry],
    record: RunRecord | None,
    outcome: str,
    returned_at: float,
    due: float,
    where: str,
) -> list[str]:
    """(f) after *takeover*, the old owner stored nothing and ``engine.run`` stopped by *due*.

    *entries* and *record* are what is stored once the execution ended;
    *outcome* describes how ``engine.run`` ended, at *returned_at*.
    """
    problems = [
        f"(f) entry seq {e.seq} ({e.key}) was stored with the old owner's token {e.token} "
        f"after another owner had taken the run over with token {takeover.token} at "
        f"t={takeover.at:g} ({where}): a fenced write was not refused"
        for e in entries
        if (e.seq or 0) > takeover.seq and e.token < takeover.token
    ]
    if record is None or record.token != takeover.token or record.owner != OTHER:
        held = "nothing" if record is None else f"token {record.token}, owner {record.owner}"
        problems.append(
            f"(f) the run record was written after another owner had taken the run over with "
            f"token {takeover.token} ({where}): it holds {held}; a fenced write was not refused"
        )
    if not outcome.startswith("raised LeaseLostError:"):
        problems.append(
            f"(f) after another owner took the run over, engine.run {outcome}, not "
            f"tether.LeaseLostError ({where})"
        )
    elif returned_at > due:
        problems.append(
            f"(f) engine.run raised LeaseLostError at t={returned_at:g}, {returned_at - due:g}s "
            f"of virtual time later than it had to know its lease was lost (by t={due:g}) "
            f"({where})"
        )
    return problems


@attrs.define
class Race:
    """A second engine's ``engine.run`` of the run, raced against the execution's own call.

    The rival starts when the first engine reaches the race's point, and that
    engine's write is held meanwhile: at its claim, until the rival claims
    too (both read the run before either claimed it), and then neither goes
    on before both claims were answered; at a later write, until the rival
    has returned (it finds the run executing).
    """

    at_claim: bool  #: the point is the first engine's claim
    owners: list[str] = attrs.field(factory=lambda: ["", ""])  #: the engines' owner names
    #: the point was reached; the rival claims (or returned); the rival returned
    go: trio.Event = attrs.field(factory=trio.Event, repr=False)
    claiming: trio.Event = attrs.field(factory=trio.Event, repr=False)
    done: trio.Event = attrs.field(factory=trio.Event, repr=False)
    #: per engine: its claim was answered, or its call ended
    answered: list[trio.Event] = attrs.field(factory=lambda: [trio.Event(), trio.Event()])
    outcomes: list[str] = attrs.field(factory=lambda: ["", ""])  #: described
    started: list[list[str]] = attrs.field(factory=lambda: [[], []])  #: step keys executed
    began: list[float] = attrs.field(factory=lambda: [0.0, 0.0])
    returned_at: list[float] = attrs.field(factory=lambda: [0.0, 0.0])

    async def reached(self) -> None:
        """The first engine is at the point: start the rival, hold the write."""
        self.go.set()
        await (self.claiming if self.at_claim else self.done).wait()

    def seen(self, call: Call) -> None:
        """A write reaches the store: the rival's claim lets the first engine's go on."""
        if call.method == "claim" and call.args[1] == self.owners[1]:
            self.claiming.set()

    async def claimed(self, call: Call) -> None:
        """A write returned: at the claims, a claim waits for the other one's answer."""
        if not (call.method == "claim" and self.at_claim and self.go.is_set()):
            return
        if call.args[1] in self.owners:
            i = self.owners.index(call.args[1])
            self.answered[i].set()
            await self.answered[1 - i].wait()

    def executed(self) -> list[str]:
        """The steps both engines executed."""
        return self.started[0] + self.started[1]

    def winner(self) -> int | None:
        """The engine that executed the run, if exactly one got RunConflictError."""
        lost = [o.startswith("raised RunConflictError:") for o in self.outcomes]
        return lost.index(False) if lost.count(True) == 1 else None

    async def run(
        self,
        engines: Sequence[Engine],
        first: Callable[[list[str]], Awaitable[T]],
        rival: Callable[[list[str]], Awaitable[T]],
    ) -> T:
        """Await ``first(started)``, and ``rival(started)`` once the point is reached.

        *engines* are the first's and the rival's. Each call records the steps
        it executes in its *started*. Returns the outcome of the winner (of
        the first call when there is none, or no race: the point was not
        reached).
        """
        self.owners = [engine.owner for engine in engines]
        outcomes: list[T | None] = [None, None]

        async def run_first() -> None:
            try:
                outcomes[0] = await first(self.started[0])
            finally:
                self.returned_at[0] = trio.current_time()
                self.answered[0].set()
                if not self.go.is_set():
                    nursery.cancel_scope.cancel()  # the point was not reached: no race

        async def run_rival() -> None:
            await self.go.wait()
            self.began[1] = trio.current_time()
            try:
                outcomes[1] = await rival(self.started[1])
            finally:
                self.returned_at[1] = trio.current_time()
                self.answered[1].set()
                self.claiming.set()
                self.done.set()

        self.began[0] = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_first, name="tether.explore racer")
            nursery.start_soon(run_rival, name="tether.explore rival")
        self.outcomes = [str(o) for o in outcomes]
        outcome = outcomes[self.winner() or 0]
        assert outcome is not None
        return outcome


def check_race(
    race: Race,
    before: Sequence[Entry],
    after: Sequence[Entry],
    record: RunRecord | None,
    *,
    where: str,
) -> list[str]:
    """(f) of two engines racing, exactly one executed; the other was refused at once."""
    if not race.go.is_set():
        return []  # the point was not reached: no race
    winner = race.winner()
    if winner is None:
        return [
            f"(f) two engines ran the run at once: one {race.outcomes[0]}, the other "
            f"{race.outcomes[1]}; exactly one must execute it and the other get "
            f"RunConflictError ({where})"
        ]
    loser = 1 - winner
    problems = []
    if race.started[loser]:
        problems.append(
            f"(f) the engine refused with RunConflictError executed "
            f"{', '.join(race.started[loser])} first ({where})"
        )
    if race.returned_at[loser] != race.began[loser]:
        problems.append(
            f"(f) the engine refused with RunConflictError returned at "
            f"t={race.returned_at[loser]:g}, not at once (it called at t={race.began[loser]:g}) "
            f"({where})"
        )
    last = max((e.seq or 0 for e in before), default=0)
    token = None if record is None else record.token
    problems += [
        f"(f) entry seq {e.seq} ({e.key}) was stored with token {e.token}, not the token "
        f"{token} of the engine that executed the run ({where})"
        for e in after
        if (e.seq or 0) > last and e.token != token
    ]
    return problems


def check_once(
    before: Sequence[Entry], after: Sequence[Entry], started: Counter[str], *, where: str
) -> list[str]:
    """(f) each step record stored in an execution is of a step it ran once, stored once."""
    problems = []
    last = max((e.seq or 0 for e in before), default=0)
    records: dict[str, list[int]] = {}
    for e in after:
        if e.status is EntryStatus.COMPLETED and e.kind in (EntryKind.STEP, EntryKind.STREAM):
            records.setdefault(e.key, []).append(e.seq or 0)
    for key, seqs in records.items():
        if len(seqs) > 1:
            problems.append(
                f"(f) step {key} has {len(seqs)} stored records (seqs "
                f"{', '.join(map(str, seqs))}) after {where}; a step's record is stored once"
            )
        if max(seqs) > last and started[key] != 1:
            problems.append(
                f"(f) step {key} was stored in {where}, which executed it {started[key]} "
                "times, not once"
            )
    return problems
