"""What the benches return: samples, percentiles and findings, as frozen attrs classes.

Layer: the bench (``tether.bench``).

Every class here is JSON-ready through :func:`tether.bench.to_json` (field
names as keys; seconds as floats; ``None`` where nothing was measured).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal, final

import attrs

from ._census import Culprit
from ._stats import Percentiles, percentiles

__all__ = (
    "CancelResult",
    "CancelSample",
    "Finding",
    "Probe",
    "StepsResult",
    "ThroughputResult",
)

Severity = Literal["bug", "warning", "note"]


@final
@attrs.frozen(kw_only=True)
class Finding:
    """Something the bench found, and what to do about it."""

    #: ``bug``: the store or the workflow breaks the promise (the CLI exits 1);
    #: ``warning``: worth a look, not proven; ``note``: how to read the figures
    severity: Severity
    #: what kind: ``overshoot``, ``held-past-deadline``, ``threads-left``,
    #: ``threads-after-close``, ``tasks-left``, ``tasks-after-close``, ``not-resumable``,
    #: ``result-differs``, ``late-samples``, ``fault-not-reached``, ``before-deadline``
    code: str
    #: who is to blame: the ``store``, the ``workflow`` (its code or its steps), ``tether``
    #: itself, or ``None`` (not known, or nobody: a note)
    culprit: Literal["store", "workflow", "tether"] | None
    message: str
    hint: str | None  #: what to change
    samples: tuple[int, ...]  #: the samples it was seen in (their ``index``)


@final
@attrs.frozen(kw_only=True)
class Probe:
    """An undisturbed run of the workflow (no fault, no deadline), measured first."""

    seconds: float  #: how long it took (on the bench's clock)
    #: store calls it made, by method (``append`` counted per save, as FaultyStore counts)
    calls: Mapping[str, int]
    width: int  #: the most steps it had in flight at once (at least 1)
    outcome: str  #: ``completed``, ``paused`` or ``failed: ErrorType``
    result: str | None  #: the stored result (JSON text) when completed
    requests: tuple[str, ...] = ()  #: the keys of the requests it paused on

    def describe(self) -> str:
        """How it ended: ``completed``, ``paused on request approve``, ``failed: ...``."""
        if self.requests:
            return f"{self.outcome} on request {', '.join(self.requests)}"
        return self.outcome


@final
@attrs.frozen(kw_only=True)
class CancelSample:
    """One run of the workflow under the caller's deadline, with the fault injected."""

    index: int  #: 1, 2, ... in the order measured
    position: int | None  #: the fault at this call of the method only (``--sweep``); or every call
    run_id: str
    #: seconds from the deadline until ``engine.run`` had returned to the caller; ``None`` when
    #: the run ended before the deadline (see :attr:`outcome`)
    overshoot: float | None
    floor: float | None  #: the overshoot of the floor sample measured just before
    outcome: str  #: ``cancelled``, or how it ended before the deadline
    fault_reached: bool  #: the run made the faulty call before the deadline
    held: tuple[Culprit, ...]  #: what held the caller *tolerance* s after the deadline
    held_threads: tuple[str, ...]  #: threads running then (not idle), by name
    tasks_left: tuple[str, ...]  #: tasks of the run still running once the caller returned
    threads_left: tuple[str, ...]  #: threads still running once the caller returned
    tasks_after_close: tuple[str, ...]  #: tasks still running once the store was closed
    threads_after_close: tuple[str, ...]  #: threads still running once the store was closed
    resumed: str  #: how the resume ended: ``completed``, ``paused``, ``failed: ...``, ...
    resumable: bool  #: the resume ended as the undisturbed run did


@final
@attrs.frozen(kw_only=True)
class CancelResult:
    """What :func:`tether.bench.bench_cancel` measured."""

    workflow: str  #: the workflow's registered name
    store: str  #: the store, as shown
    fault: str  #: the fault, e.g. ``Hang()``
    at: str  #: the store method it was injected at
    sweep: bool  #: the fault at the 1st, 2nd, ... call in turn (else at every call)
    deadline: float  #: seconds from a sample's start to the caller's deadline
    tolerance: float  #: seconds over the floor's p99 before a sample is late
    clock: Literal["real", "virtual"]
    width: int  #: the floor's width: tasks in its nursery
    probe: Probe
    samples: tuple[CancelSample, ...]
    findings: tuple[Finding, ...]

    @property
    def overshoot(self) -> Percentiles:
        """The workflow's overshoot over every sample cancelled by the deadline."""
        return percentiles(s.overshoot for s in self.samples if s.overshoot is not None)

    @property
    def floor(self) -> Percentiles:
        """The floor's overshoot over all its samples."""
        return percentiles(s.floor for s in self.samples if s.floor is not None)

    @property
    def ratio(self) -> float:
        """The workflow's p50 overshoot over the floor's (``nan``: nothing measured)."""
        return self.overshoot.ratio(self.floor)

    @property
    def bugs(self) -> tuple[Finding, ...]:
        """The findings that are bugs."""
        return tuple(f for f in self.findings if f.severity == "bug")

    def positions(self) -> dict[int | None, tuple[CancelSample, ...]]:
        """The samples by the fault's position (one key, ``None``, without a sweep)."""
        out: dict[int | None, list[CancelSample]] = {}
        for s in self.samples:
            out.setdefault(s.position, []).append(s)
        return {k: tuple(v) for k, v in out.items()}


@final
@attrs.frozen(kw_only=True)
class StepsResult:
    """What :func:`tether.bench.bench_steps` measured (seconds, medians of the repeats)."""

    store: str
    steps: int  #: sequential steps per run
    repeats: int
    #: a durable step: the median of the repeats' paired (T(steps) - T(0)) / steps, never
    #: below 0 (see :attr:`resolution`)
    per_step: float
    #: how far noise alone moves :attr:`per_step`: the median absolute deviation of the
    #: paired differences, or that of the runs of no step over *steps*, whichever is larger
    resolution: float
    per_run: float  #: T(0): a run of no step (create, claim, final status)
    plain_await: float  #: one ``await`` of a no-op coroutine
    checkpoint: float  #: one ``await trio.lowlevel.checkpoint()``
    #: each repeat's (per step, plain await, checkpoint), in the order measured (a per-step
    #: difference of one repeat may be below 0: noise)
    repeats_measured: tuple[tuple[float, float, float], ...]

    @property
    def resolved(self) -> bool:
        """Whether :attr:`per_step` is above its :attr:`resolution` (else noise could be all
        of it)."""
        return self.per_step > self.resolution

    @property
    def overhead(self) -> float:
        """What a step costs over a plain await of the same no-op (never below 0)."""
        return max(0.0, self.per_step - self.plain_await)

    @property
    def checkpoints_per_step(self) -> float:
        """A step in trio's own unit: how many checkpoints it costs."""
        return self.per_step / self.checkpoint if self.checkpoint > 0 else math.nan


@final
@attrs.frozen(kw_only=True)
class ThroughputResult:
    """What :func:`tether.bench.bench_throughput` measured (durable steps per second)."""

    store: str
    width: int  #: parallel steps per ``tether.parallel()`` block
    steps: int  #: steps per run (rounds of *width*)
    grouped: tuple[float, ...]  #: steps/s with group commit, one per repeat
    one_per_save: tuple[float, ...]  #: steps/s with every save committed alone, one per repeat

    @property
    def ratio(self) -> float:
        """Median grouped over median one-per-save steps/s."""
        low = percentiles(self.one_per_save).p50
        return percentiles(self.grouped).p50 / low if low > 0 else math.nan
