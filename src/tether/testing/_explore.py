"""The explorer: inject one fault at every interleaving point of a workflow, resume, check.

Layer: testing (``tether.testing``).

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
``receive:KEY``
    ``tether.receive`` took a message from the run's mailbox and journaled
    it: the code after it goes on (not on replay; the append of that entry
    is ``save:KEY``, as for a step);
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

The parts: the fault vocabulary (:class:`Injection`, :class:`FaultPlan`,
where each kind applies) is :mod:`._explore_plan`; one trial, which injects
the faults, is :mod:`._explore_trial`; what each of its executions did and the
invariants checked on it, :mod:`._explore_execution`; the ownership faults,
:mod:`._explore_leases`. This module is the explorer that runs the trials and
reports a broken invariant with its reproduction.

Whole because :func:`explore` is long only for its docstring, the public
reference of every fault kind and option; its body builds an :class:`Explorer`
and runs it.
"""

from __future__ import annotations

import gc
import inspect
import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, final

from .._api._workflow import Workflow
from .._errors import InvariantViolation, Request, UsageError
from ..stores._memory import MemoryStore
from ..stores._store import Store
from ._deterministic import run_deterministic
from ._explore_execution import RUN_ID, Execution
from ._explore_plan import (
    FAULT_KINDS,
    Exploration,
    FaultPlan,
    Injection,
    answer_requests,
    check_applies,
    check_seeds,
    check_target,
    encode_messages,
    kinds_at,
)
from ._explore_trial import Trial

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

__all__ = ("Explorer", "explore")

#: The explorer's options a reproduction names when they are not the default.
_OPTIONS: Final = ("deadline", "slow", "save_timeout", "limit", "torn", "lease_ttl")


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
        messages: Sequence[tuple[str, Any]] = (),
        deadline: float = 1.0,
        slow: float = 1.0,
        save_timeout: float = 30.0,
        limit: float = 3600.0,
        torn: bool | None = None,
        lease_ttl: float = 2.0,
    ) -> None:
        check_target("explore()", workflow, store_factory)
        encoded = encode_messages(workflow, messages, "explore()", RUN_ID)
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
        self.messages = encoded
        self.deadline = float(deadline)
        self.slow = float(slow)
        self.save_timeout = float(save_timeout)
        self.limit = float(limit)
        self.torn = torn
        self.lease_ttl = float(lease_ttl)
        self._baselines: dict[int, list[Execution]] = {}

    def answer(self, requests: Sequence[Request]) -> dict[str, Any]:
        """The responses to *requests*, from ``responses=``."""
        return answer_requests(self.responses, requests, "explore()")

    # -- trials ------------------------------------------------------------------

    def _trial(self, plan: FaultPlan) -> tuple[Trial, list[str]]:
        trial = Trial(self, plan)
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

    def _baseline(self, seed: int) -> list[Execution]:
        if seed not in self._baselines:
            trial, problems = self._trial(FaultPlan(seed, ()))
            if trial.starved is not None:
                self._starved(trial.starved.messages)
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
                check_applies(injection)
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
                for kind in kinds_at(point):
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
            [Injection(kind, point) for point in points for kind in kinds_at(point)]
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
        seed_list = check_seeds(seeds)
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
                check_applies(injection)

    # -- reporting ---------------------------------------------------------------

    def _starved(self, names: Sequence[str]) -> None:
        """Refuse a workflow whose uninterrupted run waits for messages never sent.

        Raises:
            UsageError: always, saying how to send them.
        """
        given = {n for n, _ in self.messages}
        sent = ", ".join(sorted(given)) or "none"
        pairs = ", ".join(f"({n!r}, ...)" for n in names)
        never = [n for n in names if n not in given]
        short = [n for n in names if n in given]
        if not short:
            why = f"which explore() never sends (it sends: {sent})"
        else:
            fewer = ", ".join(map(repr, short))
            why = f"of which explore() sends fewer than the run receives ({fewer})"
            why += f" or none ({', '.join(map(repr, never))})" if never else ""
        raise UsageError(
            f"workflow {self.workflow.name}: the uninterrupted run waits in tether.receive for "
            f"message {', '.join(map(repr, names))}, {why}; pass the messages the run "
            "receives, in the order they are sent: "
            f"explore(..., messages=[{pairs}]); they are sent to the run as it is created"
        )

    def _repro(self, plan: FaultPlan, seeds: list[int]) -> str:
        fn = self.workflow.fn
        target = f"{fn.__module__}.{fn.__qualname__}"
        args = "".join(f", {a!r}" for a in self.args)
        extra = ""
        if self.store_factory is not MemoryStore:
            extra += ", store_factory=..."
        if self.responses is not None:
            extra += ", responses=..."
        if self.messages:
            extra += ", messages=..."
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


def explore(
    workflow: Workflow[..., Any],
    *args: Any,
    store_factory: Callable[[], Store] = MemoryStore,
    seeds: int | Iterable[int] = 3,
    faults: Iterable[str | Injection | FaultPlan] = FAULT_KINDS,
    responses: Mapping[str, Any] | Callable[[Request], Any] | None = None,
    messages: Sequence[tuple[str, Any]] = (),
    deadline: float = 1.0,
    slow: float = 1.0,
    save_timeout: float = 30.0,
    limit: float = 3600.0,
    torn: bool | None = None,
    lease_ttl: float = 2.0,
) -> Exploration:
    """Inject faults at every interleaving point of ``workflow(*args)``; check the invariants.

    For each seed, runs the workflow once uninterrupted (answering its
    requests from *responses*, its receives from *messages*) to learn its
    interleaving points, then runs
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
        messages: ``(name, value)`` pairs for :func:`tether.receive`: sent to the
            run, in this order, as soon as it is created (before its code runs),
            checked and encoded as ``engine.send`` would; every trial's run
            gets them all.
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
        UsageError: an option is wrong: a message the workflow does not declare
            (or whose value does not fit), a request *responses* does not
            answer, or an uninterrupted run that waits in ``tether.receive``
            for a message *messages* does not hold (saying how to give it).
        InvariantViolation: naming the invariant, the seed, the fault plan
            and a one-line reproduction.
    """
    explorer = Explorer(
        workflow,
        *args,
        store_factory=store_factory,
        responses=responses,
        messages=messages,
        deadline=deadline,
        slow=slow,
        save_timeout=save_timeout,
        limit=limit,
        torn=torn,
        lease_ttl=lease_ttl,
    )
    return explorer.run(seeds=seeds, faults=faults)
