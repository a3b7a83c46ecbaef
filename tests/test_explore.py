"""The explorer: clean on the example workflows, and it catches planted engine bugs.

The planted bugs are source mutations of the real engine (``mutant``): each
test swaps one method of ``RunState`` for a copy with one line changed, so
the explorer is tested against exactly the mistake it is meant to catch.
"""

from __future__ import annotations

import inspect
import re
import sys
import textwrap
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, find, settings

import tether
from tether import _context
from tether.stores import Entry, RunRecord
from tether.testing import (
    FAULT_KINDS,
    Explorer,
    FaultPlan,
    InjectedFailure,
    Injection,
    explore,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "shop"))
import shop  # the example project's workflows

REFUND_ANSWERS = {"ask#0": {"approved": True, "note": "ok"}}

#: The project's example workflows: (workflow, args, explore() keywords).
EXAMPLES: dict[str, tuple[tether.Workflow[..., Any], tuple[Any, ...], dict[str, Any]]] = {
    "sequential": (shop.checkout, ("o-1",), {}),
    "fan-out-with-failure": (shop.reserve_all, (["lamp", "ghost", "desk"],), {}),
    "ask": (shop.approve_refund, ("o-2", 500), {"responses": REFUND_ANSWERS}),
    "stream": (shop.daily_report, ("mon",), {}),
}


@contextmanager
def mutant(method: str, old: str, new: str) -> Iterator[None]:
    """``RunState.<method>`` with the lines *old* replaced by *new*, for the block.

    *old* matches whole lines, ignoring their indentation; *new* is indented
    like the first of them.
    """
    original = getattr(_context.RunState, method)
    lines = textwrap.dedent(inspect.getsource(original)).splitlines()
    wanted = [line.strip() for line in textwrap.dedent(old).splitlines()]
    starts = [
        i
        for i in range(len(lines))
        if [line.strip() for line in lines[i : i + len(wanted)]] == wanted
    ]
    assert len(starts) == 1, f"RunState.{method} no longer contains {old!r} once"
    [i] = starts
    indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
    replacement = [indent + line for line in textwrap.dedent(new).splitlines()]
    lines[i : i + len(wanted)] = replacement
    code = compile(
        "from __future__ import annotations\n" + "\n".join(lines) + "\n",
        f"<mutant RunState.{method}>",
        "exec",
    )
    namespace: dict[str, Any] = {}
    exec(code, vars(_context), namespace)
    setattr(_context.RunState, method, namespace[method])
    try:
        yield
    finally:
        setattr(_context.RunState, method, original)


# -- clean runs ------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_workflows_break_no_invariant(name: str) -> None:
    workflow, args, keywords = EXAMPLES[name]
    report = explore(workflow, *args, seeds=3, **keywords)
    points = report.points[0]
    assert report.trials > 3 * len(points)  # every kind that applies, at every point
    assert any(p.startswith("start:") for p in points)
    assert any(p.startswith("stored:") for p in points)


def test_points_name_steps_saves_records_and_asks() -> None:
    explorer = Explorer(shop.approve_refund, "o-2", 500, responses=REFUND_ANSWERS)
    assert explorer.points(0) == (
        (
            "record:created",
            "start:load_order#0",
            "save:load_order#0",
            "stored:load_order#0",
            "record:paused",
        ),
        (
            "record:running",
            "save:ask#0",
            "stored:ask#0",
            "start:refund#0",
            "save:refund#0",
            "stored:refund#0",
            "record:completed",
        ),
    )
    assert explorer.outcome(0) == "returned 'refund-o-2-500'"


def test_a_fault_plan_replays_one_trial() -> None:
    explorer = Explorer(shop.checkout, "o-1")
    plan = FaultPlan.parse(4, "crash@stored:price#0 then cancel@start:charge#0")
    assert plan.injections == (
        Injection("crash", "stored:price#0"),
        Injection("cancel", "start:charge#0"),
    )
    assert str(plan) == "seed 4: crash@stored:price#0 then cancel@start:charge#0"
    explorer.check(plan)
    # ...and through explore(): strings, Injections and plans.
    assert explore(shop.checkout, "o-1", seeds=[4], faults=[plan.faults]).trials == 2
    assert explore(shop.checkout, "o-1", seeds=[1, 2], faults=[plan]).trials == 3


def test_single_fault_plans_cover_every_point_and_kind() -> None:
    explorer = Explorer(shop.checkout, "o-1")
    plans = explorer.plans_for(0)
    injected = {str(p.injections[-1]) for p in plans}
    assert "hang@save:charge#0" in injected
    assert "store_error@stored:charge#0" in injected
    assert "fail@start:price#0" in injected
    assert "crash@record:completed" in injected
    assert "fail@record:created" not in injected  # no sibling to fail yet
    assert {str(p.injections[-1]).partition("@")[0] for p in plans} == set(FAULT_KINDS)
    assert len(explorer.plans_for(0, ["crash"])) == len(explorer.points(0)[0])


# -- planted bugs are caught, with a seed that reproduces them --------------------


boxes: dict[str, list[int]] = {}


@tether.step
async def fill(tag: str) -> list[int]:
    box: list[int] = [1]
    boxes[tag] = box  # shared with the sibling, which changes it later
    return box


@tether.step
async def poke(tag: str) -> int:
    await trio.lowlevel.checkpoint()
    boxes.get(tag, []).append(99)  # after fill returned: too late to matter
    return 0


@tether.workflow(name="tests.explore.race")
async def race(tag: str) -> list[int]:
    async with tether.parallel() as p:
        box = p.start_soon(fill, tag)
        p.start_soon(poke, tag)
    return box.result


PLANTED = {
    "unshielded save": (
        "tracked_scope",
        "shield=not self.caller_cancelled, deadline=trio.current_time() + seconds",
        "shield=False, deadline=trio.current_time() + seconds",
        "(c)",
    ),
    "save ignores caller cancellation": (
        "cancel_by_caller",
        """\
            scope.shield = False
            scope.cancel()
        """,
        """\
            pass
        """,
        "(b)",
    ),
    "snapshot after scheduling": (
        "_run_step",
        """\
            text, decoded = codec.snapshot(
        """,
        """\
            await trio.lowlevel.checkpoint()
            text, decoded = codec.snapshot(
        """,
        "(d)",
    ),
}


def _reproduction(message: str) -> tuple[list[int], list[str]]:
    match = re.search(r"seeds=(\[[\d, ]+\]), faults=(\[.*?\])\)$", message, re.M)
    assert match, message
    seeds: list[int] = eval(match.group(1))
    faults: list[str] = eval(match.group(2))
    return seeds, faults


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_planted_bugs_are_caught_with_a_reproducible_seed(bug: str) -> None:
    method, old, new, invariant = PLANTED[bug]
    workflow, args = (race, ("x",)) if "snapshot" in bug else (shop.checkout, ("o-1",))
    with mutant(method, old, new):
        with pytest.raises(tether.InvariantViolation) as caught:
            explore(workflow, *args, seeds=3)
        message = str(caught.value)
        assert invariant in message
        assert "reproduce: tether.testing.explore(" in message
        seeds, faults = _reproduction(message)
        # The one-line reproduction breaks it again, alone...
        with pytest.raises(tether.InvariantViolation) as again:
            explore(workflow, *args, seeds=seeds, faults=faults)
        assert again.value.plan == caught.value.plan
    # ...and the real engine passes the same trial.
    explore(workflow, *args, seeds=seeds, faults=faults)


def test_a_replay_that_reruns_stored_steps_breaks_invariant_a() -> None:
    rerun = pytest.raises(tether.InvariantViolation, match=r"\(a\) step load_order#0 ran again")
    with mutant("execute_step", "entry = self.journal.get(key)", "entry = None"), rerun:
        explore(shop.checkout, "o-1", seeds=1, faults=["crash"])


class ForgetfulStore(tether.MemoryStore):  # type: ignore[misc]  # final, but a test may
    """Loses the first journal entry of a run once the run is resumed."""

    def __init__(self) -> None:
        super().__init__()
        self.resumed = False

    async def claim(
        self,
        run_id: str,
        owner: str,
        *,
        ttl: float,
        create: RunRecord | None = None,
        takeover: int | None = None,
    ) -> RunRecord:
        self.resumed |= await super().get_run(run_id) is not None  # claims a stored run
        record: RunRecord = await super().claim(
            run_id, owner, ttl=ttl, create=create, takeover=takeover
        )
        return record

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        entries = await super().load_entries(run_id)
        return entries[1:] if self.resumed else entries


def test_a_store_that_loses_records_breaks_invariant_c() -> None:
    with pytest.raises(tether.InvariantViolation, match=r"\(c\) entry seq 1 \(load_order#0\)"):
        explore(shop.checkout, "o-1", store_factory=ForgetfulStore, seeds=1, faults=["fail"])


@tether.step
async def forgetful_step() -> int:
    trio.sleep(1)  # type: ignore[unused-coroutine]  # noqa: ASYNC105  (the bug: never awaited)
    return 1


@tether.workflow(name="tests.explore.unawaited")
async def unawaited() -> int:
    return await forgetful_step()


def test_an_unawaited_coroutine_breaks_invariant_e() -> None:
    with pytest.raises(tether.InvariantViolation, match=r"\(e\) coroutine 'sleep' was never"):
        explore(unawaited, seeds=1, faults=[])


@tether.step
async def leak() -> int:
    trio.lowlevel.spawn_system_task(trio.sleep_forever, name="leaked")
    return 1


@tether.workflow(name="tests.explore.leak")
async def leaky() -> int:
    return await leak()


def test_a_task_left_running_breaks_invariant_e() -> None:
    with pytest.raises(tether.InvariantViolation, match=r"\(e\) tasks outlived .*: leaked"):
        explore(leaky, seeds=1, faults=[])


# -- Hypothesis ----------------------------------------------------------------------


@pytest.mark.slow
def test_hypothesis_shrinks_a_failing_plan_to_one_fault() -> None:
    explorer = Explorer(shop.reserve_all, ["lamp", "ghost", "desk"])

    def breaks(plan: FaultPlan) -> bool:
        try:
            explorer.check(plan)
        except tether.InvariantViolation:
            return True
        return False

    method, old, new, _ = PLANTED["unshielded save"]
    with mutant(method, old, new):
        smallest = find(
            explorer.plans(max_faults=3),
            breaks,
            settings=settings(
                max_examples=2000, database=None, suppress_health_check=list(HealthCheck)
            ),
        )
    assert smallest.seed == 0
    assert len(smallest.injections) == 1
    [injection] = smallest.injections
    assert injection is not None and injection.kind == "fail"


# -- misuse -----------------------------------------------------------------------


def test_misuse_is_refused_with_a_clear_error() -> None:
    with pytest.raises(tether.UsageError, match=r"takes a @tether\.workflow"):
        explore(shop.checkout.fn, "o-1")  # type: ignore[arg-type]
    with pytest.raises(tether.UsageError, match="unknown fault kind 'explode'"):
        explore(shop.checkout, "o-1", faults=["explode@save:x#0"])
    with pytest.raises(tether.UsageError, match="faults= takes fault kinds"):
        explore(shop.checkout, "o-1", faults=[3])  # type: ignore[list-item]
    with pytest.raises(tether.UsageError, match="seeds must be"):
        explore(shop.checkout, "o-1", seeds=[])
    with pytest.raises(tether.UsageError, match="deadline must be a positive"):
        explore(shop.checkout, "o-1", deadline=0)
    with pytest.raises(tether.UsageError, match=r"asks ask#0 .*pass responses="):
        explore(shop.approve_refund, "o-2", 500)
    with pytest.raises(tether.UsageError, match="kind@point"):
        FaultPlan.parse(0, "crash")
    with pytest.raises(tether.UsageError, match=r"cannot simulate a torn write"):
        explore(shop.checkout, "o-1", torn=True)
    with pytest.raises(tether.UsageError, match=r"never reaches the point 'save:chrage#0'"):
        explore(shop.checkout, "o-1", faults=["crash@save:chrage#0"])
    with pytest.raises(tether.UsageError, match=r"'fail' fault does not apply at 'record:created'"):
        explore(shop.checkout, "o-1", faults=["fail@record:created"])


def test_injected_failures_are_plain_exceptions() -> None:
    assert issubclass(InjectedFailure, Exception)
    assert issubclass(tether.InvariantViolation, AssertionError)
