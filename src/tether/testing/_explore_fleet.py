"""One trial of the worker explorer: simulated processes on one store, a fault, the checks.

Layer: testing (``tether.testing``).

A :class:`Trial` runs *workers* simulated worker processes (:class:`Process`:
an engine with :func:`tether.open_worker`, on a connection of its own to the
:class:`~._explore_shared.SharedStore`) and a submitter, which waits until
the workers are idle, submits the runs, waits for each one's outcome
(answering its requests through a live worker's engine when it pauses), and
then stops the workers. It injects at most one fault, at one point, and then
checks the invariants:

(w1) every submitted run completes exactly once: each outcome is the
     uninterrupted trial's, and exactly one final status write landed;
(w2) no stored step runs again: a step that starts executing while its
     record is stored is a violation, and a journal holds one record per step;
(w3) no write lands from a worker after its run was taken over: every entry
     and record write that landed after a claim carries that claim's token
     (checked on the store's log of landed writes, and along each journal);
(w4) a run is claimed from another process only once that process's lease
     expired (one owner at a time).

A crashed worker's engine stays registered as open until the trial ends:
for the other workers it is a live process elsewhere whose lease must
expire, not a gone owner of this machine taken over at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, final

import attrs
import outcome
import trio
import trio.testing

from .._api._workflow import Workflow
from .._core._clock import TrioWallClock
from .._core._events import RunEvent, StepStarted, current_observer
from .._core._owners import engine_closed, engine_opened
from .._engine._engine import Engine, internals
from .._errors import Paused, Request, RunCancelledError, RunFailedError
from .._worker._worker import open_worker
from ..stores._records import RunStatus
from ..stores._store import Store
from ._clock import hold_clock
from ._explore_fleet_checks import check_fencing, check_journal, check_owners
from ._explore_leases import EPOCH
from ._explore_shared import Connection, Landed, Refused, SharedStore, label_after, label_before
from ._faults import SimulatedCrash
from ._faulty import FaultyStore

__all__ = ("SUBMITTER", "Options", "Outcome", "Trial", "WorkerTrial")

#: The submitting process's name in point names.
SUBMITTER: Final = "submitter"
#: What the simulated processes' wall clock reads at virtual time 0.


@attrs.frozen(kw_only=True)
class Options:
    """What every trial of one exploration shares (see :func:`explore_workers`)."""

    workflow: Workflow[..., Any]
    args: tuple[Any, ...]
    runs: int
    workers: int
    concurrency: int
    store_factory: Callable[[], Store]
    answer: Callable[[Sequence[Request]], dict[str, Any]]
    lease_ttl: float
    poll_interval: float
    slow: float
    downtime: float
    save_timeout: float
    limit: float


@attrs.frozen
class Outcome:
    """How a run ended, as the submitter's ``engine.wait`` saw it; comparable across trials."""

    kind: str  # "value", "failed", "cancelled"
    value: Any = None
    text: str = ""

    def same_as(self, other: Outcome) -> bool:
        if self.kind != other.kind:
            return False
        return bool(self.value == other.value) if self.kind == "value" else self.text == other.text

    def __str__(self) -> str:
        return f"returned {self.value!r}" if self.kind == "value" else self.text


@final
@attrs.frozen(kw_only=True)
class WorkerTrial:
    """What one trial did (:meth:`tether.testing.WorkerExplorer.trial`), to read in a test."""

    seed: int
    fault: str | None  #: ``kind@point``, or ``None``
    points: tuple[str, ...]  #: the interleaving points reached, in order
    landed: tuple[Landed, ...]  #: the writes the store took, in order
    refused: tuple[Refused, ...]  #: the calls the store answered with an error
    outcomes: Mapping[str, str]  #: run id -> its outcome, described
    violations: tuple[str, ...]  #: the invariants it broke (empty: none)
    retries: int  #: calls refused while the store was down, and retried


# -- one simulated process --------------------------------------------------------------


@final
class Process:
    """A simulated process: an engine on a connection to the shared store (a worker, or not)."""

    def __init__(self, trial: Trial, name: str) -> None:
        options = trial.options
        self.trial = trial
        self.name = name
        self.connection = Connection(trial.shared, self)
        self.faulty = FaultyStore(self.connection)
        self.engine = Engine(
            self.faulty,
            hooks=(),
            save_timeout=options.save_timeout,
            lease_ttl=options.lease_ttl,
            clock=TrioWallClock(EPOCH),  # virtual time: a run's wake_at comes in it
        )
        self.scope = trio.CancelScope()  # the process's life: cancelled by a crash
        self.stop = trio.Event()  # the trial is over: leave the worker block
        self.crashed = False
        self.nursery: trio.Nursery | None = None  # its tasks (open while it lives)
        self._paused: trio.Event | None = None  # set: the stopped process continues
        self._occurrences: dict[str, int] = {}

    # -- its store calls (the Connection hands them here) ---------------------------------

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """One store call of this process: its point, its fault, then the shared store.

        A checkpoint. Waits while the process is paused; raises
        :class:`SimulatedCrash` where it crashes, and what the store raises.
        """
        paused = self._paused
        if paused is not None:
            await paused.wait()  # a stopped process calls nothing meanwhile
        label = label_before(method, args, kwargs)
        kind = None if label is None else self._reach(label)
        if kind == "crash":
            raise self._crash(label)
        if kind == "restart":
            self.trial.spawn(self.trial.shared.restart, self.trial.options.downtime)
        if kind == "pause":
            return await self._pause(method, args, kwargs)
        return await self._deliver(method, args, kwargs)

    async def _deliver(
        self, method: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], *, late: bool = False
    ) -> Any:
        shared = self.trial.shared
        result = await shared.call(self.name, method, args, kwargs)
        label = None if late else label_after(method, args, result)
        kind = None if label is None else self._reach(label)
        if shared.announces(method, result) and kind != "lost_notification":
            shared.notify()  # the store announces its commit, whatever becomes of us
        if kind == "crash":
            raise self._crash(label)
        return result

    def _reach(self, label: str) -> str | None:
        """Number the point *label* reached here; the kind of fault that fires there, if any."""
        n = self._occurrences.get(label, 0) + 1
        self._occurrences[label] = n
        return self.trial.reach(f"{self.name}/{label}" + ("" if n == 1 else f"~{n}"))

    def _crash(self, label: str | None) -> SimulatedCrash:
        """The process dies now: its store takes nothing more, its tasks stop."""
        self.crashed = True
        self.faulty.crash()
        self.scope.cancel()
        return SimulatedCrash(f"simulated crash of {self.name} at {label}")

    async def _pause(self, method: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        """The process stops past its lease; this call, already on its way, lands late.

        Its other calls (renewals too) wait meanwhile. The call travels in a
        task of the trial's, so it lands even when its caller gave up: right
        after every run this process held was taken over (when a zombie's
        write does most harm), or after ``lease_ttl + slow`` seconds when it
        held none (at the latest ``3 * lease_ttl + 2 * poll_interval + slow``
        seconds later). Returns or raises what the store answered it.
        """
        options, shared = self.trial.options, self.trial.shared
        resumed = self._paused = trio.Event()
        held = shared.held_by(self.name)
        answer: list[outcome.Outcome[Any]] = []
        done = trio.Event()

        async def arrive_late() -> None:
            ttl, longest = options.lease_ttl, options.slow + 2 * options.poll_interval
            with trio.move_on_after(3 * ttl + longest):
                if held:
                    await shared.taken_over(held)
                else:
                    await trio.sleep(ttl + options.slow)
            with trio.CancelScope(shield=True):
                answer.append(
                    await outcome.acapture(self._deliver, method, args, kwargs, late=True)
                )
            self._paused = None
            resumed.set()
            done.set()

        self.trial.spawn(arrive_late)
        await done.wait()
        return answer[0].unwrap()

    # -- its life ------------------------------------------------------------------------

    def _observe(self, event: RunEvent) -> None:
        if isinstance(event, StepStarted):
            self.trial.step_started(self.name, event.run_id, event.key)

    async def serve(self) -> None:
        """Be a worker until told to stop, or until it crashes (a task of the trial).

        Stopping leaves the worker block as a worker that drains does; a
        crash ends the process where it is (nothing more reaches the store).
        """
        options, engine = self.trial.options, self.engine
        current_observer.set(self._observe)  # the worker's run tasks copy this context
        try:
            with self.scope:
                async with trio.open_nursery() as nursery:
                    self.nursery = nursery
                    nursery.start_soon(internals(engine).leases.run, name=f"{self.name} leases")
                    nursery.start_soon(
                        internals(engine).changes.follow,
                        self.faulty.watch,
                        name=f"{self.name} changes",
                    )
                    async with open_worker(
                        engine,
                        concurrency=options.concurrency,
                        poll_interval=options.poll_interval,
                        workflows=[options.workflow],
                    ):
                        await self.stop.wait()
                    await internals(engine).leases.close()
                    nursery.cancel_scope.cancel()
        except* SimulatedCrash:
            if not self.crashed:
                raise

    async def answer(self, run_id: str, responses: Mapping[str, Any]) -> None:
        """Resume the paused *run_id* with *responses* here, as a request handler would.

        Returns once that resume ended, however (a crash of this process ends
        it too); what it raised is its own: the submitter waits for the run.
        """
        ended = trio.Event()

        async def resume() -> None:
            current_observer.set(self._observe)
            try:
                await self.engine.resume(run_id, responses)
            except Exception:
                pass  # the run's outcome is what the submitter waits for
            finally:
                ended.set()

        assert self.nursery is not None
        self.nursery.start_soon(resume, name=f"{self.name} resume {run_id}")
        await ended.wait()


# -- one trial ----------------------------------------------------------------------------


@final
class Trial:
    """One trial: the shared store, the processes, the submitter, what they did.

    Args:
        options: the exploration's.
        seed: (for the report) the trial's seed; :meth:`run` runs under it.
        fault: ``(kind, point)``, or ``None`` for the uninterrupted trial.
        reference: each run's outcome in the uninterrupted trial (checked
            when given).
    """

    def __init__(
        self,
        options: Options,
        seed: int,
        fault: tuple[str, str] | None,
        reference: Mapping[str, Outcome] | None = None,
    ) -> None:
        self.options = options
        self.seed = seed
        self.fault = fault
        self.reference = reference
        self.shared = SharedStore(hold_clock(options.store_factory()))
        self.points: list[str] = []
        self.violations: list[str] = []
        self.outcomes: dict[str, Outcome] = {}
        self.run_ids = [f"run-{i}" for i in range(options.runs)]
        self.workers = [Process(self, f"w{i}") for i in range(options.workers)]
        self.submitter = Process(self, SUBMITTER)
        self._fired = False
        self._background: trio.Nursery | None = None
        self._jobs: list[trio.Event] = []

    def reach(self, point: str) -> str | None:
        """*point* was reached; the kind of the fault if it fires there."""
        self.points.append(point)
        if self.fault is None or self._fired or self.fault[1] != point:
            return None
        self._fired = True
        return self.fault[0]

    def spawn(self, afn: Callable[..., Awaitable[object]], *args: Any) -> None:
        """Start a task of the explorer's (a late write, a restart); the trial waits for it."""
        assert self._background is not None
        done = trio.Event()
        self._jobs.append(done)

        async def job() -> None:
            try:
                await afn(*args)
            finally:
                done.set()

        self._background.start_soon(job, name="tether.explore_workers job")

    def step_started(self, process: str, run_id: str, key: str) -> None:
        """(w2) A step starts executing: its record must not be stored."""
        stored = self.shared.steps.get((run_id, key))
        if stored is not None:
            landed, entry = stored
            self.violations.append(
                f"(w2) step {key} of run {run_id} started in {process} at "
                f"t={trio.current_time():g}, though its record was stored (seq {entry.seq}, "
                f"by {landed.process}) at t={landed.at:g}"
            )

    def report(self) -> WorkerTrial:
        """What this trial did (once :meth:`run` returned)."""
        fault = None if self.fault is None else f"{self.fault[0]}@{self.fault[1]}"
        return WorkerTrial(
            seed=self.seed,
            fault=fault,
            points=tuple(self.points),
            landed=tuple(self.shared.log),
            refused=tuple(self.shared.refused),
            outcomes={run_id: str(o) for run_id, o in self.outcomes.items()},
            violations=tuple(self.violations),
            retries=self.shared.retries,
        )

    async def run(self) -> None:
        """The trial, then its checks (violations in :attr:`violations`)."""
        shared = self.shared
        await shared.raw.open()
        for process in self.workers:
            engine_opened(internals(process.engine).engine_id)
        try:
            with trio.CancelScope() as everything:
                async with trio.open_nursery() as background:
                    self._background = background
                    background.start_soon(self._watchdog, everything)
                    submitter = self.submitter
                    background.start_soon(
                        internals(submitter.engine).changes.follow, submitter.connection.watch
                    )
                    async with trio.open_nursery() as processes:
                        for process in self.workers:
                            processes.start_soon(process.serve, name=process.name)
                        await self._submit_and_wait()
                        for process in self.workers:
                            process.stop.set()
                    for job in self._jobs:  # late writes landed, the store is back
                        await job.wait()
                    background.cancel_scope.cancel()
            if shared.closed:
                await shared.raw.open()
            await self._check()
        finally:
            for process in self.workers:
                engine_closed(internals(process.engine).engine_id)
            await shared.raw.close()

    async def _watchdog(self, everything: trio.CancelScope) -> None:
        await trio.sleep(self.options.limit)
        missing = [r for r in self.run_ids if r not in self.outcomes]
        self.violations.append(
            f"(w1) the trial did not end within {self.options.limit:g}s of virtual time; "
            f"runs without an outcome: {', '.join(missing) or 'none'}"
        )
        everything.cancel()

    async def _submit_and_wait(self) -> None:
        options, engine = self.options, self.submitter.engine
        # The workers are up and idle first: they learn of each run from its notification.
        await trio.testing.wait_all_tasks_blocked()
        for run_id in self.run_ids:
            await engine.submit(options.workflow, *options.args, run_id=run_id)
        async with trio.open_nursery() as nursery:
            for i, run_id in enumerate(self.run_ids):
                nursery.start_soon(self._wait, i, run_id)

    async def _wait(self, index: int, run_id: str) -> None:
        """Wait for *run_id*'s outcome, answering its requests when it pauses."""
        engine = self.submitter.engine
        answers = index
        while True:
            try:
                value = await engine.wait(run_id)
            except Paused as paused:
                responses = self.options.answer(paused.requests)
                live = [p for p in self.workers if not p.crashed and p.nursery is not None]
                await live[answers % len(live)].answer(run_id, responses)
                answers += 1
                continue
            except RunFailedError as exc:
                self.outcomes[run_id] = Outcome("failed", text=f"failed: {exc.error}")
            except RunCancelledError:
                self.outcomes[run_id] = Outcome("cancelled", text="cancelled")
            else:
                self.outcomes[run_id] = Outcome("value", value)
            return

    async def _check(self) -> None:
        """(w1)-(w4) on what the store holds and took."""
        raw, log = self.shared.raw, self.shared.log
        for run_id in self.run_ids:
            got = self.outcomes.get(run_id)
            if got is None:
                continue  # the watchdog said so
            expected = None if self.reference is None else self.reference[run_id]
            if expected is not None and not got.same_as(expected):
                self.violations.append(
                    f"(w1) run {run_id} {got}, but in the uninterrupted trial it {expected}"
                )
            final = [
                w
                for w in log
                if w.run_id == run_id
                and w.method == "update_run"
                and w.status in (RunStatus.COMPLETED, RunStatus.FAILED)
            ]
            if len(final) != 1:
                record = await raw.get_run(run_id)
                self.violations.append(
                    f"(w1) run {run_id} got {len(final)} final status writes "
                    f"({', '.join(f'{w.status} by {w.process}' for w in final) or 'none'}; "
                    f"stored: {None if record is None else record.status}); it must complete "
                    "exactly once"
                )
            self.violations += check_journal(run_id, await raw.load_entries(run_id))
        self.violations += check_fencing(log)
        self.violations += check_owners(log)
