"""The worker explorer: clean on the example workflows, its faults do what they say, and it
catches planted store bugs with a one-line reproduction that fails again.

The planted bugs are small ``MemoryStore`` subclasses: a claim that ignores a
live lease, an append that ignores fencing tokens, a journal that forgets
its entries once a run is taken over.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Collection, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

import tether
from tether.stores import Entry, RunRecord, RunStatus, Served
from tether.testing import (
    WORKER_FAULT_KINDS,
    WorkerExplorer,
    WorkerFault,
    WorkerPlan,
    WorkerTrial,
    explore_workers,
)
from tether.testing._explore_workers import kinds_at

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "shop"))
import shop  # the example project's workflows

REFUND_ANSWERS = {"ask#0": {"approved": True, "note": "ok"}}

#: The example workflows tests/test_explore.py explores: (workflow, args, keywords).
EXAMPLES: dict[str, tuple[tether.Workflow[..., Any], tuple[Any, ...], dict[str, Any]]] = {
    "sequential": (shop.checkout, ("o-1",), {}),
    "fan-out-with-failure": (shop.reserve_all, (["lamp", "ghost", "desk"],), {}),
    "ask": (shop.approve_refund, ("o-2", 500), {"responses": REFUND_ANSWERS}),
    "stream": (shop.daily_report, ("mon",), {}),
}


def _explore_cleanly(name: str, workers: int, seeds: list[int]) -> None:
    workflow, args, keywords = EXAMPLES[name]
    explorer = WorkerExplorer(workflow, *args, workers=workers, **keywords)
    report = explorer.run(seeds=seeds)  # every kind at every point: no violation
    plans = [plan for seed in seeds for plan in explorer.plans_for(seed)]
    assert report.trials == len(seeds) + len(plans)
    assert {p.fault.kind for p in plans if p.fault is not None} == set(WORKER_FAULT_KINDS)
    for seed in seeds:
        points = report.points[seed]
        assert {p.partition("/")[0] for p in points} == {"submitter"} | {
            f"w{i}" for i in range(workers)
        }
        # Every point a kind applies at got a trial of that kind.
        assert sum(len(kinds_at(p)) for p in points) == len(explorer.plans_for(seed))


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_workflows_break_no_invariant(name: str, workers: int) -> None:
    _explore_cleanly(name, workers, [0])


@pytest.mark.slow
@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_workflows_break_no_invariant_under_more_seeds(name: str, workers: int) -> None:
    _explore_cleanly(name, workers, [1, 2])


def test_points_name_the_process_and_the_store_call() -> None:
    explorer = WorkerExplorer(shop.checkout, "o-1", runs=1)
    points = explorer.points(0)
    assert points[points.index("submitter/submit:run-0") + 1] == "submitter/submitted:run-0"
    owner = _owner(explorer)
    mine = [p.partition("/")[2] for p in points if p.startswith(f"{owner}/")]
    run = mine[mine.index("claimed:run-0") :]
    assert run.index("load:run-0") < run.index("save:run-0/load_order#0")
    assert run.index("save:run-0/load_order#0") + 1 == run.index("stored:run-0/load_order#0")
    assert run.index("save:run-0/charge#0") < run.index("record:run-0/completed")
    assert "renew" in run  # charge outlasts a third of lease_ttl
    assert "claim~2" in mine  # later occurrences are numbered
    assert explorer.outcome(0) == "1 run: returned 'payment-o-1-9949'"
    # Where each kind applies:
    assert kinds_at("w0/save:run-0/charge#0") == ("crash", "pause", "restart")
    assert kinds_at("w0/renew~3") == ("crash", "pause", "restart")
    assert kinds_at("w1/stored:run-0/charge#0") == ("crash",)
    assert kinds_at("w1/claimed:none~2") == ("crash",)
    assert kinds_at("w1/claimed:run-0") == ("crash", "lost_notification")
    assert kinds_at("w1/recorded:run-0/completed") == ("crash", "lost_notification")
    assert kinds_at("submitter/submit:run-0") == ("restart",)
    assert kinds_at("submitter/submitted:run-0") == ("lost_notification",)


# -- what each fault does -------------------------------------------------------------


def _owner(explorer: WorkerExplorer) -> str:
    """The worker that claims run-0 in the uninterrupted trial under seed 0."""
    return next(p for p in explorer.points(0) if p.endswith("/claimed:run-0")).partition("/")[0]


def _claims(trial: WorkerTrial, run_id: str = "run-0") -> list[tuple[str, int, float, float]]:
    """``(process, token, when, lease expiry)`` of each claim of *run_id* that landed."""
    return [
        (w.process, w.claimed, w.at, w.expires or 0.0)
        for w in trial.landed
        if w.run_id == run_id and w.claimed is not None
    ]


def _fault(explorer: WorkerExplorer, text: str) -> WorkerTrial:
    trial = explorer.trial(WorkerPlan(0, WorkerFault.parse(text)))
    assert trial.violations == ()
    assert trial.outcomes == {"run-0": "returned 'payment-o-1-9949'"}
    return trial


def test_a_crashed_workers_run_is_taken_over_once_its_lease_expired() -> None:
    explorer = WorkerExplorer(shop.checkout, "o-1", runs=1)
    owner = _owner(explorer)
    trial = _fault(explorer, f"crash@{owner}/stored:run-0/load_order#0")
    (first, token1, _, expired), (second, token2, at, _) = _claims(trial)
    assert (first, token1, token2) == (owner, 1, 2) and second != owner
    assert at >= expired  # waited for the lease: nobody released it
    saves = [w for w in trial.landed if w.method == "append"]
    # The crashed worker's one save stands and is replayed: load_order is not saved again.
    assert [(w.process, w.entries[0].key) for w in saves] == [
        (owner, "load_order#0"),
        (second, "price#0"),
        (second, "charge#0"),
    ]
    assert not [w for w in trial.landed if w.process == owner and w.at > saves[0].at]


def test_a_paused_workers_late_write_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    explorer = WorkerExplorer(shop.checkout, "o-1", runs=1)
    owner = _owner(explorer)
    with caplog.at_level(logging.WARNING, logger="tether.worker"):
        trial = _fault(explorer, f"pause@{owner}/save:run-0/charge#0")
    (_, _, _, expired), (second, token2, at, _) = _claims(trial)
    assert second != owner and token2 == 2 and at >= expired
    [late] = [r for r in trial.refused if r.process == owner and r.method == "append"]
    assert (late.run_id, late.error) == ("run-0", "LeaseLostError")
    [takeover] = [w for w in trial.landed if w.claimed == 2]
    assert late.order > takeover.order  # it reached the store after the takeover
    charges = [w for w in trial.landed if w.method == "append" and w.entries[0].key == "charge#0"]
    assert [(w.process, w.tokens) for w in charges] == [(second, (2,))]
    assert any(
        "LeaseLostError" in r.getMessage() and "run-0" in r.getMessage() for r in caplog.records
    )


def test_a_store_restart_makes_calls_wait_and_retry() -> None:
    explorer = WorkerExplorer(shop.checkout, "o-1", runs=1, downtime=2.5)
    owner = _owner(explorer)
    trial = _fault(explorer, f"restart@{owner}/save:run-0/price#0")
    assert trial.retries > 0
    went_down = next(w.at for w in trial.landed if w.method == "append")  # load_order's
    after = [w.at for w in trial.landed if w.at > went_down]
    assert min(after) >= went_down + 2.5  # nothing landed while it was down


def test_a_lost_notification_is_made_up_for_by_polling() -> None:
    explorer = WorkerExplorer(shop.checkout, "o-1", runs=1, poll_interval=0.75)
    baseline = explorer.trial(WorkerPlan(0))
    assert [at for _, _, at, _ in _claims(baseline)] == [0.0]  # at once: notified
    trial = _fault(explorer, "lost_notification@submitter/submitted:run-0")
    assert [at for _, _, at, _ in _claims(trial)] == [0.75]  # at the next poll


# -- planted bugs are caught ------------------------------------------------------------


class LeaseBlindStore(tether.MemoryStore):  # type: ignore[misc]  # final, but a test may
    """A ``claim_next`` that does not check the lease's expiry: it takes running runs whose
    owner's lease is live, as if every other owner were gone."""

    async def claim_next(
        self,
        owner: str,
        *,
        ttl: float,
        workflows: Collection[Served | str],
        max_dispatches: int,
        gone: Collection[str] = (),
        now: datetime | None = None,
    ) -> RunRecord | None:
        running = await self.list_runs(status=[RunStatus.RUNNING])
        others = {r.owner for r in running if r.owner not in (None, owner)}
        record: RunRecord | None = await super().claim_next(
            owner,
            ttl=ttl,
            workflows=workflows,
            max_dispatches=max_dispatches,
            gone={*gone, *others},
            now=now,
        )
        return record


class UnfencedAppendStore(tether.MemoryStore):  # type: ignore[misc]
    """An append that ignores fencing tokens: it stamps entries with the run's current one."""

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        run = await self.get_run(run_id)
        token = 0 if run is None else run.token
        stored: Sequence[Entry] = await super().append(
            run_id, [attrs.evolve(e, token=token) for e in entries]
        )
        return stored


class AmnesiacStore(tether.MemoryStore):  # type: ignore[misc]
    """Forgets a run's journal once the run was taken over (claimed a second time)."""

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        run = await self.get_run(run_id)
        if run is not None and run.token > 1:
            return []
        return await super().load_entries(run_id)


def _reproduction(message: str) -> str:
    lines = [line for line in message.splitlines() if line.startswith("reproduce: ")]
    assert len(lines) == 1, message
    return lines[0].removeprefix("reproduce: ")


def _replay(line: str) -> object:
    namespace = {"tether": tether, "shop": shop, "tests": sys.modules["tests"]}
    return eval(line, namespace)


@pytest.mark.parametrize(
    ("store", "invariant", "kinds"),
    [
        # Caught without a fault: two idle workers steal each other's runs.
        pytest.param(
            LeaseBlindStore,
            r"\(w4\) w\d claimed run run-\d .* two owners at once",
            {None},
            id="claim-ignores-live-lease",
        ),
        # Caught by a paused worker's late save.
        pytest.param(
            UnfencedAppendStore,
            r"\(w3\) w\d's append of .* a fenced write was not refused",
            {"pause"},
            id="append-ignores-tokens",
        ),
        # Caught by the first takeover (after a store restart, a pause or a crash).
        pytest.param(
            AmnesiacStore,
            r"\(w2\) step \S+ of run run-\d started in w\d .* was stored",
            {"crash", "pause", "restart"},
            id="journal-forgotten-on-takeover",
        ),
    ],
)
def test_planted_store_bugs_are_caught_with_a_reproduction(
    store: type[tether.MemoryStore], invariant: str, kinds: set[str | None]
) -> None:
    with pytest.raises(tether.InvariantViolation) as caught:
        explore_workers(shop.checkout, "o-1", store_factory=store, seeds=1)
    message = str(caught.value)
    assert re.search(invariant, message), message
    plan = caught.value.plan
    assert isinstance(plan, WorkerPlan)
    assert (None if plan.fault is None else plan.fault.kind) in kinds
    line = _reproduction(message)
    assert line.startswith("tether.testing.explore_workers(shop.checkout, 'o-1', seeds=[0], ")
    assert line.endswith(f", store_factory=tests.test_explore_workers.{store.__name__})")
    # The line, as printed, fails the same way again...
    with pytest.raises(tether.InvariantViolation) as again:
        _replay(line)
    assert str(again.value) == message
    # ...and passes on the real store.
    report = _replay(
        line.replace(f"tests.test_explore_workers.{store.__name__}", "tether.MemoryStore")
    )
    assert "no invariant broken" in str(report)


def test_the_lease_blind_claim_also_breaks_exactly_once() -> None:
    with pytest.raises(tether.InvariantViolation) as caught:
        explore_workers(shop.checkout, "o-1", store_factory=LeaseBlindStore, workers=3, seeds=[0])
    message = str(caught.value)
    # Runs stolen back and forth end as dead letters instead of completing.
    assert re.search(r"\(w1\) run run-\d got 0 final status writes .*dead_letter", message)
    assert message.startswith("workflow shop.checkout on 3 workers: the uninterrupted trial")
    assert ", workers=3, store_factory=" in _reproduction(message)


@tether.step
async def forgetful_step() -> int:
    trio.sleep(1)  # type: ignore[unused-coroutine]  # noqa: ASYNC105  (the bug: never awaited)
    return 1


@tether.workflow(name="tests.explore_workers.unawaited")
async def unawaited() -> int:
    return await forgetful_step()


def test_an_unawaited_coroutine_is_reported() -> None:
    with pytest.raises(tether.InvariantViolation, match=r"\(e\) coroutine 'sleep' was never"):
        explore_workers(unawaited, seeds=1, faults=[])


# -- misuse ------------------------------------------------------------------------------


def test_misuse_is_refused_with_a_clear_error() -> None:
    with pytest.raises(tether.UsageError, match=r"takes a @tether\.workflow"):
        explore_workers(shop.checkout.fn, "o-1")  # type: ignore[arg-type]
    with pytest.raises(tether.UsageError, match="workers must be an integer of at least 2"):
        explore_workers(shop.checkout, "o-1", workers=1)
    with pytest.raises(tether.UsageError, match="runs must be"):
        explore_workers(shop.checkout, "o-1", runs=0)
    with pytest.raises(tether.UsageError, match="lease_ttl must be a positive"):
        explore_workers(shop.checkout, "o-1", lease_ttl=0)
    with pytest.raises(tether.UsageError, match="seeds must be"):
        explore_workers(shop.checkout, "o-1", seeds=[])
    with pytest.raises(tether.UsageError, match="unknown worker fault kind 'explode'"):
        explore_workers(shop.checkout, "o-1", faults=["explode@w0/claim"])
    with pytest.raises(tether.UsageError, match="kind@point"):
        WorkerFault.parse("crash")
    with pytest.raises(tether.UsageError, match="faults= takes fault kinds"):
        explore_workers(shop.checkout, "o-1", faults=[3])  # type: ignore[list-item]
    with pytest.raises(tether.UsageError, match=r"never reaches the point 'w0/save:run-0/chrage"):
        explore_workers(shop.checkout, "o-1", seeds=[0], faults=["crash@w0/save:run-0/chrage#0"])
    with pytest.raises(tether.UsageError, match=r"'pause' fault does not apply at 'submitter/"):
        explore_workers(shop.checkout, "o-1", seeds=[0], faults=["pause@submitter/submit:run-0"])
    with pytest.raises(tether.UsageError, match=r"asks ask#0 .*pass responses="):
        explore_workers(shop.approve_refund, "o-2", 500, seeds=[0], faults=[])
    with pytest.raises(tether.UsageError, match=r"trial\(\) takes a WorkerPlan"):
        WorkerExplorer(shop.checkout, "o-1").trial("crash@w0/claim")  # type: ignore[arg-type]
