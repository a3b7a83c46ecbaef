"""Child runs: ``tether.child`` starts a workflow as a run of its own and reattaches to it.

- A child is a run of its own (journal, lease, status), journaled in its
  parent before it is created, with an id derived from the parent's and the
  call's key; a completed child is never executed again.
- A parent killed while its child executes (a real SIGKILLed process, and a
  ``FaultyStore`` crash) is resumed and reattaches to the same child: one
  child run in the store, its stored steps not executed again.
- Cancelling the parent cancels its children (and theirs); a caller's
  cancellation is prompt and leaves parent and child resumable; a sibling's
  failure lets the child's completed saves drain.
- A child's failure is the parent's step failure, and a resume of the parent
  resumes the child; a paused child raises ``ChildPausedError``.
- Children run in ``parallel()``; a child executing elsewhere is waited for;
  a child call inserted, removed or changed is a ``NonDeterminismError``; the
  explorer injects its faults at the child's start with no violation.

Engine tests run on every store kind (the ``store`` fixture), in virtual time.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
import trio.testing

import tether
from tether._api._children import child_run_id
from tether._engine._engine import internals
from tether.stores import Entry, EntryKind, RunStatus, Store
from tether.testing import Crash, Do, FaultyStore, Hang, SimulatedCrash, TrioWallClock, explore
from tether.testing._clock import ClockHoldingStore, hold_clock
from tether.testing._explore import Explorer
from tether.testing._faulty import Call

from . import _child_crash_workflow as crashing
from ._cli import tether_env
from .conftest import reopen_store

HERE = Path(__file__).resolve().parent

#: executions of each step, by "name/step#i"
executed: Counter[str] = Counter()
#: the steps that raise Boom now ("name/i" for work, "tail")
failing: set[str] = set()
gates: dict[str, trio.Event] = {}
entered: dict[str, trio.Event] = {}
#: which change the changing workflow has now ("" for the code its runs started with)
CODE = {"change": ""}


class Boom(Exception):
    pass


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    executed.clear()
    failing.clear()
    gates.clear()
    entered.clear()
    CODE["change"] = ""
    yield


def _entered(name: str) -> trio.Event:
    return entered.setdefault(name, trio.Event())


def _gate(name: str) -> trio.Event:
    return gates.setdefault(name, trio.Event())


def _another(store: Store) -> Store:
    """Another store object on the same place as *store* (memory: itself), wrapped alike."""
    if isinstance(store, ClockHoldingStore):
        return hold_clock(reopen_store(store.inner))
    return reopen_store(store)


@tether.step
async def work(name: str, i: int) -> int:
    executed[f"{name}/work#{i}"] += 1
    if f"{name}/{i}" in failing:
        raise Boom(f"work {name} {i}")
    return i * i


@tether.step
async def gate(name: str) -> str:
    executed[f"{name}/gate"] += 1
    _entered(name).set()
    await _gate(name).wait()
    if f"{name}/gate" in failing:
        raise Boom(f"gate {name}")
    return name


@tether.step
async def tail(x: int) -> int:
    executed["tail"] += 1
    if "tail" in failing:
        raise Boom("tail")
    return x + 1


@tether.workflow(name="tests.children.kid")
async def kid(name: str, n: int) -> int:
    total = 0
    for i in range(n):
        total += await work(name, i)
    return total


@tether.workflow(name="tests.children.fanned_kid")
async def fanned_kid(name: str, n: int) -> int:
    async with tether.parallel() as p:
        handles = [p.start_soon(work, name, i) for i in range(n)]
    return sum(h.result for h in handles)


@tether.workflow(name="tests.children.other_kid")
async def other_kid(name: str, n: int) -> int:
    return n


@tether.workflow(name="tests.children.gated_kid")
async def gated_kid(name: str) -> str:
    await work(name, 0)
    return await gate(name)


@tether.workflow(name="tests.children.parent")
async def parent(n: int) -> int:
    a = await tether.child(kid, "a", n)
    b = await tether.child(kid, "b", n + 1)
    return await tail(a + b)


@tether.workflow(name="tests.children.waits")
async def waits(name: str) -> str:
    return await tether.child(gated_kid, name)


@tether.workflow(name="tests.children.grand")
async def grand(name: str) -> str:
    return await tether.child(waits, name)


@tether.workflow(name="tests.children.fan")
async def fan(n: int) -> list[int]:
    async with tether.parallel() as p:
        handles = [p.start_soon(tether.child, kid, f"f{i}", i) for i in range(n)]
        named = p.start_soon(tether.child, kid, "named", 2, key="named")
        last = p.start_soon(tail, n)
    return [h.result for h in handles] + [named.result, last.result]


@tether.workflow(name="tests.children.asking_kid")
async def asking_kid() -> bool:
    return await tether.ask("ok?", bool)


@tether.workflow(name="tests.children.asks")
async def asks() -> bool:
    return await tether.child(asking_kid)


@tether.workflow(name="tests.children.explicit")
async def explicit(child_id: str) -> int:
    return await tether.child(kid, "x", 2, run_id=child_id)


@tether.step
async def with_child(name: str) -> int:
    return await tether.child(kid, name, 2)


@tether.workflow(name="tests.children.nested")
async def nested(name: str) -> int:
    return await with_child(name)


@tether.workflow(name="tests.children.changing")
async def changing(n: int) -> int:
    change = CODE["change"]
    if change == "inserted":
        await tail(0)
    if change == "removed":
        return await tail(n)
    if change == "other-args":
        a = await tether.child(kid, "c", n + 1)
    elif change == "other-workflow":
        a = await tether.child(other_kid, "c", n)
    elif change == "other-id":
        a = await tether.child(kid, "c", n, run_id="elsewhere")
    else:
        a = await tether.child(kid, "c", n)
    return await tail(a)


async def _status(engine: tether.Engine, run_id: str) -> RunStatus:
    info = await engine.get_run(run_id)
    assert info is not None, run_id
    return info.status


async def _run_ids(engine: tether.Engine) -> list[str]:
    return sorted(r.run_id for r in await engine.list_runs())


def _children_of(entries: tuple[Entry, ...]) -> list[tuple[str, int | None, str | None]]:
    return [(e.key, e.position, e.value) for e in entries if e.kind is EntryKind.CHILD]


# -- a run of its own -------------------------------------------------------------------


async def test_a_child_is_a_run_of_its_own_journaled_before_it_is_created(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        assert await engine.run(parent, 2, run_id="p") == (0 + 1) + (0 + 1 + 4) + 1
        assert await _run_ids(engine) == ["p", "p:child#0", "p:child#1"]
        info = await engine.get_run("p")
        assert info is not None
        # Each child call journaled once, before its child: seq order, positions 0 and 1.
        assert _children_of(info.entries) == [
            (
                "child#0",
                0,
                '{"run_id":"p:child#0","version":null,"workflow":"tests.children.kid"}',
            ),
            (
                "child#1",
                1,
                '{"run_id":"p:child#1","version":null,"workflow":"tests.children.kid"}',
            ),
        ]
        assert [e.key for e in info.entries] == ["child#0", "child#1", "tail#0"]
        child = await engine.get_run("p:child#1")
        assert child is not None and child.status is RunStatus.COMPLETED and child.result == 5
        assert [e.key for e in child.entries] == ["work#0", "work#1", "work#2"]
        # Its own lease: claimed by this engine, released with its final status.
        assert child.owner is None and not child.executing
        # A completed parent (and its children) executes nothing again.
        executed.clear()
        assert await engine.run(parent, 2, run_id="p") == 7
        assert executed == {}


async def test_a_completed_child_is_never_executed_again(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    failing.add("tail")
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(Boom):
            await engine.run(parent, 1, run_id="p")
        assert await _status(engine, "p") is RunStatus.FAILED
        assert await _status(engine, "p:child#0") is RunStatus.COMPLETED
        failing.clear()
        assert await engine.resume("p") == 0 + 1 + 1
    # The children ran once; the step after them twice (it failed once).
    assert executed == {"a/work#0": 1, "b/work#0": 1, "b/work#1": 1, "tail": 2}


async def test_children_in_parallel(tether_store: Store, autojump_clock: trio.abc.Clock) -> None:
    async with tether.open_engine(tether_store) as engine:
        assert await engine.run(fan, 3, run_id="fan") == [0, 0, 1, 1, 4]
        assert await _run_ids(engine) == [
            "fan",
            "fan:child#0",
            "fan:child#1",
            "fan:child#2",
            "fan:named",
        ]
        info = await engine.get_run("fan")
        assert info is not None
        # Keys and positions fixed when started, in program order (whatever the saves' order).
        assert sorted((pos, k) for k, pos, _ in _children_of(info.entries)) == [
            (0, "child#0"),
            (1, "child#1"),
            (2, "child#2"),
            (3, "named"),
        ]
        executed.clear()
        assert await engine.run(fan, 3, run_id="fan") == [0, 0, 1, 1, 4]
        assert executed == {}


async def test_a_child_inside_a_step_and_an_explicit_run_id(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        assert await engine.run(nested, "n", run_id="n") == 1
        assert await engine.run(explicit, "mine", run_id="e") == 1
        assert await _run_ids(engine) == ["e", "mine", "n", "n:with_child#0%2Fchild#0"]
        # An explicit id that names a run of other arguments is refused.
        await engine.submit(kid, "other", 1, run_id="taken")
        with pytest.raises(tether.RunConflictError, match=r"'taken' exists .* not the child run"):
            await engine.run(explicit, "taken", run_id="e2")
        assert await _status(engine, "taken") is RunStatus.QUEUED


def test_child_run_ids_are_distinct_for_distinct_parents_and_keys() -> None:
    assert child_run_id("p", "child#0") == "p:child#0"
    assert child_run_id("p", "s#0/child#1") == "p:s#0%2Fchild#1"
    ids = {
        child_run_id("a:b", "c#0"),
        child_run_id("a", "b:c#0"),
        child_run_id("a", "b#0/c#0"),
        child_run_id("a:b#0", "c#0"),
        child_run_id("a", "b%3Ac#0"),
    }
    assert len(ids) == 5
    assert all("/" not in i for i in ids)


async def test_bad_calls_are_usage_errors(autojump_clock: trio.abc.Clock) -> None:
    with pytest.raises(tether.NotInRunError):
        await tether.child(kid, "x", 1)

    @tether.workflow(name="tests.children.bad")
    async def bad(what: str) -> int:
        if what == "not-a-workflow":
            return await tether.child(tail, 1)  # type: ignore[arg-type]
        if what == "run-id":
            return await tether.child(kid, "x", 1, run_id="")
        return await tether.child(kid, "x")

    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(tether.UsageError, match=r"takes a @tether\.workflow"):
            await engine.run(bad, "not-a-workflow")
        with pytest.raises(tether.UsageError, match="run id '' is empty"):
            await engine.run(bad, "run-id")
        with pytest.raises(tether.UsageError, match=r"tests\.children\.kid"):
            await engine.run(bad, "arity")


async def test_a_worker_executes_a_parent_and_its_children(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        await engine.submit(parent, 1, run_id="wp")
        async with tether.open_worker(engine):
            assert await engine.wait("wp", timeout=30) == 2
        assert await _run_ids(engine) == ["wp", "wp:child#0", "wp:child#1"]
        assert executed["b/work#1"] == 1


@tether.workflow(name="tests.children.sleepy_kid")
async def sleepy_kid(name: str) -> int:
    await tether.sleep(3600)
    return await work(name, 1)


@tether.workflow(name="tests.children.sleepy")
async def sleepy(name: str) -> int:
    return await tail(await tether.child(sleepy_kid, name))


async def test_under_a_worker_a_sleeping_child_parks_and_so_does_its_parent(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    start = datetime(2030, 1, 1, tzinfo=UTC)
    due = start + timedelta(hours=1)
    clock = TrioWallClock(start)
    async with tether.open_engine(tether_store, clock=clock, lease_ttl=60) as engine:
        async with tether.open_worker(
            engine, concurrency=2, poll_interval=600, park_after=60
        ) as worker:
            await engine.submit(sleepy, "z", run_id="z")
            await trio.sleep(60)
            # Neither holds a lease nor a slot while the child sleeps.
            for run_id in ("z", "z:child#0"):
                record = await tether_store.get_run(run_id)
                assert record is not None
                assert (record.status, record.owner, record.wake_at) == (
                    RunStatus.WAITING,
                    None,
                    due,
                ), run_id
            assert worker.running == set()
            assert await engine.wait("z") == 2
        assert clock.now() < due + timedelta(minutes=1)
        assert await _run_ids(engine) == ["z", "z:child#0"]
    assert executed == {"z/work#1": 1, "tail": 1}


# -- crashes: the parent reattaches to the same child ------------------------------------


async def test_a_parent_crashed_while_its_child_executes_reattaches_to_it(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    # The process dies as the child saves its second step: the parent's child
    # call, and the child's first step, are stored.
    faulty = FaultyStore(tether_store)
    faulty.inject(
        "append",
        Crash(),
        when=lambda run_id, entries: run_id == "p:child#0" and entries[0].key == "work#1",
    )
    async with tether.open_engine(faulty) as engine:
        with pytest.raises(SimulatedCrash):
            await engine.run(parent, 2, run_id="p")
    inner = faulty.inner
    async with tether.open_engine(inner) as engine:
        assert await _status(engine, "p:child#0") is RunStatus.RUNNING
        assert await engine.resume("p") == 7
        assert await _run_ids(engine) == ["p", "p:child#0", "p:child#1"]
        child = await engine.get_run("p:child#0")
        assert child is not None and [e.key for e in child.entries] == ["work#0", "work#1"]
    # The child's stored step did not run again; the one in flight did.
    assert executed["a/work#0"] == 1 and executed["a/work#1"] == 2
    assert executed["b/work#2"] == 1


async def test_a_crash_before_the_child_was_created_starts_it_once(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    # The parent's child call is stored; the process dies at the child's claim.
    faulty = FaultyStore(tether_store)
    faulty.inject("claim", Crash(), when=lambda run_id, *args: run_id == "p:child#0")
    crashed = False
    try:
        # (the engine's lease task, which looks whether a claim cut short
        # landed after all, may meet the dead store too as the block ends)
        async with tether.open_engine(faulty) as engine:
            await engine.run(parent, 1, run_id="p")
    except* SimulatedCrash:
        crashed = True
    assert crashed
    async with tether.open_engine(faulty.inner) as engine:
        assert await _run_ids(engine) == ["p"]
        assert await engine.resume("p") == 2
        assert await _run_ids(engine) == ["p", "p:child#0", "p:child#1"]
    assert executed["a/work#0"] == 1


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_a_parent_killed_while_its_child_executes_reattaches_to_it(
    kind: str, tmp_path: Path
) -> None:
    where = str(tmp_path / ("store.db" if kind == "sqlite" else "store"))
    log = tmp_path / "effects.log"
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "_child_crash_workflow.py"), kind, where, str(log), "block"],
        stdout=subprocess.PIPE,
        text=True,
        env=tether_env(),  # (it imports tests._scripts)
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        # The child blocks in its third step: the parent and the child execute.
        assert proc.stdout.readline() == "blocked\n"
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    before = Counter(log.read_text().split())
    assert before == {"before#0": 1, "work#0": 1, "work#1": 1, "work#2": 1}

    crashing.log_path[:] = [log]

    async def resume() -> tuple[int, list[tether.RunInfo], list[str]]:
        async with tether.open_engine(crashing.open_store(kind, where)) as engine:
            # The killed process's leases are taken over at once (it is gone).
            child = await engine.get_run(crashing.CHILD_ID)
            assert child is not None and child.status is RunStatus.RUNNING
            stored = [e.key for e in child.entries]
            result = await engine.resume(crashing.RUN_ID)
            return result, await engine.list_runs(), stored

    result, runs, stored = trio.run(resume)
    assert result == crashing.EXPECTED
    assert sorted(r.run_id for r in runs) == [crashing.RUN_ID, crashing.CHILD_ID]
    assert all(r.status is RunStatus.COMPLETED for r in runs)
    assert stored == ["work#0", "work#1"]
    after = Counter(log.read_text().split())
    # Stored before the kill: never again; the step in flight once more.
    assert after == {
        "before#0": 1,
        "work#0": 1,
        "work#1": 1,
        "work#2": 2,
        "work#3": 1,
        "after#0": 1,
    }


# -- cancellation -------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["here", "another engine"])
async def test_cancelling_the_parent_cancels_its_children(
    where: str, tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with (
        tether.open_engine(tether_store) as engine,
        tether.open_engine(_another(tether_store)) as other,
    ):
        canceller = engine if where == "here" else other
        async with trio.open_nursery() as nursery:

            async def run_it() -> None:
                with pytest.raises(tether.RunCancelledError):
                    await engine.run(grand, "g", run_id="g")

            nursery.start_soon(run_it)
            await _entered("g").wait()  # the grandchild executes, in the parent's task
            await canceller.cancel("g")
        for run_id in ("g", "g:child#0", "g:child#0:child#0"):
            assert await _status(engine, run_id) is RunStatus.CANCELLED, run_id
        with pytest.raises(tether.RunCancelledError):
            await engine.resume("g:child#0:child#0")
    assert executed["g/gate"] == 1


async def test_cancelling_an_interrupted_parent_cancels_its_children_at_once(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        with trio.move_on_after(5):
            await engine.run(grand, "i", run_id="i")
        for run_id in ("i", "i:child#0", "i:child#0:child#0"):
            assert await _status(engine, run_id) is RunStatus.RUNNING, run_id
        # (their leases, ours, may not even be released yet: nobody executes them)
        await engine.cancel("i")
        for run_id in ("i", "i:child#0", "i:child#0:child#0"):
            assert await _status(engine, run_id) is RunStatus.CANCELLED, run_id
        await engine.cancel("i")  # again: nothing happens


async def test_the_callers_cancellation_is_prompt_and_leaves_both_resumable(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    # The child's save of its gate step hangs: the caller's deadline still wins at once.
    faulty = FaultyStore(tether_store)
    faulty.inject(
        "append",
        Hang(),
        when=lambda run_id, entries: run_id == "q:child#0" and entries[0].key == "gate#0",
        times=1,
    )
    _gate("q").set()
    async with tether.open_engine(faulty) as engine:
        began = trio.current_time()
        with trio.move_on_after(2) as scope:
            await engine.run(waits, "q", run_id="q")
        assert scope.cancelled_caught and trio.current_time() == began + 2
        await internals(engine).leases.flush()
        for run_id in ("q", "q:child#0"):
            info = await engine.get_run(run_id)
            assert info is not None and info.status is RunStatus.RUNNING and not info.executing
        assert await engine.resume("q") == "q"
        assert await _run_ids(engine) == ["q", "q:child#0"]
    # The step whose save was cut ran again; the one stored before did not.
    assert executed == {"q/work#0": 1, "q/gate": 2}


@pytest.mark.parametrize("fanned", [False, True])
async def test_a_siblings_failure_lets_the_childs_completed_saves_drain(
    fanned: bool, tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    # fanned: the child's steps run in parallel, so its second record waits
    # for the child's saver task (which its parent's failing sibling must not cut).
    the_kid = fanned_kid if fanned else kid
    in_flight = trio.Event()

    async def slow_save(call: Call) -> None:
        in_flight.set()
        await call.store.sleep(1.0)

    @tether.step
    async def fails_meanwhile() -> int:
        await in_flight.wait()
        if "sibling" in failing:
            raise Boom("sibling")
        return 0

    @tether.workflow(name="tests.children.sibling")
    async def sibling() -> int:
        async with tether.parallel() as p:
            h = p.start_soon(tether.child, the_kid, "s", 2)
            p.start_soon(fails_meanwhile)
        result: int = h.result  # (a child's handle is a Handle[Any] to the type checker)
        return result

    faulty = FaultyStore(tether_store)
    faulty.inject(
        "append",
        Do(slow_save),
        when=lambda run_id, entries: run_id == "s:child#0" and entries[0].key == "work#0",
        times=1,
    )
    failing.add("sibling")
    async with tether.open_engine(faulty) as engine:
        with pytest.RaisesGroup(Boom), trio.fail_after(60):  # (a lost save would hang it)
            await engine.run(sibling, run_id="s")
        child = await engine.get_run("s:child#0")
        # Stopped with its parent, not failed (resumable), its completed steps
        # stored. (The fanned child's block ends once its records are in, and
        # nothing is left to stop: it returns, completed.)
        assert child is not None
        assert child.status is (RunStatus.COMPLETED if fanned else RunStatus.RUNNING)
        stored = sorted(e.key for e in child.entries)
        assert stored == (["work#0", "work#1"] if fanned else ["work#0"])
        failing.clear()
        in_flight.set()
        assert await engine.resume("s") == 1
    assert executed == {"s/work#0": 1, "s/work#1": 1}


# -- failures, pauses, and children executing elsewhere ------------------------------------


async def test_a_childs_failure_is_the_parents_step_failure(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    failing.add("a/1")
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(Boom, match="work a 1"):
            await engine.run(parent, 2, run_id="p")
        info = await engine.get_run("p")
        assert info is not None and info.status is RunStatus.FAILED and info.error is not None
        # The parent's error names its own call; the child's its step.
        assert info.error.key == "child#0" and info.error.type.endswith("test_children.Boom")
        child = await engine.get_run("p:child#0")
        assert child is not None and child.status is RunStatus.FAILED
        assert child.error is not None and child.error.key == "work#1"
        # Nothing of the failure is journaled in the parent: a resume resumes the child.
        assert [e.key for e in info.entries] == ["child#0"]
        failing.clear()
        assert await engine.resume("p") == 7
        assert await _run_ids(engine) == ["p", "p:child#0", "p:child#1"]
    assert executed["a/work#0"] == 1 and executed["a/work#1"] == 2


async def test_a_paused_child_raises_child_paused_error_in_the_parent(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.ChildPausedError, match=r"engine\.resume") as caught:
            await engine.run(asks, run_id="ap")
        assert caught.value.run_id == "ap:child#0"
        assert [r.key for r in caught.value.requests] == ["ask#0"]
        info = await engine.get_run("ap")
        assert info is not None and info.status is RunStatus.FAILED and info.error is not None
        assert info.error.type == "tether.ChildPausedError" and info.error.key == "child#0"
        assert await _status(engine, "ap:child#0") is RunStatus.PAUSED
        with pytest.raises(tether.ChildPausedError):  # not answered yet: it pauses again
            await engine.resume("ap")
        assert await engine.resume("ap:child#0", responses={"ask#0": True}) is True
        assert await engine.resume("ap") is True


@pytest.mark.parametrize("fails", [False, True])
async def test_a_child_executing_elsewhere_is_waited_for(
    fails: bool, tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    # Another engine executes the child (as a worker that took an orphaned
    # child over would): the parent waits for its outcome instead of executing it.
    if fails:
        failing.add("w/gate")
    waiting = trio.Event()
    reads: list[str] = []

    async def looked(call: Call) -> None:
        if call.args[0] == "w:child#0":
            reads.append(call.args[0])
            if len(reads) == 2:  # the parent's look at the child, then its wait's first
                waiting.set()

    faulty = FaultyStore(tether_store)
    faulty.inject("get_run", Do(looked))
    async with (
        tether.open_engine(faulty) as engine,
        tether.open_engine(_another(tether_store)) as other,
    ):
        async with trio.open_nursery() as nursery:

            async def elsewhere() -> None:
                try:
                    await other.run(gated_kid, "w", run_id="w:child#0")
                except Boom:
                    assert fails

            nursery.start_soon(elsewhere)
            await _entered("w").wait()
            async with trio.open_nursery() as inner:

                async def release() -> None:
                    await waiting.wait()
                    _gate("w").set()

                inner.start_soon(release)
                if fails:
                    with pytest.raises(tether.RunFailedError) as caught:
                        await engine.run(waits, "w", run_id="w")
                    assert caught.value.error.type.endswith("Boom")
                else:
                    assert await engine.run(waits, "w", run_id="w") == "w"
        assert await _run_ids(engine) == ["w", "w:child#0"]
    assert executed == {"w/work#0": 1, "w/gate": 1}  # by the other engine only


# -- divergence ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("inserted", r"at step tail#0 \(position 0 in the workflow\): the journal holds "),
        ("removed", r"at step tail#0 .*the journal holds the child run call child#0"),
        ("other-args", r"at child child#0 .*with other arguments"),
        ("other-workflow", r"as a child run of workflow 'tests.children.kid'"),
        ("other-id", r"as child run 'c:child#0', not 'elsewhere'"),
    ],
)
async def test_a_changed_child_call_is_a_divergence(
    change: str, message: str, tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    failing.add("tail")
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(Boom):
            await engine.run(changing, 1, run_id="c")
        CODE["change"] = change
        with pytest.raises(tether.NonDeterminismError, match=message):
            await engine.resume("c")
        # Undone: the run keeps its status and error, and no second child exists.
        assert await _status(engine, "c") is RunStatus.FAILED
        assert await _run_ids(engine) == ["c", "c:child#0"]
        CODE["change"] = ""
        failing.clear()
        assert await engine.resume("c") == 1
    assert executed["c/work#0"] == 1


# -- the explorer -------------------------------------------------------------------------


@tether.workflow(name="tests.children.middle")
async def middle(name: str, n: int) -> int:
    return await tether.child(fanned_kid, name, n) + await work(name, n)


@tether.workflow(name="tests.children.explored")
async def explored(n: int) -> int:
    async with tether.parallel() as p:
        h = p.start_soon(tether.child, middle, "m", n)
        g = p.start_soon(tether.child, kid, "e", n)
        t = p.start_soon(tail, n)
    result: int = h.result + g.result + t.result
    return result


def test_the_explorer_injects_its_faults_at_the_childs_start() -> None:
    # A child with a grandchild whose steps run in parallel, a child, and a step.
    points = [p for ex in Explorer(explored, 2).points(0) for p in ex]
    assert "child:explored:child#0" in points  # the child's start
    assert "child:explored:child#0:child#0" in points  # the grandchild's
    assert "child:explored:child#1/save:work#1" in points
    result = explore(explored, 2, seeds=2)
    assert result.trials > 200 and result.outcome == "returned 9"


# (tests define workflows of their own: the registry is put back after each)
pytestmark = pytest.mark.usefixtures("tether_registry")
