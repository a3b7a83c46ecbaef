"""The explorer's fault kinds at signal delivery (issue 17, Done-when 6).

A workflow receives messages: three in a loop, each followed by a step, and
two in ``parallel()`` branches. Its messages are in the store before the
workflow executes: a message needs its run to exist, and the explorer gives
each trial a fresh store, so the store the explorer gets (:func:`seeded`)
sends them into its mailbox right after the claim that creates the run.

:func:`tether.testing.explore` then injects every fault kind at every
interleaving point, resumes, and checks its invariants: 0 violations. The
points include each receive's journal append (``save:receive.n#0``, ...) and
the moment after it was stored (``stored:...``), and the delivery itself
(``receive:...``, once the entry is journaled): a crash before the engine
knows the entry is stored, or a cancel while it is in flight, must
neither lose a message nor deliver one twice (the resumed result, which sums
the numbers and pairs the words, equals the uninterrupted one).

The explorer injects its faults at the store's writes and at the events of
steps, timers and receives, not at ``load_messages``, the read by which a receive
finds its message: the same fault kinds are injected there by a
``FaultyStore`` here, at each read of a run in turn, while its messages
arrive one by one (a crash, a store error, a hung read under the caller's
deadline, the caller's cancellation), each followed by a resume from a new
engine; the journal then holds each message once, in send order.
"""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from typing import Any

import pytest
import trio

import tether
from tether.stores import EntryKind, Store, mailbox_of
from tether.testing import (
    FAULT_KINDS,
    Call,
    Crash,
    Do,
    Fault,
    FaultyStore,
    Hang,
    Raise,
    SimulatedCrash,
    explore,
)
from tether.testing._explore import Explorer

#: The messages in the mailbox before the run executes: (name, JSON text).
MAILBOX = (("n", "1"), ("word", '"left"'), ("n", "2"), ("n", "3"), ("word", '"right"'), ("n", "4"))
#: The result of ``receiver(3)``, whatever was injected.
RESULT = (12, ["left", "right"])
#: The caller's deadline when a read hangs (virtual seconds).
DEADLINE = 1.0


@tether.step
async def double(n: int) -> int:
    return 2 * n


@tether.workflow(name="tests.messages.explored", messages={"n": int, "word": str})
async def receiver(count: int) -> tuple[int, list[str]]:
    total = 0
    for _ in range(count):
        total += await double(await tether.receive("n", int))
    async with tether.parallel() as p:
        a = p.start_soon(tether.receive, "word", str)
        b = p.start_soon(tether.receive, "word", str)
    # Which branch takes which word depends on the schedule: the pair does not.
    return total, sorted([a.result, b.result])


def seeded() -> Store:
    """A fresh MemoryStore whose run ``explored`` has :data:`MAILBOX` from its creation."""
    store = FaultyStore(tether.MemoryStore())

    async def send(call: Call) -> None:
        mailbox = mailbox_of(call.store.inner)
        assert mailbox is not None
        for name, value in MAILBOX:
            await mailbox.send_message(call.args[0], name, value, now=datetime.now(UTC))

    # After the claim that creates the run (the first one), before the workflow executes.
    store.inject("claim", Do(send), after=True, times=1)
    return store


def test_every_fault_kind_at_signal_delivery_breaks_no_invariant() -> None:
    explorer = Explorer(receiver, 3, store_factory=seeded)
    points = [p for execution in explorer.points(0) for p in execution]
    receives = ["receive.n#0", "receive.n#1", "receive.n#2"]
    branches = ["receive#0/receive.word#0", "receive#1/receive.word#0"]
    for key in receives + branches:
        assert f"save:{key}" in points and f"stored:{key}" in points
        # ...and, once journaled, the delivery itself: the code after it goes on.
        assert points.index(f"receive:{key}") > points.index(f"stored:{key}")
    # Delivery is in the run's order: each receive's save, then its step.
    assert points.index("save:receive.n#1") > points.index("save:double#0")

    result = explore(receiver, 3, store_factory=seeded, seeds=2, faults=FAULT_KINDS)
    assert result.outcome == "returned (12, ['left', 'right'])"
    delivery = [p for p in result.points[0] if p.partition(":")[2] in receives + branches]
    assert len(delivery) == 3 * len(receives + branches)
    assert result.trials > 10 * len(delivery)


@pytest.mark.parametrize(
    "fault",
    [
        "crash@stored:receive.n#1",  # stored, the engine does not know it yet
        "crash@save:receive.n#1",  # the append never lands
        "cancel@save:receive#1/receive.word#0",
        "fail@save:receive.n#0",
        "store_error@stored:receive.n#2",
        "lease_lost@save:receive.n#1",
    ],
)
def test_a_fault_at_a_receive_takes_each_message_once(fault: str) -> None:
    result = explore(receiver, 3, store_factory=seeded, seeds=[0, 1], faults=[fault])
    assert result.outcome == "returned (12, ['left', 'right'])"


async def resumed_to_the_end(store: Store) -> tuple[Any, list[dict[str, Any]]]:
    """Resume run ``explored`` on *store* from a new engine; its result and what it took."""
    async with tether.open_engine(store) as engine:
        result = await engine.resume("explored")
        info = await engine.get_run("explored")
    assert info is not None
    return result, [json.loads(e.value or "") for e in info.entries if e.kind is EntryKind.MESSAGE]


def assert_each_message_once(taken: list[dict[str, Any]]) -> None:
    assert sorted((t["seq"], t["name"]) for t in taken) == [
        (1, "n"),
        (2, "word"),
        (3, "n"),
        (4, "n"),
        (5, "word"),
    ]
    assert [t["value"] for t in taken if t["name"] == "n"] == [1, 2, 3]  # in send order


async def test_the_journal_takes_each_message_once_in_order() -> None:
    store = seeded()
    async with tether.open_engine(store) as engine:
        assert await engine.run(receiver, 3, run_id="explored") == RESULT
    result, taken = await resumed_to_the_end(store)  # completed: returns what it stored
    assert result == RESULT
    assert_each_message_once(taken)


async def trickle(store: Store) -> None:
    """Send :data:`MAILBOX` to run ``explored`` (created at once), one message per second
    (but its last message, which the run never takes: it may have completed)."""
    mailbox = mailbox_of(store)
    assert mailbox is not None
    for name, value in MAILBOX[:-1]:
        await trio.sleep(1.0)
        await mailbox.send_message("explored", name, value, now=datetime.now(UTC))


@pytest.mark.parametrize("kind", ["crash", "store_error", "hang", "cancel"])
async def test_a_fault_at_each_mailbox_read_loses_no_message_and_repeats_none(
    kind: str, autojump_clock: trio.abc.Clock
) -> None:
    # The messages arrive while the run waits: its receives read the mailbox
    # as each one is sent (a MemoryStore announces it), and poll in between.
    # Read n is faulted in trial n, until a run makes fewer than n reads (how
    # many it makes, about 25, depends on the schedule by one or two).
    faults: dict[str, Fault] = {"crash": Crash(), "store_error": Raise(), "hang": Hang()}
    for n in itertools.count(1):
        store = tether.MemoryStore()
        faulty = FaultyStore(store)
        fired: list[float] = []
        outcome: object = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trickle, store)
            with trio.CancelScope() as caller:

                async def strike(
                    call: Call, caller: trio.CancelScope = caller, fired: list[float] = fired
                ) -> None:
                    fired.append(trio.current_time())
                    if kind == "cancel":
                        caller.cancel()
                    elif kind == "hang":
                        caller.deadline = trio.current_time() + DEADLINE
                    if kind in faults:
                        await faults[kind].apply(call)

                faulty.inject("load_messages", Do(strike), at=n)
                try:
                    async with tether.open_engine(faulty) as engine:
                        outcome = await engine.run(receiver, 3, run_id="explored")
                except* SimulatedCrash:
                    outcome = "crashed"
                except* tether.StoreError:
                    outcome = "store error"
            if not fired:  # the run made fewer reads: it was not faulted
                assert outcome == RESULT and n > 2 * len(MAILBOX)
                return
            expected = {"crash": "crashed", "store_error": "store error"}.get(kind)
            assert outcome == expected, f"{kind} at read {n}: {outcome!r}"
            if kind in ("hang", "cancel"):
                # The caller's cancellation is prompt, even while the read hangs.
                assert caller.cancelled_caught
                wait = DEADLINE if kind == "hang" else 0.0
                assert trio.current_time() == pytest.approx(fired[0] + wait)
            # A new engine resumes the run; the messages still to come wake it.
            result, taken = await resumed_to_the_end(store)
        assert result == RESULT, f"{kind} at read {n}"
        assert_each_message_once(taken)


# (tests define workflows of their own: the registry is put back after each)
pytestmark = pytest.mark.usefixtures("tether_registry")
