"""Conformance checks for one owner per run: leases, fencing, cancel, journal integrity.

Layer: testing (``tether.testing``).

Each check holds a store to one rule of the lease contract (see
``Store.claim``, ``Store.renew``, ``Store.cancel_run`` and the fencing notes of
``Store.append`` and ``Store.update_run``). A store that lets two owners hold
a run, accepts a stale token, renews a lease it lost, or reads a journal with
a hole or a changed entry fails the check that names that rule.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from .._errors import LeaseLostError, RunCancelledError, RunConflictError, RunNotFoundError
from ..stores._records import RunRecord, RunStatus
from ..stores._store import Store
from ._conformance_base import Ctx, Opened, Skip, expect_corrupt, maybe_await

__all__ = ("LEASE_CHECKS",)

#: Lease durations the checks use (seconds, on the store's clock).
LONG = 60.0
SHORT = 0.3

A, B, C = "host-a:1:a", "host-b:2:b", "host-c:3:c"


async def expire(seconds: float) -> None:
    """Let *seconds* pass on every store clock: Trio's (MemoryStore) and the wall clock."""
    wall = time.time() + seconds
    await trio.sleep(seconds)  # Trio's clock, and the wall clock with a real Trio clock
    left = wall - time.time()
    if left > 0:  # a virtual Trio clock: the wall clock has not moved as far
        await trio.to_thread.run_sync(time.sleep, left)


async def refused(
    what: str, error: type[Exception], call: Callable[[], Awaitable[Any]]
) -> Exception:
    try:
        result = await call()
    except error as exc:
        return exc
    raise AssertionError(f"{what}: no {error.__name__}; returned {result!r:.300}")


async def _claimed(store: Store, ctx: Ctx, run_id: str, owner: str, ttl: float) -> RunRecord:
    """A new run, created by *owner*'s claim."""
    record = await store.claim(run_id, owner, ttl=ttl, create=ctx.run(run_id))
    assert record.owner == owner and record.token == 1, (
        f"a claim that creates {run_id!r} returned owner {record.owner!r}, token "
        f"{record.token} (expected {owner!r}, token 1)"
    )
    return record


async def check_claim_creates(ctx: Ctx) -> None:
    """claim(create=) creates the run already claimed (token 1), in one step; a
    claim of another workflow or other arguments under that id changes nothing."""
    async with Opened(await ctx.make()) as store:
        record = await _claimed(store, ctx, "new", A, LONG)
        assert record.lease_expires_at is not None, "a new claim's lease_expires_at is None"
        got = await store.get_run("new")
        assert got is not None and got.owner == A and got.token == 1, f"stored {got!r}"
        assert got.lease_expires_at is not None, "get_run of a leased run shows no live lease"
        assert (got.workflow, got.args) == ("checkout", '["o-1"]'), f"stored {got!r}"
        # Released, so that only the arguments can refuse the next claims.
        released = await store.update_run(attrs.evolve(got, owner=None, lease_expires_at=None))
        got = await store.get_run("new")
        assert got is not None and got.owner is None, f"after a release: {released!r}"
        other = ctx.run("new", args='["o-2"]')
        for owner in (A, B):
            await refused(
                "a claim with other arguments",
                RunConflictError,
                lambda owner=owner: store.claim("new", owner, ttl=LONG, create=other),  # type: ignore[misc]
            )
        assert await store.get_run("new") == got, "a refused claim changed the record"
        same = await store.claim("new", B, ttl=LONG, create=ctx.run("new"))
        assert same.owner == B and same.token == 2, f"a claim with the same run gave {same!r}"
        await refused(
            "a claim of an unknown run without create",
            RunNotFoundError,
            lambda: store.claim("nobody", A, ttl=LONG),
        )
        assert await store.get_run("nobody") is None, "a refused claim created a run"


async def check_claim_exclusive(ctx: Ctx) -> None:
    """While an owner's lease is live, another owner's claim raises RunConflictError
    naming it; the holder may claim again; after a release, others may; tokens grow."""
    async with Opened(await ctx.make()) as store:
        first = await _claimed(store, ctx, "x", A, LONG)
        exc = await refused(
            "a claim of a run another owner holds",
            RunConflictError,
            lambda: store.claim("x", B, ttl=LONG),
        )
        assert getattr(exc, "owner", None) == A, f"the conflict does not name owner {A}: {exc!r}"
        assert getattr(exc, "expires_at", None) is not None, "the conflict gives no expiry"
        again = await store.claim("x", A, ttl=LONG)
        assert again.token > first.token, f"tokens did not grow: {first.token}, {again.token}"
        released = attrs.evolve(again, owner=None, lease_expires_at=None)
        await store.update_run(released)
        after = await store.claim("x", B, ttl=LONG)
        assert after.owner == B and after.token > again.token, f"claim after release: {after!r}"


async def check_claim_after_expiry(ctx: Ctx) -> None:
    """A lease that expired (on the store's clock) no longer blocks a claim; a live
    one is taken over only with takeover= its exact token."""
    async with Opened(await ctx.make()) as store:
        first = await _claimed(store, ctx, "exp", A, SHORT)
        await expire(SHORT * 1.5)
        got = await store.get_run("exp")
        assert got is not None and got.lease_expires_at is None, (
            f"an expired lease still shows as live: {got!r}"
        )
        taken = await store.claim("exp", B, ttl=LONG)
        assert taken.owner == B and taken.token == first.token + 1, f"takeover gave {taken!r}"
        await refused(
            "a takeover naming a stale token",
            RunConflictError,
            lambda: store.claim("exp", C, ttl=LONG, takeover=first.token),
        )
        forced = await store.claim("exp", C, ttl=LONG, takeover=taken.token)
        assert forced.owner == C and forced.token == taken.token + 1, f"takeover gave {forced!r}"


async def check_fencing(ctx: Ctx) -> None:
    """After a takeover, writes carrying the old token (append, update_run) raise
    LeaseLostError and store nothing; the new token's writes are kept."""
    async with Opened(await ctx.make()) as store:
        old = await _claimed(store, ctx, "fence", A, LONG)
        (kept,) = await store.append("fence", [ctx.entry("fence", "s#0", token=old.token)])
        assert kept.token == old.token, f"the stored entry lost its token: {kept!r}"
        new = await store.claim("fence", B, ttl=LONG, takeover=old.token)
        before = list(await store.load_entries("fence"))
        record = await store.get_run("fence")
        await refused(
            "an append with a stale token",
            LeaseLostError,
            lambda: store.append("fence", [ctx.entry("fence", "s#1", token=old.token)]),
        )
        await refused(
            "an append with no token to a claimed run",
            LeaseLostError,
            lambda: store.append("fence", [ctx.entry("fence", "s#1")]),
        )
        stale = attrs.evolve(old, status=RunStatus.COMPLETED, result="1", owner=None)
        await refused(
            "update_run with a stale token", LeaseLostError, lambda: store.update_run(stale)
        )
        assert list(await store.load_entries("fence")) == before, "a refused append stored"
        assert await store.get_run("fence") == record, "a refused update_run changed the run"
        (mine,) = await store.append("fence", [ctx.entry("fence", "s#1", token=new.token)])
        assert (mine.seq or 0) > (kept.seq or 0), f"seq after takeover: {mine!r}"
        done = attrs.evolve(new, status=RunStatus.COMPLETED, result="1", owner=None)
        await store.update_run(done)
        final = await store.get_run("fence")
        assert final is not None and final.status is RunStatus.COMPLETED and final.owner is None
        await refused(
            "an append after the lease was released",
            LeaseLostError,
            lambda: store.append("fence", [ctx.entry("fence", "s#2", token=new.token)]),
        )


async def check_renewal(ctx: Ctx) -> None:
    """renew extends every lease of the owner in one call and reports the runs it
    lost and those with a recorded cancel; it never renews a lost lease."""
    async with Opened(await ctx.make()) as store:
        x = await _claimed(store, ctx, "rx", A, SHORT)
        y = await _claimed(store, ctx, "ry", A, SHORT)
        await expire(SHORT * 1.5)
        taken = await store.claim("ry", B, ttl=LONG)  # A's lease expired: B takes ry
        renewal = await store.renew(A, ttl=LONG, held={"rx": x.token, "ry": y.token})
        assert renewal.lost == frozenset({"ry"}), f"renewal reported lost {set(renewal.lost)}"
        rx, ry = await store.get_run("rx"), await store.get_run("ry")
        assert rx is not None and rx.owner == A and rx.lease_expires_at is not None, (
            f"the renewal did not extend A's lease on rx: {rx!r}"
        )
        assert ry is not None and ry.owner == B and ry.token == taken.token, (
            f"the renewal gave ry back to A: {ry!r}"
        )
        await refused(
            "a claim of rx by another owner after A renewed",
            RunConflictError,
            lambda: store.claim("rx", C, ttl=LONG),
        )
        await store.cancel_run("rx")
        renewal = await store.renew(A, ttl=LONG, held={"rx": x.token})
        assert renewal.cancelled == frozenset({"rx"}) and not renewal.lost, (
            f"a recorded cancel was not reported: {renewal!r}"
        )
        await store.renew(A, ttl=0, held={})
        rx = await store.get_run("rx")
        assert rx is not None and rx.lease_expires_at is None, "renew(ttl=0) left A's lease live"


async def check_renewal_released(ctx: Ctx) -> None:
    """A held run whose outcome was stored with the held token (releasing the lease) is
    reported released, not lost: the engine then lets that write's answer decide. Taken
    over afterwards, it is lost."""
    async with Opened(await ctx.make()) as store:
        held = await _claimed(store, ctx, "rr", A, SHORT)
        done = attrs.evolve(held, status=RunStatus.COMPLETED, result="1", owner=None)
        await store.update_run(done)
        renewal = await store.renew(A, ttl=LONG, held={"rr": held.token})
        assert renewal.released == frozenset({"rr"}) and not renewal.lost, (
            f"a run released by its holder's own write was reported {renewal!r}"
        )
        again = await _claimed(store, ctx, "rs", A, SHORT)
        await store.update_run(attrs.evolve(again, status=RunStatus.WAITING, owner=None))
        await store.claim("rs", B, ttl=LONG)  # released, then taken by another owner
        renewal = await store.renew(A, ttl=LONG, held={"rs": again.token})
        assert renewal.lost == frozenset({"rs"}) and not renewal.released, (
            f"a run taken over after its release was reported {renewal!r}"
        )


async def check_cancel(ctx: Ctx) -> None:
    """cancel_run: a live owner's run gets cancel_requested (and its failed or paused
    outcome is stored as cancelled); others become cancelled at once; no claim
    succeeds on a cancelled run; a completed one cannot be cancelled."""
    async with Opened(await ctx.make()) as store:
        await refused(
            "cancel_run of an unknown run", RunNotFoundError, lambda: store.cancel_run("nobody")
        )
        held = await _claimed(store, ctx, "live", A, LONG)
        (entry,) = await store.append("live", [ctx.entry("live", "s#0", token=held.token)])
        cancelled = await store.cancel_run("live")
        assert cancelled.cancel_requested and cancelled.status is RunStatus.RUNNING, (
            f"cancel gave {cancelled!r}"
        )
        exc = await refused(
            "a claim of a run with a recorded cancel",
            RunCancelledError,
            lambda: store.claim("live", B, ttl=LONG),
        )
        assert "live" in str(exc), f"the error does not name the run: {exc}"
        failed = attrs.evolve(held, status=RunStatus.FAILED, owner=None, lease_expires_at=None)
        stored = await store.update_run(failed)
        got = await store.get_run("live")
        assert got is not None and got.status is RunStatus.CANCELLED, (
            f"the owner's failed outcome after a cancel is stored as {got!r}"
        )
        assert stored is None or stored.status is RunStatus.CANCELLED, f"update_run gave {stored!r}"
        assert list(await store.load_entries("live")) == [entry], "the journal was not kept"

        # A run with no live owner (paused here) is cancelled at once, requests cleared.
        idle = await _claimed(store, ctx, "idle", A, LONG)
        paused = attrs.evolve(
            idle, status=RunStatus.PAUSED, requests=('{"key":"ask#0"}',), owner=None
        )
        await store.update_run(paused)
        got = await store.cancel_run("idle")
        assert got.status is RunStatus.CANCELLED and got.requests == (), f"cancel gave {got!r}"
        again = await store.cancel_run("idle")
        assert again.status is RunStatus.CANCELLED, "a second cancel changed the run"
        for owner in (A, B):
            await refused(
                "a claim of a cancelled run",
                RunCancelledError,
                lambda owner=owner: store.claim("idle", owner, ttl=LONG),  # type: ignore[misc]
            )

        done = await _claimed(store, ctx, "done", A, LONG)
        finished = attrs.evolve(done, status=RunStatus.COMPLETED, result="1", owner=None)
        await store.update_run(finished)
        before = await store.get_run("done")
        await refused(
            "cancel_run of a completed run", RunConflictError, lambda: store.cancel_run("done")
        )
        assert await store.get_run("done") == before, "a refused cancel changed the run"


async def check_journal_gap(ctx: Ctx) -> None:
    """A journal missing a seq below the highest raises CheckpointCorruptError."""
    if ctx.remove is None:
        raise Skip("no remove= hook given (a store that holds objects cannot lose one)")
    async with Opened(await ctx.make()) as store:
        record = await _claimed(store, ctx, "gap", A, LONG)
        for i in range(3):
            await store.append("gap", [ctx.entry("gap", f"s#{i}", token=record.token)])
        await maybe_await(ctx.remove(store, "gap", 2))
        await expect_corrupt("load_entries with seq 2 missing", "gap", store.load_entries)


async def check_entry_checksum(ctx: Ctx) -> None:
    """An entry whose stored content changed (a digit of its value) raises
    CheckpointCorruptError: it is not replayed as a valid value."""
    if ctx.alter is None:
        raise Skip("no alter= hook given (a store that holds objects cannot change one)")
    async with Opened(await ctx.make()) as store:
        record = await _claimed(store, ctx, "sum", A, LONG)
        for i in range(2):
            await store.append("sum", [ctx.entry("sum", f"s#{i}", token=record.token)])
        await maybe_await(ctx.alter(store, "sum", 1))
        await expect_corrupt("load_entries with entry 1 altered", "sum", store.load_entries)


#: The lease checks by name, in the order :func:`check_store` runs them.
LEASE_CHECKS: dict[str, Callable[[Ctx], Awaitable[None]]] = {
    "claim_creates": check_claim_creates,
    "claim_exclusive": check_claim_exclusive,
    "claim_after_expiry": check_claim_after_expiry,
    "fencing": check_fencing,
    "renewal": check_renewal,
    "renewal_released": check_renewal_released,
    "cancel": check_cancel,
    "journal_gap": check_journal_gap,
    "entry_checksum": check_entry_checksum,
}
