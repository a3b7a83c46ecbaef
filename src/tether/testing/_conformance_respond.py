"""Conformance checks for ``respond``: responses journaled and the run queued, in one step.

Layer: testing (``tether.testing``).

They hold a store that takes responses (a
:class:`~tether.stores.RespondingStore`) to its contract: the response entries
get the run's next seqs and the run becomes ``queued`` with the answered
requests gone, together; every refusal (an unknown run, a key not pending, a
finished or executing run, bad arguments) changes nothing; and of two
responds racing for one request, exactly one wins. A store without
``respond`` skips them (``engine.respond`` refuses it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import trio

from .._errors import (
    Request,
    RunConflictError,
    RunNotFoundError,
    UnknownRequestError,
    UsageError,
)
from ..stores._capabilities import responder_of
from ..stores._records import Entry, EntryKind, RunStatus, request_to_json
from ..stores._respond import RespondingStore
from ..stores._store import Store
from ._conformance_base import Ctx, Opened, Skip
from ._conformance_leases import LONG, A, refused

__all__ = ("RESPOND_CHECKS",)


def _responding(store: Store) -> RespondingStore:
    responder = responder_of(store)
    if responder is None:
        raise Skip("the store has no respond (engine.respond refuses it)")
    return responder


def _requests(*keys: str) -> tuple[str, ...]:
    return tuple(
        request_to_json(Request(key=k, payload={"q": k}, response_type="int")) for k in keys
    )


def _responses(ctx: Ctx, run_id: str, *keys: str, value: str = "1") -> list[Entry]:
    return [
        ctx.entry(run_id, k, kind=EntryKind.RESPONSE, value=value, token=0, position=None)
        for k in keys
    ]


async def _unchanged(
    store: Store, run_id: str, what: str, call: Callable[[], Awaitable[Any]]
) -> None:
    """*call* is refused (any TetherError is checked by the caller) and changes nothing."""
    before = await store.get_run(run_id), list(await store.load_entries(run_id))
    await call()
    after = await store.get_run(run_id), list(await store.load_entries(run_id))
    assert after == before, f"{what} changed the run: {before!r:.300} -> {after!r:.300}"


async def check_respond(ctx: Ctx) -> None:
    """A respond journals the responses with the run's next seqs and queues the run; the
    requests it answers are gone, the others stay and may be answered before a worker runs."""
    async with Opened(await ctx.make()) as opened:
        store = _responding(opened)
        await opened.create_run(
            ctx.run("r-1", status=RunStatus.PAUSED, requests=_requests("a", "b"))
        )
        now = ctx.time()
        record = await store.respond("r-1", _responses(ctx, "r-1", "a"), now=now)
        assert record.status is RunStatus.QUEUED, f"respond stored {record.status}, not queued"
        assert record.requests == _requests("b"), f"requests after respond: {record.requests!r}"
        assert record.owner is None and record.dispatches == 0, f"respond stored {record!r:.300}"
        stored = await opened.get_run("r-1")
        assert stored == record, f"get_run returned {stored!r:.300}, respond {record!r:.300}"
        journal = list(await opened.load_entries("r-1"))
        assert [(e.key, e.seq, e.kind, e.value) for e in journal] == [
            ("a", 1, EntryKind.RESPONSE, "1")
        ], f"the journal after respond: {journal!r:.300}"
        await store.respond("r-1", _responses(ctx, "r-1", "b", value='{"x":[1]}'), now=now)
        journal = list(await opened.load_entries("r-1"))
        assert [(e.key, e.seq) for e in journal] == [("a", 1), ("b", 2)], f"{journal!r:.300}"
        assert journal[1].value == '{"x":[1]}', "a response's text changed"
        last = await opened.get_run("r-1")
        assert last is not None and last.status is RunStatus.QUEUED and last.requests == ()


async def check_respond_refusals(ctx: Ctx) -> None:
    """Every refused respond changes nothing: an unknown run, a key not pending, a finished,
    cancelled or executing run, bad arguments."""
    async with Opened(await ctx.make()) as opened:
        store = _responding(opened)
        now = ctx.time()
        await refused(
            "respond to an unknown run",
            RunNotFoundError,
            lambda: store.respond("nope", _responses(ctx, "nope", "a"), now=now),
        )
        await opened.create_run(ctx.run("p", status=RunStatus.PAUSED, requests=_requests("a")))

        def respond(run_id: str, *keys: str, **kw: Any) -> Callable[[], Awaitable[Any]]:
            return lambda: store.respond(
                run_id, _responses(ctx, run_id, *keys), **{"now": now, **kw}
            )

        async def refuses(
            run_id: str, what: str, error: type[Exception], call: Callable[[], Awaitable[Any]]
        ) -> None:
            async def attempt() -> None:
                await refused(what, error, call)

            await _unchanged(opened, run_id, what, attempt)

        await refuses("p", "respond to a key not pending", UnknownRequestError, respond("p", "z"))
        await refuses(
            "p", "respond to two keys, one not pending", UnknownRequestError, respond("p", "a", "z")
        )
        bad: Sequence[tuple[str, Callable[[], Awaitable[Any]]]] = (
            ("a naive now", respond("p", "a", now=now.replace(tzinfo=None))),
            ("no entries", lambda: store.respond("p", [], now=now)),
            ("a step entry", lambda: store.respond("p", [ctx.entry("p", "a", token=0)], now=now)),
            (
                "an entry with a token",
                lambda: store.respond(
                    "p", [attrs.evolve(e, token=3) for e in _responses(ctx, "p", "a")], now=now
                ),
            ),
            ("another run's entry", lambda: store.respond("p", _responses(ctx, "q", "a"), now=now)),
        )
        for what, call in bad:
            await refuses("p", f"respond with {what}", UsageError, call)
        for status in (
            RunStatus.COMPLETED,
            RunStatus.FAILED,
            RunStatus.CANCELLED,
            RunStatus.DEAD_LETTER,
        ):
            run_id = f"s-{status.value}"
            await opened.create_run(ctx.run(run_id, status=status, requests=_requests("a")))
            await refuses(
                run_id, f"respond to a {status} run", RunConflictError, respond(run_id, "a")
            )
        await opened.create_run(ctx.run("x", status=RunStatus.PAUSED, requests=_requests("a")))
        claimed = await opened.claim("x", A, ttl=LONG)
        # Executing (a live lease), and asking again: still refused.
        await opened.update_run(
            attrs.evolve(claimed, requests=_requests("a"), status=RunStatus.RUNNING)
        )
        await refuses("x", "respond to an executing run", RunConflictError, respond("x", "a"))


async def check_concurrent_responds(ctx: Ctx) -> None:
    """Of two responds racing for one request, exactly one wins; the journal holds one
    response, and the loser gets RunConflictError."""
    async with Opened(await ctx.make()) as opened:
        store = _responding(opened)
        now = ctx.time()
        for round_ in range(5):
            run_id = f"race-{round_}"
            await opened.create_run(
                ctx.run(run_id, status=RunStatus.PAUSED, requests=_requests("a"))
            )
            outcomes: list[str] = []

            async def answer(
                value: str, run_id: str = run_id, outcomes: list[str] = outcomes
            ) -> None:
                try:
                    await store.respond(run_id, _responses(ctx, run_id, "a", value=value), now=now)
                except RunConflictError:
                    outcomes.append("conflict")
                else:
                    outcomes.append(value)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(answer, "1")
                nursery.start_soon(answer, "2")
            assert outcomes.count("conflict") == 1, f"two responds to one request: {outcomes}"
            (won,) = [o for o in outcomes if o != "conflict"]
            journal = list(await opened.load_entries(run_id))
            assert [(e.key, e.value) for e in journal] == [("a", won)], (
                f"two racing responds left the journal {journal!r:.300} (winner {won})"
            )


#: The checks of ``respond``, by name (see :data:`tether.testing.CHECKS`).
RESPOND_CHECKS: dict[str, Callable[[Ctx], Awaitable[None]]] = {
    "respond": check_respond,
    "respond_refusals": check_respond_refusals,
    "concurrent_responds": check_concurrent_responds,
}
