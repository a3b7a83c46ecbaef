"""The lease task stays on time whatever the store does with a release.

A release (a run cut short by its caller, written by the renewal task) that
hangs in the store must not stop the renewals of the runs still held: before,
the task waited on it forever, the held run's lease lapsed in the store while
its execution went on, and another engine took the run over under a live
execution. Virtual time; a real MemoryStore behind FaultyStore.
"""

from __future__ import annotations

import functools

import pytest
import trio
import trio.testing

import tether
from tether.stores import RunRecord
from tether.testing import FaultyStore, Hang

TTL = 2.0
gate = trio.Event()


@tether.step
async def hold() -> str:
    await gate.wait()
    return "held"


@tether.workflow(name="tests.lease_watch.hold")
async def holding() -> str:
    return await hold()


async def test_a_hanging_release_does_not_stop_the_renewals(
    autojump_clock: trio.abc.Clock,
) -> None:
    global gate
    gate = trio.Event()
    inner = tether.MemoryStore()
    store = FaultyStore(inner)

    def is_release(record: RunRecord) -> bool:
        return record.run_id == "cut" and record.owner is None

    store.inject("update_run", Hang(), when=is_release)
    async with tether.open_engine(store, lease_ttl=TTL) as engine:
        with trio.move_on_after(0.5):  # cut short by its caller: released later, and that hangs
            await engine.run(holding, run_id="cut")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(engine.run, holding, run_id="kept"))
            await trio.sleep(10 * TTL)  # virtual: many renewal intervals
            async with tether.open_engine(inner, lease_ttl=TTL) as other:
                # Its lease is live, renewed all along: refused at once. (Were it
                # lapsed, this would take the run over and wait on its gate.)
                with pytest.raises(tether.RunConflictError, match="kept"):
                    await other.resume("kept", timeout=5 * TTL)
            gate.set()
    info = await tether_get(inner, "kept")
    assert info == "completed"


async def tether_get(store: tether.MemoryStore, run_id: str) -> str:
    record = await store.get_run(run_id)
    assert record is not None
    return record.status.value


async def test_a_run_lost_while_the_store_hung_is_released_once_it_answers(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A lease lost here (no renewal answered for lease_ttl) while the owner lives on:
    the run is released once the store answers, so another worker takes it at once,
    instead of waiting for this owner's row to expire (never, while it holds runs)."""
    global gate
    gate = trio.Event()
    inner = tether.MemoryStore()
    store = FaultyStore(inner)
    store.inject("renew", Hang(), times=1)  # the first renewal hangs past the leases' expiry
    async with tether.open_engine(store, lease_ttl=TTL) as engine:
        with pytest.raises(tether.LeaseLostError):
            await engine.run(holding, run_id="lost")
        async with trio.open_nursery() as nursery:
            # The owner lives on: it holds another run, renewed all along.
            nursery.start_soon(functools.partial(engine.run, holding, run_id="kept"))
            await trio.sleep(TTL)  # virtual: a few renewal intervals
            stored = await inner.get_run("lost")
            assert stored is not None and stored.owner is None, (
                f"the run lost while the store hung is still held: {stored!r}"
            )
            taken = await inner.claim_batch(
                "host-z:9:z", ttl=TTL, workflows=[holding.name], max_dispatches=5, limit=5
            )
            assert [c.record.run_id for c in taken] == ["lost"]
            gate.set()


class Holder:
    """Holds a run for the leases: keeps what it is told."""

    def __init__(self) -> None:
        self.lost: list[Exception] = []

    def lease_lost(self, exc: Exception) -> None:
        self.lost.append(exc)

    def lease_released(self, exc: Exception) -> None:
        self.lost.append(exc)

    def cancel_recorded(self) -> None:
        pass


async def test_a_lost_run_claimed_again_here_is_not_released_under_its_new_execution(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A run lost here, then claimed again by this engine's worker: the look for lost runs
    to release must leave it alone (before, it released it under the new token, before
    the new execution held it, and another worker could run it at the same time)."""
    from tether._engine._ownership import Leases
    from tether.stores import RunStatus, utcnow

    store = tether.MemoryStore()
    owner = "host:1:e"
    leases = Leases(store, owner, ttl=TTL, save_timeout=5.0)
    now = utcnow()
    await store.create_run(
        RunRecord(
            run_id="r", workflow="wf", args="[]", status=RunStatus.QUEUED,
            created_at=now, updated_at=now,
        )
    )  # fmt: skip
    (first,) = await leases.claim_batch(
        [("wf", None)], max_dispatches=5, limit=1, gone=(), now=utcnow()
    )
    holder = Holder()
    leases.hold("r", first.record.token, holder)
    await trio.sleep(TTL * 1.5)  # no renewal answered (the task does not run): lost here
    assert leases._lose_expired() and holder.lost
    (again,) = await leases.claim_batch(
        [("wf", None)], max_dispatches=5, limit=1, gone=(), now=utcnow()
    )
    assert again.record.token == first.record.token + 1
    await leases._release_unsure()  # the lease task, before the new execution holds it
    stored = await store.get_run("r")
    assert stored is not None and stored.owner == owner and stored.token == again.record.token
