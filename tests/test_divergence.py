"""Divergence on replay: a resume whose calls do not match the journal.

Each kind of change to a workflow with a run in flight (a step inserted,
removed or moved; a return type, a step's arguments or the workflow's
parameters changed; the workflow returning before journaled calls) raises
``NonDeterminismError`` at the first call that differs, naming the run, the
call, its position and parent and what differs; the stored run keeps its
status and error, its lease is released, and it resumes once the code is
put back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator

import attrs
import pytest
import trio

import tether
from tether._engine._engine import internals
from tether.stores import Entry, EntryKind, EntryStatus, RunRecord, RunStatus, Store, utcnow
from tether.stores._record_json import dumps_record, loads_record
from tether.stores._rows import encode_entry, generic_encode_entry

#: which change the workflows below have now ("" for the code the runs started with)
CODE = {"change": ""}
#: whether settle() fails (the original runs fail there, so they can be resumed)
BANK_DOWN = {"down": True}
effects: Counter[str] = Counter()


# Tests that define another version of a workflow put the first one back.
pytestmark = pytest.mark.usefixtures("tether_registry")


@pytest.fixture(autouse=True)
def _reset() -> None:
    CODE["change"] = ""
    BANK_DOWN["down"] = True
    effects.clear()


@tether.step
async def reserve(order: str) -> str:
    effects[f"reserve({order})"] += 1
    return f"reserved {order}"


@tether.step
async def charge(order: str) -> int:
    effects[f"charge({order})"] += 1
    return 30


@tether.step
async def audit(order: str) -> str:
    effects[f"audit({order})"] += 1
    return "audited"


@tether.step(name="price")
async def price_as_int(order: str) -> int:
    effects[f"price({order})"] += 1
    return 12


@tether.step(name="price")
async def price_as_str(order: str) -> str:
    effects[f"price({order})"] += 1
    return "12"


@tether.step
async def settle(order: str) -> str:
    effects[f"settle({order})"] += 1
    if BANK_DOWN["down"]:
        raise ValueError("the bank is down")
    return "settled"


@tether.workflow(name="tests.divergence.order")
async def order_flow(order: str) -> str:
    change = CODE["change"]
    if change == "inserted":
        await reserve(order)
        await audit(order)
        await charge(order)
    elif change == "removed":
        await charge(order)
    elif change == "reordered":
        await charge(order)
        await reserve(order)
    elif change == "arguments":
        await reserve(order)
        await charge(order.upper())
    else:
        await reserve(order)
        await charge(order)
    if change == "returns-early":
        return "early"
    price = await (price_as_str if change == "return-type" else price_as_int)(order)
    await settle(order)
    return f"{order}: {price}"


async def failed_run(store: Store, run_id: str = "o") -> tuple[Entry, ...]:
    """A run of order_flow stored ``failed`` at settle(), with three steps journaled."""
    async with tether.open_engine(store) as engine:
        with pytest.raises(ValueError, match="the bank is down"):
            await engine.run(order_flow, "o-1", run_id=run_id)
        info = await engine.get_run(run_id)
    assert info is not None
    assert [(e.key, e.position) for e in info.entries] == [
        ("reserve#0", 0),
        ("charge#0", 1),
        ("price#0", 2),
    ]
    return info.entries


async def assert_kept(engine: tether.Engine, run_id: str, entries: tuple[Entry, ...]) -> None:
    """The run is stored as it was before the diverging resume: failed, released."""
    info = await engine.get_run(run_id)
    assert info is not None
    assert info.status is RunStatus.FAILED
    assert info.error is not None
    assert (info.error.type, info.error.message, info.error.key) == (
        "ValueError",
        "the bank is down",
        "settle#0",
    )
    assert info.owner is None and not info.executing  # the lease was released
    assert info.entries == entries  # nothing journaled


CASES = {
    "inserted": (
        r"run 'o' diverged from its journal at step audit#0 \(position 1 in the workflow\): "
        r"the journal holds step charge#0 \(seq 2\) at this position: a call was inserted "
        r"here, or charge#0 was removed or moved\. The code changed since the run started"
    ),
    "removed": (
        r"at step charge#0 \(position 0 in the workflow\): the journal holds it at position 1 "
        r"\(seq 2\), and step reserve#0 \(seq 1\) at this one: a call before it was inserted, "
        r"removed or moved"
    ),
    "reordered": (
        r"at step charge#0 \(position 0 in the workflow\): the journal holds it at position 1"
    ),
    "return-type": (
        r"at step price#0 \(position 2 in the workflow\): its journaled result \(seq 3\) is a "
        r"JSON integer \(12\), which does not decode as str \(the step's return type now\)"
    ),
    "arguments": (
        r"at step charge#0 \(position 1 in the workflow\): it was journaled \(seq 2\) with "
        r"other arguments than it is called with now"
    ),
    "returns-early": (
        r"run 'o' diverged from its journal: workflow tests.divergence.order returned without "
        r"reaching step price#0 \(seq 3, position 2 in the workflow\), which the journal holds "
        r"as completed: a call was removed, or the code returns earlier now"
    ),
}


@pytest.mark.parametrize("change", sorted(CASES))
async def test_a_changed_workflow_diverges_at_its_first_wrong_call(
    change: str, tether_store: Store
) -> None:
    entries = await failed_run(tether_store)
    CODE["change"] = change
    before = effects.copy()
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.NonDeterminismError, match=CASES[change]):
            await engine.resume("o")
        assert effects == before  # nothing ran: not the diverging call, not what follows
        await assert_kept(engine, "o", entries)
    # Put back, the code resumes the run where it failed.
    CODE["change"] = ""
    BANK_DOWN["down"] = False
    async with tether.open_engine(tether_store) as engine:
        assert await engine.resume("o") == "o-1: 12"
    assert effects - before == Counter({"settle(o-1)": 1})


async def test_user_code_cannot_swallow_a_divergence() -> None:
    store = tether.MemoryStore()
    entries = await failed_run(store)
    CODE["change"] = "inserted"

    @tether.workflow(name="tests.divergence.order")
    async def swallowing(order: str) -> str:
        try:
            return await order_flow.fn(order)
        except Exception:  # a workflow that catches everything
            return "swallowed"

    async with tether.open_engine(store) as engine:
        internals(engine).define(swallowing)
        with pytest.raises(tether.NonDeterminismError, match="at step audit#0"):
            await engine.resume("o")
        await assert_kept(engine, "o", entries)


# -- the workflow's parameters ------------------------------------------------------------


@tether.workflow(name="tests.divergence.signup")
async def signup_v1(user: str) -> str:
    effects[f"signup({user})"] += 1
    return await settle(user)


@tether.workflow(name="tests.divergence.signup")  # the same workflow, a parameter later
async def signup_v2(user: str, plan: str) -> str:
    effects[f"signup({user}, {plan})"] += 1
    return await settle(user)


@tether.workflow(name="tests.divergence.count")
async def count_v1(n: int) -> str:
    return await settle(str(n))


@tether.workflow(name="tests.divergence.count")  # the parameter's type changed
async def count_v2(n: str) -> str:
    return await settle(n)


@pytest.mark.parametrize(
    ("old", "args", "match"),
    [
        (
            signup_v1,
            ("ann",),
            r"run 'p' was started with 1 argument\(s\) \(\[\"ann\"\]\), which workflow "
            r"tests.divergence.signup no longer takes: missing a required argument: 'plan' "
            r"\(its parameters now: user, plan\)",
        ),
        (
            count_v1,
            (3,),
            r"run 'p' was started with 1 argument\(s\) \(\[3\]\): parameter 'n' of workflow "
            r"tests.divergence.count is now str, and the run's stored argument, a JSON "
            r"integer \(3\), does not decode as that",
        ),
    ],
)
async def test_a_changed_signature_names_the_parameter(
    old: tether.Workflow[..., str], args: tuple[object, ...], match: str, tether_store: Store
) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(ValueError, match="the bank is down"):
            await engine.run(old, *args, run_id="p")
    before = effects.copy()
    # A new engine, as in the next deploy: the name now stands for the new definition.
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.NonDeterminismError, match=match):
            await engine.resume("p")
        info = await engine.get_run("p")
    assert effects == before
    assert info is not None and info.status is RunStatus.FAILED
    assert info.error is not None and info.error.message == "the bank is down"


async def test_a_parameter_added_with_a_default_keeps_old_runs_working() -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store) as engine:
        with pytest.raises(ValueError, match="the bank is down"):
            await engine.run(signup_v1, "ann", run_id="p")

    @tether.workflow(name="tests.divergence.signup")
    async def signup_v3(user: str, plan: str = "free") -> str:
        return f"{await settle(user)} on {plan}"

    BANK_DOWN["down"] = False
    async with tether.open_engine(store) as engine:
        assert await engine.resume("p") == "settled on free"


# -- a paused run, a nested step, parallel(), ask() -------------------------------------------


@tether.workflow(name="tests.divergence.approval")
async def approval(order: str) -> str:
    if CODE["change"] == "inserted":
        await audit(order)
    await reserve(order)
    ok: bool = await tether.ask({"order": order}, bool)
    return "approved" if ok else "rejected"


async def test_a_paused_run_that_diverges_stays_paused_with_its_requests(
    tether_store: Store,
) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.Paused):
            await engine.run(approval, "o-2", run_id="a")
        CODE["change"] = "inserted"
        with pytest.raises(tether.NonDeterminismError, match=r"at step audit#0 \(position 0"):
            await engine.resume("a", responses={"ask#0": True})
        info = await engine.get_run("a")
        assert info is not None
        assert info.status is RunStatus.PAUSED
        assert [r.key for r in info.requests] == ["ask#0"]
        assert [e.key for e in info.entries] == ["reserve#0"]  # the response was not journaled
        CODE["change"] = ""
        assert await engine.resume("a", responses={"ask#0": True}) == "approved"
    assert effects == Counter({"reserve(o-2)": 1})


@tether.step
async def pack(order: str) -> str:
    await reserve(order)
    if CODE["change"] != "removed":
        await charge(order)  # the last call in pack#0
    if BANK_DOWN["down"]:
        raise ValueError("the bank is down")
    return "packed"


@tether.workflow(name="tests.divergence.nested")
async def nested(order: str) -> str:
    return await pack(order)


async def test_a_step_that_no_longer_makes_a_journaled_nested_call_diverges() -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store) as engine:
        with pytest.raises(ValueError):
            await engine.run(nested, "o-3", run_id="n")
        CODE["change"] = "removed"
        match = (
            r"step pack#0 returned without reaching step pack#0/charge#0 \(seq 2, position 1 "
            r"in pack#0\)"
        )
        BANK_DOWN["down"] = False  # pack#0 now returns, but without its nested charge
        with pytest.raises(tether.NonDeterminismError, match=match):
            await engine.resume("n")
        info = await engine.get_run("n")
        assert info is not None and info.status is RunStatus.FAILED
        # nothing was journaled for pack#0: its result was computed by diverging code
        assert [e.key for e in info.entries] == ["pack#0/reserve#0", "pack#0/charge#0"]


@tether.step
async def sleepy(seconds: float) -> float:
    await trio.sleep(seconds)
    return seconds


@tether.workflow(name="tests.divergence.fan_out")
async def fan_out() -> list[float]:
    delays = [3.0, 2.0, 1.0]
    if CODE["change"] == "reordered":
        delays.reverse()
    async with tether.parallel() as p:
        handles = [p.start_soon(sleepy, d) for d in delays]
    if BANK_DOWN["down"]:
        raise ValueError("the bank is down")
    return [h.result for h in handles]


async def test_parallel_children_take_positions_in_spawn_order(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store) as engine:
        with pytest.raises(ValueError):
            await engine.run(fan_out, run_id="f")
        info = await engine.get_run("f")
        assert info is not None
        # stored as they finished (the shortest first), positioned as they were started
        assert [(e.key, e.position, e.value) for e in info.entries] == [
            ("sleepy#2", 2, "1.0"),
            ("sleepy#1", 1, "2.0"),
            ("sleepy#0", 0, "3.0"),
        ]
        CODE["change"] = "reordered"  # started in another order: other arguments at each place
        with pytest.raises(tether.NonDeterminismError, match=r"at step sleepy#0 \(position 0"):
            await engine.resume("f")
        CODE["change"], BANK_DOWN["down"] = "", False
        before = trio.current_time()
        assert await engine.resume("f") == [3.0, 2.0, 1.0]
        assert trio.current_time() == before  # replayed: nothing slept


async def branch(order: str) -> str:
    return await audit(order)


@tether.workflow(name="tests.divergence.branches")
async def branches(order: str) -> str:
    async with tether.parallel() as p:
        if CODE["change"] == "reordered":
            h = p.start_soon(branch, order)
            p.start_soon(reserve, order)
        else:
            p.start_soon(reserve, order)
            h = p.start_soon(branch, order)
    return await settle(h.result)


async def test_a_branch_started_where_the_journal_holds_a_step_diverges() -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store) as engine:
        with pytest.raises(ValueError):
            await engine.run(branches, "o-4", run_id="b")
        info = await engine.get_run("b")
        assert info is not None
        assert {(e.key, e.position) for e in info.entries} == {
            ("reserve#0", 0),
            ("branch#0/audit#0", 0),  # a branch has no entry: its calls have positions in it
        }
        CODE["change"] = "reordered"
        match = (
            r"at branch branch#0 \(position 0 in the workflow\): the journal holds step "
            r"reserve#0 \(seq \d\) at this position"
        )
        with pytest.raises(tether.NonDeterminismError, match=match):
            await engine.resume("b")
    assert effects == Counter({"reserve(o-4)": 1, "audit(o-4)": 1, "settle(audited)": 1})


@tether.workflow(name="tests.divergence.typed_ask")
async def typed_ask() -> str:
    tp: type = int if CODE["change"] == "return-type" else bool
    answer: object = await tether.ask("how many?", tp)
    await settle(str(answer))
    return str(answer)


async def test_a_journaled_response_that_no_longer_decodes_diverges() -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store) as engine:
        with pytest.raises(tether.Paused):
            await engine.run(typed_ask, run_id="t")
        with pytest.raises(ValueError):
            await engine.resume("t", responses={"ask#0": True})
        CODE["change"] = "return-type"
        match = (
            r"at ask ask#0 \(position 0 in the workflow\): its journaled response \(seq 1\) is a "
            r"JSON boolean \(true\), which does not decode as int \(the response type now\)"
        )
        with pytest.raises(tether.NonDeterminismError, match=match):
            await engine.resume("t")


@tether.stream_step
async def numbers() -> AsyncIterator[int]:
    for i in range(2):
        yield i


@tether.stream_step(name="numbers")
async def numbers_as_text() -> AsyncIterator[str]:
    yield "0"


@tether.workflow(name="tests.divergence.streamed")
async def streamed() -> list[object]:
    source = numbers_as_text if CODE["change"] == "return-type" else numbers
    async with tether.open_stream(source) as items:
        seen: list[object] = [i async for i in items]
    await settle("s")
    return seen


async def test_journaled_stream_items_that_no_longer_decode_diverge() -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store) as engine:
        with pytest.raises(ValueError):
            await engine.run(streamed, run_id="s")
        CODE["change"] = "return-type"
        match = r"at stream numbers#0 \(position 0 in the workflow\): its journaled items \(seq 1\)"
        with pytest.raises(tether.NonDeterminismError, match=match):
            await engine.resume("s")


@tether.step
async def slow_settle(order: str) -> str:
    await trio.sleep(60)
    return "settled"


@tether.workflow(name="tests.divergence.interrupted")
async def interrupted(order: str) -> str:
    if CODE["change"] == "inserted":
        await audit(order)
    await reserve(order)
    return await slow_settle(order)


async def test_a_worker_stores_a_diverging_run_failed_instead_of_claiming_it_again(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store) as engine:
        with pytest.raises(trio.TooSlowError):
            await engine.run(interrupted, "o-6", run_id="i", timeout=1)  # interrupted: running
        CODE["change"] = "inserted"
        async with tether.open_worker(engine) as worker:
            with pytest.raises(tether.RunFailedError) as failed:
                await engine.wait("i", timeout=30)
            await trio.sleep(5)  # several polls: it is not claimed again
        assert worker.claimed == 1
    error = failed.value.error
    assert error.type == "tether.NonDeterminismError"
    assert "at step audit#0 (position 0 in the workflow)" in error.message
    assert effects == Counter({"reserve(o-6)": 1})


@tether.workflow(name="tests.divergence.same_key")
async def same_key() -> str:
    if CODE["change"] == "kind":
        await reserve.with_key("data")("x")  # a step under the key of a journaled stream
    else:
        async with tether.open_stream(numbers.with_key("data")) as items:
            _ = [i async for i in items]
    return await settle("s")


async def test_a_step_called_under_the_key_of_another_kind_of_call_diverges() -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store) as engine:
        with pytest.raises(ValueError):
            await engine.run(same_key, run_id="k")
        CODE["change"] = "kind"
        match = r"at step data \(position 0 in the workflow\): the journal holds a stream entry"
        with pytest.raises(tether.NonDeterminismError, match=match):
            await engine.resume("k")
    assert effects == Counter({"settle(s)": 1})


# -- what is not a divergence -----------------------------------------------------------------


async def test_a_value_that_is_not_json_is_corruption_not_a_code_change() -> None:
    store = tether.MemoryStore()
    async with tether.open_engine(store) as engine:
        with pytest.raises(ValueError):
            await engine.run(order_flow, "o-5", run_id="c")
    # The store took (and checksummed) a value that is no JSON: nothing tether writes.
    entries = list(store._journals["c"])
    store._journals["c"][2] = attrs.evolve(entries[2], value="{not json")
    async with tether.open_engine(store) as engine:
        with pytest.raises(tether.CheckpointCorruptError, match=r"price#0.*not JSON"):
            await engine.resume("c")


async def test_a_workflow_changed_after_the_last_journaled_call_resumes() -> None:
    store = tether.MemoryStore()
    await failed_run(store)
    CODE["change"] = "inserted-later"  # (order_flow runs its default path)
    BANK_DOWN["down"] = False

    @tether.workflow(name="tests.divergence.order")
    async def extended(order: str) -> str:
        result = await order_flow.fn(order)
        return f"{result} ({await audit(order)})"  # a step added after the journaled ones

    async with tether.open_engine(store) as engine:
        internals(engine).define(extended)
        assert await engine.resume("o") == "o-1: 12 (audited)"


# -- entries of older formats ---------------------------------------------------------------


async def legacy_run(store: Store, run_id: str, *, extra: bool = False) -> None:
    """A failed run of order_flow as an older tether stored it: entries without positions."""
    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(ValueError):
            await engine.run(order_flow, "o-1", run_id=run_id)
        info = await engine.get_run(run_id)
    assert info is not None
    now = utcnow()
    await store.open()
    try:
        await store.create_run(
            RunRecord(
                run_id=run_id,
                workflow=order_flow.name,
                args='["o-1"]',
                status=RunStatus.FAILED,
                created_at=now,
                updated_at=now,
            )
        )
        old = [attrs.evolve(e, position=None, seq=None, token=0) for e in info.entries]
        if extra:  # a journaled call the code does not make
            old.append(attrs.evolve(old[0], key="gone#0", finished_at=utcnow()))
        await store.append(run_id, old)
        stored = await store.load_entries(run_id)
    finally:
        await store.close()
    assert [e.position for e in stored] == [None] * len(old)


async def test_entries_without_positions_replay_by_key(tether_store: Store) -> None:
    await legacy_run(tether_store, "old")
    BANK_DOWN["down"] = False
    effects.clear()
    async with tether.open_engine(tether_store) as engine:
        assert await engine.resume("old") == "o-1: 12"
        info = await engine.get_run("old")
    assert effects == Counter({"settle(o-1)": 1})  # the three old entries replayed
    assert info is not None
    assert [(e.key, e.position) for e in info.entries][-1] == ("settle#0", 3)


async def test_an_unreached_entry_without_a_position_still_diverges() -> None:
    store = tether.MemoryStore()
    await legacy_run(store, "old", extra=True)
    BANK_DOWN["down"] = False
    async with tether.open_engine(store) as engine:
        with pytest.raises(tether.NonDeterminismError, match=r"without reaching step gone#0"):
            await engine.resume("old")


def test_an_entry_with_a_position_is_a_format_of_its_own() -> None:
    now = utcnow()
    entry = Entry(
        run_id="r", key="a/b#0", kind=EntryKind.MARKER, started_at=now, finished_at=now, position=4
    )
    stored = entry.stored_as(3)
    data = stored.to_json()
    assert data["position"] == 4
    assert loads_record(dumps_record(data), Entry.from_json) == stored
    # the checksum covers the position
    with pytest.raises(tether.stores.RecordDecodeError, match="checksum"):
        Entry.from_json({**data, "position": 5})
    for bad in (None, -1, "4", True):
        with pytest.raises(tether.stores.RecordDecodeError, match="'position'"):
            Entry.from_json({**data, "position": bad})
    # without a position: the older format, as before (its checksum unchanged)
    older = attrs.evolve(stored, position=None)
    assert "position" not in older.to_json()
    assert Entry.from_json(older.to_json()) == older
    # the stores' fast encoding writes exactly the same text
    for e in (entry, older, attrs.evolve(entry, status=EntryStatus.FAILED, position=0)):
        assert encode_entry(e) == generic_encode_entry(e)
        assert encode_entry(e)[0] == e.idempotency_key
