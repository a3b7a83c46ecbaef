"""Conformance checks for run ids: one rule, held by every store.

Layer: testing (``tether.testing``).

The rule is :func:`tether.stores.check_run_id`'s: a ``str`` of 1 to 200
UTF-8 bytes, valid Unicode, without NUL. ``run_id_rule`` holds a store to
refusing every other id with that :class:`~tether.UsageError` (never a store
error, never a stored run), at each call that takes a run id.
``odd_run_ids`` holds it to keeping every valid id exactly, however odd
(``/``, ``\\``, a leading ``.``, control characters, 200 bytes of ``é``):
created, claimed, read back, listed, paged after, journaled, updated,
cancelled, and, where the store has them, messages, deletes and a reopen.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, cast

import attrs

from .._errors import RunNotFoundError, UsageError
from ..stores._capabilities import Capability, has
from ..stores._mailbox import MailboxStore
from ..stores._records import RunStatus
from ..stores._run_ids import MAX_RUN_ID_BYTES
from ..stores._store import DeletableStore, Store
from ._conformance_base import Ctx, Opened, maybe_await, same
from ._conformance_leases import LONG, A, refused

__all__ = ("RUN_ID_CHECKS",)

#: Ids no store may take, by what is wrong with them.
REFUSED: Final = {
    "a lone surrogate": "order-\ud800-1",
    "a NUL": "order-\x00-1",
    f"{MAX_RUN_ID_BYTES + 1} bytes": "r" * (MAX_RUN_ID_BYTES + 1),
    f"{MAX_RUN_ID_BYTES + 1} bytes of two-byte characters": "é" * 100 + "r",
    "nothing": "",
}

#: Valid ids every store keeps exactly, some of which no file system takes as a name.
ODD: Final = (
    "a/b",
    "../up",
    "a\\b",
    ".hidden",
    ".",
    "..",
    "evil-\x1b]0;pwned\x07\x1b[2J-id",
    "tab\there\nnewline\x7f",
    "é" * (MAX_RUN_ID_BYTES // 2),
    "r" * MAX_RUN_ID_BYTES,
    "🦀 ünï cödé 漢字",
    " spaced ",
    ".r-" + "0" * 64,
    "plain",
)


async def check_run_id_rule(ctx: Ctx) -> None:
    """An invalid run id (a lone surrogate, a NUL, 201 UTF-8 bytes, empty) is refused
    with UsageError naming it by create_run and claim(create=), and nothing is stored;
    the calls that read or change a run refuse it too, or find no such run."""
    async with Opened(await ctx.make()) as store:
        for problem, run_id in REFUSED.items():
            record = ctx.run(run_id)
            storing: dict[str, Callable[[], Awaitable[Any]]] = {
                "create_run": lambda record=record: store.create_run(record),  # type: ignore[misc]
                "claim with create": lambda run_id=run_id, record=record: store.claim(  # type: ignore[misc]
                    run_id, A, ttl=LONG, create=record
                ),
            }
            for what, call in storing.items():
                exc = await refused(f"{what} of a run id with {problem}", UsageError, call)
                _names(exc, run_id, f"{what} of a run id with {problem}")
            await _refused_or_unknown(store, ctx, run_id, problem)
        runs = list(await store.list_runs())
        assert runs == [], f"refused run ids were stored: {[r.run_id for r in runs]!r:.300}"


def _names(exc: Exception, run_id: str, what: str) -> None:
    if not run_id:
        assert "empty" in str(exc), f"{what}: the UsageError does not say the id is empty: {exc}"
        return
    shown = repr(run_id)[1:20]  # (the start of the id, escaped)
    assert shown in str(exc), f"{what}: the UsageError does not name the id ({shown!r}): {exc}"


async def _refused_or_unknown(store: Store, ctx: Ctx, run_id: str, problem: str) -> None:
    """The other calls given the invalid *run_id*: UsageError, or what an unknown id gives."""
    unknown: dict[str, tuple[Callable[[], Awaitable[Any]], Callable[[Any], bool]]] = {
        "get_run": (lambda: store.get_run(run_id), lambda got: got is None),
        "load_entries": (lambda: store.load_entries(run_id), lambda got: list(got) == []),
    }
    missing: dict[str, Callable[[], Awaitable[Any]]] = {
        "update_run": lambda: store.update_run(ctx.run(run_id)),
        "append": lambda: store.append(run_id, [ctx.entry(run_id, "s#0")]),
        "cancel_run": lambda: store.cancel_run(run_id),
        "list_runs(after=)": lambda: store.list_runs(after=run_id),
    }
    for what, (call, fine) in unknown.items():
        try:
            got = await call()
        except UsageError as exc:
            _names(exc, run_id, f"{what} of a run id with {problem}")
        else:
            assert fine(got), f"{what} of a run id with {problem} returned {got!r:.300}"
    for what, call in missing.items():
        try:
            got = await call()
        except UsageError as exc:
            _names(exc, run_id, f"{what} of a run id with {problem}")
        except RunNotFoundError:
            pass
        else:
            raise AssertionError(
                f"{what} of a run id with {problem}: neither UsageError nor RunNotFoundError; "
                f"returned {got!r:.300}"
            )


async def check_odd_run_ids(ctx: Ctx) -> None:
    """Every valid run id, however odd ('/', '\\\\', a leading '.', control characters,
    200 bytes of 'é'), is kept exactly: created or claimed, read, listed, paged after,
    journaled, updated, cancelled, sent messages, deleted, and found after a reopen."""
    store = await ctx.make()
    async with Opened(store):
        for i, run_id in enumerate(ODD):
            if i % 2:  # every other run created by a claim, and released
                claimed = await store.claim(run_id, A, ttl=LONG, create=ctx.run(run_id))
                assert claimed.run_id == run_id, f"claim(create=) returned {claimed.run_id!r}"
                entry = ctx.entry(run_id, "s#0", token=claimed.token)
                (stored,) = await store.append(run_id, [entry])
                await store.update_run(attrs.evolve(claimed, owner=None, lease_expires_at=None))
            else:
                await store.create_run(ctx.run(run_id))
                entry = ctx.entry(run_id, "s#0")
                (stored,) = await store.append(run_id, [entry])
            assert same(stored, entry), f"run {run_id!r}: append returned {stored!r}"
            got = await store.get_run(run_id)
            assert got is not None and got.run_id == run_id, (
                f"run {run_id!r} reads back as {None if got is None else got.run_id!r}"
            )
            journal = list(await store.load_entries(run_id))
            assert journal == [stored], f"run {run_id!r}: the journal reads {journal!r}"
        ids = [r.run_id for r in await store.list_runs()]
        assert ids == list(ODD), f"list_runs lists {ids!r}, not every run created, in order"
        after = [r.run_id for r in await store.list_runs(after=ODD[0], limit=2)]
        assert after == list(ODD[1:3]), f"list_runs(after={ODD[0]!r}) lists {after!r}"
        for run_id in ODD[:3]:
            cancelled = await store.cancel_run(run_id)
            assert cancelled.run_id == run_id and cancelled.status is RunStatus.CANCELLED, (
                f"cancel_run({run_id!r}) returned {cancelled!r:.300}"
            )
        await _messages(store, ctx)
        if has(store, Capability.DELETE):
            deleting = cast(DeletableStore, store)
            assert await deleting.delete_run(ODD[3]) is True, f"delete_run({ODD[3]!r})"
            assert await store.get_run(ODD[3]) is None, f"run {ODD[3]!r} is still there"
            assert list(await store.load_entries(ODD[3])) == [], "its journal is still there"
    if ctx.reopen is None:
        return
    kept = [r for r in ODD if r != ODD[3] or not has(store, Capability.DELETE)]
    async with Opened(await maybe_await(ctx.reopen(store))) as again:
        ids = [r.run_id for r in await again.list_runs()]
        assert ids == kept, f"after a reopen, list_runs lists {ids!r}"
        for run_id in kept:
            got = await again.get_run(run_id)
            assert got is not None and got.run_id == run_id, f"after a reopen, {run_id!r}"
            assert len(await again.load_entries(run_id)) == 1, f"the journal of {run_id!r}"


async def _messages(store: Store, ctx: Ctx) -> None:
    """Messages to odd ids (a store with a mailbox): sent, loaded back exactly."""
    if not has(store, Capability.MESSAGES):
        return
    box = cast(MailboxStore, store)
    for run_id in ODD[3:]:
        sent = await box.send_message(run_id, "note", '"hi"', now=ctx.time())
        assert sent.run_id == run_id, f"send_message to {run_id!r} returned {sent!r}"
        loaded = list(await box.load_messages(run_id))
        assert loaded == [sent], f"the messages of run {run_id!r} read {loaded!r}"


RUN_ID_CHECKS: dict[str, Callable[[Ctx], Awaitable[None]]] = {
    "run_id_rule": check_run_id_rule,
    "odd_run_ids": check_odd_run_ids,
}
