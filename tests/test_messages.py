"""Signals: ``engine.send`` and ``tether.receive``, their settlement, and parking on messages.

- Messages sent to a run are taken by its receives in send order per name,
  each exactly once, journaled before they are returned: through a crash
  before or after the save, and between parallel receivers.
- A bad message is refused at ``send`` (nothing stored); an undeclared name
  or type is refused at ``receive``; declarations are checked at decoration.
- A receive waits in the process under ``engine.run`` (woken by a send), never
  keeps a run with an ``ask`` from pausing, and under a worker parks the run
  with no ``wake_at`` until a send makes it due, also when the send lands
  between the execution's last mailbox read and its park write.
- Cancelling a run waiting in ``receive`` (by the caller, or ``engine.cancel``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import tether
from tether._api._timers import Waiting
from tether._engine._engine import internals
from tether.stores import (
    Entry,
    EntryKind,
    MailboxStore,
    Message,
    RecordDecodeError,
    RunRecord,
    RunStatus,
    Store,
    dumps_record,
    loads_record,
    mailbox_of,
)
from tether.testing import Call, Crash, Do, FaultyStore, SimulatedCrash
from tether.testing._clock import hold_clock

from ._json_store import JsonStore
from ._wall_clock import START, ModuleClock, fresh_test
from .conftest import reopen_store

#: what the workflows' steps saw, in order
seen: list[Any] = []
clock = ModuleClock()

# (the workflows a test defines are forgotten after it)
pytestmark = pytest.mark.usefixtures("tether_registry")


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    with fresh_test(clock, seen):
        yield


@attrs.frozen
class Item:
    sku: str
    count: int


@tether.step
async def note(value: Any) -> None:
    seen.append(value)


@tether.workflow(name="tests.messages.ten", messages={"item": int})
async def ten() -> list[int]:
    got = []
    for _ in range(10):
        value = await tether.receive("item", int)
        await note(value)
        got.append(value)
    return got


@tether.workflow(name="tests.messages.approval", messages={"approve": bool, "item": Item})
async def approval() -> tuple[Item, bool]:
    item = await tether.receive("item", Item)
    approved = await tether.receive("approve", bool)
    return item, approved


def messages_of(info: tether.RunInfo) -> list[tuple[str, str | None]]:
    return [(e.key, e.value) for e in info.entries if e.kind is EntryKind.MESSAGE]


async def info_of(engine: tether.Engine, run_id: str) -> tether.RunInfo:
    info = await engine.get_run(run_id)
    assert info is not None
    return info


async def mailbox_in(store: Store, run_id: str) -> list[Message]:
    box = mailbox_of(store)
    assert box is not None
    return list(await box.load_messages(run_id))


# -- one process -------------------------------------------------------------------------


async def test_a_receive_waits_for_a_send_and_messages_come_in_order_per_name(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = tether.MemoryStore()
    result: list[tuple[Item, bool]] = []
    async with (
        tether.open_engine(store, clock=clock()) as engine,
        trio.open_nursery() as nursery,
    ):

        async def run() -> None:
            result.append(await engine.run(approval, run_id="a"))

        nursery.start_soon(run)
        await trio.sleep(30)
        assert result == []  # it waits, in the process
        info = await info_of(engine, "a")
        assert info.status is RunStatus.RUNNING and info.executing
        # Sent in the other order than received: each receive takes its own name.
        await engine.send("a", "approve", True)
        await engine.send("a", "approve", False)
        await engine.send("a", "item", Item("sku-1", 2))
        sent_at = trio.current_time()
    assert result == [(Item("sku-1", 2), True)]
    assert trio.current_time() == sent_at  # woken by the send at once, not by polling
    async with tether.open_engine(store, clock=clock()) as engine:
        info = await info_of(engine, "a")
    assert messages_of(info) == [
        ("receive.item#0", '{"name":"item","seq":3,"value":{"count":2,"sku":"sku-1"}}'),
        ("receive.approve#0", '{"name":"approve","seq":1,"value":true}'),
    ]
    (entry,) = [e for e in info.entries if e.key == "receive.item#0"]
    assert entry.position == 0 and entry.started_at == START + timedelta(seconds=30)
    # The second approval waits in the mailbox, untaken.
    assert [m.seq for m in await mailbox_in(store, "a")] == [1, 2, 3]


async def test_a_send_from_another_engine_wakes_a_receive_on_every_store(
    tether_raw_store_factory: Callable[[], Store], autojump_clock: trio.testing.MockClock
) -> None:
    @tether.workflow(name="tests.messages.one", messages={"item": int})
    async def one() -> int:
        value = await tether.receive("item", int)
        seen.append(trio.current_time())
        return value

    raw = tether_raw_store_factory()
    async with (
        tether.open_engine(hold_clock(raw), clock=clock()) as receiver,
        # Another process, as it were: a store object of its own on the same storage.
        tether.open_engine(hold_clock(reopen_store(raw)), clock=clock()) as sender,
        trio.open_nursery() as nursery,
    ):
        result: list[int] = []

        async def run() -> None:
            result.append(await receiver.run(one, run_id="r"))

        nursery.start_soon(run)
        await trio.sleep(100)
        sent = trio.current_time()
        await sender.send("r", "item", 42)
    assert result == [42]
    # Notified where the store announces changes, else found by polling (at most a second).
    assert sent <= seen[0] <= sent + 1.0


async def test_messages_sent_before_the_run_reaches_receive_are_taken_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with tether.open_engine(tether.MemoryStore(), clock=clock()) as engine:
        await engine.submit(ten, run_id="t")
        for i in range(10):
            await engine.send("t", "item", i * 10)
        assert await engine.run(ten, run_id="t") == [i * 10 for i in range(10)]
        info = await info_of(engine, "t")
    assert trio.current_time() == 0
    assert [k for k, _ in messages_of(info)] == [f"receive.item#{i}" for i in range(10)]


async def test_a_resumed_run_replays_its_messages_and_takes_only_new_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with tether.open_engine(tether.MemoryStore(), clock=clock()) as engine:
        await engine.submit(ten, run_id="t")
        for i in range(4):
            await engine.send("t", "item", i)
        with trio.move_on_after(60) as waited:
            await engine.run(ten, run_id="t")
        assert waited.cancelled_caught  # a caller cancellation, prompt: the run is resumable
        assert seen == [0, 1, 2, 3]
        for i in range(4, 10):
            await engine.send("t", "item", i)
        assert await engine.resume("t") == list(range(10))
    assert seen == list(range(10))  # the journaled ones replayed: not noted again


async def test_message_events_are_reported_and_described(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with tether.open_engine(tether.MemoryStore(), clock=clock()) as engine:
        await engine.submit(approval, run_id="a")
        await engine.send("a", "item", Item("x", 1))
        await engine.send("a", "approve", True)
        async with engine.open_run(approval, run_id="a") as run:
            events = [e async for e in run.events()]
    received = [e for e in events if isinstance(e, tether.MessageReceived)]
    assert received == [
        tether.MessageReceived(run_id="a", key="receive.item#0", name="item", seq=1),
        tether.MessageReceived(run_id="a", key="receive.approve#0", name="approve", seq=2),
    ]
    assert tether.describe_event(received[0]) == "  receive receive.item#0: message item (seq 1)"


# -- exactly once ------------------------------------------------------------------------


@pytest.mark.parametrize("after", [False, True], ids=["before-the-save", "after-the-save"])
async def test_ten_messages_arrive_in_order_each_once_through_a_crash(
    tether_raw_store_factory: Callable[[], Store],
    after: bool,
    autojump_clock: trio.testing.MockClock,
) -> None:
    raw = tether_raw_store_factory()
    faulty = FaultyStore(hold_clock(raw))
    # The process dies at the save of the fourth message: before it lands, or right after.
    faulty.inject(
        "append",
        Crash(),
        when=lambda run_id, entries: entries[0].key == "receive.item#3",
        after=after,
    )
    async with tether.open_engine(faulty, clock=clock()) as engine:
        await engine.submit(ten, run_id="t")
        for i in range(10):
            await engine.send("t", "item", i)
        with pytest.raises(SimulatedCrash):
            await engine.run(ten, run_id="t")
    assert seen == [0, 1, 2]
    # A new process, on the same storage.
    async with tether.open_engine(hold_clock(reopen_store(raw)), clock=clock()) as engine:
        assert await engine.resume("t") == list(range(10))
        info = await info_of(engine, "t")
    assert seen == list(range(10))  # the crashed receive's message was noted once, after all
    journaled = [loads_message(v) for _, v in messages_of(info)]
    assert journaled == [{"name": "item", "seq": i + 1, "value": i} for i in range(10)]
    # ...the fourth one under the fourth receive's key, whichever execution journaled it.
    assert [k for k, _ in messages_of(info)][3] == "receive.item#3"


def loads_message(value: str | None) -> Any:
    from tether._codec._values import loads

    return loads(value or "null")


async def test_parallel_receivers_take_each_message_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    @tether.workflow(name="tests.messages.pair", messages={"item": int})
    async def pair() -> list[int]:
        async with tether.parallel() as p:
            a = p.start_soon(tether.receive, "item", int)
            b = p.start_soon(tether.receive, "item", int)
        return [a.result, b.result]

    store = tether.MemoryStore()
    events: list[tether.RunEvent] = []
    async with tether.open_engine(store, clock=clock()) as engine:
        async with engine.open_run(pair, run_id="p") as run:

            async def read() -> None:
                async for event in run.events():
                    events.append(event)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(read)
                await trio.sleep(10)
                await engine.send("p", "item", 7)
                await trio.sleep(10)
                # One receiver took it; the other still waits.
                assert [e.seq for e in events if isinstance(e, tether.MessageReceived)] == [1]
                await engine.send("p", "item", 8)
            result = await run.result()
        info = await info_of(engine, "p")
    assert sorted(result) == [7, 8]
    values = {k: loads_message(v)["value"] for k, v in messages_of(info)}
    assert values == {"receive#0/receive.item#0": result[0], "receive#1/receive.item#0": result[1]}


# -- refusals ----------------------------------------------------------------------------


async def test_a_bad_message_is_refused_at_send_and_nothing_is_stored(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store, clock=clock()) as engine:
        await engine.submit(approval, run_id="a")
        with pytest.raises(tether.MessageRejectedError) as caught:
            await engine.send("a", "approve", 1)  # an int is not a bool: no coercion
        assert isinstance(caught.value, TypeError)
        assert "'a'" in str(caught.value) and "'approve'" in str(caught.value)
        assert "bool" in str(caught.value) and "nothing was stored" in str(caught.value)
        with pytest.raises(tether.MessageRejectedError, match="declares it as Item"):
            await engine.send("a", "item", {"sku": "x", "count": 1})  # a dict is not an Item
        with pytest.raises(
            tether.MessageRejectedError, match=r"declares no such message \(it declares "
        ) as undeclared:
            await engine.send("a", "reject", True)
        assert "'approve', 'item'" in str(undeclared.value)
        with pytest.raises(tether.UsageError, match="message name"):
            await engine.send("a", "no spaces", True)
        with pytest.raises(tether.RunNotFoundError):
            await engine.send("nope", "approve", True)
        assert await mailbox_in(store, "a") == []


@pytest.mark.parametrize(
    "status", [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.DEAD_LETTER, RunStatus.CANCELLED]
)
async def test_a_finished_run_takes_no_message(
    status: RunStatus, autojump_clock: trio.testing.MockClock
) -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store, clock=clock()) as engine:
        await engine.submit(approval, run_id="a")
        record = await store.get_run("a")
        assert record is not None
        await store.update_run(attrs.evolve(record, status=status))
        with pytest.raises(tether.RunConflictError, match=status.value.replace("_", "-")):
            await engine.send("a", "approve", True)
    assert await mailbox_in(store, "a") == []


async def test_send_needs_the_workflow_defined_here_and_a_store_that_keeps_messages(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = tether.MemoryStore()
    now = START
    await store.create_run(
        RunRecord(
            run_id="x",
            workflow="tests.messages.elsewhere",
            args="[]",
            created_at=now,
            updated_at=now,
        )
    )
    async with tether.open_engine(store, clock=clock()) as engine:
        with pytest.raises(tether.WorkflowNotFoundError, match="import the module"):
            await engine.send("x", "approve", True)
    assert await mailbox_in(store, "x") == []
    plain = JsonStore()
    assert mailbox_of(plain) is None and not isinstance(plain, MailboxStore)
    async with tether.open_engine(plain, clock=clock()) as engine:
        await engine.submit(approval, run_id="a")
        with pytest.raises(tether.UsageError, match="keeps no messages"):
            await engine.send("a", "approve", True)
        with pytest.raises(tether.UsageError, match="keeps no messages"):
            await engine.run(approval, run_id="a")


async def test_receive_refuses_an_undeclared_name_or_another_type() -> None:
    @tether.workflow(name="tests.messages.wrong_type", messages={"approve": bool})
    async def wrong_type() -> int:
        return await tether.receive("approve", int)

    @tether.workflow(name="tests.messages.undeclared", messages={"approve": bool})
    async def undeclared() -> bool:
        return await tether.receive("reject", bool)

    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(tether.UsageError, match="declares message 'approve' as bool"):
            await engine.run(wrong_type)
        with pytest.raises(tether.UsageError, match=r"no message 'reject' \(declared: 'approve'"):
            await engine.run(undeclared)
    with pytest.raises(tether.NotInRunError):
        await tether.receive("approve", bool)


@pytest.mark.parametrize(
    ("signals", "message"),
    [
        ([("approve", bool)], "mapping of message names to types"),
        ({"no spaces": bool}, "message name"),
        ({"": bool}, "message name"),
        ({"x" * 101: bool}, "message name"),
        ({"lock": object}, "cannot be decoded as"),
        ({"items": list[object]}, "cannot be decoded as"),
    ],
)
def test_declarations_are_checked_at_decoration(signals: Any, message: str) -> None:
    async def fn() -> None:
        pass

    with pytest.raises(tether.UsageError, match=message):
        tether.workflow(name="tests.messages.bad", messages=signals)(fn)


def test_declared_signals_are_read_only_and_empty_by_default() -> None:
    declared = {"approve": bool, "a.b-c_9": list[Item]}

    @tether.workflow(name="tests.messages.declared", messages=declared)
    async def fn() -> None:
        pass

    declared.clear()  # a copy was kept
    assert dict(fn.messages) == {"approve": bool, "a.b-c_9": list[Item]}
    with pytest.raises(TypeError):
        fn.messages["x"] = int  # type: ignore[index]
    assert dict(ten.messages) == {"item": int}

    @tether.workflow(name="tests.messages.none")
    async def none() -> None:
        pass

    assert dict(none.messages) == {}


# -- replay ------------------------------------------------------------------------------


async def test_another_call_or_type_at_a_journaled_receive_is_a_divergence(
    autojump_clock: trio.testing.MockClock,
) -> None:
    version = {"v": 1}

    @tether.workflow(name="tests.messages.changes", messages={"n": int, "m": int})
    async def changes() -> Any:
        if version["v"] == 1:
            await tether.sleep(1, key="k")
        else:
            await tether.receive("n" if version["v"] == 2 else "m", int, key="k")
        return await tether.ask("done?", bool)

    store = tether.MemoryStore()
    async with tether.open_engine(store, clock=clock()) as engine:
        with pytest.raises(tether.Paused):
            await engine.run(changes, run_id="c")
        version["v"] = 2
        with pytest.raises(tether.NonDeterminismError, match="holds a timer entry"):
            await engine.resume("c")
        assert (await info_of(engine, "c")).status is RunStatus.PAUSED  # undone as it was
        await engine.submit(changes, run_id="d")
        await engine.send("d", "n", 5)
        with pytest.raises(tether.Paused):
            await engine.run(changes, run_id="d")
        version["v"] = 3
        await engine.send("d", "m", 6)
        with pytest.raises(tether.NonDeterminismError, match="journaled a message 'n'"):
            await engine.resume("d")

    @tether.workflow(name="tests.messages.changes", messages={"n": str})
    async def retyped() -> Any:
        await tether.receive("n", str, key="k")
        return await tether.ask("done?", bool)

    async with tether.open_engine(store, clock=clock()) as engine:
        with pytest.raises(
            tether.NonDeterminismError,
            match=r"message 'n' \(seq 1 in the mailbox\) is a JSON integer \(5\)",
        ):
            await engine.resume("d")


async def test_a_stored_message_that_does_not_decode_fails_the_receive(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store, clock=clock()) as engine:
        await engine.submit(approval, run_id="a")
        # Stored around engine.send, which would refuse it.
        await store.send_message("a", "item", '{"sku": 1}', now=START)
        with pytest.raises(tether.MessageRejectedError, match="does not decode as Item"):
            await engine.run(approval, run_id="a")
        info = await info_of(engine, "a")
    assert info.status is RunStatus.FAILED and messages_of(info) == []


# -- settlement --------------------------------------------------------------------------


async def test_a_receive_beside_an_ask_pauses_and_the_message_waits_for_the_resume(
    autojump_clock: trio.testing.MockClock,
) -> None:
    @tether.workflow(name="tests.messages.review", messages={"comment": str})
    async def review() -> tuple[bool, str]:
        async with tether.parallel() as p:
            ok = p.start_soon(tether.ask, "ok?", bool)
            comment = p.start_soon(tether.receive, "comment", str)
        return ok.result, comment.result

    store = tether.MemoryStore()
    async with tether.open_engine(store, clock=clock()) as engine:
        with pytest.raises(tether.Paused) as paused:
            await engine.run(review, run_id="r")
        assert trio.current_time() == 0  # the receive did not keep it from pausing
        (request,) = paused.value.requests
        await engine.send("r", "comment", "looks good")  # a paused run takes messages
        info = await info_of(engine, "r")
        assert info.status is RunStatus.PAUSED and messages_of(info) == []
        assert await engine.resume("r", responses={request.key: True}) == (True, "looks good")


async def test_a_receive_parks_under_a_worker_without_wake_at_and_a_send_requeues_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = tether.MemoryStore()
    async with (
        tether.open_engine(store, clock=clock()) as engine,
        tether.open_worker(engine, concurrency=2, poll_interval=3600) as worker,
    ):
        await engine.submit(approval, run_id="a")
        await engine.send("a", "item", Item("x", 1))
        await trio.sleep(60)
        record = await store.get_run("a")
        assert record is not None
        assert (record.status, record.owner, record.lease_expires_at, record.wake_at) == (
            RunStatus.WAITING,
            None,
            None,
            None,
        )
        assert worker.outcomes == {"waiting": 1}
        assert worker.running == set() and worker.free_slots == 2
        # Not due, however late: only a message makes it due.
        later = clock().now() + timedelta(days=365)
        assert not await internals(engine).leases.claim_batch(
            [(approval.name, None)], max_dispatches=5, limit=16, gone=(), now=later
        )
        # A send from another engine (another process, as far as this worker knows).
        async with tether.open_engine(store, clock=clock()) as sender:
            await sender.send("a", "approve", True)
            sent_at = trio.current_time()
        assert await engine.wait("a", timeout=1) == (Item("x", 1), True)
    assert trio.current_time() == sent_at  # claimed at once, not at the next poll
    assert worker.outcomes == {"waiting": 1, "completed": 1}
    async with tether.open_engine(store, clock=clock()) as engine:
        info = await info_of(engine, "a")
    assert info.wake_at is None and [k for k, _ in messages_of(info)] == [
        "receive.item#0",
        "receive.approve#0",
    ]


async def test_a_send_to_a_parked_run_sets_its_wake_at_to_the_send(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store, clock=clock()) as engine:
        async with tether.open_worker(engine):
            await engine.submit(approval, run_id="a")
            await trio.sleep(60)
        record = await store.get_run("a")
        assert record is not None and record.status is RunStatus.WAITING
        await engine.send("a", "item", Item("x", 1))
        record = await store.get_run("a")
        assert record is not None and record.wake_at == START + timedelta(seconds=60)
        # engine.run (outside a worker) continues it, and waits in the process.
        with trio.move_on_after(10):
            await engine.run(approval, run_id="a")
        await engine.send("a", "approve", False)
        assert await engine.resume("a") == (Item("x", 1), False)


async def test_a_timer_due_soon_keeps_a_receiving_run_and_a_far_one_parks_it_until_then(
    autojump_clock: trio.testing.MockClock,
) -> None:
    minutes = {"m": 0.5}

    @tether.workflow(name="tests.messages.deadline", messages={"approve": bool})
    async def deadline() -> str:
        async with tether.parallel() as p:
            answer = p.start_soon(tether.receive, "approve", bool)
            p.start_soon(tether.sleep, minutes["m"] * 60)
        return f"approved={answer.result}"

    store = tether.MemoryStore()
    async with (
        tether.open_engine(store, clock=clock()) as engine,
        tether.open_worker(engine, park_after=60, poll_interval=3600) as worker,
    ):
        await engine.submit(deadline, run_id="soon")
        await trio.sleep(15)
        record = await store.get_run("soon")
        assert record is not None and record.status is RunStatus.RUNNING
        # The timer fired at 30 s: now only the receive waits, and the run parks on it.
        await trio.sleep(30)
        record = await store.get_run("soon")
        assert record is not None and (record.status, record.wake_at) == (RunStatus.WAITING, None)
        minutes["m"] = 120
        due = clock().now() + timedelta(hours=2)
        await engine.submit(deadline, run_id="far")
        await trio.sleep(1)
        record = await store.get_run("far")
        assert record is not None and (record.status, record.wake_at) == (RunStatus.WAITING, due)
        await engine.send("far", "approve", True)
        await trio.sleep(1)
        # It took the message, and parked again on its timer alone.
        info = await info_of(engine, "far")
        assert (info.status, info.wake_at) == (RunStatus.WAITING, due)
        assert [k for k, _ in messages_of(info)] == ["receive#0/receive.approve#0"]
        assert await engine.wait("far") == "approved=True"
        assert clock().now() == due
    assert worker.outcomes == {"waiting": 3, "completed": 1}


async def test_park_after_inf_never_parks_a_receiving_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = tether.MemoryStore()
    async with (
        tether.open_engine(store, clock=clock()) as engine,
        tether.open_worker(engine, park_after=math.inf) as worker,
    ):
        await engine.submit(approval, run_id="a")
        await trio.sleep(3600)
        record = await store.get_run("a")
        assert record is not None and record.status is RunStatus.RUNNING
        assert worker.running == {"a"}
        await engine.send("a", "item", Item("x", 1))
        await engine.send("a", "approve", True)
        assert await engine.wait("a", timeout=1) == (Item("x", 1), True)


async def test_a_send_between_the_last_mailbox_read_and_the_park_write_wakes_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    inner = tether.MemoryStore()
    faulty = FaultyStore(inner)
    raced: list[tuple[RunStatus, Message]] = []

    async def send_first(call: Call) -> None:
        record: RunRecord = call.args[0]
        if record.status is RunStatus.WAITING and not raced:
            # The park write is about to land: the execution read the mailbox
            # last before it, and the run is still running, so this send
            # cannot make it due by itself.
            stored = await inner.get_run(record.run_id)
            assert stored is not None
            message = await inner.send_message(record.run_id, "approve", "true", now=START)
            raced.append((stored.status, message))

    faulty.inject("update_run", Do(send_first))
    async with (
        tether.open_engine(faulty, clock=clock()) as engine,
        tether.open_worker(engine, poll_interval=3600) as worker,
    ):
        await engine.submit(approval, run_id="a")
        await engine.send("a", "item", Item("x", 1))
        assert await engine.wait("a", timeout=5) == (Item("x", 1), True)
    assert [(status, m.seq) for status, m in raced] == [(RunStatus.RUNNING, 2)]
    assert worker.outcomes == {"waiting": 1, "completed": 1}
    assert trio.current_time() < 1


async def test_a_race_with_a_message_nobody_waits_for_leaves_the_run_parked(
    autojump_clock: trio.testing.MockClock,
) -> None:
    inner = tether.MemoryStore()
    faulty = FaultyStore(inner)

    async def send_other(call: Call) -> None:
        record: RunRecord = call.args[0]
        if record.status is RunStatus.WAITING and record.wake_at is None:
            await inner.send_message(record.run_id, "approve", "true", now=START)

    faulty.inject("update_run", Do(send_other), times=1)
    async with (
        tether.open_engine(faulty, clock=clock()) as engine,
        tether.open_worker(engine, poll_interval=3600) as worker,
    ):
        await engine.submit(approval, run_id="a")  # waits for "item", not "approve"
        await trio.sleep(60)
    record = await inner.get_run("a")
    assert record is not None and (record.status, record.wake_at) == (RunStatus.WAITING, None)
    assert worker.outcomes == {"waiting": 1}


# -- cancellation ------------------------------------------------------------------------


async def test_cancelling_a_run_waiting_in_receive(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store, clock=clock()) as engine:
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                with pytest.raises(tether.RunCancelledError):
                    await engine.run(approval, run_id="a")

            nursery.start_soon(run)
            await trio.sleep(10)
            await engine.cancel("a")
        assert trio.current_time() == 10  # told at once: it executes in this engine
        info = await info_of(engine, "a")
        assert info.status is RunStatus.CANCELLED
        with pytest.raises(tether.RunConflictError, match="cancelled"):
            await engine.send("a", "item", Item("x", 1))
        # A parked one is cancelled at once too.
        async with tether.open_worker(engine):
            await engine.submit(approval, run_id="b")
            await trio.sleep(10)
        record = await store.get_run("b")
        assert record is not None and record.status is RunStatus.WAITING
        await engine.cancel("b")
        record = await store.get_run("b")
        assert record is not None and (record.status, record.wake_at) == (
            RunStatus.CANCELLED,
            None,
        )


async def test_a_caller_cancellation_of_a_waiting_receive_is_prompt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with tether.open_engine(tether.MemoryStore(), clock=clock()) as engine:
        with trio.move_on_after(5) as scope:
            await engine.run(approval, run_id="a")
        assert scope.cancelled_caught and trio.current_time() == 5
        info = await info_of(engine, "a")
        assert info.status is RunStatus.RUNNING and messages_of(info) == []


# -- formats -----------------------------------------------------------------------------


def test_a_message_entry_reads_back_strictly_and_other_kinds_are_unchanged() -> None:
    entry = Entry(
        run_id="r",
        key="receive.approve#0",
        kind=EntryKind.MESSAGE,
        value='{"name":"approve","seq":1,"value":true}',
        started_at=START,
        finished_at=START,
        token=1,
        position=0,
    ).stored_as(1)
    text = dumps_record(entry.to_json())
    assert loads_record(text, Entry.from_json) == entry
    assert '"kind":"message"' in text.replace(" ", "")
    with pytest.raises(RecordDecodeError):
        loads_record(text.replace('"message"', '"messages"'), Entry.from_json)
    timer = attrs.evolve(entry, kind=EntryKind.TIMER, value='{"due":"2030-01-01T00:00:00+00:00"}')
    assert loads_record(dumps_record(timer.to_json()), Entry.from_json) == timer


def test_a_run_parked_for_messages_says_so() -> None:
    assert str(Waiting("r", None)) == "run 'r' is waiting for a message"
    assert str(Waiting("r", START)) == (
        "run 'r' is waiting for its timers until 2030-01-01T00:00:00+00:00"
    )


async def test_a_parent_waits_for_a_child_parked_on_a_receive_until_a_send_wakes_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    @tether.workflow(name="tests.messages.parent")
    async def parent() -> str:
        item, approved = await tether.child(approval, run_id="kid")
        return f"{item.sku}: {approved}"

    store = tether.MemoryStore()
    async with (
        tether.open_engine(store, clock=clock()) as engine,
        tether.open_worker(engine, poll_interval=3600) as worker,
    ):
        await engine.submit(parent, run_id="p")
        await trio.sleep(60)
        kid = await store.get_run("kid")
        assert kid is not None and (kid.status, kid.wake_at) == (RunStatus.WAITING, None)
        assert worker.running == {"p"}  # the parent waits for the child's outcome
        await engine.send("kid", "item", Item("x", 1))
        await engine.send("kid", "approve", True)
        assert await engine.wait("p", timeout=5) == "x: True"
