"""The explorer: inject one fault at every interleaving point of a workflow, resume, check.

A *trial* runs a workflow under a seeded schedule and virtual time
(:func:`run_deterministic`) on a fresh store, injects the faults of a
:class:`FaultPlan` at chosen points, then resumes the run on the same store
until it finishes, and checks the invariants tether promises:

(a) no step whose record was stored runs again;
(b) a caller's cancellation (or deadline) returns exactly when it fires, in
    virtual time, even while a save is held or the store hangs;
(c) no stored record is lost, and a sibling's failure never discards the
    save of a step that completed;
(d) the final outcome equals the uninterrupted run's (under every seed);
(e) no task outlives ``engine.run`` and no coroutine is left unawaited;
(f) one owner at a time: after a takeover the old owner stores nothing and
    stops promptly with ``LeaseLostError``; of two racing engines exactly one
    executes (see :mod:`._explore_leases`).

Interleaving points are named by what happens there:

``start:KEY``
    a step (or stream step) starts executing (not on replay);
``timer:KEY``
    a durable timer (``tether.sleep``) was journaled and starts waiting
    (not on replay);
``due:KEY``
    a durable timer is due: the code after it goes on (also a timer
    replayed from the journal);
``save:KEY``
    the append of KEY's journal entry begins (an append that carries several
    entries, a batch of saves or of responses, reaches one point per entry,
    in order; a fault there applies to the whole append);
``stored:KEY``
    that append returned from the store: the entry is stored, the engine
    does not know it yet;
``record:STATUS``
    the run record is written (``record:created``, ``record:running``,
    ``record:completed``, ``record:failed``, ``record:paused``); the first
    two are the execution's claim of the run's lease.
``child:RUN``
    the child run RUN (``tether.child``) is claimed to be executed: the
    child's start, or its reattachment; the child's other writes are
    ``child:RUN/save:KEY`` and ``child:RUN/record:STATUS``. A sibling's
    failure (``fail``) must let the child's completed saves drain too.

A point reached a second time in the same execution gets ``~2``, and so on.
"""

from __future__ import annotations

import gc
import inspect
import math
import warnings
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import trio

from .._engine import Engine
from .._errors import InvariantViolation, StoreError, UsageError
from .._events import RunEvent, StepStarted, TimerFired, TimerStarted, current_observer
from .._requests import Paused, Request, request_from_json
from .._workflow import Workflow
from ..stores._memory import MemoryStore
from ..stores._protocol import Entry, EntryKind, EntryStatus, RunRecord, RunStatus, Store
from ._clock import hold_clock
from ._deterministic import run_deterministic
from ._explore_leases import (
    OWNERSHIP_KINDS,
    OwnerFaults,
    Race,
    Takeover,
    check_once,
    check_race,
    check_takeover,
    hand_back,
    open_owner,
)
from ._faulty import Call, Crash, Do, FaultyStore, SimulatedCrash, _torn_writer

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

__all__ = (
    "FAULT_KINDS",
    "Exploration",
    "Explorer",
    "FaultPlan",
    "InjectedFailure",
    "Injection",
    "explore",
)

#: Every kind of fault the explorer injects (the ownership faults last).
FAULT_KINDS: Final = ("cancel", "fail", "store_error", "hang", "crash", *OWNERSHIP_KINDS)

#: Which kinds apply at which kind of point ("claim": record:created and
#: record:running, the claims of a run's lease; "record": its other writes).
_KINDS_AT: Final = {
    "start": ("cancel", "fail", "crash"),
    "timer": ("cancel", "fail", "crash"),
    "due": ("cancel", "fail", "crash"),
    "save": ("cancel", "fail", "store_error", "hang", "crash", "lease_lost", "pause", "race"),
    "stored": ("cancel", "fail", "store_error", "crash"),
    "record": ("cancel", "store_error", "hang", "crash", "lease_lost", "pause", "race"),
    "child": ("cancel", "fail", "store_error", "hang", "crash"),
    "claim": ("cancel", "store_error", "hang", "crash", "race"),
}

_RUN_ID: Final = "explored"
#: The explorer's options a reproduction names when they are not the default.
_OPTIONS: Final = ("deadline", "slow", "save_timeout", "limit", "torn", "lease_ttl")
_WRITES: Final = ("create_run", "claim", "update_run", "append")
#: Executions a trial may take beyond its plan (pauses answered one by one).
_EXTRA_EXECUTIONS: Final = 20


class InjectedFailure(Exception):
    """The failure the explorer injects (``fail`` faults)."""


@final
@attrs.frozen
class Injection:
    """One fault at one point: ``kind@point``, e.g. ``crash@save:charge#0``."""

    kind: str = attrs.field()
    at: str

    @kind.validator
    def _check_kind(self, _: object, kind: str) -> None:
        if kind not in FAULT_KINDS:
            raise UsageError(f"unknown fault kind {kind!r}; one of {', '.join(FAULT_KINDS)}")

    def __str__(self) -> str:
        return f"{self.kind}@{self.at}"

    @classmethod
    def parse(cls, text: str) -> Injection:
        """``"crash@save:charge#0"`` → ``Injection("crash", "save:charge#0")``."""
        kind, sep, at = text.partition("@")
        if not sep or not at:
            raise UsageError(
                f"a fault is written kind@point, like 'crash@save:charge#0', not {text!r}"
            )
        return cls(kind, at)


@final
@attrs.frozen
class FaultPlan:
    """What one trial does: a seed, and at most one fault per execution.

    ``injections[0]`` applies to the first ``engine.run``, ``injections[1]``
    to the first resume, and so on (``None``: no fault in that execution);
    after the last, the run is resumed without faults until it finishes.
    """

    seed: int
    injections: tuple[Injection | None, ...]

    def __str__(self) -> str:
        faults = " then ".join("-" if i is None else str(i) for i in self.injections)
        return f"seed {self.seed}: {faults or 'no fault'}"

    @property
    def faults(self) -> str:
        """The plan's faults as ``explore(faults=[...])`` takes them."""
        return " then ".join("-" if i is None else str(i) for i in self.injections)

    @classmethod
    def parse(cls, seed: int, text: str) -> FaultPlan:
        """``FaultPlan.parse(3, "crash@save:a#0 then cancel@start:b#0")``; ``-`` skips one."""
        injections = tuple(
            None if part.strip() == "-" else Injection.parse(part.strip())
            for part in text.split(" then ")
        )
        return cls(seed, injections)


@final
@attrs.frozen
class Exploration:
    """What :func:`explore` did: no invariant was broken in any of these trials."""

    trials: int  #: trials run
    points: Mapping[int, tuple[str, ...]]  #: per seed, the points of the uninterrupted run
    outcome: str  #: the uninterrupted run's outcome, described

    def __str__(self) -> str:
        n = max((len(p) for p in self.points.values()), default=0)
        return (
            f"{self.trials} trials over {len(self.points)} seeds and up to {n} points: "
            f"no invariant broken; outcome {self.outcome}"
        )


# -- outcomes -------------------------------------------------------------------


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def _describe_error(exc: BaseException) -> str:
    leaves = sorted(f"{type(e).__qualname__}: {e}" for e in _leaves(exc))
    return f"raised {'; '.join(leaves)}"


@attrs.frozen
class _Outcome:
    """An execution's outcome, comparable across trials."""

    kind: str  # "value", "error", "paused", "cancelled", "crashed"
    value: Any = None
    text: str = ""

    def same_as(self, other: _Outcome) -> bool:
        if self.kind != other.kind:
            return False
        if self.kind == "value":
            return bool(self.value == other.value)
        return self.text == other.text

    def __str__(self) -> str:
        return f"returned {self.value!r}" if self.kind == "value" else self.text


def _split_crash(exc: BaseException) -> tuple[BaseException | None, BaseException | None]:
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(SimulatedCrash)
    return (exc, None) if isinstance(exc, SimulatedCrash) else (None, exc)


# -- one trial --------------------------------------------------------------------


@attrs.define
class _Execution:
    index: int
    injection: Injection | None
    points: list[str] = attrs.field(factory=list)
    started: list[str] = attrs.field(factory=list)  # step keys executed (not replayed)
    begun: dict[str, int] = attrs.field(factory=dict)  # appends begun, by label
    landed: dict[str, int] = attrs.field(factory=dict)  # ...and that reached the store
    fired_at: float | None = None  # when the injection fired (virtual time)
    deadline: float | None = None  # the caller deadline a hang set
    occurrences: dict[str, int] = attrs.field(factory=dict)
    outcome: _Outcome | None = None
    began: float = 0.0
    returned_at: float = 0.0
    leftover: list[str] = attrs.field(factory=list)  # tasks alive after engine.run returned
    takeover: Takeover | None = None  # another owner took the run over (lease_lost, pause)
    race: Race | None = None  # what the two engines of a race did

    def point(self, label: str) -> str:
        n = self.occurrences.get(label, 0) + 1
        self.occurrences[label] = n
        name = label if n == 1 else f"{label}~{n}"
        self.points.append(name)
        return name


@final
class _Tasks(trio.abc.Instrument):
    """Tasks spawned while an execution is being watched, and not exited yet."""

    def __init__(self) -> None:
        self.watching = False
        self.alive: dict[trio.lowlevel.Task, None] = {}

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        if self.watching and not _of_the_engine(task):
            self.alive[task] = None

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self.alive.pop(task, None)


def _of_the_engine(task: trio.lowlevel.Task) -> bool:
    """Whether *task* is the engine's own, not a run's: started by its lease task.

    (Such as a thread-backed store's helper for a lease release, which a child
    run's claim cut short by the caller may start while the parent unwinds.)
    """
    nursery = task.parent_nursery
    while nursery is not None:
        parent = nursery.parent_task
        if parent.name == "tether leases":
            return True
        nursery = parent.parent_nursery
    return False


def _run_of(method: str, args: tuple[Any, ...]) -> str:
    """The run a write is about."""
    if method in ("append", "claim"):
        run_id: str = args[0]
        return run_id
    record: RunRecord = args[0]
    return record.run_id


def _labels(method: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[str]:
    """The points a write reaches: one per entry for an append, else one."""
    if method == "append":
        entries: Sequence[Entry] = args[1]
        labels = [f"save:{e.key}" for e in entries]
    else:
        labels = [_label(method, args, kwargs)]
    run_id = _run_of(method, args)
    if run_id == _RUN_ID:
        return labels
    # A child run of the explored one (tether.child): its claim is the child's start.
    if method == "claim":
        return [f"child:{run_id}"]
    return [f"child:{run_id}/{label}" for label in labels]


def _label(method: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    if method == "create_run":
        return "record:created"
    if method == "claim":
        # engine.run claims with the record to create (a new run is created
        # claimed); engine.resume claims a stored run, marking it running.
        return "record:created" if kwargs.get("create") is not None else "record:running"
    record: RunRecord = args[0]
    return f"record:{record.status.value}"


def _can_tear(store: Store) -> bool:
    try:
        _torn_writer(store, "append")
    except UsageError:
        return False
    return True


def _completed_keys(entries: Sequence[Entry]) -> dict[str, int]:
    return {
        e.key: e.seq or 0
        for e in entries
        if e.status is EntryStatus.COMPLETED and e.kind in (EntryKind.STEP, EntryKind.STREAM)
    }


@final
class _Trial:
    """One trial: its store, its executions, and the injection machinery."""

    def __init__(self, explorer: Explorer, plan: FaultPlan) -> None:
        self.explorer = explorer
        self.plan = plan
        self.raw = explorer.store_factory()
        self.faulty = FaultyStore(hold_clock(self.raw))
        self.tasks = _Tasks()
        self.executions: list[_Execution] = []
        self.violations: list[str] = []
        self.current: _Execution | None = None
        self.caller: trio.CancelScope | None = None  # cancels engine.run: the caller
        self.process: trio.CancelScope | None = None  # cancels everything: a crash
        self.nursery: trio.Nursery | None = None  # the execution's: lease tasks, late writes
        self.owners = OwnerFaults(
            self.faulty.inner, _RUN_ID, lease_ttl=explorer.lease_ttl, slow=explorer.slow
        )
        self.sabotage = trio.Event()
        self.workflow = self._wrap(explorer.workflow)
        self.torn = _can_tear(self.raw) if explorer.torn is None else explorer.torn
        if self.torn and not _can_tear(self.raw):
            raise UsageError(
                f"torn=True, but {self.raw!r} cannot simulate a torn write (FileStore can); "
                "leave torn=None to tear where the store can"
            )
        self._arm()

    # -- the instrumented workflow ----------------------------------------------

    def _wrap(self, inner: Workflow[..., Any]) -> Workflow[..., Any]:
        """The workflow, run beside a saboteur task that fails when told to.

        The saboteur is a sibling in the workflow task's own nursery: its
        failure cancels the workflow as any failing sibling would
        (framework-owned cancellation), while saves are in flight.
        """
        trial = self

        async def explored(*args: Any) -> Any:
            result: list[Any] = []
            error: list[Exception] = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trial._saboteur, name="tether.explore saboteur")
                try:
                    result.append(await inner.fn(*args))
                except Exception as exc:
                    error.append(exc)
                finally:
                    nursery.cancel_scope.cancel()
            if error:
                raise error.pop()
            return result[0]

        return Workflow(explored, inner.name, inner.signature)

    async def _saboteur(self) -> None:
        await self.sabotage.wait()
        raise InjectedFailure(f"a sibling failed ({self._describe_current()})")

    def _describe_current(self) -> str:
        assert self.current is not None and self.current.injection is not None
        return f"injected: {self.current.injection}"

    # -- injection ------------------------------------------------------------

    def _arm(self) -> None:
        for method in _WRITES:
            self.faulty.inject(method, Do(self._before))
            self.faulty.inject(method, Do(self._after), after=True)
        self.faulty.inject("renew", Do(self.owners.renew))

    def _matches(self, point: str) -> Injection | None:
        ex = self.current
        if ex is None or ex.injection is None or ex.fired_at is not None:
            return None
        inj = ex.injection
        if inj.at == point:
            ex.fired_at = trio.current_time()
            return inj
        return None

    def _observer(self, started: list[str]) -> Callable[[RunEvent], None]:
        """The observer of one engine's run: records the steps it executes in *started*."""
        return lambda event: self._observe(event, started)

    def _observe(self, event: RunEvent, started: list[str]) -> None:
        ex = self.current
        if ex is None:
            return
        if isinstance(event, StepStarted):
            started.append(event.key)
            point = f"start:{event.key}"
        elif isinstance(event, TimerStarted):
            point = f"timer:{event.key}"
        elif isinstance(event, TimerFired):
            point = f"due:{event.key}"
        else:
            return
        inj = self._matches(ex.point(point))
        if inj is not None:
            self._strike(inj, f"step {event.key} failed")
            if inj.kind == "crash":
                self.faulty.crash()

    async def _before(self, call: Call) -> None:
        ex = self.current
        if ex is None:
            return
        await self.owners.write(call)  # a stopped process writes nothing meanwhile
        if ex.race is not None and _run_of(call.method, call.args) == _RUN_ID:
            ex.race.seen(call)
        labels = _labels(call.method, call.args, call.kwargs)
        inj: Injection | None = None
        for label in labels:
            if call.method == "append":
                ex.begun[label] = ex.begun.get(label, 0) + 1
            inj = self._matches(ex.point(label)) or inj
        if inj is None:
            return
        self._strike(inj, "a sibling failed")
        if inj.kind in ("cancel", "fail"):
            await call.store.sleep(self.explorer.slow)  # the write stays in flight
        elif inj.kind == "hang":
            await call.store.sleep_forever()
        elif inj.kind == "lease_lost":
            await self.owners.lease_lost(call)
        elif inj.kind == "pause":
            await self.owners.pause(call, self._spawn_outside)
        elif inj.kind == "race":
            assert ex.race is not None
            await ex.race.reached()
        else:
            torn = self.torn and call.method in ("append", "update_run")
            await Crash(torn=torn).apply(call)

    async def _after(self, call: Call) -> None:
        ex = self.current
        if ex is not None and ex.race is not None and _run_of(call.method, call.args) == _RUN_ID:
            await ex.race.claimed(call)
        if ex is None or call.method != "append":
            return
        inj: Injection | None = None
        for label in _labels(call.method, call.args, call.kwargs):
            ex.landed[label] = ex.landed.get(label, 0) + 1
            if label.startswith("child:"):
                continue  # (a child run's writes have no stored: points)
            inj = self._matches(ex.point("stored:" + label.partition(":")[2])) or inj
        if inj is not None:
            self._strike(inj, "a sibling failed")
            if inj.kind == "crash":
                await Crash().apply(call)

    def _strike(self, inj: Injection, failure: str) -> None:
        """What *inj* does the moment its point is reached (writes then wait, or crash)."""
        assert self.caller is not None and self.current is not None
        if inj.kind == "cancel":
            self.caller.cancel()
        elif inj.kind == "fail":
            if inj.at.startswith("start:"):
                raise InjectedFailure(f"{failure} ({self._describe_current()})")
            self.sabotage.set()  # the saboteur raises it
        elif inj.kind == "store_error":
            raise StoreError(f"injected store failure at {inj.at}")
        elif inj.kind == "hang":
            self.current.deadline = trio.current_time() + self.explorer.deadline
            self.caller.deadline = self.current.deadline
        elif inj.kind == "crash":
            self._stop_process()
        # lease_lost, pause and race act in the held write (see _before)

    def _spawn_outside(self, afn: Callable[..., Awaitable[None]], *args: Any, name: str) -> None:
        """Start a task of the explorer's, in the execution's nursery, not counted as the run's."""
        assert self.nursery is not None
        watching, self.tasks.watching = self.tasks.watching, False
        try:
            self.nursery.start_soon(afn, *args, name=name)
        finally:
            self.tasks.watching = watching

    def _stop_process(self) -> None:
        # The process dies: nothing of this execution runs on.
        assert self.process is not None
        self.process.cancel()

    # -- executions -------------------------------------------------------------

    async def _stored(self) -> tuple[RunRecord | None, tuple[Entry, ...]]:
        record = await self.raw.get_run(_RUN_ID)
        entries = tuple(await self.raw.load_entries(_RUN_ID)) if record is not None else ()
        return record, entries

    async def run(self) -> list[_Execution]:
        explorer = self.explorer
        await self.raw.open()
        try:
            limit = len(self.plan.injections) + _EXTRA_EXECUTIONS
            for index in range(limit):
                injection = (
                    self.plan.injections[index] if index < len(self.plan.injections) else None
                )
                if self.faulty.crashed:
                    self.faulty.restart()  # a new process, on the same storage
                    self._arm()
                self.sabotage = trio.Event()
                record, before = await self._stored()
                responses = None
                if record is not None and record.status is RunStatus.PAUSED:
                    requests = [request_from_json(text) for text in record.requests]
                    responses = explorer.answer(requests)
                ex = _Execution(index, injection)
                self.executions.append(ex)
                await self._execute(ex, responses)
                stored, after = await self._stored()
                self._check_execution(ex, before, after, stored)
                if ex.takeover is not None:
                    await hand_back(self.faulty.inner)  # the new owner stops; we resume
                assert ex.outcome is not None
                finished = ex.outcome.kind != "paused" and ex.fired_at is None
                if finished and index >= len(self.plan.injections) - 1:
                    return self.executions
            self.violations.append(
                f"the run did not finish within {limit} executions (it keeps pausing or failing "
                "in a way a resume does not clear)"
            )
            return self.executions
        finally:
            await self.raw.close()

    async def _execute(self, ex: _Execution, responses: dict[str, Any] | None) -> None:
        """One execution: a process with one engine (two, racing), and its caller."""
        self.current = ex
        self.owners.reset()
        ex.began = trio.current_time()
        claim = "record:created" if responses is None else "record:running"
        if ex.injection is not None and ex.injection.kind == "race":
            ex.race = Race(at_claim=ex.injection.at == claim)
        outcome: _Outcome | None = None
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            with trio.CancelScope() as process:
                self.process = process
                nursery.start_soon(self._watchdog, ex, process)
                async with AsyncExitStack() as stack:
                    engines = [
                        await stack.enter_async_context(self._open_engine(nursery))
                        for _ in range(1 if ex.race is None else 2)
                    ]
                    with trio.CancelScope() as caller:
                        self.caller = caller
                        self.tasks.watching = True
                        try:
                            if ex.race is not None:  # the rival makes the same call
                                outcome = await ex.race.run(
                                    engines,
                                    lambda started: self._call(engines[0], responses, started),
                                    lambda started: self._call(engines[1], responses, started),
                                )
                                ex.started += ex.race.executed()
                            else:
                                outcome = await self._call(engines[0], responses, ex.started)
                        finally:
                            # Synchronously, before anything else can run or exit.
                            ex.returned_at = trio.current_time()
                            self.tasks.watching = False
                            ex.leftover = [t.name for t in self.tasks.alive]
                            self.tasks.alive.clear()
                    if caller.cancelled_caught:
                        outcome = _Outcome("cancelled", text="cancelled by the caller")
            if process.cancelled_caught or self.faulty.crashed:
                outcome = _Outcome("crashed", text="crashed")
            await self.owners.settle()  # a paused owner's late write reaches the store
            ex.takeover = self.owners.takeover
            nursery.cancel_scope.cancel()
        self.current = None
        ex.outcome = outcome

    def _open_engine(self, nursery: trio.Nursery) -> AbstractAsyncContextManager[Engine]:
        explorer = self.explorer
        return open_owner(
            self.faulty,
            self.workflow,
            nursery,
            save_timeout=explorer.save_timeout,
            lease_ttl=explorer.lease_ttl,
            crashed=lambda: self.faulty.crashed,
        )

    async def _call(
        self, engine: Engine, responses: dict[str, Any] | None, started: list[str]
    ) -> _Outcome:
        """``engine.run`` (or ``resume``) of the explored run, as an outcome."""
        current_observer.set(self._observer(started))
        try:
            if responses is not None:
                value = await engine.resume(_RUN_ID, responses)
            else:
                value = await engine.run(self.workflow, *self.explorer.args, run_id=_RUN_ID)
            return _Outcome("value", value)
        except Paused as paused:
            keys = ", ".join(r.key for r in paused.requests)
            return _Outcome("paused", paused.requests, f"paused on {keys}")
        except Exception as exc:
            return _Outcome("error", text=_describe_error(exc))
        except BaseException as exc:
            # A write the crash reached outside the run's own tasks raises
            # SimulatedCrash; Cancelled (ours) goes on to the scope that owns it.
            crash, rest = _split_crash(exc)
            if crash is None:
                raise
            if rest is not None:
                raise rest from None
            return _Outcome("crashed", text="crashed")
        finally:
            current_observer.set(None)

    async def _watchdog(self, ex: _Execution, process: trio.CancelScope) -> None:
        await trio.sleep(self.explorer.limit)
        self.violations.append(
            f"execution {ex.index} did not return within {self.explorer.limit}s of virtual "
            "time; the explorer crashed the store to stop it"
        )
        self.faulty.crash()
        process.cancel()

    # -- invariants -------------------------------------------------------------

    def _check_execution(
        self,
        ex: _Execution,
        before: tuple[Entry, ...],
        after: tuple[Entry, ...],
        record: RunRecord | None,
    ) -> None:
        where = f"execution {ex.index} ({'first run' if ex.index == 0 else 'resume'})"
        # (a) nothing stored runs again
        stored = _completed_keys(before)
        for key in ex.started:
            if key in stored:
                self.violations.append(
                    f"(a) step {key} ran again in {where}, though its record was stored "
                    f"(seq {stored[key]}) before"
                )
        # (b) the caller's cancellation is exact
        inj = ex.injection
        if inj is not None and ex.fired_at is not None and inj.kind in ("cancel", "hang"):
            due = ex.deadline if inj.kind == "hang" else ex.fired_at
            assert due is not None
            assert ex.outcome is not None
            if ex.returned_at != due:
                what = "deadline" if inj.kind == "hang" else "cancellation"
                self.violations.append(
                    f"(b) engine.run returned at t={ex.returned_at:g}, {ex.returned_at - due:g}s "
                    f"of virtual time after the caller's {what} at t={due:g} ({where})"
                )
            elif ex.outcome.kind != "cancelled":
                self.violations.append(
                    f"(b) after the caller's cancellation engine.run {ex.outcome} ({where})"
                )
        # (c) nothing stored is lost...
        kept = {e.seq: e for e in after}
        for entry in before:
            if kept.get(entry.seq) != entry:
                self.violations.append(
                    f"(c) entry seq {entry.seq} ({entry.key}) was stored before {where} and is "
                    f"{'changed' if entry.seq in kept else 'gone'} after it"
                )
        # ...and a sibling's failure does not discard a completed step's save.
        if inj is None or ex.fired_at is None or inj.kind == "fail":
            for label, n in ex.begun.items():
                if ex.landed.get(label, 0) < n:
                    self.violations.append(
                        f"(c) the {label} began in {where} and never reached the store, though "
                        "the store worked and the caller did not cancel: a sibling's failure "
                        "discarded a completed step's record"
                    )
        # (e) no task outlives the run
        if ex.leftover:
            self.violations.append(
                f"(e) tasks outlived engine.run in {where}: {', '.join(ex.leftover)}"
            )
        # (f) one owner at a time
        if inj is not None and ex.fired_at is not None and ex.takeover is not None:
            # It knows when the held write is refused (lease_lost), or once no
            # renewal succeeded for lease_ttl (pause).
            wait = self.explorer.slow if inj.kind == "lease_lost" else self.explorer.lease_ttl
            due = ex.fired_at + wait
            self.violations += check_takeover(
                ex.takeover, after, record, str(ex.outcome), ex.returned_at, due, where
            )
        if ex.race is not None:
            self.violations += check_race(ex.race, before, after, record, where=where)
        self.violations += check_once(before, after, Counter(ex.started), where=where)


# -- the explorer -------------------------------------------------------------------


@final
class Explorer:
    """Explores one workflow call; see :func:`explore` for the arguments.

    Use it directly for Hypothesis (:meth:`plans`, :meth:`check`) or to list
    a workflow's interleaving points (:meth:`points`).
    """

    def __init__(
        self,
        workflow: Workflow[..., Any],
        *args: Any,
        store_factory: Callable[[], Store] = MemoryStore,
        responses: Mapping[str, Any] | Callable[[Request], Any] | None = None,
        deadline: float = 1.0,
        slow: float = 1.0,
        save_timeout: float = 30.0,
        limit: float = 3600.0,
        torn: bool | None = None,
        lease_ttl: float = 2.0,
    ) -> None:
        check_target("explore()", workflow, store_factory)
        numbers = {"deadline": deadline, "slow": slow, "limit": limit, "lease_ttl": lease_ttl}
        for name, value in numbers.items():
            if not isinstance(value, int | float) or not value > 0 or math.isinf(value):
                raise UsageError(f"{name} must be a positive number of seconds, not {value!r}")
        if not isinstance(save_timeout, int | float) or not save_timeout > 0:
            raise UsageError(f"save_timeout must be a positive number, not {save_timeout!r}")
        self.workflow = workflow
        self.args = args
        self.store_factory = store_factory
        self.responses = responses
        self.deadline = float(deadline)
        self.slow = float(slow)
        self.save_timeout = float(save_timeout)
        self.limit = float(limit)
        self.torn = torn
        self.lease_ttl = float(lease_ttl)
        self._baselines: dict[int, list[_Execution]] = {}

    def answer(self, requests: Sequence[Request]) -> dict[str, Any]:
        """The responses to *requests*, from ``responses=``."""
        return answer_requests(self.responses, requests, "explore()")

    # -- trials ------------------------------------------------------------------

    def _trial(self, plan: FaultPlan) -> tuple[_Trial, list[str]]:
        trial = _Trial(self, plan)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run_deterministic(trial.run, seed=plan.seed, instruments=[trial.tasks])
            gc.collect(1)  # young objects: the trial's; a full collection costs 20 ms
        unawaited = sorted(
            {str(w.message) for w in caught if "was never awaited" in str(w.message)}
        )
        problems = list(trial.violations)
        problems += [f"(e) {message}" for message in unawaited]
        return trial, problems

    def _baseline(self, seed: int) -> list[_Execution]:
        if seed not in self._baselines:
            trial, problems = self._trial(FaultPlan(seed, ()))
            if problems:
                self._raise(FaultPlan(seed, ()), problems, "the uninterrupted run")
            self._baselines[seed] = trial.executions
        return self._baselines[seed]

    def points(self, seed: int = 0) -> tuple[tuple[str, ...], ...]:
        """The interleaving points of the uninterrupted run under *seed*, per execution."""
        return tuple(tuple(ex.points) for ex in self._baseline(seed))

    def outcome(self, seed: int = 0) -> str:
        """The uninterrupted run's final outcome under *seed*, described."""
        final = self._baseline(seed)[-1].outcome
        return str(final)

    def check(self, plan: FaultPlan) -> None:
        """Run one trial and raise :class:`InvariantViolation` if an invariant broke."""
        if not isinstance(plan, FaultPlan):
            raise UsageError(f"check() takes a FaultPlan, not {plan!r}")
        for injection in plan.injections:
            if injection is not None:
                _check_applies(injection)
        reference = self._baseline(plan.seed)[-1].outcome
        assert reference is not None
        trial, problems = self._trial(plan)
        final = trial.executions[-1].outcome if trial.executions else None
        if final is not None and not final.same_as(reference) and not problems:
            problems.append(
                f"(d) the run's final outcome differs from the uninterrupted run's: it "
                f"{final}, the uninterrupted run {reference}"
            )
        if problems:
            self._raise(plan, problems, f"fault plan {plan}")

    def plans_for(self, seed: int, kinds: Iterable[str] = FAULT_KINDS) -> list[FaultPlan]:
        """Every single-fault plan for *seed*: each kind at each point of each execution."""
        kinds = tuple(kinds)
        plans = []
        for index, points in enumerate(self.points(seed)):
            for point in points:
                for kind in _kinds_at(point):
                    if kind in kinds:
                        plans.append(FaultPlan(seed, (None,) * index + (Injection(kind, point),)))
        return plans

    def plans(
        self, *, seeds: SearchStrategy[int] | None = None, max_faults: int = 3
    ) -> SearchStrategy[FaultPlan]:
        """A Hypothesis strategy of fault plans (up to *max_faults* executions faulted).

        Shrinks towards seed 0, fewer faults and earlier points.
        """
        from hypothesis import strategies as st

        # In the order the uninterrupted run reaches them: shrinking goes earlier.
        points = dict.fromkeys(p for execution in self.points(0) for p in execution)
        injection = st.sampled_from(
            [Injection(kind, point) for point in points for kind in _kinds_at(point)]
        )
        return st.builds(
            FaultPlan,
            seeds if seeds is not None else st.integers(0, 2**16),
            st.lists(st.none() | injection, min_size=1, max_size=max_faults).map(tuple),
        )

    def run(
        self,
        *,
        seeds: int | Iterable[int] = 3,
        faults: Iterable[str | Injection | FaultPlan] = FAULT_KINDS,
    ) -> Exploration:
        """Run every trial; raise :class:`InvariantViolation` at the first broken invariant."""
        seed_list = _seeds(seeds)
        kinds: list[str] = []
        plans: list[FaultPlan] = []
        for fault in faults if not isinstance(faults, str) else [faults]:
            if isinstance(fault, FaultPlan):
                plans.append(fault)
            elif isinstance(fault, Injection):
                plans += [FaultPlan(s, (fault,)) for s in seed_list]
            elif isinstance(fault, str) and fault in FAULT_KINDS:
                kinds.append(fault)
            elif isinstance(fault, str):
                plans += [FaultPlan.parse(s, fault) for s in seed_list]
            else:
                raise UsageError(
                    f"faults= takes fault kinds ({', '.join(FAULT_KINDS)}), 'kind@point' "
                    f"strings, Injections or FaultPlans, not {fault!r}"
                )
        reference = self._baseline(seed_list[0])[-1].outcome
        assert reference is not None
        for seed in seed_list:
            outcome = self._baseline(seed)[-1].outcome
            assert outcome is not None
            if not outcome.same_as(reference):
                self._raise(
                    FaultPlan(seed, ()),
                    [
                        f"(d) the uninterrupted run {outcome} under seed {seed} but "
                        f"{reference} under seed {seed_list[0]}: the outcome depends on the "
                        "schedule"
                    ],
                    "the uninterrupted run",
                    seeds=[seed_list[0], seed],
                )
        for plan in plans:
            self._check_points(plan)
        for seed in seed_list:
            if kinds:
                plans += self.plans_for(seed, kinds)
        for plan in plans:
            self.check(plan)
        return Exploration(
            trials=len(plans) + len(seed_list),
            points={s: tuple(p for ex in self.points(s) for p in ex) for s in seed_list},
            outcome=str(reference),
        )

    def _check_points(self, plan: FaultPlan) -> None:
        # A fault asked for by name must name a point the workflow reaches:
        # a misspelt point would otherwise be a trial that injects nothing.
        known = {p for execution in self.points(plan.seed) for p in execution}
        for injection in plan.injections:
            if injection is not None and injection.at not in known:
                raise UsageError(
                    f"workflow {self.workflow.name} never reaches the point {injection.at!r} "
                    f"under seed {plan.seed}; its points are: {', '.join(sorted(known))}"
                )
            if injection is not None:
                _check_applies(injection)

    # -- reporting ---------------------------------------------------------------

    def _repro(self, plan: FaultPlan, seeds: list[int]) -> str:
        fn = self.workflow.fn
        target = f"{fn.__module__}.{fn.__qualname__}"
        args = "".join(f", {a!r}" for a in self.args)
        extra = ""
        if self.store_factory is not MemoryStore:
            extra += ", store_factory=..."
        if self.responses is not None:
            extra += ", responses=..."
        defaults = inspect.signature(Explorer).parameters
        for name in _OPTIONS:
            if getattr(self, name) != defaults[name].default:
                extra += f", {name}={getattr(self, name)!r}"
        faults = f", faults=[{plan.faults!r}]" if plan.injections else ", faults=[]"
        return f"tether.testing.explore({target}{args}, seeds={seeds!r}{faults}{extra})"

    def _raise(
        self, plan: FaultPlan, problems: list[str], what: str, seeds: list[int] | None = None
    ) -> None:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise InvariantViolation(
            f"workflow {self.workflow.name}: {what} broke an invariant:\n{lines}\n"
            f"seed {plan.seed}, fault plan: {plan.faults or 'none'}\n"
            f"reproduce: {self._repro(plan, seeds or [plan.seed])}",
            plan,
        )


def check_target(caller: str, workflow: object, store_factory: object) -> None:
    """An explorer's workflow and store factory, validated.

    Raises:
        UsageError: *workflow* is not a workflow, or *store_factory* not callable.
    """
    if not isinstance(workflow, Workflow):
        raise UsageError(f"{caller} takes a @tether.workflow, not {workflow!r}")
    if not callable(store_factory):
        raise UsageError(
            f"store_factory must be a callable returning a new store, not {store_factory!r}"
        )


def answer_requests(
    given: Mapping[str, Any] | Callable[[Request], Any] | None,
    requests: Sequence[Request],
    caller: str,
) -> dict[str, Any]:
    """The responses an explorer gives to *requests*, from its ``responses=``.

    Raises:
        UsageError: a request that *given* has no answer for.
    """
    answers: dict[str, Any] = {}
    for request in requests:
        if callable(given):
            answers[request.key] = given(request)
        elif given is not None and request.key in given:
            answers[request.key] = given[request.key]
        else:
            raise UsageError(
                f"the workflow asks {request.key} ({request.payload!r}, expecting "
                f"{request.response_type}); pass responses={{{request.key!r}: ...}} or a "
                f"function of the request to {caller}"
            )
    return answers


def _check_applies(injection: Injection) -> None:
    if injection.kind not in _kinds_at(injection.at):
        raise UsageError(
            f"a {injection.kind!r} fault does not apply at {injection.at!r}; there: "
            f"{', '.join(_kinds_at(injection.at)) or 'none'}"
        )


def _kinds_at(point: str) -> tuple[str, ...]:
    """The fault kinds that apply at *point*."""
    kind, _, what = point.partition(":")
    if kind == "record" and what.partition("~")[0] in ("created", "running"):
        kind = "claim"
    return _KINDS_AT.get(kind, ())


def _seeds(seeds: int | Iterable[int]) -> list[int]:
    if isinstance(seeds, bool):
        raise UsageError(f"seeds must be a count or an iterable of ints, not {seeds!r}")
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if not seed_list or not all(isinstance(s, int) and not isinstance(s, bool) for s in seed_list):
        raise UsageError(
            f"seeds must be a positive count or a non-empty list of ints, not {seeds!r}"
        )
    return seed_list


def explore(
    workflow: Workflow[..., Any],
    *args: Any,
    store_factory: Callable[[], Store] = MemoryStore,
    seeds: int | Iterable[int] = 3,
    faults: Iterable[str | Injection | FaultPlan] = FAULT_KINDS,
    responses: Mapping[str, Any] | Callable[[Request], Any] | None = None,
    deadline: float = 1.0,
    slow: float = 1.0,
    save_timeout: float = 30.0,
    limit: float = 3600.0,
    torn: bool | None = None,
    lease_ttl: float = 2.0,
) -> Exploration:
    """Inject faults at every interleaving point of ``workflow(*args)``; check the invariants.

    For each seed, runs the workflow once uninterrupted (answering its
    requests from *responses*) to learn its interleaving points, then runs
    one trial per point and fault kind: a fresh store from *store_factory*,
    the fault injected at that point, then resumes on the same store until
    the run finishes. Each trial is a ``trio.run`` of its own under
    :func:`run_deterministic` (virtual time, seeded schedule), so a trial is
    reproducible from its seed and plan (exactly so with the default
    :class:`MemoryStore`; thread-backed stores add real-time ordering).

    A synchronous function: call it from a plain (not ``async``) test.

    Fault kinds (``faults=``; or ``"kind@point"`` strings, or
    :class:`FaultPlan`\\ s to replay one trial):

    ``cancel``
        the caller cancels engine.run at the point (at a write: while the
        write is held *slow* seconds);
    ``fail``
        a step fails at its start; at a write, a sibling task fails while
        the write is held *slow* seconds; at a timer's start or due time,
        a sibling task fails;
    ``store_error``
        the write raises :class:`tether.StoreError` (at ``stored:``: after
        the entry was written, an unclear failure);
    ``hang``
        the write never returns; the caller's deadline is *deadline*
        seconds later;
    ``crash``
        the process dies: the store takes no further writes (a torn write
        where the store can simulate one, see *torn*) and the execution
        stops; a new engine resumes on the same storage;
    ``lease_lost``
        (at ``save:`` and status ``record:`` points) another owner takes the
        run over while the write is held *slow* seconds (renewals held too);
        the write must be refused and ``engine.run`` raise
        :class:`tether.LeaseLostError`;
    ``pause``
        (same points) the process stops past its lease: the write, renewals
        and other writes wait *lease_ttl* + *slow* seconds, another owner
        claims the run, the write arrives late and must be refused; the
        engine must have stopped within *lease_ttl*;
    ``race``
        (at writes, and at the execution's claim) a second engine calls
        ``engine.run`` of the run: exactly one executes it, the other gets
        :class:`tether.RunConflictError` at once.

    After a takeover the other owner stops, and a fresh engine resumes.

    Args:
        workflow: a ``@tether.workflow``; *args* are its arguments.
        store_factory: makes a new, unopened store per trial. Default
            :class:`MemoryStore` (fully reproducible).
        seeds: how many seeds (0..n-1), or which.
        responses: answers for :func:`tether.ask` requests: a mapping from
            request key, or a function of the :class:`Request`.
        deadline: seconds of virtual time from a ``hang`` to the caller's deadline.
        slow: seconds of virtual time a write is held (``cancel``, ``fail``,
            ``lease_lost``, ``pause``).
        save_timeout: the engine's ``save_timeout`` in trials.
        limit: virtual seconds an execution may take before the explorer
            declares it stuck.
        torn: leave torn writes at crashes (default: if the store can).
        lease_ttl: the engines' ``lease_ttl`` in trials (virtual seconds;
            they renew every third of it).

    Returns:
        an :class:`Exploration` summary when no invariant broke.

    Raises:
        InvariantViolation: naming the invariant, the seed, the fault plan
            and a one-line reproduction.
    """
    explorer = Explorer(
        workflow,
        *args,
        store_factory=store_factory,
        responses=responses,
        deadline=deadline,
        slow=slow,
        save_timeout=save_timeout,
        limit=limit,
        torn=torn,
        lease_ttl=lease_ttl,
    )
    return explorer.run(seeds=seeds, faults=faults)
