"""One owner per run, in one process: leases, fencing, cancel by id, and the checks for them.

Real processes (SIGSTOP, SIGKILL, two processes racing) are in test_processes.py.
"""

from __future__ import annotations

import functools
import os
import socket
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

import tether
from tether._codec._values import codec, digest
from tether._engine._engine import internals
from tether.stores import (
    Entry,
    Renewal,
    RunRecord,
    RunStatus,
    Store,
    dumps_record,
    entry_checksum,
    fenced_update,
    loads_record,
    utcnow,
)
from tether.testing import Delay, Do, FaultyStore, Hang, StoreConformanceError, check_store
from tether.testing._conformance_flow import FLOW_CHECKS
from tether.testing._conformance_messages import MESSAGE_CHECKS
from tether.testing._conformance_respond import RESPOND_CHECKS
from tether.testing._faulty import Call

from ._json_store import JsonStore, json_alter, json_corrupt, json_remove

# -- the conformance checks catch each broken rule ---------------------------------------


class UnfencedStore(JsonStore):
    """Breaks fencing: takes writes whatever their token."""

    def check_token(self, run_id: str, entries: Sequence[Entry]) -> None:
        if run_id not in self.runs:
            raise tether.RunNotFoundError(run_id)

    async def update_run(self, record: RunRecord) -> RunRecord:
        await trio.lowlevel.checkpoint()
        self.write(record)
        return record


class SharedClaimStore(JsonStore):
    """Breaks exclusivity: a claim takes the run from whoever holds it."""

    async def claim(
        self,
        run_id: str,
        owner: str,
        *,
        ttl: float,
        create: RunRecord | None = None,
        takeover: int | None = None,
    ) -> RunRecord:
        current = self.read(run_id)
        steal = None if current is None else current.token
        return await super().claim(run_id, owner, ttl=ttl, create=create, takeover=steal)


class ResurrectingStore(JsonStore):
    """Breaks renewal: renews each held run by id, giving a lost one back to its old owner."""

    async def renew(self, owner: str, *, ttl: float, held: Mapping[str, int]) -> Renewal:
        for run_id, token in held.items():
            record = self.read(run_id)
            if record is not None:
                self.write(attrs.evolve(record, owner=owner, token=token))
        return await super().renew(owner, ttl=ttl, held=held)


class GapBlindStore(JsonStore):
    """Breaks strict reads: returns a journal with a seq missing in the middle."""

    def decode_entries(self, run_id: str) -> list[Entry]:
        return [
            self.decode_entry(run_id, i, text)
            for i, text in enumerate(self.journals.get(run_id, ()))
        ]


class ChecksumBlindStore(JsonStore):
    """Breaks strict reads: replays an entry whose content changed (recomputes its checksum)."""

    def decode_entry(self, run_id: str, i: int, text: str) -> Entry:
        def unchecked(data: object) -> Entry:
            assert isinstance(data, dict)
            data = {**data, "checksum": None}
            entry = Entry.from_json({**data, "seq": None})
            return entry.stored_as(data["seq"])

        entry: Entry = loads_record(text, unchecked)
        return entry


class ClaimAnyArgsStore(JsonStore):
    """Breaks create: claims a stored run for a create of other arguments."""

    async def claim(
        self,
        run_id: str,
        owner: str,
        *,
        ttl: float,
        create: RunRecord | None = None,
        takeover: int | None = None,
    ) -> RunRecord:
        stored = self.read(run_id)
        if create is not None and stored is not None:
            create = attrs.evolve(create, workflow=stored.workflow, args=stored.args)
        return await super().claim(run_id, owner, ttl=ttl, create=create, takeover=takeover)


class EverlastingStore(JsonStore):
    """Breaks expiry: a lease, once taken, never expires."""

    def decode_run(self, run_id: str) -> RunRecord:
        record = super().decode_run(run_id)
        if record.owner is not None and record.lease_expires_at is None:
            record = attrs.evolve(record, lease_expires_at=record.updated_at)
        return record


class ReleaseBlindStore(JsonStore):
    """Reports a run its holder's own write released as lost (no ``released`` read)."""

    async def renew(self, owner: str, *, ttl: float, held: Mapping[str, int]) -> Renewal:
        renewal = await super().renew(owner, ttl=ttl, held=held)
        return Renewal(lost=renewal.lost | renewal.released, cancelled=renewal.cancelled)


class EagerCancelStore(JsonStore):
    """Breaks cancel: marks a run cancelled at once although its owner still executes it."""

    async def cancel_run(self, run_id: str, *, takeover: int | None = None) -> RunRecord:
        current = self.read(run_id)
        return await super().cancel_run(run_id, takeover=None if current is None else current.token)


HOOKS = {"corrupt": json_corrupt, "remove": json_remove, "alter": json_alter}


async def test_the_json_store_passes_every_check_with_its_hooks() -> None:
    result = await check_store(JsonStore, **HOOKS)  # type: ignore[arg-type]
    # (It keeps no messages, takes no responds and claims one run at a time:
    # tests/test_mailbox.py checks a mailbox built on it, tests/test_respond.py a respond;
    # it keeps no queues' rules at submit.)
    batched = ["claim_batch", "claim_batch_exclusive", "claim_batch_decides"]
    skipped = ["reopen", "watch", *batched, *MESSAGE_CHECKS, *RESPOND_CHECKS, *FLOW_CHECKS]
    assert [name for name, _ in result.skipped] == skipped


@pytest.mark.parametrize(
    ("broken", "check", "says"),
    [
        (UnfencedStore, "fencing", "no LeaseLostError"),
        (SharedClaimStore, "claim_exclusive", "no RunConflictError"),
        (ResurrectingStore, "renewal", "renewal reported lost set()"),
        (ReleaseBlindStore, "renewal_released", "released by its holder's own write"),
        (GapBlindStore, "journal_gap", "no CheckpointCorruptError"),
        (ChecksumBlindStore, "entry_checksum", "no CheckpointCorruptError"),
        (EagerCancelStore, "cancel", "cancel gave"),
        (ClaimAnyArgsStore, "claim_creates", "a claim with other arguments"),
        (EverlastingStore, "claim_after_expiry", "an expired lease still shows as live"),
    ],
)
async def test_each_lease_check_catches_a_store_that_breaks_its_rule(
    broken: type[JsonStore], check: str, says: str
) -> None:
    with pytest.raises(StoreConformanceError) as info:
        await check_store(broken, only=[check], **HOOKS)  # type: ignore[arg-type]
    assert [name for name, _ in info.value.failures] == [check]
    assert says in str(info.value)
    # ...and the correct store passes that same check.
    await check_store(JsonStore, only=[check], **HOOKS)  # type: ignore[arg-type]


# -- the engine ---------------------------------------------------------------------------

executed: list[str] = []
gate = trio.Event()  # the gated step waits for it
waiters = trio.Semaphore(0)  # released once by each gated step that started waiting


@pytest.fixture(autouse=True)
def _fresh() -> None:
    global gate, waiters
    executed.clear()
    gate = trio.Event()
    waiters = trio.Semaphore(0)


@tether.step
async def quick(n: int) -> int:
    executed.append(f"quick({n})")
    return n * 2


@tether.step
async def waiting(n: int) -> int:
    executed.append(f"waiting({n})")
    waiters.release()
    await gate.wait()
    return n + 100


@tether.workflow(name="tests.leases.flow")
async def flow(n: int) -> list[int]:
    a = await quick(n)
    b = await waiting(n)
    c = await quick(n + 1)
    return [a, b, c]


@attrs.define(eq=False)
class Outcome:
    """What ``engine.run(flow, 1)`` in a background task raised, once :attr:`ended`."""

    error: BaseException | None = None
    ended: trio.Event = attrs.field(factory=trio.Event)


def start_run(nursery: trio.Nursery, engine: tether.Engine, run_id: str = "r") -> Outcome:
    """Start ``engine.run(flow, 1, run_id=run_id)`` in *nursery*; its TetherError is kept."""
    outcome = Outcome()

    async def run() -> None:
        try:
            await engine.run(flow, 1, run_id=run_id)
        except tether.TetherError as exc:
            outcome.error = exc
        finally:
            outcome.ended.set()

    nursery.start_soon(run)
    return outcome


async def _executing(engine: tether.Engine, run_id: str) -> tether.RunInfo:
    """Wait until *run_id* waits in the gated step; its RunInfo then."""
    await waiters.acquire()
    await trio.testing.wait_all_tasks_blocked()
    info = await engine.get_run(run_id)
    assert info is not None
    return info


async def test_a_second_engine_is_refused_at_once_naming_the_owner(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = tether.MemoryStore()
    async with (
        tether.open_engine(store) as first,
        tether.open_engine(store) as second,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(functools.partial(first.run, flow, 1, run_id="r"))
        info = await _executing(first, "r")
        assert info.executing and info.owner == first.owner
        assert info.lease_expires_at is not None
        ran = list(executed)
        start = trio.current_time()
        with pytest.raises(tether.RunConflictError) as conflict:
            await second.run(flow, 1, run_id="r")
        assert trio.current_time() == start  # at once: a claim never waits
        assert conflict.value.owner == first.owner
        assert first.owner in str(conflict.value) and "until" in str(conflict.value)
        with pytest.raises(tether.RunConflictError):
            await second.resume("r")
        assert executed == ran  # the refused engine executed nothing
        gate.set()


async def test_a_run_left_by_a_closed_engine_of_this_process_is_taken_over_at_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = tether.MemoryStore()
    now = utcnow()
    gone = f"{socket.gethostname()}:{os.getpid()}:closed-engine"
    record = RunRecord(run_id="r", workflow=flow.name, args="[1]", created_at=now, updated_at=now)
    await store.claim("r", gone, ttl=3600, create=record)  # a live lease of a dead owner
    gate.set()
    async with tether.open_engine(store) as engine:
        info = await engine.get_run("r")
        assert info is not None and not info.executing and info.owner == gone
        start = trio.current_time()
        assert await engine.run(flow, 1, run_id="r") == [2, 101, 4]
        assert trio.current_time() - start < 1.0


async def test_a_lease_taken_over_by_another_owner_stops_the_run_and_writes_nothing_more(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store, lease_ttl=3.0) as engine:
        async with trio.open_nursery() as nursery:
            outcome = start_run(nursery, engine)
            info = await _executing(engine, "r")
            record = await store.get_run("r")
            assert record is not None
            # A stale owner elsewhere: another process takes the run over.
            taken = await store.claim("r", "elsewhere:1:x", ttl=3600, takeover=record.token)
            start = trio.current_time()
            await outcome.ended.wait()
            # Noticed at the next renewal (every lease_ttl / 3).
            assert trio.current_time() - start <= 1.0 + 1e-9
        assert isinstance(outcome.error, tether.LeaseLostError)
        assert engine.owner in str(outcome.error) and "another owner" in str(outcome.error)
        gate.set()
        await trio.testing.wait_all_tasks_blocked()
        stored = await store.get_run("r")
        assert stored is not None and stored.owner == "elsewhere:1:x"
        assert stored.token == taken.token and stored.status is RunStatus.RUNNING
        entries = await store.load_entries("r")
        assert [e.key for e in entries] == ["quick#0"]  # nothing after the takeover
        assert info.executing


async def test_a_refused_save_stops_the_run_at_once(autojump_clock: trio.abc.Clock) -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store, lease_ttl=60.0) as engine:
        async with trio.open_nursery() as nursery:
            outcome = start_run(nursery, engine)
            await _executing(engine, "r")
            record = await store.get_run("r")
            assert record is not None
            await store.claim("r", "elsewhere:1:x", ttl=3600, takeover=record.token)
            start = trio.current_time()
            gate.set()  # the step completes; its save carries the old token
            await outcome.ended.wait()
            assert trio.current_time() - start < 0.01  # long before the next renewal
        assert isinstance(outcome.error, tether.LeaseLostError)
        assert "was refused" in str(outcome.error)
        assert executed == ["quick(1)", "waiting(1)"]  # the third step never ran
        assert [e.key for e in await store.load_entries("r")] == ["quick#0"]


@tether.workflow(name="tests.leases.one_quick")
async def one_quick(x: int) -> int:
    return await quick(x)


@pytest.mark.parametrize("renewal", ["released", "lost as the write answers"])
async def test_an_outcome_stored_wins_over_a_renewal_that_saw_its_release(
    tether_store: tether.stores.Store, autojump_clock: trio.abc.Clock, renewal: str
) -> None:
    # The outcome's write has landed, releasing the lease with the run's token, and a
    # renewal answers before the write's answer reaches the run. The run is no longer
    # this engine's, since its own write released it. That is not a lost lease: the run
    # ends with the outcome it stored.
    # - "released": the store reports the run released (Renewal.released), and the
    #   write's answer takes a while: the run waits for it, not cut short (reported
    #   lost, the loss cut the write short: LeaseLostError, the outcome stored);
    # - "lost as the write answers": a store that reports it lost (no Renewal.released),
    #   in the same moment as the write's answer: the stored outcome wins too.
    faulty = FaultyStore(tether_store)

    async def renewal_answers_first(call: Call) -> None:
        (record,) = call.args
        leases = internals(engine).leases
        if renewal == "released":
            answer = await faulty.inner.renew(leases.owner, ttl=3.0, held={"r": record.token})
            assert answer == tether.stores.Renewal(released=frozenset({"r"}))
            assert await leases._renew()  # the engine's renewal, through the store
            await trio.sleep(0.5)
        else:
            leases._lose(record.run_id, record.token, "another owner took it over")
        assert record.run_id not in leases.held

    faulty.inject(
        "update_run",
        Do(renewal_answers_first),
        when=lambda record: record.status is RunStatus.COMPLETED,
        after=True,
    )
    async with tether.open_engine(faulty, lease_ttl=3.0) as engine:
        assert await engine.run(one_quick, 1, run_id="r") == 2
        stored = await faulty.inner.get_run("r")
    assert stored is not None and stored.status is RunStatus.COMPLETED


async def test_a_run_released_with_its_token_while_no_write_is_in_flight_is_lost(
    tether_store: tether.stores.Store, autojump_clock: trio.abc.Clock
) -> None:
    # Released with the execution's token but by no write of its own (here: a cancel
    # recorded after its lease lapsed): the run stops at once, as for any lost lease.
    async with tether.open_engine(tether_store, lease_ttl=3.0) as engine:
        leases = internals(engine).leases

        async def cancel_behind_its_back() -> None:
            await waiters.acquire()  # flow waits in its second step
            record = await tether_store.get_run("r")
            assert record is not None
            await tether_store.update_run(
                attrs.evolve(record, status=RunStatus.CANCELLED, owner=None)
            )
            assert await leases._renew()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_behind_its_back)
            with pytest.raises(tether.RunCancelledError, match="was cancelled"):
                await engine.run(flow, 1, run_id="r")
        assert executed == ["quick(1)", "waiting(1)"]  # it stopped in the wait


async def test_no_renewal_for_lease_ttl_loses_the_lease_on_this_process_clock(
    autojump_clock: trio.abc.Clock,
) -> None:
    faulty = FaultyStore(tether.MemoryStore())
    faulty.inject("renew", Hang())  # the store stops answering renewals
    async with tether.open_engine(faulty, lease_ttl=3.0) as engine:
        start = trio.current_time()
        with pytest.raises(tether.LeaseLostError, match="no lease renewal succeeded"):
            await engine.run(flow, 1, run_id="r")
        assert trio.current_time() - start == pytest.approx(3.0)
        assert executed == ["quick(1)", "waiting(1)"]
        # Nothing more was written: the run is as the lease left it, resumable.
        record = await faulty.inner.get_run("r")
        assert record is not None and record.status is RunStatus.RUNNING
        faulty.clear()
        gate.set()
    async with tether.open_engine(faulty.inner) as engine:
        assert await engine.run(flow, 1, run_id="r") == [2, 101, 4]


async def test_one_renewal_per_interval_however_many_runs(
    autojump_clock: trio.abc.Clock,
) -> None:
    faulty = FaultyStore(tether.MemoryStore())
    async with tether.open_engine(faulty, lease_ttl=3.0) as engine:
        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(functools.partial(engine.run, flow, 1, run_id=f"r{i}"))
            for _ in range(200):
                await waiters.acquire()
            before = faulty.calls["renew"]
            await trio.sleep(10.5)  # ten renewal intervals (lease_ttl / 3 each)
            assert faulty.calls["renew"] - before == 10
            assert engine._leases.renewals >= 10
            gate.set()
        assert faulty.calls["update_run"] == 200  # one status write (and release) per run
        records = await faulty.inner.list_runs()
        assert {r.status for r in records} == {RunStatus.COMPLETED}
        assert {r.owner for r in records} == {None}


async def test_a_caller_cancellation_releases_the_lease_soon_without_waiting(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store) as engine, tether.open_engine(store) as other:
        with trio.move_on_after(1.0):
            await engine.run(flow, 1, run_id="r")
        await trio.testing.wait_all_tasks_blocked()
        record = await store.get_run("r")
        assert record is not None and record.owner is None  # released by the lease task
        assert record.status is RunStatus.RUNNING
        gate.set()
        assert await other.run(flow, 1, run_id="r") == [2, 101, 4]  # not refused


async def test_cancel_reaches_an_executing_run_within_one_renewal(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = tether.MemoryStore()
    async with (
        tether.open_engine(store, lease_ttl=3.0) as engine,
        tether.open_engine(store) as other,
    ):
        async with trio.open_nursery() as nursery:
            outcome = start_run(nursery, engine)
            await _executing(engine, "r")
            start = trio.current_time()
            await other.cancel("r")  # from another engine: via the store
            info = await other.get_run("r")
            assert info is not None and info.cancel_requested and info.executing
            await outcome.ended.wait()
            assert trio.current_time() - start <= 1.0 + 1e-9  # lease_ttl / 3
        assert isinstance(outcome.error, tether.RunCancelledError)
        info = await other.get_run("r")
        assert info is not None and info.status is RunStatus.CANCELLED
        assert [e.key for e in info.entries] == ["quick#0"]  # completed steps kept
        assert info.owner is None and not info.executing
        for call in (other.run(flow, 1, run_id="r"), other.resume("r")):
            with pytest.raises(tether.RunCancelledError):
                await call
        await other.cancel("r")  # already cancelled: nothing happens
        assert executed == ["quick(1)", "waiting(1)"]


async def test_cancel_in_the_same_engine_is_immediate(autojump_clock: trio.abc.Clock) -> None:
    store = tether.MemoryStore()
    async with (
        tether.open_engine(store, lease_ttl=60.0) as engine,
        trio.open_nursery() as nursery,
    ):
        outcome = start_run(nursery, engine)
        await _executing(engine, "r")
        start = trio.current_time()
        await engine.cancel("r")
        await outcome.ended.wait()
        assert trio.current_time() - start < 0.01
    assert isinstance(outcome.error, tether.RunCancelledError)


@tether.step
async def flaky() -> int:
    executed.append("flaky")
    raise ValueError("flaky")


@tether.workflow(name="tests.leases.fails")
async def fails() -> int:
    await quick(1)
    return await flaky()


@tether.workflow(name="tests.leases.asks")
async def asks() -> bool:
    await quick(1)
    answer: bool = await tether.ask({"q": 1}, bool)
    return answer


async def test_cancel_of_runs_without_an_owner_is_final_at_once(tether_store: Store) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(ValueError, match="flaky"):
            await engine.run(fails, run_id="failed")
        with pytest.raises(tether.Paused):
            await engine.run(asks, run_id="paused")
        gate.set()
        assert await engine.run(flow, 1, run_id="done") == [2, 101, 4]
        for run_id in ("failed", "paused"):
            await engine.cancel(run_id)
            info = await engine.get_run(run_id)
            assert info is not None and info.status is RunStatus.CANCELLED, run_id
            assert info.requests == () and [e.key for e in info.entries] == ["quick#0"]
        with pytest.raises(tether.RunCancelledError):
            await engine.resume("paused", responses={"ask#0": True})
        with pytest.raises(tether.RunConflictError, match="completed"):
            await engine.cancel("done")
        info = await engine.get_run("done")
        assert info is not None and info.status is RunStatus.COMPLETED
        with pytest.raises(tether.RunNotFoundError):
            await engine.cancel("nobody")
        assert executed.count("flaky") == 1


async def test_a_cancel_after_the_workflow_returned_is_ignored(
    autojump_clock: trio.abc.Clock,
) -> None:
    faulty = FaultyStore(tether.MemoryStore())

    async def cancel_first(call: Call) -> None:
        record: RunRecord = call.args[0]
        if record.status is RunStatus.COMPLETED:
            await faulty.inner.cancel_run(record.run_id)  # lands just before the final write

    faulty.inject("update_run", Do(cancel_first))
    gate.set()
    async with tether.open_engine(faulty) as engine:
        assert await engine.run(flow, 1, run_id="r") == [2, 101, 4]
        info = await engine.get_run("r")
        assert info is not None and info.status is RunStatus.COMPLETED


async def test_a_failure_stored_after_a_cancel_was_recorded_is_cancelled(
    autojump_clock: trio.abc.Clock,
) -> None:
    faulty = FaultyStore(tether.MemoryStore())

    async def cancel_first(call: Call) -> None:
        await faulty.inner.cancel_run(call.args[0].run_id)

    faulty.inject("update_run", Do(cancel_first))
    async with tether.open_engine(faulty) as engine:
        with pytest.raises(tether.RunCancelledError) as info:
            await engine.run(fails, run_id="r")
        assert isinstance(info.value.__context__, ValueError)
        stored = await faulty.inner.get_run("r")
        assert stored is not None and stored.status is RunStatus.CANCELLED


async def test_a_retry_after_a_timed_out_claim_resumes_the_run(
    autojump_clock: trio.abc.Clock,
) -> None:
    faulty = FaultyStore(tether.MemoryStore())
    faulty.inject("claim", Delay(5.0), at=1, after=True)  # the create lands, its answer is late
    gate.set()
    async with tether.open_engine(faulty) as engine:
        with pytest.raises(trio.TooSlowError):
            await engine.run(flow, 1, run_id="r", timeout=1.0)
        assert await engine.run(flow, 1, run_id="r") == [2, 101, 4]
        assert executed == ["quick(1)", "waiting(1)", "quick(2)"]


async def test_open_engine_refuses_a_store_without_lease_methods() -> None:
    class Old:
        async def open(self) -> None: ...
        async def close(self) -> None: ...
        async def create_run(self, record: RunRecord) -> None: ...
        async def update_run(self, record: RunRecord) -> None: ...
        async def get_run(self, run_id: str) -> RunRecord | None:
            return None

        async def list_runs(self) -> Sequence[RunRecord]:
            return []

        async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
            return entries

        async def load_entries(self, run_id: str) -> Sequence[Entry]:
            return []

    with pytest.raises(tether.UsageError, match="it lacks claim, renew, cancel_run"):
        async with tether.open_engine(Old()):  # type: ignore[arg-type]
            pass
    with pytest.raises(tether.UsageError, match="lease_ttl"):
        async with tether.open_engine(tether.MemoryStore(), lease_ttl=0):
            pass


# -- integrity and older formats ------------------------------------------------------------


def test_a_stale_token_is_refused_and_a_recorded_cancel_survives_the_owners_write() -> None:
    now = utcnow()
    base = RunRecord(run_id="r", workflow="w", args="[]", created_at=now, updated_at=now)
    current = attrs.evolve(base, owner="a", token=3, cancel_requested=True)
    with pytest.raises(tether.LeaseLostError, match=r"token 2 was refused.*token is 3"):
        fenced_update(current, attrs.evolve(base, owner="a", token=2))
    paused = fenced_update(current, attrs.evolve(base, status=RunStatus.PAUSED, token=3))
    assert paused.status is RunStatus.CANCELLED and paused.owner is None


def test_an_entry_checksum_covers_every_field_and_its_seq() -> None:
    now = utcnow()
    entry = Entry(run_id="r", key="s#0", value="1", started_at=now, finished_at=now, token=2)
    stored = entry.stored_as(1)
    data = stored.to_json()
    assert data["checksum"] == entry_checksum(entry.idempotency_key, 1)
    assert loads_record(dumps_record(data), Entry.from_json) == stored
    for field, value in [("value", "2"), ("seq", 2), ("token", 3), ("key", "s#1")]:
        with pytest.raises(tether.stores.RecordDecodeError, match="checksum"):
            Entry.from_json({**data, field: value})
    legacy = {k: v for k, v in data.items() if k not in ("token", "checksum")}
    assert Entry.from_json(legacy) == attrs.evolve(stored, token=0)  # format 1 stays readable


def _v1_sqlite(path: Path) -> None:
    """A store file as tether wrote it before leases (schema 1, format 1 records)."""
    now = utcnow().isoformat()
    run: dict[str, object] = {
        "run_id": "old",
        "workflow": flow.name,
        "args": "[1]",
        "status": "failed",
        "result": None,
        "error": {"type": "ValueError", "message": "x", "key": None},
        "requests": [],
        "created_at": now,
        "updated_at": now,
        "format_version": 1,
    }
    args_digest = digest(codec.encode_args((1,), {}, what="test"))
    entry = {
        "run_id": "old",
        "seq": 1,
        "key": "quick#0",
        "kind": "step",
        "status": "completed",
        "value": "2",
        "error": None,
        "args_digest": args_digest,
        "started_at": now,
        "finished_at": now,
        "attempt": 1,
    }
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, "
            "run_id TEXT NOT NULL UNIQUE, data TEXT NOT NULL)"
        )
        conn.execute(
            "CREATE TABLE entries (run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
            "ikey TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (run_id, seq), "
            "UNIQUE (run_id, ikey))"
        )
        conn.execute("INSERT INTO runs (run_id, data) VALUES ('old', ?)", (dumps_record(run),))
        conn.execute("INSERT INTO entries VALUES ('old', 1, 'k', ?)", (dumps_record(entry),))
        conn.execute("PRAGMA user_version = 1")
    conn.close()


async def test_a_version_1_sqlite_file_is_migrated_and_its_run_resumes(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _v1_sqlite(path)
    gate.set()
    async with tether.open_engine(tether.SQLiteStore(path)) as engine:
        info = await engine.get_run("old")
        assert info is not None and info.status is RunStatus.FAILED
        assert [(e.key, e.token) for e in info.entries] == [("quick#0", 0)]
        assert await engine.resume("old") == [2, 101, 4]
    assert executed == ["waiting(1)", "quick(2)"]  # quick#0 replayed from the old journal
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (tether.stores.SCHEMA_VERSION,)
    conn.close()


async def test_a_lost_lease_that_turns_out_to_be_a_cancel_raises_run_cancelled(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store, lease_ttl=3.0) as engine, trio.open_nursery() as nursery:
        outcome = start_run(nursery, engine)
        await _executing(engine, "r")
        record = await store.get_run("r")
        assert record is not None
        # Cancelled as though its owner were gone: stored cancelled at once.
        await store.cancel_run("r", takeover=record.token)
    assert isinstance(outcome.error, tether.RunCancelledError)
    assert isinstance(outcome.error.__cause__, tether.LeaseLostError)


async def test_responses_to_a_run_executing_elsewhere_are_a_conflict(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = tether.MemoryStore()
    async with (
        tether.open_engine(store) as first,
        tether.open_engine(store) as second,
        trio.open_nursery() as nursery,
    ):
        outcome = start_run(nursery, first)
        await _executing(first, "r")
        with pytest.raises(tether.RunConflictError, match="is executing") as conflict:
            await second.resume("r", responses={"ask#0": True})
        assert conflict.value.owner == first.owner
        gate.set()
        await outcome.ended.wait()
    assert outcome.error is None


# -- a damaged journal stops a resume before anything executes ------------------------------


def _delete_entry(path: Path, seq: int) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM entries WHERE run_id = 'r' AND seq = ?", (seq,))
    conn.close()


def _change_a_digit(text: str) -> str:
    head, sep, value = text.partition('"value":"')
    return head + sep + value.replace("2", "3", 1)


def _alter_sqlite(path: Path, seq: int) -> None:
    with sqlite3.connect(path) as conn:
        (data,) = conn.execute(
            "SELECT data FROM entries WHERE run_id = 'r' AND seq = ?", (seq,)
        ).fetchone()
        conn.execute(
            "UPDATE entries SET data = ? WHERE run_id = 'r' AND seq = ?",
            (_change_a_digit(data), seq),
        )
    conn.close()


def _alter_file(directory: Path, seq: int) -> None:
    path = directory / "r" / "entries" / f"{seq:012d}.json"
    path.write_text(_change_a_digit(path.read_text(encoding="utf-8")), encoding="utf-8")


@pytest.mark.parametrize(
    ("kind", "damage", "says"),
    [
        ("sqlite", "delete", "seq 1: missing"),
        ("sqlite", "alter", "entry seq 1 does not match its checksum"),
        ("file", "alter", "entry seq 1 does not match its checksum"),
    ],
)
async def test_a_damaged_journal_raises_naming_the_run_and_seq_and_nothing_executes(
    kind: str, damage: str, says: str, tmp_path: Path
) -> None:
    store: Store = (
        tether.SQLiteStore(tmp_path / "d.db") if kind == "sqlite" else tether.FileStore(tmp_path)
    )
    with pytest.raises(ValueError, match="flaky"):
        async with tether.open_engine(store) as engine:
            await engine.run(damaged, run_id="r")  # journals quick#0 (value 2) and quick#1
    if damage == "delete":
        _delete_entry(tmp_path / "d.db", 1)  # the middle of the journal: seq 2 is stored
    elif kind == "sqlite":
        _alter_sqlite(tmp_path / "d.db", 1)
    else:
        _alter_file(tmp_path, 1)
    executed.clear()
    async with tether.open_engine(store) as engine:
        with pytest.raises(tether.CheckpointCorruptError) as info:
            await engine.resume("r")
    assert "'r'" in str(info.value) and says in str(info.value), str(info.value)
    assert executed == []  # nothing executed: a stored step is never taken for a missing one


@tether.workflow(name="tests.leases.damaged")
async def damaged() -> int:
    await quick(1)
    await quick(2)
    return await flaky()


async def test_a_bad_owner_or_ttl_is_a_usage_error_on_every_store(tether_store: Store) -> None:
    now = utcnow()
    record = RunRecord(run_id="r", workflow="w", args="[]", created_at=now, updated_at=now)
    await tether_store.open()
    try:
        for owner, ttl in [("a/b", 1.0), ("", 1.0), ("ok", -1.0), ("ok", float("nan"))]:
            with pytest.raises(tether.UsageError, match="lease"):
                await tether_store.claim("r", owner, ttl=ttl, create=record)
        assert await tether_store.get_run("r") is None  # nothing was created
        with pytest.raises(tether.UsageError, match="lease owner"):
            await tether_store.renew("a\nb", ttl=1.0, held={})
    finally:
        await tether_store.close()
