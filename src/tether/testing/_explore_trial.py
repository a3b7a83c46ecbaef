"""One trial of the explorer: a fresh store, the plan's faults injected, resumed until done.

Layer: testing (``tether.testing``).

A :class:`Trial` runs the explored workflow on a :class:`FaultyStore` over a
fresh store, one :class:`~._explore_execution.Execution` after another (the
first ``engine.run``, then resumes, answering requests), injecting each
execution's fault of the :class:`~._explore_plan.FaultPlan` where its point
is reached: at a step's start or a timer (through the run's observer), at a
write before and after it reaches the store (through the faulty store), and
with a saboteur task beside the workflow for a sibling's failure. The
ownership faults act through :mod:`._explore_leases`; after each execution
the trial checks the invariants (:func:`~._explore_execution.check_execution`).
The explorer's messages (``messages=``) are sent to the run once its
creation landed in the store, before its code runs. An execution that does
not return within the explorer's *limit* is stopped, and what the run
waited for is said (:mod:`._explore_waits`).
A trial takes its settings from its explorer (:class:`Settings`):
:class:`~._explore.Explorer` runs one per ``trio.run``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any, Final, Protocol, final

import attrs
import trio

from .._api._workflow import Workflow
from .._core._events import (
    MessageReceived,
    RunEvent,
    StepStarted,
    TimerFired,
    TimerStarted,
    current_observer,
)
from .._core._store_calls import mailbox
from .._engine._engine import Engine
from .._errors import Paused, Request, StoreError, UsageError
from ..stores._records import Entry, RunRecord, RunStatus, request_from_json
from ..stores._store import Store
from ._clock import hold_clock
from ._explore_execution import (
    RUN_ID,
    Execution,
    Outcome,
    Tasks,
    check_execution,
    describe_error,
    point_labels,
    run_of,
    split_crash,
)
from ._explore_leases import EPOCH, OwnerFaults, Race, hand_back, open_owner
from ._explore_plan import FaultPlan, InjectedFailure, Injection
from ._explore_waits import Waits, waits_of
from ._faults import Call, Crash, Do, torn_writer
from ._faulty import FaultyStore

__all__ = ("Settings", "Trial")

_WRITES: Final = ("create_run", "claim", "update_run", "append")
#: Executions a trial may take beyond its plan (pauses answered one by one).
_EXTRA_EXECUTIONS: Final = 20


class Settings(Protocol):
    """What a trial takes from its explorer (:class:`~._explore.Explorer`)."""

    workflow: Workflow[..., Any]
    args: tuple[Any, ...]
    store_factory: Callable[[], Store]
    deadline: float
    slow: float
    save_timeout: float
    limit: float
    torn: bool | None
    lease_ttl: float
    #: the messages sent to the run once it is created: (name, JSON text as encoded)
    messages: tuple[tuple[str, str], ...]

    def answer(self, requests: Sequence[Request]) -> dict[str, Any]:
        """The responses to *requests*."""
        ...


def _can_tear(store: Store) -> bool:
    try:
        torn_writer(store, "append")
    except UsageError:
        return False
    return True


@final
class Trial:
    """One trial: its store, its executions, and the injection machinery."""

    def __init__(self, explorer: Settings, plan: FaultPlan) -> None:
        self.explorer = explorer
        self.plan = plan
        self.raw = explorer.store_factory()
        self.faulty = FaultyStore(hold_clock(self.raw))
        self.tasks = Tasks()
        self.executions: list[Execution] = []
        self.violations: list[str] = []
        self.current: Execution | None = None
        self.caller: trio.CancelScope | None = None  # cancels engine.run: the caller
        self.process: trio.CancelScope | None = None  # cancels everything: a crash
        self.nursery: trio.Nursery | None = None  # the execution's: lease tasks, late writes
        self.owners = OwnerFaults(
            self.faulty.inner, RUN_ID, lease_ttl=explorer.lease_ttl, slow=explorer.slow
        )
        self.sabotage = trio.Event()
        self.sent = not explorer.messages  # the explorer's messages are in the mailbox
        #: what the run waited for when it did not return in time, only for messages
        self.starved: Waits | None = None
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

        # Everything but the function stays the workflow's (its version, its messages).
        return attrs.evolve(inner, fn=explored)

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
        elif isinstance(event, MessageReceived):
            point = f"receive:{event.key}"
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
        if ex.race is not None and run_of(call.method, call.args) == RUN_ID:
            ex.race.seen(call)
        labels = point_labels(call.method, call.args, call.kwargs)
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
        if ex is not None and ex.race is not None and run_of(call.method, call.args) == RUN_ID:
            await ex.race.claimed(call)
        if not self.sent and point_labels(call.method, call.args, call.kwargs) == [
            "record:created"
        ]:
            await self._send_messages()
        if ex is None or call.method != "append":
            return
        inj: Injection | None = None
        for label in point_labels(call.method, call.args, call.kwargs):
            ex.landed[label] = ex.landed.get(label, 0) + 1
            if label.startswith("child:"):
                continue  # (a child run's writes have no stored: points)
            inj = self._matches(ex.point("stored:" + label.partition(":")[2])) or inj
        if inj is not None:
            self._strike(inj, "a sibling failed")
            if inj.kind == "crash":
                await Crash().apply(call)

    async def _send_messages(self) -> None:
        """Send the explorer's messages to the run, whose creation just landed."""
        self.sent = True
        box = mailbox(self.faulty.inner)
        for name, text in self.explorer.messages:
            await box.send_message(RUN_ID, name, text, now=EPOCH)

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
        record = await self.raw.get_run(RUN_ID)
        entries = tuple(await self.raw.load_entries(RUN_ID)) if record is not None else ()
        return record, entries

    async def run(self) -> list[Execution]:
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
                ex = Execution(index, injection)
                self.executions.append(ex)
                await self._execute(ex, responses)
                stored, after = await self._stored()
                self.violations += check_execution(
                    ex, before, after, stored, slow=explorer.slow, lease_ttl=explorer.lease_ttl
                )
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

    async def _execute(self, ex: Execution, responses: dict[str, Any] | None) -> None:
        """One execution: a process with one engine (two, racing), and its caller."""
        self.current = ex
        self.owners.reset()
        ex.began = trio.current_time()
        claim = "record:created" if responses is None else "record:running"
        if ex.injection is not None and ex.injection.kind == "race":
            ex.race = Race(at_claim=ex.injection.at == claim)
        outcome: Outcome | None = None
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
                        outcome = Outcome("cancelled", text="cancelled by the caller")
            if process.cancelled_caught or self.faulty.crashed:
                outcome = Outcome("crashed", text="crashed")
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
    ) -> Outcome:
        """``engine.run`` (or ``resume``) of the explored run, as an outcome."""
        current_observer.set(self._observer(started))
        try:
            if responses is not None:
                value = await engine.resume(RUN_ID, responses)
            else:
                value = await engine.run(self.workflow, *self.explorer.args, run_id=RUN_ID)
            return Outcome("value", value)
        except Paused as paused:
            keys = ", ".join(r.key for r in paused.requests)
            return Outcome("paused", paused.requests, f"paused on {keys}")
        except Exception as exc:
            return Outcome("error", text=describe_error(exc))
        except BaseException as exc:
            # A write the crash reached outside the run's own tasks raises
            # SimulatedCrash; Cancelled (ours) goes on to the scope that owns it.
            crash, rest = split_crash(exc)
            if crash is None:
                raise
            if rest is not None:
                raise rest from None
            return Outcome("crashed", text="crashed")
        finally:
            current_observer.set(None)

    async def _watchdog(self, ex: Execution, process: trio.CancelScope) -> None:
        await trio.sleep(self.explorer.limit)
        waits = waits_of(RUN_ID, self.tasks.alive)
        hint = ""
        if waits.executing:
            hint = f" ({waits.describe()})"
        if waits.forever:
            self.starved = waits
            names = ", ".join(f"({n!r}, ...)" for n in waits.messages)
            hint += (
                f"; only a message wakes it: give explore() the messages the run receives, "
                f"messages=[{names}]"
            )
        self.violations.append(
            f"execution {ex.index} did not return within {self.explorer.limit}s of virtual "
            f"time{hint}; the explorer crashed the store to stop it"
        )
        self.faulty.crash()
        process.cancel()
