"""The worker explorer: simulated workers share one store; a fault at every point; check.

Layer: testing (``tether.testing``).

:func:`explore_workers` runs trials (:mod:`._explore_fleet`): under
:func:`run_deterministic` (virtual time, a seeded schedule), *workers*
simulated worker processes, each an engine with :func:`tether.open_worker`,
share one store (:mod:`._explore_shared`) with a submitter that submits
*runs* runs of the workflow and waits for them. One trial without faults
learns the interleaving points; then one trial per point and fault kind
injects that fault there and checks the invariants (w1)-(w4) (see
:mod:`._explore_fleet`): every run completes exactly once, no stored step
runs again, no write lands after a takeover, one owner at a time.

Points are named ``PROCESS/LABEL`` (``w0``, ``w1``, ..., ``submitter``), the
label naming the store call (:func:`._explore_shared.label_before` and
``label_after``), with ``~2``, ``~3`` ... for a process's later occurrences
of the same label: ``w1/save:run-0/charge#0``, ``w0/claimed:run-1``,
``w0/renew~3``.

Whole because this module is the worker explorer and nothing else: its plans
(:class:`WorkerFault`, :class:`WorkerPlan`), the :class:`WorkerExplorer` that
makes and runs them, and :func:`explore_workers`, whose length is its
docstring, the public reference of every fault kind and option (its body
builds a :class:`WorkerExplorer` and runs it). The trial and its checks
(:mod:`._explore_fleet`) and the shared store (:mod:`._explore_shared`) are
already apart.
"""

from __future__ import annotations

import gc
import inspect
import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, final

import attrs

from .._api._workflow import Workflow
from .._errors import InvariantViolation, Request, UsageError
from ..stores._memory import MemoryStore
from ..stores._store import Store
from ._deterministic import run_deterministic
from ._explore_fleet import SUBMITTER, Options, Outcome, Trial, WorkerTrial
from ._explore_plan import Exploration, answer_requests, check_seeds, check_target

__all__ = (
    "WORKER_FAULT_KINDS",
    "WorkerExplorer",
    "WorkerFault",
    "WorkerPlan",
    "WorkerTrial",
    "explore_workers",
    "kinds_at",
)

#: Every kind of fault the worker explorer injects.
WORKER_FAULT_KINDS: Final = ("crash", "pause", "restart", "lost_notification")

#: The options a reproduction names when they are not the default.
_OPTIONS: Final = (
    "runs",
    "workers",
    "concurrency",
    "lease_ttl",
    "poll_interval",
    "slow",
    "downtime",
    "save_timeout",
    "limit",
)


@final
@attrs.frozen
class WorkerFault:
    """One fault at one point: ``kind@point``, e.g. ``crash@w1/save:run-0/charge#0``."""

    kind: str = attrs.field()
    at: str

    @kind.validator
    def _check_kind(self, _: object, kind: str) -> None:
        if kind not in WORKER_FAULT_KINDS:
            raise UsageError(
                f"unknown worker fault kind {kind!r}; one of {', '.join(WORKER_FAULT_KINDS)}"
            )

    def __str__(self) -> str:
        return f"{self.kind}@{self.at}"

    @classmethod
    def parse(cls, text: str) -> WorkerFault:
        """``"crash@w0/claim~2"`` → ``WorkerFault("crash", "w0/claim~2")``."""
        kind, sep, at = text.partition("@")
        if not sep or not at:
            raise UsageError(f"a fault is written kind@point, like 'crash@w0/claim', not {text!r}")
        return cls(kind, at)


@final
@attrs.frozen
class WorkerPlan:
    """What one trial does: a seed, and the fault it injects (``None``: none)."""

    seed: int
    fault: WorkerFault | None = None

    def __str__(self) -> str:
        return f"seed {self.seed}: {self.fault or 'no fault'}"


def kinds_at(point: str) -> tuple[str, ...]:
    """The fault kinds that apply at *point*.

    ``crash`` at every point of a worker; ``pause`` where a worker calls the
    store; ``restart`` where anyone does; ``lost_notification`` where a
    write that changed a run record landed.
    """
    process, _, label = point.partition("/")
    what = label.partition("~")[0].partition(":")[0]
    after = what in ("claimed", "stored", "recorded", "submitted")
    kinds: list[str] = []
    if process != SUBMITTER:
        kinds.append("crash")
        if not after:
            kinds.append("pause")
    if not after:
        kinds.append("restart")
    if after and label.partition("~")[0] != "claimed:none" and what != "stored":
        kinds.append("lost_notification")
    return tuple(kinds)


# -- the explorer -----------------------------------------------------------------------------


def _positive(name: str, value: object) -> float:
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not value > 0
        or math.isinf(value)
    ):
        raise UsageError(f"{name} must be a positive number of seconds, not {value!r}")
    return float(value)


def _count(name: str, value: object, least: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise UsageError(f"{name} must be an integer of at least {least}, not {value!r}")
    return value


def _first(exc: BaseException) -> BaseException:
    """The first exception of *exc*, a group (nested or not), or *exc* itself."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def _name(obj: object) -> str:
    """``module.qualname`` of *obj*, or ``...`` when that would not find it again."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        return "..."
    return f"{module}.{qualname}"


@final
class WorkerExplorer:
    """Explores *runs* runs of one workflow call on simulated workers; see :func:`explore_workers`.

    Use it directly to list the points of a trial (:meth:`points`), the plans
    a run would try (:meth:`plans_for`), or to replay one (:meth:`check`).
    """

    def __init__(
        self,
        workflow: Workflow[..., Any],
        *args: Any,
        runs: int = 2,
        workers: int = 2,
        store_factory: Callable[[], Store] = MemoryStore,
        responses: Mapping[str, Any] | Callable[[Request], Any] | None = None,
        concurrency: int = 2,
        lease_ttl: float = 1.0,
        poll_interval: float = 1.0,
        slow: float = 1.0,
        downtime: float | None = None,
        save_timeout: float = 30.0,
        limit: float = 600.0,
    ) -> None:
        check_target("explore_workers()", workflow, store_factory)
        self.workflow = workflow
        self.args = args
        self.runs = _count("runs", runs, 1)
        self.workers = _count("workers", workers, 2)  # one crashes, another takes over
        self.concurrency = _count("concurrency", concurrency, 1)
        self.store_factory = store_factory
        self.responses = responses
        self.lease_ttl = _positive("lease_ttl", lease_ttl)
        self.poll_interval = _positive("poll_interval", poll_interval)
        self.slow = _positive("slow", slow)
        self.downtime = (
            self.lease_ttl + self.slow if downtime is None else _positive("downtime", downtime)
        )
        self._downtime_given = downtime
        self.save_timeout = _positive("save_timeout", save_timeout)
        self.limit = _positive("limit", limit)
        self._options = Options(
            workflow=workflow,
            args=args,
            runs=self.runs,
            workers=self.workers,
            concurrency=self.concurrency,
            store_factory=store_factory,
            answer=self.answer,
            lease_ttl=self.lease_ttl,
            poll_interval=self.poll_interval,
            slow=self.slow,
            downtime=self.downtime,
            save_timeout=self.save_timeout,
            limit=self.limit,
        )
        self._baselines: dict[int, Trial] = {}

    def answer(self, requests: Sequence[Request]) -> dict[str, Any]:
        """The responses to *requests*, from ``responses=``."""
        return answer_requests(self.responses, requests, "explore_workers()")

    def _trial(self, plan: WorkerPlan) -> Trial:
        fault = None if plan.fault is None else (plan.fault.kind, plan.fault.at)
        reference = None if fault is None else self.reference(plan.seed)
        trial = Trial(self._options, plan.seed, fault, reference)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                run_deterministic(trial.run, seed=plan.seed)
            except BaseExceptionGroup as group:
                misuse, rest = group.split(UsageError)
                if misuse is None or rest is not None:
                    raise
                raise _first(misuse) from None  # responses= lacks an answer
            gc.collect(1)  # young objects: the trial's
        trial.violations += sorted(
            {f"(e) {w.message}" for w in caught if "was never awaited" in str(w.message)}
        )
        return trial

    def _baseline(self, seed: int) -> Trial:
        if seed not in self._baselines:
            plan = WorkerPlan(seed)
            trial = self._trial(plan)
            if trial.violations:
                self._raise(plan, trial.violations, "the uninterrupted trial")
            self._baselines[seed] = trial
        return self._baselines[seed]

    def trial(self, plan: WorkerPlan) -> WorkerTrial:
        """Run one trial and say what it did (the writes the store took, the outcomes, ...).

        Never raises for a broken invariant: :attr:`WorkerTrial.violations`
        lists them. Raises :class:`UsageError` for a point the trial never
        reaches or where the fault's kind does not apply.
        """
        if not isinstance(plan, WorkerPlan):
            raise UsageError(f"trial() takes a WorkerPlan, not {plan!r}")
        if plan.fault is not None:
            self._check_point(plan)
        return self._trial(plan).report()

    def reference(self, seed: int = 0) -> dict[str, Outcome]:
        """Each run's outcome in the uninterrupted trial under *seed*."""
        return dict(self._baseline(seed).outcomes)

    def points(self, seed: int = 0) -> tuple[str, ...]:
        """The interleaving points of the uninterrupted trial under *seed*, in order."""
        return tuple(self._baseline(seed).points)

    def outcome(self, seed: int = 0) -> str:
        """The runs' outcomes in the uninterrupted trial under *seed*, described."""
        outcomes = self.reference(seed)
        described = sorted({str(o) for o in outcomes.values()})
        runs = f"{len(outcomes)} run{'' if len(outcomes) == 1 else 's'}"
        return f"{runs}: {'; '.join(described)}"

    def plans_for(self, seed: int, kinds: Iterable[str] = WORKER_FAULT_KINDS) -> list[WorkerPlan]:
        """Every single-fault plan for *seed*: each kind at each point where it applies."""
        wanted = tuple(kinds)
        return [
            WorkerPlan(seed, WorkerFault(kind, point))
            for point in self.points(seed)
            for kind in kinds_at(point)
            if kind in wanted
        ]

    def check(self, plan: WorkerPlan) -> None:
        """Run one trial; raise :class:`InvariantViolation` if an invariant broke."""
        if not isinstance(plan, WorkerPlan):
            raise UsageError(f"check() takes a WorkerPlan, not {plan!r}")
        if plan.fault is None:
            self._baseline(plan.seed)
            return
        self._check_point(plan)
        trial = self._trial(plan)
        if trial.violations:
            self._raise(plan, trial.violations, f"fault plan {plan}")

    def _check_point(self, plan: WorkerPlan) -> None:
        fault = plan.fault
        assert fault is not None
        known = self.points(plan.seed)
        if fault.at not in known:
            raise UsageError(
                f"the trial of {self.workflow.name} never reaches the point {fault.at!r} under "
                f"seed {plan.seed}; its points are: {', '.join(known)}"
            )
        if fault.kind not in kinds_at(fault.at):
            raise UsageError(
                f"a {fault.kind!r} fault does not apply at {fault.at!r}; there: "
                f"{', '.join(kinds_at(fault.at))}"
            )

    def run(
        self,
        *,
        seeds: int | Iterable[int] = 3,
        faults: Iterable[str | WorkerFault | WorkerPlan] = WORKER_FAULT_KINDS,
    ) -> Exploration:
        """Run every trial; raise :class:`InvariantViolation` at the first broken invariant."""
        seed_list = check_seeds(seeds)
        kinds: list[str] = []
        plans: list[WorkerPlan] = []
        for fault in [faults] if isinstance(faults, str) else faults:
            if isinstance(fault, WorkerPlan):
                plans.append(fault)
            elif isinstance(fault, WorkerFault):
                plans += [WorkerPlan(s, fault) for s in seed_list]
            elif isinstance(fault, str) and fault in WORKER_FAULT_KINDS:
                kinds.append(fault)
            elif isinstance(fault, str):
                plans += [WorkerPlan(s, WorkerFault.parse(fault)) for s in seed_list]
            else:
                raise UsageError(
                    f"faults= takes fault kinds ({', '.join(WORKER_FAULT_KINDS)}), 'kind@point' "
                    f"strings, WorkerFaults or WorkerPlans, not {fault!r}"
                )
        first = self.reference(seed_list[0])
        for seed in seed_list:
            for run_id, got in self.reference(seed).items():
                if not got.same_as(first[run_id]):
                    self._raise(
                        WorkerPlan(seed),
                        [
                            f"(w1) run {run_id} {got} under seed {seed} but {first[run_id]} "
                            f"under seed {seed_list[0]}: the outcome depends on the schedule"
                        ],
                        "the uninterrupted trial",
                    )
        for plan in plans:
            if plan.fault is not None:
                self._check_point(plan)
        plans += [plan for seed in seed_list if kinds for plan in self.plans_for(seed, kinds)]
        for plan in plans:
            self.check(plan)
        return Exploration(
            trials=len(plans) + len(seed_list),
            points={s: self.points(s) for s in seed_list},
            outcome=self.outcome(seed_list[0]),
        )

    # -- reporting -------------------------------------------------------------------------

    def _repro(self, plan: WorkerPlan) -> str:
        args = "".join(f", {a!r}" for a in self.args)
        extra = ""
        defaults = inspect.signature(WorkerExplorer).parameters
        for name in _OPTIONS:
            value = self._downtime_given if name == "downtime" else getattr(self, name)
            if value != defaults[name].default:
                extra += f", {name}={value!r}"
        if self.store_factory is not MemoryStore:
            extra += f", store_factory={_name(self.store_factory)}"
        if isinstance(self.responses, Mapping):
            extra += f", responses={dict(self.responses)!r}"
        elif self.responses is not None:
            extra += ", responses=..."
        faults = f"[{str(plan.fault)!r}]" if plan.fault is not None else "[]"
        return (
            f"tether.testing.explore_workers({_name(self.workflow.fn)}{args}, "
            f"seeds=[{plan.seed}], faults={faults}{extra})"
        )

    def _raise(self, plan: WorkerPlan, problems: list[str], what: str) -> None:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise InvariantViolation(
            f"workflow {self.workflow.name} on {self.workers} workers: {what} broke an "
            f"invariant:\n{lines}\n"
            f"seed {plan.seed}, fault: {plan.fault or 'none'}\n"
            f"reproduce: {self._repro(plan)}",
            plan,
        )


def explore_workers(
    workflow: Workflow[..., Any],
    *args: Any,
    runs: int = 2,
    workers: int = 2,
    seeds: int | Iterable[int] = 3,
    faults: Iterable[str | WorkerFault | WorkerPlan] = WORKER_FAULT_KINDS,
    store_factory: Callable[[], Store] = MemoryStore,
    responses: Mapping[str, Any] | Callable[[Request], Any] | None = None,
    concurrency: int = 2,
    lease_ttl: float = 1.0,
    poll_interval: float = 1.0,
    slow: float = 1.0,
    downtime: float | None = None,
    save_timeout: float = 30.0,
    limit: float = 600.0,
) -> Exploration:
    """Run ``workflow(*args)`` *runs* times on *workers* simulated workers, with faults; check.

    For each seed, one trial without faults learns the interleaving points
    (every store call of every process: claims, loads, saves, record writes,
    renewals, submits; and, once a write landed, the moment before its
    caller hears back), then one trial per point and fault kind that applies
    there. A trial: a fresh store from *store_factory*, shared by *workers*
    worker processes (each an engine with :func:`tether.open_worker`) and a
    submitter, which submits the runs and waits for each one's outcome,
    answering requests (from *responses*) through a worker's engine. Each
    trial is a ``trio.run`` of its own under :func:`run_deterministic`
    (virtual time, seeded schedule), so it is reproducible from its seed
    and fault.

    A synchronous function: call it from a plain (not ``async``) test.

    Fault kinds (``faults=``; or ``"kind@point"`` strings, or
    :class:`WorkerPlan`\\ s):

    ``crash``
        the worker process dies at the point (at a ``claimed:``,
        ``stored:`` or ``recorded:`` point: its write landed, it never
        heard back): its tasks stop and its store takes nothing more. It
        releases nothing: its leases must expire and another worker take
        its runs over.
    ``pause``
        the worker process stops past its lease: this call and all its
        other calls (renewals too) wait; the call lands late, after
        ``lease_ttl + slow`` seconds and once the runs it held were taken
        over, and must be refused by fencing.
    ``restart``
        the store restarts: it is closed once no call is in it, stays down
        *downtime* seconds (calls meanwhile fail with a transient error and
        are retried), and is opened again.
    ``lost_notification``
        the change notification of the write that landed at the point is
        lost, for every process: workers must pick the change up by polling.

    Invariants, checked after each trial (a violation names its tag):

    ``(w1)``
        every submitted run completes exactly once: the outcome
        ``engine.wait`` returns is the uninterrupted trial's, and exactly one
        final status write of it landed;
    ``(w2)``
        no stored step runs again: no step starts executing while its
        record is stored, and each journal holds one record per step;
    ``(w3)``
        no write lands from a worker after its run was taken over: every
        entry and record write that landed after a claim carries that
        claim's token (in the order the store took them), and tokens never
        go down along a journal;
    ``(w4)``
        a run is claimed from another worker only once that worker's lease
        expired (one owner at a time).

    The store must measure lease expiry on Trio's clock, as
    :class:`tether.MemoryStore` does (the default), so that virtual time
    expires leases.

    Args:
        workflow: a ``@tether.workflow``; *args* are its arguments, for every run.
        runs: how many runs are submitted (ids ``run-0``, ``run-1``, ...).
        workers: how many worker processes share the store.
        seeds: how many seeds (0..n-1), or which.
        store_factory: makes a new, unopened store per trial.
        responses: answers for :func:`tether.ask` requests: a mapping from
            request key, or a function of the :class:`Request`.
        concurrency: each worker's ``open_worker(concurrency=)``.
        lease_ttl: the engines' ``lease_ttl`` (virtual seconds).
        poll_interval: the workers' ``poll_interval``.
        slow: how much longer than ``lease_ttl`` a pause lasts, at least.
        downtime: how long a restarting store is down (default
            ``lease_ttl + slow``: every lease expires meanwhile).
        save_timeout: the engines' ``save_timeout``.
        limit: virtual seconds a trial may take before the explorer declares
            it stuck.

    Returns:
        an :class:`Exploration` summary when no invariant broke.

    Raises:
        InvariantViolation: naming the invariant, the seed, the fault and a
            one-line reproduction.
        UsageError: invalid options, or a fault at a point the trial never
            reaches or where its kind does not apply.
    """
    explorer = WorkerExplorer(
        workflow,
        *args,
        runs=runs,
        workers=workers,
        store_factory=store_factory,
        responses=responses,
        concurrency=concurrency,
        lease_ttl=lease_ttl,
        poll_interval=poll_interval,
        slow=slow,
        downtime=downtime,
        save_timeout=save_timeout,
        limit=limit,
    )
    return explorer.run(seeds=seeds, faults=faults)
