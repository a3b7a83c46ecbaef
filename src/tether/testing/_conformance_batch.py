"""Conformance checks for batched claims and for writes of many runs at once.

Layer: testing (``tether.testing``).

``claim_batch`` holds a store that takes many runs per claim (one with
``claim_batch``) to the rules of ``claim_next``, for up to ``limit`` runs in
one atomic step: oldest first, queued, due waiting and orphaned runs alike,
each claim fenced with a new token, the owner it was taken over from
reported, nothing past ``limit``. ``claim_batch_exclusive`` races batches
from many owners: no run is taken twice, none is left. ``claim_batch_decides``
holds it to the rules on the way: a run with a recorded cancel is stored
``cancelled``, one dispatched ``max_dispatches`` times ``dead_letter``, and
neither counts toward ``limit``.

``batch_fencing`` holds every store to fencing when writes of many runs
are committed together (group commit across runs): appends and record
writes of several runs issued at once, one of them by an owner whose lease
was taken over, store every other one and refuse exactly that one. A store
whose batched write checks the fence of only some of its runs fails it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import cast

import attrs
import trio

from .._errors import LeaseLostError, UsageError
from ..stores._capabilities import Capability, has
from ..stores._queue import Claimed
from ..stores._records import RunRecord, RunStatus
from ..stores._store import BatchClaimingStore, Store
from ._conformance_base import Ctx, Opened, Skip
from ._conformance_leases import LONG, SHORT, A, B, C, expire, refused

__all__ = ("BATCH_CHECKS",)

_WORKFLOWS = ("checkout",)


def _batches(store: Store) -> BatchClaimingStore:
    if not has(store, Capability.CLAIM_BATCH):
        raise Skip("the store has no claim_batch (its workers claim one run at a time)")
    return cast(BatchClaimingStore, store)


def _ids(claimed: Sequence[Claimed]) -> list[str]:
    return [c.record.run_id for c in claimed]


async def check_claim_batch(ctx: Ctx) -> None:
    """claim_batch takes up to limit of the oldest dispatchable runs in one step, each
    claimed as claim_next claims it, and names the owner a run was taken over from."""
    async with Opened(await ctx.make()) as opened:
        store = _batches(opened)
        empty = await store.claim_batch(
            A, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=3, limit=5
        )
        assert list(empty) == [], f"claim_batch on an empty store returned {empty!r}"
        for i in range(5):
            await opened.create_run(ctx.run(f"q{i}", status=RunStatus.QUEUED))
        await opened.create_run(ctx.run("other", status=RunStatus.QUEUED, workflow="refund"))
        await opened.create_run(ctx.run("done", status=RunStatus.COMPLETED))
        first = await store.claim_batch(
            A, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=3, limit=3
        )
        assert _ids(first) == ["q0", "q1", "q2"], f"claim_batch(limit=3) took {_ids(first)}"
        for c in first:
            r = c.record
            assert (r.owner, r.token, r.dispatches, r.status) == (A, 1, 1, RunStatus.RUNNING), (
                f"a run claimed in a batch: {r!r}"
            )
            assert r.lease_expires_at is not None, f"no lease expiry: {r!r}"
            assert c.previous_owner is None, f"a queued run was 'taken over': {c!r}"
            stored = await opened.get_run(r.run_id)
            assert stored is not None and stored.owner == A and stored.token == 1, (
                f"stored after the batch: {stored!r}"
            )
        # A's lease on q0..q2 runs out; a due waiting run and q3, q4 are older or newer.
        await opened.renew(A, ttl=SHORT, held={c.record.run_id: 1 for c in first})
        await opened.create_run(
            ctx.run("w", status=RunStatus.WAITING, wake_at=datetime(2001, 1, 1, tzinfo=UTC))
        )
        await expire(SHORT * 1.5)
        second = await store.claim_batch(
            B, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=3, limit=100
        )
        assert _ids(second) == ["q0", "q1", "q2", "q3", "q4", "w"], (
            f"claim_batch(limit=100) took {_ids(second)}: expected the three runs whose lease "
            "expired, the two queued ones and the due waiting one, oldest first"
        )
        previous = {c.record.run_id: c.previous_owner for c in second}
        assert previous == {"q0": A, "q1": A, "q2": A, "q3": None, "q4": None, "w": None}, (
            f"the owners the runs were taken over from: {previous}"
        )
        assert [c.record.token for c in second] == [2, 2, 2, 1, 1, 1], f"tokens: {second!r}"
        await refused(
            "an append by the owner whose runs were taken over",
            LeaseLostError,
            lambda: opened.append("q0", [ctx.entry("q0", "late#0", token=1)]),
        )
        none = await store.claim_batch(
            C, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=3, limit=10
        )
        assert list(none) == [], f"claim_batch took runs with live leases: {_ids(none)}"
        for limit in (0, -1, True, 10**9):
            await refused(
                f"claim_batch(limit={limit!r})",
                UsageError,
                lambda limit=limit: store.claim_batch(  # type: ignore[misc]
                    C, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=3, limit=limit
                ),
            )


async def check_claim_batch_exclusive(ctx: Ctx) -> None:
    """Concurrent batched claims from many owners never take a run twice, nor leave one."""
    async with Opened(await ctx.make()) as opened:
        store = _batches(opened)
        for i in range(30):
            await opened.create_run(ctx.run(f"q{i:02}", status=RunStatus.QUEUED))
        got: dict[str, list[str]] = {}

        async def claimer(owner: str) -> None:
            while True:
                batch = await store.claim_batch(
                    owner, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=3, limit=4
                )
                if not batch:
                    return
                got.setdefault(owner, []).extend(_ids(batch))

        async with trio.open_nursery() as nursery:
            for i in range(5):
                nursery.start_soon(claimer, f"host-{i}:{i}:w")
        taken = sorted(r for ids in got.values() for r in ids)
        assert taken == [f"q{i:02}" for i in range(30)], (
            f"5 owners claiming batches of 4 from 30 queued runs took {taken}"
        )
        for owner, ids in got.items():
            for run_id in ids:
                stored = await opened.get_run(run_id)
                assert stored is not None and stored.owner == owner, (
                    f"{run_id} was returned to {owner} but is stored as {stored!r}"
                )


async def check_claim_batch_decides(ctx: Ctx) -> None:
    """A batch stores a run with a recorded cancel cancelled and a run dispatched
    max_dispatches times dead_letter, and neither counts toward its limit."""
    async with Opened(await ctx.make()) as opened:
        store = _batches(opened)
        await opened.create_run(ctx.run("poison", status=RunStatus.QUEUED))
        await opened.create_run(ctx.run("cancel", status=RunStatus.QUEUED))
        for i in range(3):
            await opened.create_run(ctx.run(f"q{i}", status=RunStatus.QUEUED))
        got = await store.claim_batch(A, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=1, limit=2)
        assert _ids(got) == ["poison", "cancel"], f"the first batch took {_ids(got)}"
        await opened.cancel_run("cancel")  # A holds it: the cancel is recorded
        await opened.renew(A, ttl=0, held={})  # A "died" with both
        got = await store.claim_batch(B, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=1, limit=2)
        assert _ids(got) == ["q0", "q1"], (
            f"a batch of 2 past a dead-letter run and a cancelled one took {_ids(got)}"
        )
        poison, cancel = await opened.get_run("poison"), await opened.get_run("cancel")
        assert poison is not None and poison.status is RunStatus.DEAD_LETTER, f"{poison!r}"
        assert cancel is not None and cancel.status is RunStatus.CANCELLED, f"{cancel!r}"


async def check_batch_fencing(ctx: Ctx) -> None:
    """Appends and record writes of several runs issued at once (committed together where
    the store groups them) are each fenced: the one with a stale token alone is refused."""
    async with Opened(await ctx.make()) as store:
        runs = [f"r{i}" for i in range(6)]
        held: dict[str, RunRecord] = {}
        for run_id in runs:
            await store.create_run(ctx.run(run_id))
            held[run_id] = await store.claim(run_id, A, ttl=SHORT)
        await expire(SHORT * 1.5)
        stale = "r3"
        taken = await store.claim(stale, B, ttl=LONG)  # A's token for r3 is stale now
        for run_id in runs:
            if run_id != stale:
                held[run_id] = await store.claim(run_id, A, ttl=LONG)  # A again, token 2
        errors: dict[str, BaseException] = {}

        async def write(run_id: str) -> None:
            record = held[run_id]
            try:
                await store.append(run_id, [ctx.entry(run_id, "s#0", token=record.token)])
                await store.update_run(
                    attrs.evolve(record, status=RunStatus.COMPLETED, result='"ok"', owner=None)
                )
            except LeaseLostError as exc:
                errors[run_id] = exc

        async with trio.open_nursery() as nursery:
            for run_id in runs:
                nursery.start_soon(write, run_id)
        assert sorted(errors) == [stale], (
            f"writes of 6 runs at once, r3's by an owner whose lease was taken over: "
            f"refused {sorted(errors)}, expected exactly ['r3']"
        )
        for run_id in runs:
            entries = await store.load_entries(run_id)
            stored = await store.get_run(run_id)
            assert stored is not None
            if run_id == stale:
                assert not entries, f"the stale owner's append to r3 was stored: {entries!r}"
                assert stored.owner == B and stored.token == taken.token, (
                    f"the stale owner's write of r3 was stored: {stored!r}"
                )
            else:
                assert [e.key for e in entries] == ["s#0"], f"{run_id}: {entries!r}"
                assert stored.status is RunStatus.COMPLETED, f"{run_id}: {stored!r}"


BATCH_CHECKS: dict[str, Callable[[Ctx], Awaitable[None]]] = {
    "claim_batch": check_claim_batch,
    "claim_batch_exclusive": check_claim_batch_exclusive,
    "claim_batch_decides": check_claim_batch_decides,
    "batch_fencing": check_batch_fencing,
}
