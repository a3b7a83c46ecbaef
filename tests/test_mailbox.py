"""Runs' mailboxes: the stored message format, the shared rules, and the conformance checks.

Each mailbox conformance check is shown to catch a small store that breaks its
rule (built on ``tests/_json_store.py``'s JSON store, as a third-party store
would be written with the helpers ``tether.stores`` gives), and MemoryStore
passes them all. The other built-in stores run them in ``tests/test_stores.py``
(the whole suite, per store) and ``tests/test_mailbox_stores.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import tether
from tether.stores import (
    FINISHED,
    Capability,
    MailboxStore,
    Message,
    RecordDecodeError,
    RunRecord,
    RunStatus,
    Served,
    capabilities_of,
    check_after,
    check_message_name,
    check_send,
    decide_send,
    dispatchable,
    due,
    dumps_record,
    load_message,
    loads_record,
    mailbox_of,
    message_gap,
)
from tether.testing import (
    ClockHoldingStore,
    Crash,
    FaultyStore,
    Raise,
    SimulatedCrash,
    StoreConformanceError,
    check_store,
)
from tether.testing._conformance_messages import MESSAGE_CHECKS
from tether.testing._explore_shared import Connection, SharedStore

from ._json_store import JsonStore

T0 = datetime(2031, 2, 3, 4, 5, 6, tzinfo=UTC)


def _message(**kw: object) -> Message:
    fields: dict[str, object] = {
        "run_id": "r",
        "seq": 1,
        "name": "approve",
        "value": '{"ok": true}',
        "sent_at": T0,
    }
    fields.update(kw)
    return Message(**fields)  # type: ignore[arg-type]


def _record(status: RunStatus = RunStatus.RUNNING, **kw: object) -> RunRecord:
    return RunRecord(
        run_id="r",
        workflow="wf",
        args="[]",
        status=status,
        created_at=T0,
        updated_at=T0,
        **kw,  # type: ignore[arg-type]
    )


# -- the stored form -----------------------------------------------------------------------


def test_a_message_round_trips_exactly_through_its_stored_text() -> None:
    message = _message(value=' {"z": 1.50, "a": "ü"} ', seq=7)
    text = dumps_record(message.to_json())
    assert json.loads(text)["format_version"] == 1
    assert json.loads(text)["checksum"] == message.checksum
    again = load_message(text, "r", 7)
    assert again == message and again.value == ' {"z": 1.50, "a": "ü"} '
    assert load_message(text.encode(), "r", 7) == message


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda d: d.update(value='{"ok": false}'), "does not match its checksum"),
        (lambda d: d.update(name="other"), "does not match its checksum"),
        (lambda d: d.update(sent_at="2031-02-03T04:05:07+00:00"), "does not match its checksum"),
        (lambda d: d.update(checksum=None), "does not match its checksum"),
        (lambda d: d.update(format_version=2), "format_version 2"),
        (lambda d: d.update(format_version=True), "format_version True"),
        (lambda d: d.pop("format_version"), "format_version None"),
        (lambda d: d.update(extra=1), "unknown field(s) 'extra'"),
        (lambda d: d.pop("sent_at"), "missing field(s) 'sent_at'"),
        (lambda d: d.update(seq=0), "positive integer"),
        (lambda d: d.update(seq="1"), "positive integer"),
        (lambda d: d.update(value=1), "'value' must be a string"),
        (lambda d: d.update(sent_at="2031-02-03T04:05:06"), "no timezone"),
    ],
)
def test_the_strict_reader_refuses_a_changed_or_malformed_message(
    change: Callable[[dict[str, Any]], object], says: str
) -> None:
    data = _message().to_json()
    change(data)
    with pytest.raises(RecordDecodeError) as info:
        load_message(dumps_record(data), "r", 1)
    assert says in str(info.value)


def test_the_strict_reader_refuses_another_run_or_seq_and_bad_json() -> None:
    text = dumps_record(_message(seq=2).to_json())
    with pytest.raises(RecordDecodeError, match="names run 'r'"):
        load_message(text, "other", 2)
    with pytest.raises(RecordDecodeError, match="says seq 2, where it is stored 3"):
        load_message(text, "r", 3)
    with pytest.raises(RecordDecodeError, match="not valid JSON"):
        load_message(text[:-1], "r", 2)
    with pytest.raises(RecordDecodeError, match="duplicate JSON key"):
        load_message(text[:-1] + ',"seq":2}', "r", 2)


def test_message_gap_finds_the_first_missing_seq_after_the_page_start() -> None:
    assert message_gap([], after=0) is None
    assert message_gap([1, 2, 3], after=0) is None
    assert message_gap([4, 5], after=3) is None
    assert message_gap([2, 3], after=0) == 1
    assert message_gap([4, 6], after=3) == 5
    assert message_gap([5], after=3) == 4


# -- the shared rules ------------------------------------------------------------------------


def test_argument_checks() -> None:
    assert check_message_name("item.v-2_x") == "item.v-2_x"
    assert check_message_name("a" * 100) == "a" * 100
    for bad in ("", "a" * 101, "a b", "é", "a/b", None, 3):
        with pytest.raises(tether.UsageError, match="message name"):
            check_message_name(bad)
    plus_two = datetime(2031, 1, 1, 2, tzinfo=timezone(timedelta(hours=2)))
    sent_at = check_send("r", "n", " [1] ", plus_two)
    assert sent_at == plus_two and sent_at.tzinfo is UTC
    for args, says in (
        (("", "n", "1", T0), "run id"),
        (("r", "n", 1, T0), "JSON text, not int"),
        (("r", "n", "{", T0), "JSON text"),
        (("r", "n", "1", datetime(2031, 1, 1)), "timezone-aware"),
        (("r", "n", "1", "2031-01-01"), "timezone-aware"),
    ):
        with pytest.raises(tether.UsageError, match=says):
            check_send(*args)
    assert check_after(0) == 0 and check_after(5) == 5
    for bad_after in (-1, True, 1.0, "1", None):
        with pytest.raises(tether.UsageError, match="after must be"):
            check_after(bad_after)


def test_decide_send_refuses_unknown_and_finished_runs() -> None:
    with pytest.raises(tether.RunNotFoundError, match="'r'"):
        decide_send(None, run_id="r", now=T0)
    finished = {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.DEAD_LETTER, RunStatus.CANCELLED}
    assert finished == FINISHED
    for status in FINISHED:
        with pytest.raises(tether.RunConflictError, match=f"is {status.value}"):
            decide_send(_record(status), run_id="r", now=T0)
    for status in (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.PAUSED):
        assert decide_send(_record(status), run_id="r", now=T0) is None


def test_decide_send_makes_a_waiting_run_due_at_the_send() -> None:
    later = T0 + timedelta(hours=1)
    woken = decide_send(_record(RunStatus.WAITING), run_id="r", now=later)
    assert woken is not None
    assert (woken.status, woken.wake_at, woken.updated_at) == (RunStatus.WAITING, later, later)
    timer = _record(RunStatus.WAITING, wake_at=T0 + timedelta(days=3))
    moved = decide_send(timer, run_id="r", now=later)
    assert moved is not None and moved.wake_at == later
    assert moved == attrs.evolve(timer, wake_at=later, updated_at=later)
    # An earlier (or equal) wake-up stands: the record is left as it is.
    assert decide_send(_record(RunStatus.WAITING, wake_at=T0), run_id="r", now=later) is None
    assert decide_send(_record(RunStatus.WAITING, wake_at=later), run_id="r", now=later) is None


def test_a_waiting_run_without_wake_at_is_not_due() -> None:
    inbox = _record(RunStatus.WAITING)
    far = datetime(2999, 1, 1, tzinfo=UTC)
    assert not due(inbox, far)
    assert not dispatchable(inbox, workflows={("wf", None)}, gone=(), now=far)
    timer = _record(RunStatus.WAITING, wake_at=T0)
    assert not due(timer, T0 - timedelta(microseconds=1)) and due(timer, T0)
    for status in (RunStatus.QUEUED, RunStatus.RUNNING):
        assert due(_record(status), T0)


def test_mailbox_of_finds_both_methods_or_none() -> None:
    memory = tether.MemoryStore()
    assert mailbox_of(memory) is memory
    assert isinstance(memory, MailboxStore)
    assert mailbox_of(JsonStore()) is None
    assert mailbox_of(HalfMailbox()) is None


# -- the conformance checks, and stores that break them ----------------------------------------


class MailboxJsonStore(JsonStore):
    """JsonStore with a mailbox, written with the shared helpers: it passes every check."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: dict[str, list[str]] = {}

    async def send_message(self, run_id: str, name: str, value: str, *, now: datetime) -> Message:
        sent_at = check_send(run_id, name, value, now)
        await trio.lowlevel.checkpoint()
        record = decide_send(self.read(run_id), run_id=run_id, now=sent_at)
        return self.store_message(record, run_id, name, value, sent_at)

    def store_message(
        self, record: RunRecord | None, run_id: str, name: str, value: str, sent_at: datetime
    ) -> Message:
        mailbox = self.messages.setdefault(run_id, [])
        message = Message(
            run_id=run_id, seq=len(mailbox) + 1, name=name, value=value, sent_at=sent_at
        )
        mailbox.append(dumps_record(message.to_json()))
        if record is not None:
            self.write(record)
        return message

    async def load_messages(self, run_id: str, *, after: int = 0) -> Sequence[Message]:
        after = check_after(after)
        await trio.lowlevel.checkpoint()
        texts = self.messages.get(run_id, [])
        return [load_message(t, run_id, i) for i, t in enumerate(texts, 1)][after:]

    async def delete_run(self, run_id: str) -> bool:
        deleted = await super().delete_run(run_id)
        self.messages.pop(run_id, None)
        return deleted


class HalfMailbox(JsonStore):
    async def send_message(self, run_id: str, name: str, value: str, *, now: datetime) -> Message:
        raise AssertionError("never called")


class ReformattingStore(MailboxJsonStore):
    """Breaks exact values: stores the value re-encoded."""

    async def send_message(self, run_id: str, name: str, value: str, *, now: datetime) -> Message:
        return await super().send_message(run_id, name, json.dumps(json.loads(value)), now=now)


class LateSeqStore(MailboxJsonStore):
    """Breaks concurrent sends: reads the next seq, then awaits, then writes."""

    async def send_message(self, run_id: str, name: str, value: str, *, now: datetime) -> Message:
        sent_at = check_send(run_id, name, value, now)
        record = decide_send(self.read(run_id), run_id=run_id, now=sent_at)
        seq = len(self.messages.get(run_id, [])) + 1
        await trio.lowlevel.checkpoint()  # another send takes the same seq
        message = Message(run_id=run_id, seq=seq, name=name, value=value, sent_at=sent_at)
        self.messages.setdefault(run_id, []).append(dumps_record(message.to_json()))
        if record is not None:
            self.write(record)
        return message


class TornSendStore(MailboxJsonStore):
    """Breaks atomic sends: reserves the seq, awaits, then writes the message."""

    async def send_message(self, run_id: str, name: str, value: str, *, now: datetime) -> Message:
        sent_at = check_send(run_id, name, value, now)
        record = decide_send(self.read(run_id), run_id=run_id, now=sent_at)
        mailbox = self.messages.setdefault(run_id, [])
        mailbox.append("{")  # the seq is taken
        await trio.lowlevel.checkpoint()  # cancelled here: a torn message stays
        mailbox.pop()
        return self.store_message(record, run_id, name, value, sent_at)


class FinishedTakesStore(MailboxJsonStore):
    """Breaks refusals: a finished run takes a message."""

    async def send_message(self, run_id: str, name: str, value: str, *, now: datetime) -> Message:
        sent_at = check_send(run_id, name, value, now)
        await trio.lowlevel.checkpoint()
        if self.read(run_id) is None:
            raise tether.RunNotFoundError(run_id)
        return self.store_message(None, run_id, name, value, sent_at)


class SleepyStore(MailboxJsonStore):
    """Breaks wake-ups: a send leaves a waiting run as it was."""

    async def send_message(self, run_id: str, name: str, value: str, *, now: datetime) -> Message:
        sent_at = check_send(run_id, name, value, now)
        await trio.lowlevel.checkpoint()
        decide_send(self.read(run_id), run_id=run_id, now=sent_at)
        return self.store_message(None, run_id, name, value, sent_at)


class EagerStore(MailboxJsonStore):
    """Breaks the not-due rule: a waiting run without wake_at is claimed (the old rule)."""

    async def claim_next(
        self,
        owner: str,
        *,
        ttl: float,
        workflows: Collection[Served | str],
        max_dispatches: int,
        gone: Collection[str] = (),
        now: datetime | None = None,
    ) -> RunRecord | None:
        for run_id in self.runs:
            current = self.decode_run(run_id)
            if current.status is RunStatus.WAITING and current.wake_at is None:
                self.write(attrs.evolve(current, wake_at=datetime(2000, 1, 1, tzinfo=UTC)))
        return await super().claim_next(
            owner,
            ttl=ttl,
            workflows=workflows,
            max_dispatches=max_dispatches,
            gone=gone,
            now=now,
        )


class UndeletedStore(MailboxJsonStore):
    """Breaks deletes: the mailbox outlives its run."""

    async def delete_run(self, run_id: str) -> bool:
        return await JsonStore.delete_run(self, run_id)


class MisnumberingStore(MailboxJsonStore):
    """Breaks seqs: a send reports a seq other than the one it stored."""

    def store_message(
        self, record: RunRecord | None, run_id: str, name: str, value: str, sent_at: datetime
    ) -> Message:
        message = super().store_message(record, run_id, name, value, sent_at)
        return attrs.evolve(message, seq=message.seq * 2)


async def test_memory_and_a_third_party_style_store_pass_the_mailbox_checks() -> None:
    for factory in (tether.MemoryStore, MailboxJsonStore):
        result = await check_store(factory, only=MESSAGE_CHECKS, reopen=lambda s: s)
        skipped = [] if factory is tether.MemoryStore else [("message_watch",)]
        assert [(name,) for name, _ in result.skipped] == skipped
        assert len(result.passed) + len(skipped) == len(MESSAGE_CHECKS)


async def test_a_store_without_a_mailbox_skips_the_mailbox_checks() -> None:
    result = await check_store(JsonStore, only=MESSAGE_CHECKS, reopen=lambda s: s)
    assert result.passed == ()
    assert {reason for _, reason in result.skipped} == {
        "the store has no send_message/load_messages (it keeps no messages)"
    }


@pytest.mark.parametrize(
    ("broken", "check", "says"),
    [
        (ReformattingStore, "messages", "send_message returned"),
        (MisnumberingStore, "messages", "send_message returned"),
        (LateSeqStore, "concurrent_messages", "concurrent sends got seqs"),
        (TornSendStore, "cancelled_send_atomic", "RecordDecodeError"),
        (FinishedTakesStore, "message_refusals", "no RunConflictError"),
        (SleepyStore, "message_wakes", "a send to a run waiting for messages left"),
        (EagerStore, "message_wakes", "claim_next took a run waiting for messages"),
        (UndeletedStore, "message_delete", "delete_run kept the run's messages"),
    ],
)
async def test_each_mailbox_check_catches_a_store_that_breaks_its_rule(
    broken: type[MailboxJsonStore], check: str, says: str
) -> None:
    with pytest.raises(StoreConformanceError) as info:
        await check_store(broken, only=[check])
    assert [name for name, _ in info.value.failures] == [check]
    assert says in str(info.value)
    await check_store(MailboxJsonStore, only=[check])


async def test_memory_store_wakes_its_watchers_on_a_send_and_takes_no_write_when_cancelled() -> (
    None
):
    store = tether.MemoryStore()
    await store.open()
    await store.create_run(_record())
    seen: list[int] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.watch, lambda: seen.append(1))
        await trio.testing.wait_all_tasks_blocked()
        await store.send_message("r", "approve", "true", now=T0)
        assert seen == [1]
        with trio.CancelScope() as scope:
            scope.cancel()
            await store.send_message("r", "approve", "false", now=T0)
        assert scope.cancelled_caught
        nursery.cancel_scope.cancel()
    assert [m.value for m in await store.load_messages("r")] == ["true"]
    assert loads_record(dumps_record(_message().to_json()), Message.from_json) == _message()


# -- wrappers forward the mailbox, exactly when the store they wrap has one --------------------


async def test_faulty_store_forwards_the_mailbox_with_its_faults() -> None:
    store = FaultyStore(tether.MemoryStore())
    assert mailbox_of(store) is not None
    store.inject("send_message", Raise(), when=lambda run_id, name, value: name == "reject")
    store.inject("send_message", Raise(), at=3, after=True)
    store.inject("load_messages", Crash(), at=3)
    await store.open()
    await store.create_run(_record())
    first = await store.send_message("r", "approve", "1", now=T0)
    with pytest.raises(tether.StoreError, match="injected failure of send_message call #2"):
        await store.send_message("r", "reject", "2", now=T0)
    with pytest.raises(tether.StoreError, match="after the inner store returned"):
        await store.send_message("r", "approve", "3", now=T0)
    stored = list(await store.load_messages("r"))
    assert [m.value for m in stored] == ["1", "3"], "a failure before the call stored it"
    assert list(await store.load_messages("r", after=1)) == stored[1:]
    with pytest.raises(SimulatedCrash, match="load_messages call #3"):
        await store.load_messages("r")
    with pytest.raises(SimulatedCrash):
        await store.send_message("r", "approve", "4", now=T0)
    assert store.calls["send_message"] == 4 and store.calls["load_messages"] == 3
    assert list(await store.inner.load_messages("r")) == [first, stored[1]]  # type: ignore[attr-defined]
    await store.close()


async def test_wrappers_have_no_mailbox_when_the_wrapped_store_has_none() -> None:
    bare = JsonStore()
    for wrapper in (FaultyStore(bare), ClockHoldingStore(bare)):
        assert mailbox_of(wrapper) is None, f"{wrapper!r} claims a mailbox"
        # It defines send_message (forwarding); it declares what the inner store has.
        assert Capability.MESSAGES not in capabilities_of(wrapper)
        assert capabilities_of(wrapper) <= capabilities_of(bare)
    with pytest.raises(ValueError, match="unknown store method"):
        FaultyStore(bare).inject("send_messages", Raise())


async def test_clock_holding_store_forwards_the_mailbox() -> None:
    store = ClockHoldingStore(tether.MemoryStore())
    mailbox = mailbox_of(store)
    assert mailbox is not None
    await store.open()
    await store.create_run(_record(RunStatus.WAITING))
    message = await mailbox.send_message("r", "approve", "true", now=T0)
    assert list(await mailbox.load_messages("r")) == [message]
    assert list(await mailbox.load_messages("r", after=1)) == []
    woken = await store.get_run("r")
    assert woken is not None and woken.wake_at == T0
    await store.close()


async def test_an_explorer_connection_forwards_the_mailbox_and_announces_a_send() -> None:
    shared = SharedStore(tether.MemoryStore())

    class Process:
        async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
            return await shared.call("p", method, args, kwargs)

    connection = Connection(shared, Process())
    mailbox = mailbox_of(connection)
    assert mailbox is not None
    assert mailbox_of(Connection(SharedStore(JsonStore()), Process())) is None
    await shared.raw.create_run(_record())
    message = await mailbox.send_message("r", "approve", "true", now=T0)
    assert list(await mailbox.load_messages("r")) == [message]
    assert shared.announces("send_message", message)
    assert shared.answered == 2
    with pytest.raises(tether.RunNotFoundError):
        await mailbox.send_message("nobody", "approve", "true", now=T0)
    assert [(r.method, r.run_id, r.error) for r in shared.refused] == [
        ("send_message", "nobody", "RunNotFoundError")
    ]
