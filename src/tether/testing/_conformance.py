"""The store conformance suite: plain async checks any store must pass.

Layer: testing (``tether.testing``).

No pytest here: :func:`check_store` runs inside any Trio run and raises
:class:`StoreConformanceError` listing every check that failed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta, timezone
from typing import Final

import attrs
import trio

from .._errors import ErrorInfo, RunConflictError, RunNotFoundError
from ..stores._records import Entry, EntryKind, EntryStatus, RunStatus
from ..stores._store import Store
from ._conformance_base import (
    CANCEL_POINTS,
    ConformanceResult,
    Corrupter,
    Ctx,
    Opened,
    Reopener,
    Skip,
    StoreConformanceError,
    StoreFactory,
    Tamperer,
    cancelled,
    expect_corrupt,
    maybe_await,
    same,
)
from ._conformance_batch import BATCH_CHECKS
from ._conformance_delete import DELETE_CHECKS
from ._conformance_flow import FLOW_CHECKS
from ._conformance_leases import LEASE_CHECKS
from ._conformance_messages import MESSAGE_CHECKS
from ._conformance_queue import QUEUE_CHECKS
from ._conformance_respond import RESPOND_CHECKS
from ._conformance_run_ids import RUN_ID_CHECKS

__all__ = (
    "CHECKS",
    "ConformanceResult",
    "Corrupter",
    "Reopener",
    "StoreConformanceError",
    "StoreFactory",
    "Tamperer",
    "check_store",
)

# -- the checks ------------------------------------------------------------------------


#: A stored failure with everything an error can hold: a traceback and a group's members.
_FAILURE: Final = ErrorInfo(
    type="ExceptionGroup",
    message="out of stock ü (2 sub-exceptions)",
    key=None,
    traceback='Traceback (most recent call last):\n  File "shop.py", line 7\nValueError: ü\n',
    members=(
        ErrorInfo(type="ValueError", message="out of stock ü", key="reserve#0"),
        ErrorInfo(type="KeyError", message="'lamp'", key="price#0"),
    ),
)


async def check_run_round_trip(ctx: Ctx) -> None:
    """create/get/update/list return exactly what was stored."""
    async with Opened(await ctx.make()) as store:
        record = ctx.run("rt-1", requests=('{"q":1}', '{"q":2}'))
        await store.create_run(record)
        got = await store.get_run("rt-1")
        assert got == record, f"get_run returned {got!r}, stored {record!r}"
        updated = attrs.evolve(
            record,
            status=RunStatus.FAILED,
            result='{"total":3}',
            error=_FAILURE,
            requests=(),
            updated_at=ctx.time(timezone(timedelta(hours=-7))),
        )
        await store.update_run(updated)
        got = await store.get_run("rt-1")
        assert got == updated, f"after update_run, get_run returned {got!r}, stored {updated!r}"
        runs = list(await store.list_runs())
        assert runs == [updated], f"list_runs returned {runs!r}"


async def check_list_runs_order(ctx: Ctx) -> None:
    """list_runs returns every run, oldest first (not sorted by id)."""
    async with Opened(await ctx.make()) as store:
        records = [ctx.run(run_id) for run_id in ("order-c", "order-a", "order-b")]
        for record in records:
            await store.create_run(record)
        runs = list(await store.list_runs())
        ids = [r.run_id for r in runs]
        assert ids == ["order-c", "order-a", "order-b"], f"list_runs order: {ids}"
        assert runs == records


async def check_create_conflict(ctx: Ctx) -> None:
    """create_run of an existing id raises RunConflictError and changes nothing."""
    async with Opened(await ctx.make()) as store:
        first = ctx.run("dup")
        await store.create_run(first)
        try:
            await store.create_run(ctx.run("dup", workflow="other"))
        except RunConflictError:
            pass
        else:
            raise AssertionError("create_run of an existing id did not raise RunConflictError")
        got = await store.get_run("dup")
        assert got == first, f"the failed create_run changed the record: {got!r}"


async def check_unknown_run(ctx: Ctx) -> None:
    """Unknown runs: get_run -> None, load_entries -> empty, update/append raise."""
    async with Opened(await ctx.make()) as store:
        got = await store.get_run("nobody")
        assert got is None, f"get_run of an unknown id returned {got!r}"
        entries = list(await store.load_entries("nobody"))
        assert entries == [], f"load_entries of an unknown id returned {entries!r}"
        for what, call in (
            ("update_run", lambda: store.update_run(ctx.run("nobody"))),
            ("append", lambda: store.append("nobody", [ctx.entry("nobody", "s#0")])),
        ):
            try:
                await call()
            except RunNotFoundError:
                pass
            else:
                raise AssertionError(f"{what} of an unknown run did not raise RunNotFoundError")
        got = await store.get_run("nobody")
        assert got is None, f"a failed update_run/append created the run: {got!r}"
        assert list(await store.load_entries("nobody")) == []


async def check_append_seqs(ctx: Ctx) -> None:
    """append assigns distinct increasing seqs and returns the stored entries."""
    async with Opened(await ctx.make()) as store:
        await store.create_run(ctx.run("seq"))
        given = [ctx.entry("seq", f"s#{i}") for i in range(3)]
        returned: list[Entry] = []
        for e in given:
            out = list(await store.append("seq", [e]))
            assert len(out) == 1, f"append of one entry returned {len(out)}"
            returned += out
        batch = [
            ctx.entry("seq", "b#0", kind=EntryKind.RESPONSE),
            ctx.entry("seq", "b#1", status=EntryStatus.FAILED, value=None, error=_FAILURE),
        ]
        out = list(await store.append("seq", batch))
        assert len(out) == 2, f"append of two entries returned {len(out)}"
        returned += out
        given += batch
        for r, g in zip(returned, given, strict=True):
            assert same(r, g), f"append returned {r!r} for {g!r}"
        seqs = [r.seq for r in returned]
        assert all(isinstance(s, int) for s in seqs), f"seqs {seqs}"
        assert seqs == sorted(set(seqs)), f"seqs not distinct and increasing: {seqs}"  # type: ignore[type-var]
        loaded = list(await store.load_entries("seq"))
        assert loaded == returned, f"load_entries returned {loaded!r}, append returned {returned!r}"


async def check_concurrent_appends(ctx: Ctx) -> None:
    """50 appends started at once from a nursery are all kept, with distinct seqs."""
    n = 50
    async with Opened(await ctx.make()) as store:
        await store.create_run(ctx.run("par"))
        given = [ctx.entry("par", f"p#{i}") for i in range(n)]
        returned: dict[int, Entry] = {}

        async def one(i: int) -> None:
            out = list(await store.append("par", [given[i]]))
            assert len(out) == 1, f"append returned {len(out)} entries for one"
            returned[i] = out[0]

        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(one, i)
        for i, g in enumerate(given):
            assert same(returned[i], g), f"append returned {returned[i]!r} for {g!r}"
        seqs = sorted(e.seq for e in returned.values() if e.seq is not None)
        assert len(set(seqs)) == n, f"{n} concurrent appends got {len(set(seqs))} distinct seqs"
        loaded = list(await store.load_entries("par"))
        assert len(loaded) == n, f"{n} concurrent appends, {len(loaded)} entries loaded"
        assert [e.seq for e in loaded] == seqs, "load_entries is not in seq order"
        assert sorted(loaded, key=lambda e: e.key) == sorted(
            returned.values(), key=lambda e: e.key
        ), "load_entries differs from what append returned"


async def check_reads_are_copies(ctx: Ctx) -> None:
    """Changing what a read returned changes nothing stored."""
    async with Opened(await ctx.make()) as store:
        await store.create_run(ctx.run("copy"))
        await store.append("copy", [ctx.entry("copy", "s#0")])
        entries = await store.load_entries("copy")
        before = list(entries)
        if isinstance(entries, list):
            entries.clear()
        runs = await store.list_runs()
        runs_before = list(runs)
        if isinstance(runs, list):
            runs.clear()
        assert list(await store.load_entries("copy")) == before, "load_entries shares its list"
        assert list(await store.list_runs()) == runs_before, "list_runs shares its list"


async def check_journals_independent(ctx: Ctx) -> None:
    """Appends to one run never show up in another's journal."""
    async with Opened(await ctx.make()) as store:
        for run_id in ("ind-a", "ind-b"):
            await store.create_run(ctx.run(run_id))
        for i in range(3):
            for run_id in ("ind-a", "ind-b"):
                await store.append(run_id, [ctx.entry(run_id, f"{run_id}#{i}")])
        for run_id in ("ind-a", "ind-b"):
            loaded = list(await store.load_entries(run_id))
            keys = [e.key for e in loaded]
            assert keys == [f"{run_id}#{i}" for i in range(3)], f"{run_id}: journal {keys}"
            assert {e.run_id for e in loaded} == {run_id}
            seqs = [e.seq for e in loaded]
            assert len(set(seqs)) == 3


async def _append_cancelled(
    store: Store, e: Entry, *, step: int | None, yields: int, delay: float
) -> list[Entry]:
    """Append *e* under a scope cancelled at the chosen moment; what it returned."""
    returned = await cancelled(
        lambda: store.append(e.run_id, [e]), step=step, yields=yields, delay=delay
    )
    return [] if returned is None else list(returned)


async def check_cancelled_append_atomic(ctx: Ctx) -> None:
    """An append cancelled at any point stored its entry whole or not at all,
    a returned append is stored, and retrying the same entry keeps one copy."""
    async with Opened(await ctx.make()) as store:
        await store.create_run(ctx.run("atom"))
        # Cancel at the n-th checkpoint inside the call; after n passes of
        # another task; after short real-time waits (a thread-backed store is
        # then mid-write).
        for i, (step, yields, delay) in enumerate(CANCEL_POINTS):
            e = ctx.entry("atom", f"c#{i}")
            returned = await _append_cancelled(store, e, step=step, yields=yields, delay=delay)
            where = (
                f"append cancelled at its checkpoint #{step}"
                if step is not None
                else f"append cancelled after {yields} yields and {delay}s"
            )
            mine = [x for x in await store.load_entries("atom") if x.key == e.key]
            assert len(mine) <= 1, f"{where}: {len(mine)} copies stored"
            if returned:
                assert mine, f"{where}: append returned but nothing is stored"
            if mine:
                assert same(mine[0], e), f"{where}: torn record {mine[0]!r} for {e!r}"
            again = list(await store.append("atom", [e]))
            mine = [x for x in await store.load_entries("atom") if x.key == e.key]
            assert len(mine) == 1, f"{where}, then retried: {len(mine)} copies stored"
            assert again == mine, f"{where}: the retry returned {again!r}, stored {mine!r}"
        loaded = list(await store.load_entries("atom"))
        seqs = [x.seq for x in loaded]
        assert len(set(seqs)) == len(seqs) == len(CANCEL_POINTS), f"seqs {seqs}"


async def check_idempotent_append(ctx: Ctx) -> None:
    """Appending an entry equal to a stored one returns the stored one."""
    async with Opened(await ctx.make()) as store:
        await store.create_run(ctx.run("idem"))
        e = ctx.entry("idem", "s#0")
        (first,) = await store.append("idem", [e])
        await store.append("idem", [ctx.entry("idem", "s#1")])
        (second,) = await store.append("idem", [e])
        assert second == first, f"re-append returned {second!r}, first {first!r}"
        other = attrs.evolve(e, attempt=2)  # a different record of the same key
        (third,) = await store.append("idem", [other])
        assert third.seq != first.seq and same(third, other)
        loaded = list(await store.load_entries("idem"))
        assert [x.key for x in loaded] == ["s#0", "s#1", "s#0"], [x.key for x in loaded]


async def check_strict_reads(ctx: Ctx) -> None:
    """A record that does not decode raises CheckpointCorruptError naming the run;
    nothing older is returned in its place."""
    if ctx.corrupt is None:
        raise Skip("no corrupt= hook given (a store that holds objects cannot corrupt them)")
    async with Opened(await ctx.make()) as store:
        await store.create_run(ctx.run("strict-old"))
        await store.create_run(ctx.run("strict-new"))
        for i in range(3):
            await store.append("strict-new", [ctx.entry("strict-new", f"s#{i}")])
        newest = list(await store.load_entries("strict-new"))[-1]
        assert newest.seq is not None
        await maybe_await(ctx.corrupt(store, "strict-new", newest.seq))
        await expect_corrupt(
            "load_entries with its newest entry corrupt", "strict-new", store.load_entries
        )
        await maybe_await(ctx.corrupt(store, "strict-new", None))
        await expect_corrupt("get_run of a corrupt run record", "strict-new", store.get_run)
        await expect_corrupt(
            "list_runs with the newest run corrupt", "strict-new", lambda _: store.list_runs()
        )
        got = await store.get_run("strict-old")
        assert got is not None and got.run_id == "strict-old", "a healthy run became unreadable"


async def check_reopen(ctx: Ctx) -> None:
    """Everything stored is there after close and reopen on the same location."""
    if ctx.reopen is None:
        raise Skip("no reopen= hook given (a store that keeps nothing after close)")
    first = await ctx.make()
    async with Opened(first) as store:
        record = ctx.run("keep")
        await store.create_run(record)
        stored = list(await store.append("keep", [ctx.entry("keep", f"s#{i}") for i in range(2)]))
        record = attrs.evolve(record, status=RunStatus.COMPLETED, result="1")
        await store.update_run(record)
    second = await maybe_await(ctx.reopen(first))
    async with Opened(second) as store:
        assert await store.get_run("keep") == record, "the run record changed across reopen"
        assert list(await store.load_entries("keep")) == stored, "the journal changed"
        assert list(await store.list_runs()) == [record]
        (more,) = await store.append("keep", [ctx.entry("keep", "s#2")])
        assert more.seq not in {e.seq for e in stored}, "a seq was reused after reopen"


#: Every check by name, in the order :func:`check_store` runs them.
CHECKS: dict[str, Callable[[Ctx], Awaitable[None]]] = {
    "run_round_trip": check_run_round_trip,
    "list_runs_order": check_list_runs_order,
    "create_conflict": check_create_conflict,
    "unknown_run": check_unknown_run,
    "append_seqs": check_append_seqs,
    "concurrent_appends": check_concurrent_appends,
    "reads_are_copies": check_reads_are_copies,
    "journals_independent": check_journals_independent,
    "cancelled_append_atomic": check_cancelled_append_atomic,
    "idempotent_append": check_idempotent_append,
    "strict_reads": check_strict_reads,
    "reopen": check_reopen,
    **LEASE_CHECKS,
    **QUEUE_CHECKS,
    **BATCH_CHECKS,
    **DELETE_CHECKS,
    **MESSAGE_CHECKS,
    **RESPOND_CHECKS,
    **FLOW_CHECKS,
    **RUN_ID_CHECKS,
}


async def check_store(
    factory: StoreFactory,
    *,
    only: Iterable[str] | None = None,
    reopen: Reopener | None = None,
    corrupt: Corrupter | None = None,
    remove: Tamperer | None = None,
    alter: Tamperer | None = None,
) -> ConformanceResult:
    """Run the store conformance checks against stores made by *factory*.

    Each check makes its own store with ``factory()`` (a sync or async
    callable returning a fresh, **unopened** store on a fresh location), opens
    it, and closes it again, whatever happens. Every check runs even when an
    earlier one failed.

    Args:
        factory: makes a fresh, unopened store.
        only: names of the checks to run (keys of :data:`CHECKS`); default all.
        reopen: for a persistent store, given a closed store, makes a new
            unopened store on the same location (or returns the store itself
            if it may be reopened); enables the ``reopen`` check.
        corrupt: damages a stored record so it cannot be decoded (see
            :data:`Corrupter`); enables the ``strict_reads`` check.
        remove: deletes a stored journal entry (see :data:`Tamperer`);
            enables the ``journal_gap`` check.
        alter: changes one digit of a stored entry's value, keeping it valid
            JSON (see :data:`Tamperer`); enables the ``entry_checksum`` check.

    The lease checks (``claim_*``, ``fencing``, ``renewal``, ``cancel``) wait
    for short leases (0.3 s) to expire, on Trio's clock and the wall clock.
    The queue checks (``claim_next_*``) are skipped for a store without
    ``claim_next`` (it serves no workers), the batched claim checks (``claim_batch*``)
    for one without ``claim_batch``, ``advertise`` for one without
    ``advertise`` and ``list_workers`` (it cannot tell stranded runs),
    ``watch`` for one without ``watch``, ``delete_run`` for one without ``delete_run`` (it cannot
    delete runs, so ``tether runs prune`` refuses it), and the mailbox checks (``messages``,
    ``message_*``) for one without ``send_message`` and ``load_messages`` (it keeps no
    messages, so ``engine.send`` and ``tether.receive`` refuse it), and the ``respond``
    checks (``respond``, ``respond_refusals``, ``concurrent_responds``) for one without
    ``respond`` (``engine.respond`` refuses it). The run id checks (``run_id_rule``,
    ``odd_run_ids``) hold the store to :func:`tether.stores.check_run_id`'s rule.
    ``batch_fencing`` writes to several runs at once, one of them with a stale
    token: only that one is refused, however the store groups the writes.

    Returns:
        Which checks passed and which were skipped (a missing hook).

    This is a checkpoint; it must run inside Trio. Cancellation propagates
    (the store being checked is closed).

    Raises:
        StoreConformanceError: one or more checks failed; lists them all.
        ValueError: *only* names an unknown check.
    """
    names = list(CHECKS) if only is None else list(only)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise ValueError(f"unknown check(s) {unknown}; known: {', '.join(CHECKS)}")
    ctx = Ctx(factory=factory, reopen=reopen, corrupt=corrupt, remove=remove, alter=alter)
    passed: list[str] = []
    skipped: list[tuple[str, str]] = []
    failures: list[tuple[str, BaseException]] = []
    for name in names:
        try:
            await CHECKS[name](ctx)
        except Skip as skip:
            skipped.append((name, str(skip)))
        except Exception as exc:  # a failed check; BaseExceptions propagate
            failures.append((name, exc))
        else:
            passed.append(name)
    if failures:
        label = getattr(factory, "__qualname__", None) or repr(factory)
        raise StoreConformanceError(f"the stores of {label}", failures)
    return ConformanceResult(passed=tuple(passed), skipped=tuple(skipped))
