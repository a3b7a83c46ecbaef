"""Conformance checks for listing at scale and for the queue workers claim from.

Layer: testing (``tether.testing``).

``list_filters`` holds every store to ``list_runs``'s filters and keyset
pagination. The ``claim_next_*`` checks hold a store that serves workers
(one with ``claim_next``) to the dispatch rules: what is dispatchable, in
which order, that two claims never take one run, and that a cancelled run or
one that keeps killing its workers is set aside rather than claimed, and that
a worker takes only runs of the workflow versions it serves. A store without
``claim_next`` skips them (it serves no workers). ``claim_next_waiting``
holds it to parked runs: a ``waiting`` run is claimed once its ``wake_at``
has come on the claimer's clock (``now=``), never before. ``advertise`` checks a
store that keeps workers' advertisements, ``watch`` one that announces
changes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import cast

import trio

from .._errors import LeaseLostError, RunNotFoundError, UsageError
from ..stores._capabilities import Capability, has
from ..stores._owners import Served
from ..stores._queue import DEAD_LETTER_ERROR
from ..stores._records import RunRecord, RunStatus
from ..stores._store import AdvertisingStore, Store, WorkerStore
from ._conformance_base import Ctx, Opened, Skip
from ._conformance_leases import LONG, SHORT, A, B, C, expire, refused

__all__ = ("QUEUE_CHECKS",)

_WORKFLOWS = ("checkout",)


async def _queued(store: Store, ctx: Ctx, run_id: str, **kw: object) -> RunRecord:
    record = ctx.run(run_id, status=RunStatus.QUEUED, **kw)
    await store.create_run(record)
    return record


async def _parked(store: Store, ctx: Ctx, run_id: str, wake_at: datetime) -> RunRecord:
    record = ctx.run(run_id, status=RunStatus.WAITING, wake_at=wake_at)
    await store.create_run(record)
    return record


def _serves_workers(store: Store) -> WorkerStore:
    if not has(store, Capability.WORKERS):
        raise Skip("the store has no claim_next (it serves no workers)")
    return cast(WorkerStore, store)


async def check_list_filters(ctx: Ctx) -> None:
    """list_runs filters by status and workflow and pages by run id, in creation order."""
    async with Opened(await ctx.make()) as store:
        for i in range(6):
            status = RunStatus.QUEUED if i % 2 else RunStatus.COMPLETED
            workflow = "checkout" if i < 4 else "refund"
            await store.create_run(ctx.run(f"r{i}", status=status, workflow=workflow))
        ids = [r.run_id for r in await store.list_runs()]
        assert ids == [f"r{i}" for i in range(6)], f"list_runs() order: {ids}"
        cases: list[tuple[dict[str, object], list[str]]] = [
            ({"status": [RunStatus.QUEUED]}, ["r1", "r3", "r5"]),
            ({"status": [RunStatus.QUEUED, RunStatus.COMPLETED]}, ids),
            ({"workflow": "refund"}, ["r4", "r5"]),
            ({"workflow": "checkout", "status": [RunStatus.COMPLETED]}, ["r0", "r2"]),
            ({"limit": 2}, ["r0", "r1"]),
            ({"after": "r1", "limit": 2}, ["r2", "r3"]),
            ({"after": "r1", "status": [RunStatus.QUEUED]}, ["r3", "r5"]),
            ({"after": "r5"}, []),
            ({"limit": 0}, []),
            ({"workflow": "nothing"}, []),
        ]
        for kwargs, expected in cases:
            got = [r.run_id for r in await store.list_runs(**kwargs)]  # type: ignore[arg-type]
            assert got == expected, f"list_runs({kwargs}) returned {got}, expected {expected}"
        await refused(
            "list_runs(after=) of an unknown run",
            RunNotFoundError,
            lambda: store.list_runs(after="nope"),
        )
        await refused("list_runs(limit=-1)", UsageError, lambda: store.list_runs(limit=-1))


async def check_claim_next_queued(ctx: Ctx) -> None:
    """claim_next takes the oldest queued run of the given workflows, once, as one write."""
    async with Opened(await ctx.make()) as opened:
        store = _serves_workers(opened)
        none = await store.claim_next(A, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=3)
        assert none is None, f"claim_next on an empty store returned {none!r}"
        await _queued(store, ctx, "q1")
        await _queued(store, ctx, "q2")
        await _queued(store, ctx, "other", workflow="refund")
        await store.create_run(ctx.run("paused", status=RunStatus.PAUSED))
        await store.create_run(ctx.run("failed", status=RunStatus.FAILED))
        await store.create_run(ctx.run("done", status=RunStatus.COMPLETED))
        got = await store.claim_next(A, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=3)
        assert got is not None and got.run_id == "q1", f"first claim_next returned {got!r}"
        assert (got.owner, got.token, got.dispatches, got.status) == (
            A,
            1,
            1,
            RunStatus.RUNNING,
        ), f"a claimed run: {got!r}"
        assert got.lease_expires_at is not None, "claim_next returned no lease expiry"
        stored = await store.get_run("q1")
        assert stored is not None and stored.owner == A and stored.lease_expires_at is not None
        assert stored.status is RunStatus.RUNNING and stored.dispatches == 1, f"stored {stored!r}"
        second = await store.claim_next(B, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=3)
        assert second is not None and second.run_id == "q2", f"second claim_next: {second!r}"
        third = await store.claim_next(B, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=3)
        assert third is None, (
            f"claim_next took {third!r}: only queued runs and running runs without a live "
            "lease are dispatchable (never paused, failed, completed ones, nor held ones)"
        )
        refund = await store.claim_next(B, ttl=LONG, workflows=["refund"], max_dispatches=3)
        assert refund is not None and refund.run_id == "other", f"by workflow: {refund!r}"


async def check_claim_next_exclusive(ctx: Ctx) -> None:
    """Concurrent claim_next calls never take the same run."""
    async with Opened(await ctx.make()) as opened:
        store = _serves_workers(opened)
        for i in range(8):
            await _queued(store, ctx, f"q{i}")
        got: list[str | None] = []

        async def claimer(owner: str) -> None:
            record = await store.claim_next(owner, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=3)
            got.append(None if record is None else record.run_id)

        async with trio.open_nursery() as nursery:
            for i in range(12):
                nursery.start_soon(claimer, f"host-{i}:{i}:w")
        claimed = [r for r in got if r is not None]
        assert sorted(claimed) == [f"q{i}" for i in range(8)], (
            f"12 concurrent claim_next calls on 8 queued runs took {sorted(claimed)}"
        )


async def check_claim_next_takeover(ctx: Ctx) -> None:
    """A running run whose owner's lease expired, or whose owner is gone, is claimed
    with a new token; the old owner's writes are then refused."""
    async with Opened(await ctx.make()) as opened:
        store = _serves_workers(opened)
        await _queued(store, ctx, "q")
        first = await store.claim_next(A, ttl=SHORT, workflows=_WORKFLOWS, max_dispatches=5)
        assert first is not None and first.token == 1, f"claim_next returned {first!r}"
        held = await store.claim_next(B, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=5)
        assert held is None, f"claim_next took a run with a live lease: {held!r}"
        gone = await store.claim_next(B, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=5, gone=[A])
        assert gone is not None and (gone.owner, gone.token, gone.dispatches) == (B, 2, 2), (
            f"claim_next(gone=[A]) of A's run returned {gone!r}"
        )
        await refused(
            "an append by the taken-over owner",
            LeaseLostError,
            lambda: store.append("q", [ctx.entry("q", "late#0", token=1)]),
        )
        await store.renew(B, ttl=0, held={})  # B's lease ends now: dispatchable again
        again = await store.claim_next(A, ttl=SHORT, workflows=_WORKFLOWS, max_dispatches=5)
        assert again is not None and again.token == 3, f"after B's lease ended: {again!r}"
        await expire(SHORT * 1.5)
        expired = await store.claim_next(B, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=5)
        assert expired is not None and expired.token == 4, f"after A's lease expired: {expired!r}"


async def check_claim_next_dead_letter(ctx: Ctx) -> None:
    """A run dispatched max_dispatches times is set aside as dead_letter, not claimed;
    a run with a recorded cancel is stored cancelled, not claimed."""
    async with Opened(await ctx.make()) as opened:
        store = _serves_workers(opened)
        await _queued(store, ctx, "poison")
        for n in (1, 2):
            got = await store.claim_next(A, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=2)
            assert got is not None and got.dispatches == n, f"dispatch {n}: {got!r}"
            await store.renew(A, ttl=0, held={})  # the worker "died"
        await _queued(store, ctx, "fine")
        got = await store.claim_next(A, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=2)
        assert got is not None and got.run_id == "fine", (
            f"claim_next after 2 dispatches of 'poison' (max 2) returned {got!r}"
        )
        dead = await store.get_run("poison")
        assert dead is not None and dead.status is RunStatus.DEAD_LETTER, f"stored {dead!r}"
        assert dead.owner is None and dead.error is not None, f"stored {dead!r}"
        assert dead.error.type == DEAD_LETTER_ERROR, f"dead-letter error: {dead.error!r}"
        await store.cancel_run("fine")  # A holds it: the cancel is recorded
        await store.renew(A, ttl=0, held={})
        none = await store.claim_next(B, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=2)
        assert none is None, f"claim_next took a run with a recorded cancel: {none!r}"
        fine = await store.get_run("fine")
        assert fine is not None and fine.status is RunStatus.CANCELLED, f"stored {fine!r}"
        resumed = await store.claim("poison", B, ttl=LONG)
        assert resumed.status is RunStatus.RUNNING and resumed.dispatches == 0, (
            f"a claim by hand of a dead-letter run: {resumed!r}"
        )


async def check_claim_next_versions(ctx: Ctx) -> None:
    """A run's workflow version is stored, listed by, and claimed only by a worker serving
    exactly that (workflow, version); a plain name stands for the unversioned workflow."""
    async with Opened(await ctx.make()) as opened:
        store = _serves_workers(opened)
        await _queued(store, ctx, "v1", version="1")
        await _queued(store, ctx, "none")
        await _queued(store, ctx, "v2", version="2")
        await _queued(store, ctx, "other-v2", workflow="refund", version="2")
        stored = await store.get_run("v1")
        assert stored is not None and stored.version == "1", f"stored {stored!r}"
        listed = [r.run_id for r in await store.list_runs(version="2")]
        assert listed == ["v2", "other-v2"], f"list_runs(version='2') returned {listed}"
        listed = [r.run_id for r in await store.list_runs(workflow="checkout", version="2")]
        assert listed == ["v2"], f"list_runs(workflow=, version=) returned {listed}"
        cases: list[tuple[list[Served | str], str]] = [
            ([("checkout", "2")], "v2"),
            (["checkout"], "none"),
            ([("checkout", "1"), ("refund", "2")], "v1"),
            ([("refund", "2")], "other-v2"),
        ]
        for workflows, expected in cases:
            got = await store.claim_next(A, ttl=LONG, workflows=workflows, max_dispatches=3)
            assert got is not None and got.run_id == expected, (
                f"claim_next(workflows={workflows}) returned {got!r}, expected run {expected!r}"
            )
            assert got.version == (None if expected == "none" else expected[-1]), (
                f"the claimed run lost its version: {got!r}"
            )
        taken: list[list[Served | str]] = [[("checkout", "2")], [("checkout", "3")], ["checkout"]]
        for workflows in taken:
            none = await store.claim_next(B, ttl=LONG, workflows=workflows, max_dispatches=3)
            assert none is None, f"claim_next(workflows={workflows}) took {none!r}"
        await refused(
            "claim_next with an empty version",
            UsageError,
            lambda: store.claim_next(B, ttl=LONG, workflows=[("checkout", "")], max_dispatches=3),
        )


async def check_claim_next_waiting(ctx: Ctx) -> None:
    """A waiting run keeps its wake_at, is claimed once it is due by the claimer's now=
    (not before, and after older due runs), and a claim, a dispatch or a cancel clears it."""
    async with Opened(await ctx.make()) as opened:
        store = _serves_workers(opened)
        due = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=2)))
        just_before = due - timedelta(microseconds=1)
        await _parked(store, ctx, "w", due)
        await _queued(store, ctx, "q")
        stored = await store.get_run("w")
        assert stored is not None and stored.status is RunStatus.WAITING, f"stored {stored!r}"
        assert stored.wake_at == due, f"wake_at {due!r} was stored as {stored.wake_at!r}"
        listed = [r.wake_at for r in await store.list_runs(status=[RunStatus.WAITING])]
        assert listed == [due], f"list_runs(status=[waiting]) has wake_at {listed}"
        early = await store.claim_next(
            A, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=3, now=just_before
        )
        assert early is not None and early.run_id == "q", (
            f"claim_next(now=) a microsecond before a waiting run is due returned {early!r}; "
            "expected the queued run created after it"
        )
        none = await store.claim_next(
            B, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=3, now=just_before
        )
        assert none is None, f"claim_next took a waiting run before its wake_at: {none!r}"
        got = await store.claim_next(B, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=3, now=due)
        assert got is not None and got.run_id == "w", f"claim_next(now=wake_at) returned {got!r}"
        assert (got.status, got.owner, got.token, got.dispatches, got.wake_at) == (
            RunStatus.RUNNING,
            B,
            1,
            1,
            None,
        ), f"a claimed waiting run: {got!r}"
        stored = await store.get_run("w")
        assert stored is not None and stored.wake_at is None, f"stored after the claim: {stored!r}"
        # Without now=, the wall clock decides.
        await _parked(store, ctx, "past", datetime(2001, 1, 1, tzinfo=UTC))
        await _parked(store, ctx, "future", datetime(2999, 1, 1, tzinfo=UTC))
        got = await store.claim_next(C, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=3)
        assert got is not None and got.run_id == "past", f"claim_next without now=: {got!r}"
        none = await store.claim_next(C, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=3)
        assert none is None, f"claim_next without now= took a run due in 2999: {none!r}"
        claimed = await store.claim("future", A, ttl=LONG)
        assert claimed.status is RunStatus.RUNNING and claimed.wake_at is None, (
            f"a claim by hand of a waiting run: {claimed!r}"
        )
        await _parked(store, ctx, "cancel", due)
        cancelled = await store.cancel_run("cancel")
        assert cancelled.status is RunStatus.CANCELLED and cancelled.wake_at is None, (
            f"a cancel of a waiting run: {cancelled!r}"
        )
        await refused(
            "claim_next with a naive now=",
            UsageError,
            lambda: store.claim_next(
                C, ttl=LONG, workflows=_WORKFLOWS, max_dispatches=3, now=datetime(2031, 1, 1)
            ),
        )


def _serves_ads(store: Store) -> AdvertisingStore:
    if not has(store, Capability.ADVERTISE):
        raise Skip("the store has no advertise/list_workers (it cannot tell stranded runs)")
    return cast(AdvertisingStore, store)


async def check_advertise(ctx: Ctx) -> None:
    """Workers' advertisements are stored, replaced, expire on the store's clock, and are
    withdrawn with ttl=0; leases are unaffected."""
    async with Opened(await ctx.make()) as opened:
        store = _serves_ads(opened)
        assert list(await store.list_workers()) == [], "list_workers() of a new store"
        await store.advertise(A, serves=[("checkout", "2"), ("refund", None)], ttl=LONG)
        await store.advertise(B, serves=[("checkout", None)], ttl=SHORT)
        ads = {ad.owner: ad for ad in await store.list_workers()}
        assert sorted(ads) == [A, B], f"list_workers() after two advertisements: {ads}"
        assert ads[A].serves == {("checkout", "2"), ("refund", None)}, f"A: {ads[A]!r}"
        assert ads[B].serves == {("checkout", None)}, f"B: {ads[B]!r}"
        assert ads[A].expires_at > ads[B].expires_at, f"expiries: {ads}"
        await store.advertise(A, serves=[("checkout", "3")], ttl=LONG)
        ads = {ad.owner: ad for ad in await store.list_workers()}
        assert ads[A].serves == {("checkout", "3")}, f"a new advertisement kept {ads[A]!r}"
        await opened.create_run(ctx.run("held"))
        held = await opened.claim("held", C, ttl=SHORT)
        await store.advertise(C, serves=[("checkout", None)], ttl=LONG)
        await expire(SHORT * 1.5)
        owners = [ad.owner for ad in await store.list_workers()]
        assert owners == [A, C], f"list_workers() once B's advertisement expired: {owners}"
        lapsed = await opened.get_run("held")
        assert lapsed is not None and lapsed.lease_expires_at is None, (
            f"a worker's advertisement extended its lease (token {held.token}): {lapsed!r}"
        )
        await store.advertise(A, serves=(), ttl=0)
        await store.advertise(C, serves=(), ttl=0)
        assert list(await store.list_workers()) == [], "advertise(ttl=0) did not withdraw"
        await refused(
            "an advertisement with an empty workflow name",
            UsageError,
            lambda: store.advertise(A, serves=[("", None)], ttl=LONG),
        )


async def check_watch(ctx: Ctx) -> None:
    """A store with watch() announces a new run and a status change."""
    async with Opened(await ctx.make()) as store:
        if not has(store, Capability.WATCH):
            raise Skip("the store has no watch() (waiters poll it)")
        watch = store.watch  # type: ignore[attr-defined]
        changed = trio.Event()
        events: list[int] = []

        def note() -> None:
            events.append(1)
            changed.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch, note)
            # A listener may still be connecting when the first run is created:
            # create runs until one is announced.
            with trio.fail_after(30):
                while not changed.is_set():
                    await store.create_run(ctx.run(f"w{len(events)}-{trio.current_time()}"))
                    with trio.move_on_after(1):
                        await changed.wait()
            nursery.cancel_scope.cancel()
        assert events, "watch() never called back after a run was created"


QUEUE_CHECKS: dict[str, Callable[[Ctx], Awaitable[None]]] = {
    "list_filters": check_list_filters,
    "claim_next_queued": check_claim_next_queued,
    "claim_next_exclusive": check_claim_next_exclusive,
    "claim_next_takeover": check_claim_next_takeover,
    "claim_next_dead_letter": check_claim_next_dead_letter,
    "claim_next_versions": check_claim_next_versions,
    "claim_next_waiting": check_claim_next_waiting,
    "advertise": check_advertise,
    "watch": check_watch,
}
