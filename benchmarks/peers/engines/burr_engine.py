# Parts of Burr's API are unannotated (ApplicationBuilder(), the persisters' constructors).
# mypy: disable-error-code="no-untyped-call"
"""Burr (``apache-burr``), its asyncio API.

Every workflow is written the way Burr's docs write an application: ``@action``
async functions over a ``State``, wired by ``ApplicationBuilder`` with
``with_actions`` / ``with_transitions`` (a step is one action run: *n*
sequential steps are an action that transitions to itself while
``count < n``), built with ``abuild()`` and run with ``arun(...)``. Parallel
steps are a ``MapStates`` action (Burr's parallelism: one sub-application per
state, run with ``asyncio.gather``), whose sub-applications inherit the
parent's persister ("cascade"). Durable means Burr's SQLite persister for
asyncio applications, ``AsyncSQLitePersister`` (the synchronous
``SQLitePersister`` would block the event loop on every save, and Burr warns
against sync persisters in async parallel actions); in memory means its
``AsyncInMemoryPersister``. A failed run is resumed as Burr's docs resume one:
a new application with the same ``app_id`` and
``initialize_from(persister, resume_at_next_action=True, ...)``, which loads the
last saved state and position (a failed action is run again, a completed one
is followed by its successor).

How Burr persists a step: ``with_state_persister`` wraps the persister in a
``PersisterHookAsync``, a ``post_run_step`` lifecycle hook. ``Application._astep``
runs the action, applies its state update, and in its ``finally`` awaits every
``post_run_step`` hook, so ``PersisterHookAsync.post_run_step`` awaits
``AsyncBaseStatePersister.save(partition_key, app_id, sequence_id, position,
state, status)``: the one write of a completed action's resulting state, before
``astep`` returns and the next action starts.

*cancel*: what hangs is that ``save``. The persister given to
``with_state_persister`` (and cascaded to every sub-application of the
``MapStates`` action) is :class:`_GatedPersister`, an
``AsyncBaseStatePersister`` whose ``save`` awaits the trial's
:class:`~_protocol.Hang` (``wait_asyncio``) before delegating to an
``AsyncSQLitePersister``; so each of the ``width`` sub-applications waits in
the save of its completed action. What the trials then show (the notes count
the saves by action and status): the deadline's cancellation reaches those
saves at once, but the parent application's ``_astep`` runs its
``post_run_step`` hooks in a ``finally`` with ``exception=None`` (an
``asyncio.CancelledError`` is not an ``Exception``), so the parent saves its
cancelled ``MapStates`` action with status "completed"; that save hangs like
every other, and asyncio delivers a cancellation only once, so nothing cancels
it. The call returns when the hung save gives up (``HANG_LIMIT``), which the
recorder counts as a capped trial.

*sibling*: the same wrapper makes every save first sleep ``slow_save`` seconds
(a cancellable ``asyncio.sleep``, before the real write); B waits until A's
save has begun, then raises. ``asyncio.gather`` does not cancel A's
sub-application when B fails, and the notes say which saves had landed when the
failed run returned.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator
from functools import partial
from typing import Any, Literal

from _protocol import (
    CancelConfig,
    CancelRecorder,
    CancelResult,
    MemoryConfig,
    MemoryMeter,
    MemoryResult,
    ParallelConfig,
    ParallelResult,
    ResumeConfig,
    ResumeResult,
    SiblingConfig,
    SiblingResult,
    StepsConfig,
    StepsResult,
    asyncio_settle,
    best_of,
    main,
    package_version,
)
from burr.core import (
    Application,
    ApplicationBuilder,
    ApplicationContext,
    State,
    action,
    default,
    when,
)
from burr.core.parallelism import MapActions, MapStates
from burr.core.persistence import (
    AsyncBaseStatePersister,
    AsyncInMemoryPersister,
    PersistedStateData,
)
from burr.integrations.persisters.b_aiosqlite import AsyncSQLitePersister

from engines._common import (
    Call,
    Gate,
    SiblingCase,
    SiblingFailure,
    Tally,
    all_hung_note,
    asyncio_scenario,
    resume_after_failure,
)

ENGINE = "Burr"
DISTRIBUTION = "apache-burr"

# Burr logs every failed action with its traceback (the sibling and resume scenarios
# fail on purpose) and warns about runs that end without a halt condition.
logging.getLogger("burr").setLevel(logging.CRITICAL)


def version() -> str:
    return package_version(DISTRIBUTION)


class _GatedPersister(AsyncBaseStatePersister):
    """Each ``save`` awaits *gate* (the hang, or the slow save) before the real write."""

    def __init__(self, inner: AsyncBaseStatePersister, gate: Gate):
        self._inner = inner
        self._gate = gate
        self.entered: list[str] = []  #: "position status" of each save that began
        self.landed: list[str] = []  #: ... and of each that reached the real write's end

    async def is_initialized(self) -> bool:
        return await self._inner.is_initialized()

    async def load(
        self, partition_key: str, app_id: str | None, sequence_id: int | None = None, **kwargs: Any
    ) -> PersistedStateData | None:
        return await self._inner.load(partition_key, app_id, sequence_id, **kwargs)

    async def list_app_ids(self, partition_key: str, **kwargs: Any) -> list[str]:
        return await self._inner.list_app_ids(partition_key, **kwargs)

    async def save(
        self,
        partition_key: str | None,
        app_id: str,
        sequence_id: int,
        position: str,
        state: State[Any],
        status: Literal["completed", "failed"],
        **kwargs: Any,
    ) -> None:
        self.entered.append(f"{position} {status}")
        await self._gate()
        await self._inner.save(
            partition_key, app_id, sequence_id, position, state, status, **kwargs
        )
        self.landed.append(f"{position} {status}")


async def _sqlite(directory: str) -> AsyncSQLitePersister:
    path = os.path.join(directory, "burr.db")
    persister: AsyncSQLitePersister = await AsyncSQLitePersister.from_values(db_path=path)
    await persister.initialize()
    return persister


async def _persister(durable: bool, directory: str) -> AsyncBaseStatePersister:
    return await _sqlite(directory) if durable else AsyncInMemoryPersister()


async def _close(persister: AsyncBaseStatePersister) -> None:
    if isinstance(persister, AsyncSQLitePersister):
        await persister.cleanup()


# -- the actions ---------------------------------------------------------------------------

S = Tally()


@action(reads=["count"], writes=["count"])
async def work(state: State[Any]) -> State[Any]:
    S.ran += 1
    return state.update(count=state["count"] + 1)


@action(reads=[], writes=[])
async def finish(state: State[Any]) -> State[Any]:
    S.end_of_run()  # the first run of the resume scenario fails here
    return state


@action(reads=["i"], writes=["out"])
async def work_once(state: State[Any]) -> State[Any]:
    S.ran += 1
    return state.update(out=state["i"])


class FanOut(MapStates):
    """``work_once`` over ``n`` states, in parallel sub-applications."""

    def action(self, state: State[Any], inputs: dict[str, Any]) -> Callable[..., Any]:
        return work_once

    def states(
        self, state: State[Any], context: ApplicationContext, inputs: dict[str, Any]
    ) -> Generator[State[Any], None, None]:
        for i in range(state["n"]):
            yield state.update(i=i)

    # An async MapStates/MapActions hands reduce an async generator and awaits it, as Burr's
    # docs say; the base class annotates only the synchronous form.
    async def reduce(  # type: ignore[override]
        self, state: State[Any], states: AsyncGenerator[State[Any], None]
    ) -> State[Any]:
        done = 0
        async for _ in states:
            done += 1
        return state.update(done=done)

    def is_async(self) -> bool:
        return True

    @property
    def reads(self) -> list[str]:
        return ["n"]

    @property
    def writes(self) -> list[str]:
        return ["done"]


def _sequence(n: int) -> ApplicationBuilder[Any]:
    """``n`` runs of ``work``, then ``finish``."""
    return (
        ApplicationBuilder()
        .with_actions(work=work, finish=finish)
        .with_transitions(("work", "work", when(count__lt=n)), ("work", "finish", default))
    )


async def _fanout_app(n: int, persister: AsyncBaseStatePersister) -> Any:
    return await (
        ApplicationBuilder()
        .with_actions(fanout=FanOut())
        .with_state(n=n)
        .with_entrypoint("fanout")
        .with_state_persister(persister)
        .abuild()
    )


# -- 1. cancel -----------------------------------------------------------------------------


def _tally(saves: list[str]) -> str:
    """``["a completed", "a completed", "b failed"]`` -> ``"2 x a completed, 1 x b failed"``."""
    return ", ".join(f"{count} x {what}" for what, count in Counter(saves).items())


async def _in_memory_fanout(width: int, gate: Gate) -> Call:
    app = await _fanout_app(width, _GatedPersister(AsyncInMemoryPersister(), gate))
    return partial(app.arun, halt_after=["fanout"])


@asyncio_scenario
async def scenario_cancel(cfg: CancelConfig) -> CancelResult:
    rec = CancelRecorder(cfg)
    tallies: set[str] = set()
    for _, hang in rec.trials():
        with tempfile.TemporaryDirectory() as directory:
            sqlite = await _sqlite(directory)
            persister = _GatedPersister(sqlite, hang.wait_asyncio)
            app = await _fanout_app(cfg.width, persister)
            await rec.asyncio_trial(
                partial(app.arun, halt_after=["fanout"]),
                hang,
                before_release=partial(_note_saves, tallies, persister),
            )
            await asyncio_settle(cfg.hang_limit)
            await sqlite.cleanup()
    return rec.finish(
        "AsyncBaseStatePersister.save awaits the hang before AsyncSQLitePersister.save; "
        f"saves entered per trial (action, status): {' | '.join(sorted(tallies))}",
        await all_hung_note(cfg, partial(_in_memory_fanout, cfg.width)),
    )


def _note_saves(tallies: set[str], persister: _GatedPersister) -> None:
    tallies.add(_tally(persister.entered))


# -- 2. sibling ----------------------------------------------------------------------------


@action(reads=[], writes=["a"])
async def sibling_a(state: State[Any]) -> State[Any]:
    S.sibling.a()
    return state.update(a="a")


@action(reads=[], writes=["b"])
async def sibling_b(state: State[Any]) -> State[Any]:
    await S.sibling.b(S.sibling.patience)  # fails once A's save is in flight
    return state.update(b="b")


class Siblings(MapActions):
    """A and B in parallel sub-applications."""

    def actions(
        self, state: State[Any], context: ApplicationContext, inputs: dict[str, Any]
    ) -> Generator[Callable[..., Any], None, None]:
        yield sibling_a
        yield sibling_b

    def state(self, state: State[Any], inputs: dict[str, Any]) -> State[Any]:
        return state

    # As in FanOut.reduce.
    async def reduce(  # type: ignore[override]
        self, state: State[Any], states: AsyncGenerator[State[Any], None]
    ) -> State[Any]:
        out = ""
        async for sub in states:
            out += sub.get("a", "") + sub.get("b", "")
        return state.update(out=out)

    def is_async(self) -> bool:
        return True

    @property
    def reads(self) -> list[str]:
        return []

    @property
    def writes(self) -> list[str]:
        return ["out"]


async def _siblings_app(persister: AsyncBaseStatePersister) -> Any:
    return await (
        ApplicationBuilder()
        .with_actions(siblings=Siblings())
        .with_transitions()
        .initialize_from(
            persister,
            resume_at_next_action=True,
            default_state={},
            default_entrypoint="siblings",
        )
        .with_state_persister(persister)
        .with_identifiers(app_id="siblings")
        .abuild()
    )


@asyncio_scenario
async def scenario_sibling(cfg: SiblingConfig) -> SiblingResult:
    S.sibling = case = SiblingCase(cfg)
    with tempfile.TemporaryDirectory() as directory:
        sqlite = await _sqlite(directory)
        persister = _GatedPersister(sqlite, case.slow_save)
        try:
            await (await _siblings_app(persister)).arun(halt_after=["siblings"])
        except SiblingFailure:
            case.first_run_failed()
        landed = _tally(persister.landed)
        case.fixed = True
        _, _, state = await (await _siblings_app(persister)).arun(halt_after=["siblings"])
        await asyncio_settle(cfg.slow_save * 10)
        await sqlite.cleanup()
    return case.result(
        state["out"] == "ab",
        (
            "re-run: same app_id, initialize_from(resume_at_next_action=True); saves landed "
            f"when the failed run returned (action, status): {landed or 'none'}"
        ),
    )


# -- 3. steps, 4. parallel -----------------------------------------------------------------


async def _timed_once(
    build: Callable[[AsyncBaseStatePersister], Awaitable[Any]], durable: bool, **halt: list[str]
) -> float:
    """Seconds of one ``arun(**halt)`` of the application *build* makes on a fresh store."""
    with tempfile.TemporaryDirectory() as directory:
        persister = await _persister(durable, directory)
        app = await build(persister)
        S.ran = 0
        t0 = time.perf_counter()
        await app.arun(**halt)
        seconds = time.perf_counter() - t0
        await _close(persister)
    return seconds


async def _sequence_app(n: int, persister: AsyncBaseStatePersister) -> Any:
    return await (
        _sequence(n).with_state(count=0).with_entrypoint("work").with_state_persister(persister)
    ).abuild()


def scenario_steps(cfg: StepsConfig) -> StepsResult:
    once = partial(_timed_once, partial(_sequence_app, cfg.n), cfg.durable, halt_before=["finish"])
    best = best_of(cfg.repeats, lambda: asyncio.run(once()))
    store = "AsyncSQLitePersister" if cfg.durable else "AsyncInMemoryPersister"
    return StepsResult(us_per_step=best / cfg.n * 1e6, steps_ran=S.ran, notes=store)


def scenario_parallel(cfg: ParallelConfig) -> ParallelResult:
    once = partial(_timed_once, partial(_fanout_app, cfg.n), True, halt_after=["fanout"])
    best = best_of(cfg.repeats, lambda: asyncio.run(once()))
    return ParallelResult(
        seconds=best,
        steps_ran=S.ran,
        notes="a MapStates action: one sub-application per step; AsyncSQLitePersister",
    )


# -- 5. resume -----------------------------------------------------------------------------


async def _resumable(n: int, persister: AsyncBaseStatePersister) -> Any:
    return await (
        _sequence(n)
        .initialize_from(
            persister,
            resume_at_next_action=True,
            default_state={"count": 0},
            default_entrypoint="work",
        )
        .with_state_persister(persister)
        .with_identifiers(app_id="resume")
        .abuild()
    )


async def _run_resumable(n: int, persister: AsyncBaseStatePersister) -> int:
    """Build the application anew (resuming what *persister* holds), run it; its count."""
    _, _, state = await (await _resumable(n, persister)).arun(halt_after=["finish"])
    count: int = state["count"]
    return count


@asyncio_scenario
async def scenario_resume(cfg: ResumeConfig) -> ResumeResult:
    with tempfile.TemporaryDirectory() as directory:
        persister = await _sqlite(directory)
        run = partial(_run_resumable, cfg.n, persister)
        r = await resume_after_failure(S, cfg.n, run, run)
        await persister.cleanup()
    return r.result(
        "a new application, same app_id, initialize_from(resume_at_next_action=True): "
        "it loads the last saved state and runs the failed action again; the failed run "
        f"of {r.stored} steps took {r.failed_seconds:.1f} s"
    )


# -- 6. memory -----------------------------------------------------------------------------


@action(reads=[], writes=["first"])
async def first_step(state: State[Any]) -> State[Any]:
    return state.update(first=True)


@action(reads=[], writes=["second"])
async def waiting_step(state: State[Any]) -> State[Any]:
    await S.parking.park()
    return state.update(second=True)


async def _two_steps(i: int, persister: AsyncBaseStatePersister) -> None:
    app: Application[Any] = await (
        ApplicationBuilder()
        .with_actions(first=first_step, second=waiting_step)
        .with_transitions(("first", "second"))
        .with_state(i=i)
        .with_entrypoint("first")
        .with_state_persister(persister)
        .with_identifiers(app_id=f"run-{i}")
        .abuild()
    )
    await app.arun(halt_after=["second"])


@asyncio_scenario
async def scenario_memory(cfg: MemoryConfig) -> MemoryResult:
    S.parking.expect(cfg.runs, asyncio.Event)
    meter = MemoryMeter()
    persister = AsyncInMemoryPersister()
    runs = [asyncio.create_task(_two_steps(i, persister)) for i in range(cfg.runs)]
    await S.parking.measure(meter)
    await asyncio.gather(*runs)
    return S.parking.result(meter, notes="one application per run; a shared AsyncInMemoryPersister")


if __name__ == "__main__":
    main(sys.modules[__name__])
