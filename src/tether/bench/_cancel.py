"""``bench_cancel``: a workflow under a caller's deadline while its store misbehaves.

Layer: the bench (``tether.bench``).

Each sample makes a fresh store with the factory, wraps it in
:class:`~tether.testing.FaultyStore` with the fault at the chosen method
(every call of it, or with a sweep the k-th call only), opens an engine on
it, and then, in this order:

1. the floor: a bare trio nursery of the same width, under the same deadline
   (so both are measured in the same process, one sample after the other);
2. the workflow, ``engine.run`` with a fresh run id under
   ``trio.move_on_at(start + deadline)``; the overshoot is the time from the
   deadline until ``engine.run`` returned to the caller, and the harness
   names what still held the caller *tolerance* seconds after the deadline;
3. the tasks and threads still running once the caller returned;
4. the resume: the fault cleared, ``engine.resume`` of the run (bounded by
   ten times the undisturbed run's duration, at least 10 s and at most the
   phase timeout), which must end as the undisturbed run did (completed,
   with the same result, or paused, or failed with the same error type);
5. the tasks and threads still running once the engine closed the store,
   against a census taken before it opened.

The runs of samples that resumed as they should are deleted afterwards
where the store can (``delete_run``); the others are kept, and named.

The phases without a caller's deadline, the undisturbed run and each
resume, are bounded by the phase timeout (:func:`~._phases.within`): an
undisturbed run that does not end stops the bench with
:class:`~._phases.PhaseStuckError`, naming what it waits for; a resume that
does not end is a sample that did not resume, and says so.

Whole because :func:`bench_cancel` is the bench from top to bottom (check the
options, probe, the samples, judge), each part already a function of its own
(:func:`~._probe.probe`, ``_sample``, :func:`~._findings.judge`); it is long
for the reference of its options.
"""

from __future__ import annotations

import gc
import math
import random
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Final, Literal

import attrs
import trio
import trio.testing

from .._api._workflow import Workflow
from .._core._clock import Clock, TrioWallClock
from .._engine._engine import Engine, open_engine
from .._errors import RunNotFoundError, UsageError
from ..stores._store import STORE_METHODS
from ..testing import FaultyStore, Hang, StoreFactory
from ..testing._faults import Fault
from ._census import Census, Culprit
from ._deadline import bare_nursery, under_deadline
from ._findings import judge
from ._phases import PhaseStuckError, within
from ._probe import Holding, Watched, delete_quietly, make_store, outcome_of, probe
from ._results import CancelResult, CancelSample, Probe

__all__ = ("bench_cancel",)

#: The store methods a fault can be injected at: those a run can call while it executes
#: (``open`` and ``close`` are the engine's, around every run).
FAULT_METHODS: Final = tuple(m for m in STORE_METHODS if m not in ("open", "close"))
#: A real-clock deadline gets up to this much at random (the same for the floor and the
#: workflow of one pair), so both see the same spread of the timer's millisecond rounding.
_JITTER: Final = 1e-3
_MIN_RESUME: Final = 10.0
#: The default phase timeout: seconds the undisturbed run, and each resume, may take.
PHASE_TIMEOUT: Final = 60.0

Progress = Callable[[str], None]


def _virtual() -> bool:
    """Whether the current run's clock is virtual (an autojumping MockClock).

    Raises:
        UsageError: a MockClock that does not autojump at once (it would wait forever).
    """
    clock = trio.lowlevel.current_clock()
    if not isinstance(clock, trio.testing.MockClock):
        return False
    if clock.autojump_threshold != 0:
        raise UsageError(
            "bench_cancel under a MockClock needs autojump_threshold=0, not "
            f"{clock.autojump_threshold!r}: trio.run(..., clock=MockClock(autojump_threshold=0))"
        )
    return True


def _check(
    deadline: float, samples: int, tolerance: float, width: int | None, at: str, timeout: float
) -> None:
    if not isinstance(deadline, int | float) or not 0 < deadline < math.inf:
        raise UsageError(f"the deadline must be a positive number of seconds, not {deadline!r}")
    if not isinstance(timeout, int | float) or not 0 < timeout < math.inf:
        raise UsageError(f"the phase timeout must be a positive number of seconds, not {timeout!r}")
    if not isinstance(samples, int) or samples < 1:
        raise UsageError(f"samples must be 1 or more, not {samples!r}")
    if not isinstance(tolerance, int | float) or not 0 <= tolerance < math.inf:
        raise UsageError(f"the tolerance must be 0 or more seconds, not {tolerance!r}")
    if width is not None and (not isinstance(width, int) or width < 1):
        raise UsageError(f"the floor's width must be 1 or more, not {width!r}")
    if at not in FAULT_METHODS:
        raise UsageError(f"a fault goes at one of {', '.join(FAULT_METHODS)}, not {at!r}")


def _positions(probe: Probe, at: str, sweep: bool) -> Sequence[int | None]:
    made = probe.calls.get(at, 0)
    if not made:
        calls = ", ".join(f"{m} x{n}" for m, n in probe.calls.items())
        raise UsageError(
            f"an undisturbed run makes no {at} call, so a fault there would never apply; "
            f"it calls: {calls} (and ends {probe.describe()})"
        )
    return range(1, made + 1) if sweep else [None]


async def _resume(engine: Engine, run_id: str, probe: Probe, limit: float) -> tuple[str, bool]:
    """How the resume of *run_id* ended, and whether that is how the undisturbed run ended."""
    error: BaseException | None = None
    try:
        await within(
            lambda: engine.resume(run_id),
            phase="the resume",
            run_id=run_id,
            timeout=limit,
            store=engine.store,
            longer="a resume gets ten times the undisturbed run's time, at least 10 s and at "
            "most the phase timeout (--phase-timeout SECONDS, phase_timeout=)",
        )
    except RunNotFoundError:
        return "not stored: the deadline struck before the run was created", True
    except PhaseStuckError as exc:
        return str(exc), False
    except Exception as exc:  # the workflow's outcome (a pause, a failure), or the store's
        error = exc
    outcome = outcome_of(error)
    if outcome != probe.outcome:
        detail = f" ({type(error).__name__}: {error})" if error is not None else ""
        return f"{outcome}{detail:.300}", False
    if outcome == "completed":
        record = await engine.store.get_run(run_id)
        if record is None or record.result != probe.result:
            return "completed, with another result", True
    return outcome, True


async def _sample(
    wf: Workflow[..., Any],
    args: tuple[Any, ...],
    *,
    index: int,
    position: int | None,
    factory: StoreFactory,
    fault: Fault,
    at: str,
    deadline: float,
    jitter: float,
    tolerance: float,
    width: int,
    probe: Probe,
    virtual: bool,
    clock: Clock | None,
    keep_runs: bool,
    phase_timeout: float,
    on_late: Callable[[tuple[Culprit, ...], tuple[str, ...]], None] | None,
) -> CancelSample:
    inner = await make_store(factory)
    holding = Holding(inner) if virtual else None
    faulty = FaultyStore(holding if holding is not None else inner)
    watched = Watched(fault, reached=None if holding is None else holding.release)
    faulty.inject(at, watched, at=position)
    run_id = f"bench-{uuid.uuid4().hex[:12]}"
    before_open = Census.take()
    async with open_engine(faulty, clock=clock) as engine:
        floor = await under_deadline(
            bare_nursery(width), deadline=trio.current_time() + deadline + jitter, late=tolerance
        )
        timed = await under_deadline(
            lambda: engine.run(wf, *args, run_id=run_id),
            deadline=trio.current_time() + deadline + jitter,
            late=tolerance,
            store=inner,
            on_late=on_late,
        )
        reached = watched.count > 0
        faulty.clear()
        if holding is not None:
            holding.hold()
        limit = min(phase_timeout, max(_MIN_RESUME, 10 * probe.seconds))
        resumed, resumable = await _resume(engine, run_id, probe, limit)
        if resumable and not keep_runs:
            await delete_quietly(inner, run_id)
    if timed.overshoot is not None:
        outcome = "cancelled"
    else:
        outcome = f"{outcome_of(timed.outcome)} before the deadline"
    return CancelSample(
        index=index,
        position=position,
        run_id=run_id,
        overshoot=timed.overshoot,
        floor=floor.overshoot,
        outcome=outcome,
        fault_reached=reached,
        held=timed.held,
        held_threads=timed.held_threads,
        tasks_left=timed.tasks_left,
        threads_left=timed.threads_left,
        tasks_after_close=tuple(t.name for t in before_open.new_tasks()),
        threads_after_close=tuple(t.name for t in before_open.new_threads()),
        resumed=resumed,
        resumable=resumable,
    )


def _late(
    progress: Progress | None, what: str, tolerance: float
) -> Callable[[tuple[Culprit, ...], tuple[str, ...]], None] | None:
    """What tells *progress* that the caller of *what* is still held after its deadline."""
    if progress is None:
        return None

    def late(held: tuple[Culprit, ...], threads: tuple[str, ...]) -> None:
        seen = "; ".join([c.describe() for c in held] + [f"thread {t}" for t in threads])
        progress(
            f"  {what}: not returned {tolerance:g} s after its deadline; "
            f"held by {seen or 'nothing seen (the event loop was blocked?)'}"
        )

    return late


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.3f} ms"


async def bench_cancel(
    wf: Workflow[..., Any],
    *args: Any,
    store: StoreFactory,
    fault: Fault | None = None,
    at: str = "append",
    deadline: float = 0.2,
    samples: int = 10,
    sweep: bool = False,
    width: int | None = None,
    tolerance: float = 0.02,
    shown: str | None = None,
    keep_runs: bool = False,
    progress: Progress | None = None,
    phase_timeout: float = PHASE_TIMEOUT,
) -> CancelResult:
    """Bench ``wf(*args)`` under a caller's deadline with *fault* at the store's *at* calls.

    Args:
        wf: the workflow.
        args: its arguments (the workflow's own width is whatever they make
            it: a fan-out's size is one of its arguments).
        store: a sync or async callable returning a fresh, unopened store (as
            :func:`tether.testing.check_store` takes), called for the
            undisturbed run and once per sample: ``lambda:
            tether.SQLiteStore(path)``, or a class of your own.
        fault: a :mod:`tether.testing` fault: ``Hang()`` (the default) or
            ``Delay(seconds)``, or any object with ``async def apply(call)``.
        at: the store method whose calls get the fault.
        deadline: seconds from each sample's start to the caller's deadline.
        samples: samples per fault position.
        sweep: the fault at the 1st call of *at* only, then the 2nd, ..., up to the
            number of calls an undisturbed run makes (*samples* each); else at every call.
        width: tasks in the floor's nursery (default: the most steps the
            undisturbed run had in flight at once).
        tolerance: seconds over the floor's p99 before a sample is late; also
            when the harness looks at what holds a caller that has not returned.
        shown: the store as the result shows it (default: the first store's repr).
        keep_runs: keep every run in the store (default: delete, where the store
            can, those that resumed as they should).
        progress: called with one line of text as the undisturbed run starts and
            ends, as each sample ends, and when a caller is still held
            *tolerance* seconds after its deadline.
        phase_timeout: seconds the undisturbed run may take, and each resume (at
            most; a resume gets ten times the undisturbed run, at least 10 s).

    Under ``trio.testing.MockClock(autojump_threshold=0)`` the bench runs in
    virtual time (the engines' wall clock is a
    :class:`~tether.testing.TrioWallClock`), where every overshoot must be
    exactly 0.

    A checkpoint. Cancelling it cancels the sample in progress as a caller
    cancellation (its run stays resumable; its store is closed).

    Raises:
        UsageError: an option is out of range, the undisturbed run makes no *at*
            call, or a MockClock does not autojump at once.
        PhaseStuckError: the undisturbed run did not end within *phase_timeout*,
            or waits for a message (naming what it waits for).
        TetherError: the undisturbed run met a store (or codec) error.
    """
    _check(deadline, samples, tolerance, width, at, phase_timeout)
    fault = Hang() if fault is None else fault
    virtual = _virtual()
    clock = TrioWallClock(datetime.now(UTC)) if virtual else None
    if progress is not None:
        progress(
            f"undisturbed run of {wf.name}: no fault, no deadline (at most {phase_timeout:g} s)"
        )
    first, first_store = await probe(
        wf,
        args,
        factory=store,
        virtual=virtual,
        clock=clock,
        keep_runs=keep_runs,
        timeout=phase_timeout,
    )
    if progress is not None:
        progress(f"undisturbed run: {_ms(first.seconds)}, {first.describe()}")
    positions = _positions(first, at, sweep)
    width = first.width if width is None else width
    rng = random.Random(13)
    measured: list[CancelSample] = []
    total = len(positions) * samples

    for position in positions:
        for _ in range(samples):
            index = len(measured) + 1
            where = f" [{at} #{position}]" if position is not None else ""
            gc.collect()
            sample = await _sample(
                wf,
                args,
                index=index,
                position=position,
                factory=store,
                fault=fault,
                at=at,
                deadline=deadline,
                jitter=0.0 if virtual else rng.random() * _JITTER,
                tolerance=tolerance,
                width=width,
                probe=first,
                virtual=virtual,
                clock=clock,
                keep_runs=keep_runs,
                phase_timeout=phase_timeout,
                on_late=_late(progress, f"sample {index}{where}", tolerance),
            )
            measured.append(sample)
            if progress is not None:
                progress(
                    f"sample {index}/{total}{where}: overshoot {_ms(sample.overshoot)} "
                    f"(floor {_ms(sample.floor)}), resumed: {sample.resumed}"
                )
    clock_kind: Literal["real", "virtual"] = "virtual" if virtual else "real"
    result = CancelResult(
        workflow=wf.name,
        store=shown if shown is not None else first_store,
        fault=repr(fault),
        at=at,
        sweep=sweep,
        deadline=deadline,
        tolerance=tolerance,
        clock=clock_kind,
        width=width,
        probe=first,
        samples=tuple(measured),
        findings=(),
    )
    findings = judge(
        measured,
        probe=first,
        at=at,
        virtual=virtual,
        tolerance=tolerance,
        floor=result.floor,
    )
    return attrs.evolve(result, findings=findings)
