"""The explorer: clean on the example workflows, and it catches planted engine bugs.

The planted bugs are source mutations of the real engine and store
(``mutant``): each test swaps one function (a method of the run's ``Saver``,
of the ``Execution``, of ``MemoryStore``, of the engine's ``Leases``, a step
call, or a lease rule as the memory store imports it) for a copy with one line
changed, so the explorer is tested against exactly the mistake it is meant to
catch.
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
from tether._api import _parallel, _steps
from tether._core import _saver, _shields
from tether._engine import _ownership
from tether.stores import Entry, RunRecord, _memory
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
#: The courier's two scans shop.deliver receives, in the order sent.
SCANS = [("scanned", "at the depot"), ("scanned", "at the door")]

#: The project's example workflows: (workflow, args, explore() keywords).
EXAMPLES: dict[str, tuple[tether.Workflow[..., Any], tuple[Any, ...], dict[str, Any]]] = {
    "sequential": (shop.checkout, ("o-1",), {}),
    "fan-out-with-failure": (shop.reserve_all, (["lamp", "ghost", "desk"],), {}),
    "ask": (shop.approve_refund, ("o-2", 500), {"responses": REFUND_ANSWERS}),
    "stream": (shop.daily_report, ("mon",), {}),
    "messages": (shop.deliver, ("o-4",), {"messages": SCANS}),
}


@contextmanager
def mutant(owner: Any, name: str, old: str, new: str) -> Iterator[None]:
    """``owner.<name>`` with the lines *old* replaced by *new*, for the block.

    *owner* is a class (a method is replaced) or a module (a function it
    uses, maybe imported from another module: replaced where *owner* looks
    it up). The copy is compiled in the original's own globals. *old*
    matches whole lines, ignoring their indentation; *new* is indented like
    the first of them.
    """
    original = getattr(owner, name)
    where = f"{getattr(owner, '__name__', owner)}.{name}"
    lines = textwrap.dedent(inspect.getsource(original)).splitlines()
    wanted = [line.strip() for line in textwrap.dedent(old).splitlines()]
    starts = [
        i
        for i in range(len(lines))
        if [line.strip() for line in lines[i : i + len(wanted)]] == wanted
    ]
    assert len(starts) == 1, f"{where} no longer contains {old!r} once"
    [i] = starts
    indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
    replacement = [indent + line for line in textwrap.dedent(new).splitlines()]
    lines[i : i + len(wanted)] = replacement
    code = compile(
        "from __future__ import annotations\n" + "\n".join(lines) + "\n",
        f"<mutant {where}>",
        "exec",
    )
    namespace: dict[str, Any] = {}
    exec(code, original.__globals__, namespace)
    setattr(owner, name, namespace[name])
    try:
        yield
    finally:
        setattr(owner, name, original)


# -- clean runs ------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_workflows_break_no_invariant(name: str) -> None:
    workflow, args, keywords = EXAMPLES[name]
    explorer = Explorer(workflow, *args, **keywords)
    report = explorer.run(seeds=3)  # what explore() does, by default with every kind
    points = report.points[0]
    # Every kind that applies, at every point of every execution, per seed:
    plans = [plan for seed in range(3) for plan in explorer.plans_for(seed)]
    assert report.trials == 3 + len(plans) > 3 * len(points)
    assert {str(plan.injections[-1]).partition("@")[0] for plan in plans} == set(FAULT_KINDS)
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


def test_an_append_of_several_records_reaches_a_point_per_record() -> None:
    # lamp and desk complete at the same moment: their records go to the store
    # in one append, which reaches save:KEY for each, then stored:KEY for each.
    explorer = Explorer(shop.reserve_all, ["lamp", "desk"])
    [points] = explorer.points(0)
    saves = [p for p in points if p.startswith(("save:", "stored:"))]
    assert sorted(saves[:2]) == ["save:reserve#0", "save:reserve#1"]
    assert sorted(saves[2:]) == ["stored:reserve#0", "stored:reserve#1"]
    # A fault at either point applies to the whole append: both records.
    for point in saves[:2]:
        explore(shop.reserve_all, ["lamp", "desk"], seeds=[0], faults=[f"crash@{point}"])


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


OWNERSHIP = ["lease_lost", "pause", "race"]


def test_ownership_faults_apply_at_every_write_and_claim() -> None:
    # lease_lost and pause where the owner writes holding its lease; race there
    # and at each execution's claim (record:created for engine.run,
    # record:running for engine.resume).
    explorer = Explorer(shop.approve_refund, "o-2", 500, responses=REFUND_ANSWERS)
    assert [plan.faults for plan in explorer.plans_for(0, OWNERSHIP)] == [
        "race@record:created",
        "lease_lost@save:load_order#0",
        "pause@save:load_order#0",
        "race@save:load_order#0",
        "lease_lost@record:paused",
        "pause@record:paused",
        "race@record:paused",
        "- then race@record:running",
        "- then lease_lost@save:ask#0",
        "- then pause@save:ask#0",
        "- then race@save:ask#0",
        "- then lease_lost@save:refund#0",
        "- then pause@save:refund#0",
        "- then race@save:refund#0",
        "- then lease_lost@record:completed",
        "- then pause@record:completed",
        "- then race@record:completed",
    ]
    # ...and every one of them breaks nothing, under three seeds.
    report = explore(
        shop.approve_refund, "o-2", 500, seeds=3, faults=OWNERSHIP, responses=REFUND_ANSWERS
    )
    assert report.trials == 3 + 3 * 17


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


Saver = _saver.Saver

#: bug: (where, function, the line(s), changed to, the invariant that catches it)
PLANTED: dict[str, tuple[Any, str, str, str, str]] = {
    # An inline save (a sequential step's, when no other save is in flight).
    "unshielded save": (
        Saver,
        "tracked_scope",
        "shield=not self.caller_cancelled, deadline=trio.current_time() + seconds",
        "shield=False, deadline=trio.current_time() + seconds",
        "(c)",
    ),
    "save ignores caller cancellation": (
        Saver,
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
    # A task parked for its saves: a parallel() block waiting for its
    # children's records, or a step queued behind a save in flight.
    "parked wait unshielded": (
        _shields.Parked,
        "abort",
        "if saver.caller_cancelled:",
        "if True:",
        "(c)",
    ),
    "block exits before its records": (
        _parallel.Parallel,
        "__aexit__",
        "if self._unsaved and not saver.caller_cancelled:",
        "if False:",
        "(c)",
    ),
    "snapshot after scheduling": (
        _parallel,  # where a parallel() child's step call looks it up
        "execute_step",
        """\
            decoded, entries = _entries(
        """,
        """\
            await trio.lowlevel.checkpoint()
            decoded, entries = _entries(
        """,
        "(d)",
    ),
    # -- one owner at a time ---------------------------------------------------
    "append not fenced": (
        _memory.MemoryStore,
        "append_nowait",
        "check_append(run_id, entries, token=run.token, owner=run.owner)",
        "pass",
        "(f)",
    ),
    "run record write not fenced": (
        _memory,
        "fenced_update",
        "if not _fenced(current.token, current.owner, incoming.token):",
        "if False:",
        "(f)",
    ),
    "claim ignores a live lease": (
        _memory,
        "decide_claim",
        "if live and current.owner != owner:",
        "if False:",
        "(f)",
    ),
    "renewal without a deadline": (
        _ownership.Leases,
        "_renew",
        "with trio.move_on_at(self._confirmed + self.ttl):",
        "if True:",
        "(f)",
    ),
}


#: the workflow each planted bug is explored on, when not shop.checkout (sequential)
WORKFLOW_FOR: dict[str, tuple[tether.Workflow[..., Any], tuple[Any, ...]]] = {
    "snapshot after scheduling": (race, ("x",)),
    "parked wait unshielded": (shop.reserve_all, (["lamp", "ghost", "desk"],)),
    "block exits before its records": (shop.reserve_all, (["lamp", "ghost", "desk"],)),
}


def _reproduction(message: str) -> tuple[list[int], list[str]]:
    match = re.search(r"seeds=(\[[\d, ]+\]), faults=(\[.*?\])\)$", message, re.M)
    assert match, message
    seeds: list[int] = eval(match.group(1))
    faults: list[str] = eval(match.group(2))
    return seeds, faults


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_planted_bugs_are_caught_with_a_reproducible_seed(bug: str) -> None:
    owner, name, old, new, invariant = PLANTED[bug]
    workflow, args = WORKFLOW_FOR.get(bug, (shop.checkout, ("o-1",)))
    with mutant(owner, name, old, new):
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


def test_a_store_that_does_not_fence_appends_breaks_invariant_f() -> None:
    # The planted bug: MemoryStore.append without its fencing check.
    reproduction = (
        "tether.testing.explore(shop.checkout, 'o-1', seeds=[0], "
        "faults=['lease_lost@save:load_order#0'])"
    )
    with mutant(*PLANTED["append not fenced"][:4]):
        with pytest.raises(tether.InvariantViolation) as caught:
            explore(shop.checkout, "o-1", seeds=3)
        lines = str(caught.value).splitlines()
        assert lines[0] == (
            "workflow shop.checkout: fault plan seed 0: lease_lost@save:load_order#0 broke "
            "an invariant:"
        )
        assert lines[1] == (
            "  - (f) entry seq 1 (load_order#0) was stored with the old owner's token 1 after "
            "another owner had taken the run over with token 2 at t=0.1 (execution 0 (first "
            "run)): a fenced write was not refused"
        )
        assert lines[-1] == f"reproduce: {reproduction}"
        # The line itself, as printed, replays it.
        with pytest.raises(tether.InvariantViolation) as again:
            eval(reproduction, {"tether": tether, "shop": shop})
        assert str(again.value) == str(caught.value)
        # A reproduction names the options that differ from the defaults.
        with pytest.raises(tether.InvariantViolation, match=r", lease_ttl=3\.0\)$"):
            explore(shop.checkout, "o-1", seeds=[0], faults=["lease_lost"], lease_ttl=3.0)
    eval(reproduction, {"tether": tether, "shop": shop})  # the real store refuses it


@tether.step
async def note(text: str) -> str:
    await trio.sleep(0.1)
    return text


@tether.workflow(name="tests.explore.forgiving")
async def forgiving() -> list[str]:
    notes = []
    for text in ("a", "b", "c"):
        try:
            notes.append(await note(text))
        except Exception:  # a workflow may carry on past a failed step
            notes.append("-")
    return notes


def test_an_engine_that_runs_on_after_a_refused_write_breaks_invariant_f() -> None:
    # The store refuses the write, but the engine does not stop the run: the
    # workflow swallows the error and executes on, as the old owner.
    late = pytest.raises(
        tether.InvariantViolation,
        match=r"\(f\) engine.run raised LeaseLostError at t=1\.3, 0\.2s .* \(by t=1\.1\)",
    )
    with mutant(Saver, "_lost", "self.lose(exc)", "pass"), late:
        explore(forgiving, seeds=1, faults=["lease_lost"])
    explore(forgiving, seeds=1, faults=["lease_lost"])


def test_a_replay_that_reruns_stored_steps_breaks_invariant_a() -> None:
    rerun = pytest.raises(tether.InvariantViolation, match=r"\(a\) step load_order#0 ran again")
    with mutant(_steps, "execute_step", "entry = run.journal.get(key)", "entry = None"), rerun:
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

    with mutant(*PLANTED["parked wait unshielded"][:4]):
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


# -- messages ----------------------------------------------------------------------


def test_messages_are_sent_to_the_run_as_it_is_created() -> None:
    explorer = Explorer(shop.deliver, "o-4", messages=SCANS)
    assert explorer.points(0) == (
        (
            "record:created",
            "start:dispatch#0",
            "save:dispatch#0",
            "stored:dispatch#0",
            "save:receive.scanned#0",
            "stored:receive.scanned#0",
            "receive:receive.scanned#0",
            "save:receive.scanned#1",
            "stored:receive.scanned#1",
            "receive:receive.scanned#1",
            "record:completed",
        ),
    )
    assert explorer.outcome() == "returned 'parcel-o-4: at the depot, then at the door'"
    # A crash as the first scan is taken: the next process takes it again, once.
    report = explore(shop.deliver, "o-4", seeds=2, messages=SCANS, faults=["crash", "cancel"])
    assert report.outcome == explorer.outcome()


@pytest.mark.tether_stores("memory", "sqlite", "file")
def test_messages_reach_the_run_on_every_store(tether_explore: Any) -> None:
    report = tether_explore(shop.deliver, "o-4", seeds=1, messages=SCANS, faults=["crash"])
    assert report.outcome == "returned 'parcel-o-4: at the depot, then at the door'"


def test_a_run_that_waits_for_a_message_never_sent_is_refused_saying_how() -> None:
    with pytest.raises(tether.UsageError) as none:
        explore(shop.deliver, "o-4", seeds=1)
    assert str(none.value) == (
        "workflow shop.deliver: the uninterrupted run waits in tether.receive for message "
        "'scanned', which explore() never sends (it sends: none); pass the messages the run "
        "receives, in the order they are sent: explore(..., messages=[('scanned', ...)]); "
        "they are sent to the run as it is created"
    )
    with pytest.raises(tether.UsageError, match=r"sends fewer than the run receives \(.scanned.\)"):
        explore(shop.deliver, "o-4", seeds=1, messages=SCANS[:1])  # the second scan is missing
    with pytest.raises(tether.UsageError, match=r"a list of pairs\), not 5"):
        explore(shop.deliver, "o-4", seeds=1, messages=5)  # type: ignore[arg-type]


@tether.workflow(name="tests.explore.naps")
async def naps() -> int:
    await tether.sleep(10)
    return 1


def test_an_execution_past_the_limit_says_what_the_run_waits_for() -> None:
    with pytest.raises(tether.InvariantViolation) as caught:
        explore(naps, seeds=1, limit=5)
    assert (
        "execution 0 did not return within 5.0s of virtual time (a durable timer waits "
        "until 2030-01-01T00:00:10+00:00); the explorer crashed the store to stop it"
    ) in str(caught.value)


def test_messages_are_checked_as_engine_send_checks_them() -> None:
    with pytest.raises(tether.UsageError, match=r"messages=: .*declares it as str, and the int"):
        explore(shop.deliver, "o-4", messages=[("scanned", 3)])
    with pytest.raises(tether.UsageError, match=r"declares no such message \(it declares 'scan"):
        explore(shop.deliver, "o-4", messages=[("signed", "yes")])
    with pytest.raises(tether.UsageError, match=r"each of messages= is a \(name, value\) pair"):
        explore(shop.deliver, "o-4", messages=[("scanned",)])  # type: ignore[list-item]
    with pytest.raises(tether.UsageError, match=r"takes messages=\[\(name, value\), \.\.\.\]"):
        explore(shop.deliver, "o-4", messages={"scanned": "x"})  # type: ignore[arg-type]


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
    with pytest.raises(tether.UsageError, match=r"'lease_lost' fault does not apply at 'record:c"):
        explore(shop.checkout, "o-1", faults=["lease_lost@record:created"])
    with pytest.raises(tether.UsageError, match=r"'race' fault does not apply at 'start:price#0'"):
        explore(shop.checkout, "o-1", faults=["race@start:price#0"])
    with pytest.raises(tether.UsageError, match="lease_ttl must be a positive"):
        explore(shop.checkout, "o-1", lease_ttl=0)


def test_injected_failures_are_plain_exceptions() -> None:
    assert issubclass(InjectedFailure, Exception)
    assert issubclass(tether.InvariantViolation, AssertionError)
