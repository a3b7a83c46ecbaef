"""Conformance checks for ``submit_run``: dedupe ids, debounce and ``max_queued`` at submit.

Layer: testing (``tether.testing``).

They hold a store that keeps queues' rules at submit (a
:class:`~tether.stores.QueueingStore`) to its contract: a dedupe id gives
one run while it is unfinished, and a new one after; a debounced submit
rewrites the run until it starts; a submit at ``max_queued`` raises and
stores nothing; every refusal changes nothing; and submits racing, from
concurrent calls, never make two live runs of one dedupe id nor more than
``max_queued`` pending runs. A store without ``submit_run`` skips them
(``engine.submit`` refuses a dedupe id or ``max_queued`` on it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial
from typing import Any, cast

import attrs
import trio

from .._errors import QueueFullError, RunConflictError, UsageError
from ..stores._capabilities import Capability, has
from ..stores._flow import Submission
from ..stores._records import RunRecord, RunStatus
from ..stores._store import QueueingStore, Store
from ._conformance_base import Ctx, Opened, Skip
from ._conformance_leases import LONG, A, refused

__all__ = ("FLOW_CHECKS",)

#: How many submits race in the concurrency checks.
_RACERS = 8


def _queueing(store: Store) -> QueueingStore:
    if not has(store, Capability.QUEUES):
        raise Skip("the store has no submit_run (engine.submit refuses dedupe and max_queued)")
    return cast(QueueingStore, store)


def _new(ctx: Ctx, run_id: str, **kw: Any) -> RunRecord:
    fields: dict[str, Any] = {"status": RunStatus.QUEUED, "queue": "q"}
    fields.update(kw)
    return ctx.run(run_id, **fields)


async def _all(store: Store) -> list[RunRecord]:
    return list(await store.list_runs())


async def _finish(store: Store, run_id: str) -> None:
    claimed = await store.claim(run_id, A, ttl=LONG)
    await store.update_run(attrs.evolve(claimed, status=RunStatus.COMPLETED, result="1"))


async def check_submit_dedupe(ctx: Ctx) -> None:
    """A dedupe id gives its unfinished run (nothing stored); in another queue, or once
    the run finished, a submit with it stores a new run."""
    async with Opened(await ctx.make()) as opened:
        store = _queueing(opened)
        got = await store.submit_run(Submission(_new(ctx, "d-1", dedupe="once")))
        assert got == "d-1", f"a first submit with a dedupe id returned {got!r}, not 'd-1'"
        before = await _all(opened)
        got = await store.submit_run(Submission(_new(ctx, "d-2", dedupe="once", args="[2]")))
        assert got == "d-1", f"a second submit of a live dedupe id returned {got!r}, not 'd-1'"
        after = await _all(opened)
        assert after == before, f"a deduplicated submit stored something: {after!r:.300}"
        got = await store.submit_run(Submission(_new(ctx, "d-3", dedupe="once", queue="other")))
        assert got == "d-3", f"a dedupe id of another queue deduplicated: returned {got!r}"
        await _finish(opened, "d-1")
        got = await store.submit_run(Submission(_new(ctx, "d-4", dedupe="once")))
        assert got == "d-4", f"a dedupe id whose run finished gave {got!r}, not a new run"
        stored = await opened.get_run("d-4")
        assert stored is not None and stored.dedupe == "once" and stored.queue == "q", (
            f"the new run is stored as {stored!r:.300}"
        )


async def check_submit_debounce(ctx: Ctx) -> None:
    """A debounced submit rewrites its dedupe id's run (arguments, key, start) while it has
    not started; once claimed, a debounced submit gives the run unchanged."""
    async with Opened(await ctx.make()) as opened:
        store = _queueing(opened)
        start = ctx.time() + timedelta(seconds=30)

        def waiting(run_id: str, args: str, wake: int) -> Submission:
            record = _new(
                ctx,
                run_id,
                dedupe="last",
                key=f"k{wake}",
                args=args,
                status=RunStatus.WAITING,
                wake_at=start + timedelta(seconds=wake),
            )
            return Submission(record, debounce=True)

        assert await store.submit_run(waiting("b-1", "[1]", 0)) == "b-1"
        for n in (2, 3):
            got = await store.submit_run(waiting(f"b-{n}", f"[{n}]", n))
            assert got == "b-1", f"debounced submit {n} returned {got!r}, not 'b-1'"
        stored = await opened.get_run("b-1")
        assert stored is not None, "the debounced run is gone"
        assert (stored.args, stored.key, stored.wake_at) == (
            "[3]",
            "k3",
            start + timedelta(seconds=3),
        ), f"after three debounced submits the run is {stored!r:.300}"
        assert [r.run_id for r in await _all(opened)] == ["b-1"], "a debounced submit added a run"
        claimed = await opened.claim("b-1", A, ttl=LONG)
        got = await store.submit_run(waiting("b-4", "[4]", 4))
        assert got == "b-1", f"a debounced submit of a started run returned {got!r}"
        again = await opened.get_run("b-1")
        assert again is not None and (again.args, again.token) == ("[3]", claimed.token), (
            f"a debounced submit rewrote a started run: {again!r:.300}"
        )
        other = _new(ctx, "b-5", dedupe="other", status=RunStatus.WAITING, wake_at=start)
        await store.submit_run(Submission(other, debounce=True))
        wrong = attrs.evolve(other, run_id="b-6", workflow="refund")
        await refused(
            "a debounced submit of another workflow",
            RunConflictError,
            lambda: store.submit_run(Submission(wrong, debounce=True)),
        )
        assert await opened.get_run("b-6") is None, "a refused debounced submit stored a run"


async def check_submit_max_queued(ctx: Ctx) -> None:
    """A submit that finds ``max_queued`` pending runs (queued, or scheduled and never
    claimed) raises QueueFullError naming the queue and stores nothing; other queues and
    claimed runs do not count."""
    async with Opened(await ctx.make()) as opened:
        store = _queueing(opened)
        scheduled = _new(ctx, "m-2", status=RunStatus.WAITING, wake_at=ctx.time())
        for record in (_new(ctx, "m-1"), scheduled, _new(ctx, "o-1", queue="other")):
            assert await store.submit_run(Submission(record, max_queued=2)) == record.run_id
        before = await _all(opened)
        exc = await refused(
            "a submit at max_queued",
            QueueFullError,
            lambda: store.submit_run(Submission(_new(ctx, "m-3"), max_queued=2)),
        )
        assert isinstance(exc, QueueFullError)
        said = (exc.queue, exc.depth, exc.max_queued)
        assert said == ("q", 2, 2), f"QueueFullError says (queue, depth, max_queued) {said}"
        assert "'q'" in str(exc), f"QueueFullError does not name the queue: {exc}"
        assert await _all(opened) == before, "a submit refused at max_queued stored something"
        # A deduplicated submit stores nothing, so a full queue gives it its run.
        dedupe = _new(ctx, "m-4", dedupe="x")
        await refused(
            "a dedupe id's first submit at max_queued",
            QueueFullError,
            lambda: store.submit_run(Submission(dedupe, max_queued=2)),
        )
        await opened.claim("m-1", A, ttl=LONG)
        assert await store.submit_run(Submission(dedupe, max_queued=2)) == "m-4"
        second = attrs.evolve(dedupe, run_id="m-5")
        got = await store.submit_run(Submission(second, max_queued=2))
        assert got == "m-4", f"a full queue refused a deduplicated submit, or gave {got!r}"


async def check_submit_existing_id(ctx: Ctx) -> None:
    """A submit of a run id that is stored raises RunConflictError (``engine.submit`` then
    finds a resubmitted run there), never QueueFullError, however full its queue; it
    changes nothing."""
    async with Opened(await ctx.make()) as opened:
        store = _queueing(opened)
        first = _new(ctx, "e-1")
        await store.submit_run(Submission(first, max_queued=1))
        before = await _all(opened)
        for again in (Submission(first, max_queued=1), Submission(first)):
            await refused(
                f"a resubmitted id, max_queued {again.max_queued}",
                RunConflictError,
                partial(store.submit_run, again),
            )
        assert await _all(opened) == before, "a resubmitted id changed the store"


async def check_submit_refusals(ctx: Ctx) -> None:
    """submit_run refuses what is not a new run, names that break the rule, and debounce
    without a dedupe id (UsageError); and an existing id (RunConflictError); none stores
    anything."""
    async with Opened(await ctx.make()) as opened:
        store = _queueing(opened)
        await store.submit_run(Submission(_new(ctx, "r-1")))
        before = await _all(opened)
        bad: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("a running run", lambda: store.submit_run(Submission(_new(ctx, "r-2", token=1)))),
            (
                "a waiting run without wake_at",
                lambda: store.submit_run(Submission(_new(ctx, "r-3", status=RunStatus.WAITING))),
            ),
            (
                "an empty queue name",
                lambda: store.submit_run(Submission(_new(ctx, "r-4", queue=""))),
            ),
            ("a key with NUL", lambda: store.submit_run(Submission(_new(ctx, "r-5", key="a\0")))),
            (
                "debounce without a dedupe id",
                lambda: store.submit_run(Submission(_new(ctx, "r-6"), debounce=True)),
            ),
            (
                "max_queued of 0",
                lambda: store.submit_run(Submission(_new(ctx, "r-7"), max_queued=0)),
            ),
            ("not a Submission", lambda: store.submit_run(_new(ctx, "r-8"))),  # type: ignore[arg-type]
        ]
        for what, call in bad:
            await refused(f"submit_run of {what}", UsageError, call)
        await refused(
            "submit_run of an existing id",
            RunConflictError,
            lambda: store.submit_run(Submission(_new(ctx, "r-1", args="[9]"))),
        )
        after = await _all(opened)
        assert after == before, f"refused submits changed the store: {after!r:.300}"


async def check_concurrent_dedupe(ctx: Ctx) -> None:
    """Submits of one dedupe id racing from concurrent calls make one run, and all of them
    return its id."""
    async with Opened(await ctx.make()) as opened:
        store = _queueing(opened)
        got: list[str] = []

        async def submit(n: int) -> None:
            got.append(await store.submit_run(Submission(_new(ctx, f"c-{n}", dedupe="race"))))

        async with trio.open_nursery() as nursery:
            for n in range(_RACERS):
                nursery.start_soon(submit, n)
        runs = [r.run_id for r in await _all(opened)]
        assert len(runs) == 1, f"{_RACERS} racing submits of one dedupe id stored {runs}"
        assert set(got) == set(runs), f"racing submits returned {got}, stored {runs}"


async def check_concurrent_max_queued(ctx: Ctx) -> None:
    """Submits racing for the last places of a queue: exactly ``max_queued`` are stored,
    the others raise QueueFullError."""
    async with Opened(await ctx.make()) as opened:
        store = _queueing(opened)
        limit = 3
        full: list[int] = []

        async def submit(n: int) -> None:
            try:
                await store.submit_run(Submission(_new(ctx, f"c-{n}"), max_queued=limit))
            except QueueFullError:
                full.append(n)

        async with trio.open_nursery() as nursery:
            for n in range(_RACERS):
                nursery.start_soon(submit, n)
        runs = await _all(opened)
        assert len(runs) == limit, (
            f"{_RACERS} racing submits, max_queued {limit}: {len(runs)} stored"
        )
        assert len(full) == _RACERS - limit, f"{len(full)} racing submits raised QueueFullError"


#: The checks of ``submit_run``, by name (see :data:`tether.testing.CHECKS`).
FLOW_CHECKS: dict[str, Callable[[Ctx], Awaitable[None]]] = {
    "submit_dedupe": check_submit_dedupe,
    "submit_debounce": check_submit_debounce,
    "submit_max_queued": check_submit_max_queued,
    "submit_existing_id": check_submit_existing_id,
    "submit_refusals": check_submit_refusals,
    "concurrent_dedupe": check_concurrent_dedupe,
    "concurrent_max_queued": check_concurrent_max_queued,
}
