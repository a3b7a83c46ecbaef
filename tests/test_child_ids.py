"""Child run ids that collide: shared by two parents, a parent's own, an ancestor's, too long.

- Two parents in one engine that start a child under the same explicit
  ``run_id`` at the same moment both get its result: the child is created
  and executed once, and the parent whose call finds it still being created
  by the other waits for it (issue 25, item 1). The interleaving is forced:
  the creating claim is slow, so the other parent reaches the child while it
  is not stored yet.
- A run that starts itself as its child, or a run it executes inside of, is
  refused at once with ``UsageError`` naming the run, before anything is
  journaled (item 2), also under a worker (no slot held forever).
- A child id derived from a parent id too long for it is refused before the
  call is journaled.

Engine tests run on every store kind, in virtual time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
import trio

import tether
from tether.stores import EntryKind, RunStatus, Store
from tether.testing import Delay, FaultyStore

#: executions of each step, by argument
executed: Counter[int] = Counter()


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    executed.clear()
    yield


@tether.step
async def square(i: int) -> int:
    executed[i] += 1
    return i * i


@tether.workflow(name="tests.child_ids.kid")
async def kid(n: int) -> int:
    return await square(n)


@tether.workflow(name="tests.child_ids.sharing")
async def sharing(tag: str) -> int:
    return await tether.child(kid, 3, run_id="shared")


async def test_two_parents_sharing_a_child_run_id_both_get_its_one_result(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    faulty = FaultyStore(tether_store)
    # The first claim of the child, which creates it, is slow: the other
    # parent reaches the child meanwhile, executing in this engine but not
    # stored yet. (Before the fix it read "no run 'shared'" and failed.)
    faulty.inject("claim", Delay(5.0), when=lambda run_id, owner: run_id == "shared", times=1)
    results: dict[str, object] = {}
    async with tether.open_engine(faulty) as engine:

        async def parent(tag: str) -> None:
            try:
                results[tag] = await engine.run(sharing, tag, run_id=tag)
            except Exception as exc:
                results[tag] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(parent, "a")
            nursery.start_soon(parent, "b")
        assert results == {"a": 9, "b": 9}
        assert executed == {3: 1}  # one child, executed once
        for run_id in ("a", "b", "shared"):
            info = await engine.get_run(run_id)
            assert info is not None and info.status is RunStatus.COMPLETED, (run_id, info)
        assert faulty.calls["claim"] >= 3  # (the delayed claim was made: the race was forced)


@pytest.mark.tether_stores("memory", "sqlite")
@pytest.mark.tether_seeds(12)
async def test_two_parents_sharing_a_child_run_id_under_any_schedule(
    tether_store: Store, tether_scheduler: int, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:

        async def parent(tag: str) -> None:
            assert await engine.run(sharing, tag, run_id=tag) == 9

        async with trio.open_nursery() as nursery:
            for tag in ("a", "b", "c"):
                nursery.start_soon(parent, tag)
        assert executed == {3: 1}
        infos = [await engine.get_run(r) for r in ("a", "b", "c", "shared")]
        assert [i.status if i else None for i in infos] == [RunStatus.COMPLETED] * 4


@tether.workflow(name="tests.child_ids.selfish")
async def selfish(x: int) -> int:
    return await tether.child(selfish, x, run_id="me")


@tether.workflow(name="tests.child_ids.inner")
async def inner(x: int) -> int:
    return await tether.child(outer, x, run_id="top")


@tether.workflow(name="tests.child_ids.outer")
async def outer(x: int) -> int:
    return await tether.child(inner, x)


async def test_a_run_that_is_its_own_child_is_refused_at_once(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        with trio.fail_after(1), pytest.raises(tether.UsageError) as info:
            await engine.run(selfish, 1, run_id="me")
        assert "run 'me' cannot start run 'me' as its child at child#0" in str(info.value)
        assert "its own id" in str(info.value)
        run = await engine.get_run("me")
        assert run is not None and run.status is RunStatus.FAILED
        assert run.error is not None and run.error.type == "tether.UsageError"
        assert not [e for e in run.entries if e.kind is EntryKind.CHILD]  # nothing journaled


async def test_a_child_with_an_ancestors_id_is_refused_at_once(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        with trio.fail_after(1), pytest.raises(tether.UsageError) as info:
            await engine.run(outer, 1, run_id="top")
        message = str(info.value)
        assert "run 'top:child#0' cannot start run 'top' as its child" in message
        assert "'top:child#0' in 'top'" in message  # the chain of runs, named
        child = await engine.get_run("top:child#0")
        assert child is not None and child.status is RunStatus.FAILED
        assert not [e for e in child.entries if e.kind is EntryKind.CHILD]


@tether.workflow(name="tests.child_ids.long")
async def long_parent(x: int) -> int:
    return await tether.child(kid, x)


async def test_a_child_id_too_long_is_refused_before_it_is_journaled(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    parent_id = "p" * 195  # valid; "<it>:child#0" is 203 bytes
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.UsageError) as info:
            await engine.run(long_parent, 2, run_id=parent_id)
        assert "cannot start its child run at child#0" in str(info.value)
        assert "give the child a run_id=" in str(info.value)
        run = await engine.get_run(parent_id)
        assert run is not None and not [e for e in run.entries if e.kind is EntryKind.CHILD]
        assert executed == {}


async def test_a_worker_refuses_a_run_that_is_its_own_child(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        await engine.submit(selfish, 2, run_id="me")
        async with tether.open_worker(engine, workflows=[selfish]):
            with trio.fail_after(30), pytest.raises(tether.RunFailedError) as info:
                await engine.wait("me")
        assert info.value.error.type == "tether.UsageError"
        assert "its own id" in info.value.error.message
