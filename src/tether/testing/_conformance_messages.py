"""Conformance checks for runs' mailboxes (``send_message``, ``load_messages``).

Layer: testing (``tether.testing``).

They hold a store that keeps messages (a :class:`~tether.stores.MailboxStore`)
to its contract: each message gets the run's next seq, in send order, also
under concurrent sends; ``after`` pages; the value's text is kept exactly; an
unknown or finished run refuses a message and nothing is stored; a send makes
a waiting run due at its *now* (and a waiting run without ``wake_at``, waiting
for messages only, is never due before); a cancel keeps the mailbox and a
delete removes it. A store without the two methods skips them (the engine
refuses ``send`` and ``receive`` on it).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import cast

import trio

from .._errors import RunConflictError, RunNotFoundError, UsageError
from ..stores._capabilities import Capability, has, mailbox_of
from ..stores._mailbox import MailboxStore, Message
from ..stores._records import RunStatus
from ..stores._store import DeletableStore, Store, WorkerStore
from ._conformance_base import CANCEL_POINTS, Ctx, Opened, Skip, cancelled, maybe_await
from ._conformance_leases import LONG, A, B, refused

__all__ = ("MESSAGE_CHECKS",)

#: Values whose exact text must come back (spacing, number spelling, escapes).
_VALUES = ('{"z": 1.50, "a":["ü", "\\u00e9"]}', " true ", "[]", '"text"', "1e3", "null")


def _mailbox(store: Store) -> MailboxStore:
    mailbox = mailbox_of(store)
    if mailbox is None:
        raise Skip("the store has no send_message/load_messages (it keeps no messages)")
    return mailbox


async def _loaded(store: MailboxStore, run_id: str, after: int = 0) -> list[Message]:
    return list(await store.load_messages(run_id, after=after))


async def check_messages(ctx: Ctx) -> None:
    """Messages get seqs 1, 2, 3, ... in send order, per run; come back exactly, pages by
    after=; sent_at is the sender's now in UTC; bad arguments are refused."""
    async with Opened(await ctx.make()) as opened:
        store = _mailbox(opened)
        await opened.create_run(ctx.run("m-a"))
        await opened.create_run(ctx.run("m-b", status=RunStatus.PAUSED, requests=('{"q":1}',)))
        assert await _loaded(store, "m-a") == [], "load_messages of a run with no messages"
        before = await opened.get_run("m-a")
        now = datetime(2031, 2, 3, 4, 5, 6, 789, tzinfo=timezone(timedelta(hours=2)))
        sent: list[Message] = []
        for i, value in enumerate(_VALUES):
            name = ("approve", "item.v-2_x")[i % 2]
            message = await store.send_message("m-a", name, value, now=now + timedelta(seconds=i))
            expected = Message(
                run_id="m-a", seq=i + 1, name=name, value=value, sent_at=now + timedelta(seconds=i)
            )
            assert message == expected, f"send_message returned {message!r}, not {expected!r}"
            assert message.sent_at.utcoffset() == timedelta(0), f"sent_at {message.sent_at!r}"
            sent.append(message)
        other = await store.send_message("m-b", "approve", "false", now=now)
        assert other.seq == 1, f"the first message of another run got seq {other.seq}"
        loaded = await _loaded(store, "m-a")
        assert loaded == sent, f"load_messages returned {loaded!r}, sent {sent!r}"
        assert [m.value for m in loaded] == list(_VALUES), "a value's text changed"
        for after in (1, 3, len(sent), len(sent) + 5):
            page = await _loaded(store, "m-a", after)
            assert page == sent[after:], f"load_messages(after={after}) returned {page!r}"
        assert await _loaded(store, "m-b") == [other], "messages of one run showed in another"
        assert await opened.get_run("m-a") == before, "a send changed a running run's record"
        paused = await opened.get_run("m-b")
        assert paused is not None and paused.status is RunStatus.PAUSED, (
            f"a send changed a paused run: {paused!r}"
        )
        assert paused.requests == ('{"q":1}',), (
            f"a send changed a paused run's requests: {paused!r}"
        )
        bad_args: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("an empty name", lambda: store.send_message("m-a", "", "1", now=now)),
            ("a name with a space", lambda: store.send_message("m-a", "a b", "1", now=now)),
            ("a value that is not JSON", lambda: store.send_message("m-a", "x", "{", now=now)),
            ("a naive now", lambda: store.send_message("m-a", "x", "1", now=datetime(2031, 1, 1))),
            ("after=-1", lambda: store.load_messages("m-a", after=-1)),
            ("after=True", lambda: store.load_messages("m-a", after=True)),
        ]
        for what, call in bad_args:
            await refused(f"a mailbox call with {what}", UsageError, call)
        assert await _loaded(store, "m-a") == sent, "a refused send stored something"


async def check_concurrent_messages(ctx: Ctx) -> None:
    """30 sends started at once to one run get the seqs 1 to 30, each once."""
    n = 30
    async with Opened(await ctx.make()) as opened:
        store = _mailbox(opened)
        await opened.create_run(ctx.run("par"))
        returned: dict[int, Message] = {}

        async def one(i: int) -> None:
            returned[i] = await store.send_message("par", "n", str(i), now=ctx.time())

        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(one, i)
        seqs = sorted(m.seq for m in returned.values())
        assert seqs == list(range(1, n + 1)), f"{n} concurrent sends got seqs {seqs}"
        loaded = await _loaded(store, "par")
        assert [m.seq for m in loaded] == seqs, "load_messages is not in seq order"
        assert sorted(loaded, key=lambda m: m.seq) == sorted(
            returned.values(), key=lambda m: m.seq
        ), "load_messages differs from what send_message returned"


async def check_cancelled_send_atomic(ctx: Ctx) -> None:
    """A send cancelled at any point stored its message whole or not at all, once, and a
    send that returned is stored; the mailbox has no gap."""
    async with Opened(await ctx.make()) as opened:
        store = _mailbox(opened)
        await opened.create_run(ctx.run("atom"))
        returned: dict[str, Message] = {}
        for i, (step, yields, delay) in enumerate(CANCEL_POINTS):
            value = f'"c{i}"'
            send = functools.partial(store.send_message, "atom", "n", value, now=ctx.time())
            message = await cancelled(send, step=step, yields=yields, delay=delay)
            if message is not None:
                returned[value] = message
        # (A thread-backed store may still store a send it could not withdraw: never twice.)
        loaded = await _loaded(store, "atom")
        values = [m.value for m in loaded]
        assert len(set(values)) == len(values), f"a cancelled send was stored twice: {values}"
        assert [m.seq for m in loaded] == list(range(1, len(loaded) + 1)), "seqs with a gap"
        for message in returned.values():
            assert message in loaded, f"a send that returned {message!r} is not stored"
        attempted = {f'"c{i}"' for i in range(len(CANCEL_POINTS))}
        assert set(values) <= attempted, f"torn or foreign values stored: {values}"
        assert {m.name for m in loaded} <= {"n"}, f"names changed: {loaded!r}"


async def check_message_refusals(ctx: Ctx) -> None:
    """A send to an unknown run is RunNotFoundError, to a finished one RunConflictError
    naming its status; nothing is stored. A cancel keeps the mailbox."""
    async with Opened(await ctx.make()) as opened:
        store = _mailbox(opened)
        now = ctx.time()
        await refused(
            "send_message to an unknown run",
            RunNotFoundError,
            lambda: store.send_message("nobody", "approve", "true", now=now),
        )
        assert await _loaded(store, "nobody") == [], "a refused send stored a message"
        assert await opened.get_run("nobody") is None, "a refused send created the run"
        for status in (
            RunStatus.COMPLETED,
            RunStatus.FAILED,
            RunStatus.DEAD_LETTER,
            RunStatus.CANCELLED,
        ):
            run_id = f"done-{status.value}"
            record = ctx.run(run_id, status=status)
            await opened.create_run(record)
            error = await refused(
                f"send_message to a {status.value} run",
                RunConflictError,
                functools.partial(store.send_message, run_id, "approve", "true", now=now),
            )
            assert status.value in str(error), f"the refusal does not name {status.value}: {error}"
            assert await _loaded(store, run_id) == [], f"a {status.value} run took a message"
            got = await opened.get_run(run_id)
            assert got == record, f"a refused send changed the {status.value} run: {got!r}"
        await opened.create_run(ctx.run("to-cancel"))
        kept = [await store.send_message("to-cancel", "approve", str(i), now=now) for i in (1, 2)]
        await opened.cancel_run("to-cancel")
        assert await _loaded(store, "to-cancel") == kept, "cancel_run changed the mailbox"
        await refused(
            "send_message to a run cancelled after it took messages",
            RunConflictError,
            lambda: store.send_message("to-cancel", "approve", "3", now=now),
        )
        assert await _loaded(store, "to-cancel") == kept


async def check_message_wakes(ctx: Ctx) -> None:
    """A waiting run without wake_at (waiting for messages) is never due; a send makes a
    waiting run due at its now (an earlier wake_at is kept), and workers claim it."""
    async with Opened(await ctx.make()) as opened:
        store = _mailbox(opened)
        workers = cast(WorkerStore, opened) if has(opened, Capability.WORKERS) else None
        far = datetime(2999, 1, 1, tzinfo=UTC)
        parked = ctx.run("inbox", status=RunStatus.WAITING, wake_at=None)
        await opened.create_run(parked)
        if workers is not None:
            none = await workers.claim_next(
                A, ttl=LONG, workflows=["checkout"], max_dispatches=3, now=far
            )
            assert none is None, f"claim_next took a run waiting for messages: {none!r}"
        sent_at = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
        await store.send_message("inbox", "approve", "true", now=sent_at)
        woken = await opened.get_run("inbox")
        assert woken is not None and (woken.status, woken.wake_at) == (
            RunStatus.WAITING,
            sent_at,
        ), f"a send to a run waiting for messages left {woken!r}; expected wake_at {sent_at}"
        assert woken.token == parked.token and woken.owner is None, (
            f"the send claimed it: {woken!r}"
        )
        later = sent_at + timedelta(hours=1)
        await store.send_message("inbox", "approve", "false", now=later)
        again = await opened.get_run("inbox")
        assert again is not None and again.wake_at == sent_at, (
            f"a later send moved an earlier wake_at {sent_at} to {again and again.wake_at}"
        )
        timer = ctx.run("timer", status=RunStatus.WAITING, wake_at=far)
        await opened.create_run(timer)
        await store.send_message("timer", "approve", "true", now=later)
        moved = await opened.get_run("timer")
        assert moved is not None and moved.wake_at == later, (
            f"a send to a run parked on a timer due in 2999 left wake_at {moved and moved.wake_at}"
        )
        if workers is not None:
            early = await workers.claim_next(
                A, ttl=LONG, workflows=["checkout"], max_dispatches=3, now=sent_at
            )
            assert early is not None and early.run_id == "inbox", f"claim_next: {early!r}"
            none = await workers.claim_next(
                B, ttl=LONG, workflows=["checkout"], max_dispatches=3, now=sent_at
            )
            assert none is None, f"claim_next took a run before its wake_at: {none!r}"
            got = await workers.claim_next(
                B, ttl=LONG, workflows=["checkout"], max_dispatches=3, now=later
            )
            assert got is not None and got.run_id == "timer", f"claim_next: {got!r}"
        assert [m.value for m in await _loaded(store, "inbox")] == ["true", "false"]


async def check_message_delete(ctx: Ctx) -> None:
    """delete_run removes the mailbox: the id reads as empty, and a run created again
    under it starts at seq 1."""
    async with Opened(await ctx.make()) as opened:
        store = _mailbox(opened)
        if not has(opened, Capability.DELETE):
            raise Skip("the store has no delete_run (it cannot delete runs)")
        deleting = cast(DeletableStore, opened)
        await opened.create_run(ctx.run("gone", status=RunStatus.PAUSED))
        await opened.create_run(ctx.run("stays", status=RunStatus.PAUSED))
        for i in range(3):
            await store.send_message("gone", "approve", str(i), now=ctx.time())
        kept = [await store.send_message("stays", "approve", "1", now=ctx.time())]
        assert await deleting.delete_run("gone") is True
        assert await _loaded(store, "gone") == [], "delete_run kept the run's messages"
        assert await _loaded(store, "stays") == kept, "delete_run changed another run's mailbox"
        await opened.create_run(ctx.run("gone"))
        first = await store.send_message("gone", "approve", '"new"', now=ctx.time())
        assert first.seq == 1, f"the first message of a run created again got seq {first.seq}"
        assert await _loaded(store, "gone") == [first], "the old messages came back"


async def check_message_reopen(ctx: Ctx) -> None:
    """Messages are there after close and reopen, and the next send takes the next seq."""
    if ctx.reopen is None:
        raise Skip("no reopen= hook given (a store that keeps nothing after close)")
    first = await ctx.make()
    async with Opened(first) as opened:
        store = _mailbox(opened)
        await opened.create_run(ctx.run("keep"))
        sent = [await store.send_message("keep", "n", str(i), now=ctx.time()) for i in range(2)]
    second = await maybe_await(ctx.reopen(first))
    async with Opened(second) as opened:
        store = _mailbox(opened)
        assert await _loaded(store, "keep") == sent, "the mailbox changed across reopen"
        more = await store.send_message("keep", "n", "2", now=ctx.time())
        assert more.seq == 3, f"a send after reopen got seq {more.seq}, not 3"


async def check_message_watch(ctx: Ctx) -> None:
    """A store with watch() announces a send."""
    async with Opened(await ctx.make()) as opened:
        store = _mailbox(opened)
        if not has(opened, Capability.WATCH):
            raise Skip("the store has no watch() (waiters poll it)")
        watch = opened.watch  # type: ignore[attr-defined]
        await opened.create_run(ctx.run("w"))
        changed = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch, changed.set)
            # A listener may still be connecting when the first message is sent:
            # send until one is announced.
            with trio.fail_after(30):
                while not changed.is_set():
                    await store.send_message("w", "n", "1", now=ctx.time())
                    with trio.move_on_after(1):
                        await changed.wait()
            nursery.cancel_scope.cancel()


#: The mailbox checks by name.
MESSAGE_CHECKS: dict[str, Callable[[Ctx], Awaitable[None]]] = {
    "messages": check_messages,
    "concurrent_messages": check_concurrent_messages,
    "cancelled_send_atomic": check_cancelled_send_atomic,
    "message_refusals": check_message_refusals,
    "message_wakes": check_message_wakes,
    "message_delete": check_message_delete,
    "message_reopen": check_message_reopen,
    "message_watch": check_message_watch,
}
