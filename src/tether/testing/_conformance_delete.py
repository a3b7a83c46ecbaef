"""Conformance check for deleting runs (``delete_run``, for retention).

Layer: testing (``tether.testing``).

``delete_run`` holds a store that can delete runs (one with ``delete_run``,
:class:`~tether.stores.DeletableStore`) to its contract: the record and its
whole journal go together; the id then reads as unknown everywhere and can
be created again, fresh; an unknown id is ``False``; a run an owner executes
(a live lease) is refused and kept whole. A store without ``delete_run``
skips it (it cannot prune runs).
"""

from __future__ import annotations

from typing import cast

from .._errors import RunConflictError
from ..stores._capabilities import Capability, has
from ..stores._records import EntryKind, RunStatus
from ..stores._store import DeletableStore, Store
from ._conformance_base import Ctx, Opened, Skip
from ._conformance_leases import LONG, A, refused

__all__ = ("DELETE_CHECKS",)


def _deletes(store: Store) -> DeletableStore:
    if not has(store, Capability.DELETE):
        raise Skip("the store has no delete_run (it cannot delete runs)")
    return cast(DeletableStore, store)


async def check_delete_run(ctx: Ctx) -> None:
    """delete_run removes the record and its journal; the id reads as unknown and can
    be created again, fresh; an unknown id is False; a live lease refuses it."""
    async with Opened(await ctx.make()) as store:
        deleting = _deletes(store)
        await store.create_run(ctx.run("del-a", status=RunStatus.COMPLETED, result="1"))
        await store.create_run(ctx.run("del-b"))
        for i in range(3):
            await store.append("del-a", [ctx.entry("del-a", f"s#{i}")])
        await store.append("del-b", [ctx.entry("del-b", "s#0")])
        kept = list(await store.load_entries("del-b"))

        deleted = await deleting.delete_run("del-a")
        assert deleted is True, f"delete_run of a stored run returned {deleted!r}, not True"
        got = await store.get_run("del-a")
        assert got is None, f"get_run of a deleted run returned {got!r}"
        entries = list(await store.load_entries("del-a"))
        assert entries == [], f"the journal of a deleted run is still there: {entries!r}"
        ids = [r.run_id for r in await store.list_runs()]
        assert ids == ["del-b"], f"list_runs after a delete: {ids}"
        assert list(await store.load_entries("del-b")) == kept, "another run's journal changed"
        for run_id in ("del-a", "nobody"):
            again = await deleting.delete_run(run_id)
            assert again is False, f"delete_run of unknown run {run_id!r} returned {again!r}"

        # The id is free: a new run under it starts fresh, with seq 1 and token 1.
        fresh = ctx.run("del-a", workflow="refund", args='["o-9"]')
        await store.create_run(fresh)
        got = await store.get_run("del-a")
        assert got == fresh, f"the run created again under a deleted id reads {got!r}"
        assert list(await store.load_entries("del-a")) == [], "the old journal came back"
        (first,) = await store.append("del-a", [ctx.entry("del-a", "r#0")])
        assert first.seq == 1, f"the first entry of a run created again got seq {first.seq}"
        assert await deleting.delete_run("del-a") is True
        claimed = await store.claim("del-a", A, ttl=LONG, create=ctx.run("del-a"))
        assert claimed.token == 1, f"a claim that creates a deleted id got token {claimed.token}"

        # Executing under a live lease: refused, and nothing is deleted.
        await store.append(
            "del-a", [ctx.entry("del-a", "a#0", kind=EntryKind.RESPONSE, token=claimed.token)]
        )
        journal = list(await store.load_entries("del-a"))
        await refused(
            "delete_run of a run with a live lease",
            RunConflictError,
            lambda: deleting.delete_run("del-a"),
        )
        got = await store.get_run("del-a")
        assert got is not None and got.owner == A, f"a refused delete changed the run: {got!r}"
        assert list(await store.load_entries("del-a")) == journal, "a refused delete changed it"
        await store.renew(A, ttl=0, held={"del-a": claimed.token})  # the lease ends now
        assert await deleting.delete_run("del-a") is True, "no delete once the lease ended"
        assert await store.get_run("del-a") is None


#: The delete check by name.
DELETE_CHECKS = {"delete_run": check_delete_run}
