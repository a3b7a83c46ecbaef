"""Human input: ``tether.ask``, settlement, ``Paused`` and resume with responses."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
import trio

import tether
from tether.stores import EntryKind, RunStatus, Store
from tether.testing import Delay, FaultyStore, Hang

effects: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _reset() -> None:
    effects.clear()


@tether.step
async def total_of(order: str) -> int:
    effects[f"total_of({order})"] += 1
    return 42


@tether.step
async def ship(order: str) -> str:
    effects[f"ship({order})"] += 1
    return f"shipped-{order}"


@tether.workflow
async def approval(order: str) -> str:
    total = await total_of(order)
    ok = await tether.ask({"order": order, "total": total}, bool)
    if not ok:
        return "rejected"
    return await ship(order)


async def stored(engine: tether.Engine, run_id: str) -> tether.RunInfo:
    info = await engine.get_run(run_id)
    assert info is not None
    return info


# -- 1. one request ---------------------------------------------------------------


async def test_a_request_pauses_the_run_and_resume_completes_it(tether_store: Store) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.Paused) as caught:
            await engine.run(approval, "o-1", run_id="o-1")
        paused = caught.value
        assert not isinstance(paused, tether.TetherError)
        assert paused.run_id == "o-1"
        assert paused.requests == (
            tether.Request(
                key="ask#0", payload={"order": "o-1", "total": 42}, response_type="bool"
            ),
        )
        info = await stored(engine, "o-1")
        assert info.status is RunStatus.PAUSED
        assert info.requests == paused.requests
        assert [e.key for e in info.entries] == ["total_of#0"]

        assert await engine.resume("o-1", responses={"ask#0": True}) == "shipped-o-1"
        # the step before the ask was journaled: it did not run again
        assert effects == {"total_of(o-1)": 1, "ship(o-1)": 1}
        info = await stored(engine, "o-1")
        assert info.status is RunStatus.COMPLETED
        assert info.requests == ()
        assert [(e.key, e.kind) for e in info.entries] == [
            ("total_of#0", EntryKind.STEP),
            ("ask#0", EntryKind.RESPONSE),
            ("ship#0", EntryKind.STEP),
        ]


@tether.step
async def review(order: str) -> str:
    total = await total_of(order)  # a nested step, journaled before the ask
    effects[f"review-body({order})"] += 1
    note = await tether.ask({"total": total}, str)
    return f"{order}: {note}"


@tether.workflow
async def reviewed(order: str) -> str:
    return await review(order)


class Recorder:
    def __init__(self) -> None:
        self.ends: list[tuple[str | None, type[BaseException] | None]] = []

    async def on_step_end(self, event: tether.HookEvent) -> None:
        self.ends.append((event.key, type(event.exception) if event.exception else None))

    async def on_run_end(self, event: tether.HookEvent) -> None:
        self.ends.append((None, type(event.exception) if event.exception else None))


async def test_a_request_inside_a_step_does_not_fail_the_step(tether_store: Store) -> None:
    hooks = Recorder()
    async with tether.open_engine(tether_store, hooks=[hooks]) as engine:
        with pytest.raises(tether.Paused) as caught:
            await engine.run(reviewed, "o-2", run_id="o-2")
        assert [r.key for r in caught.value.requests] == ["review#0/ask#0"]
        info = await stored(engine, "o-2")
        # only the nested step is journaled; nothing is journaled as failed
        assert [(e.key, e.status.value) for e in info.entries] == [
            ("review#0/total_of#0", "completed")
        ]
        assert info.error is None
        # the pause reached the step as a cancellation, and the run end as Paused
        assert hooks.ends == [
            ("review#0/total_of#0", None),
            ("review#0", trio.Cancelled),
            (None, tether.Paused),
        ]
        assert await engine.resume("o-2", responses={"review#0/ask#0": "fine"}) == "o-2: fine"
        # the step body re-ran (it was not journaled); its journaled nested step did not
        assert effects == {"total_of(o-2)": 1, "review-body(o-2)": 2}


# -- 2. fan-out questions come out together ------------------------------------------


async def ask_branch(name: str) -> int:
    answer: int = await tether.ask(f"how many {name}?", int)
    return answer


@tether.workflow
async def fan_out() -> list[int]:
    async with tether.parallel() as p:
        a = p.start_soon(ask_branch, "apples", key="apples")
        b = p.start_soon(ask_branch, "pears", key="pears")
    return [a.result, b.result]


async def test_parallel_branches_pause_together_and_resume_one_by_one(tether_store: Store) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.Paused) as caught:
            await engine.run(fan_out, run_id="f")
        assert sorted(r.key for r in caught.value.requests) == ["apples/ask#0", "pears/ask#0"]
        assert {r.payload for r in caught.value.requests} == {"how many apples?", "how many pears?"}

        with pytest.raises(tether.Paused) as again:
            await engine.resume("f", responses={"apples/ask#0": 3})
        assert [r.key for r in again.value.requests] == ["pears/ask#0"]
        info = await stored(engine, "f")
        assert info.status is RunStatus.PAUSED
        assert [r.key for r in info.requests] == ["pears/ask#0"]

        # the first response was journaled: it need not be sent again
        assert await engine.resume("f", responses={"pears/ask#0": 5}) == [3, 5]
        info = await stored(engine, "f")
        assert [e.key for e in info.entries if e.kind is EntryKind.RESPONSE] == [
            "apples/ask#0",
            "pears/ask#0",
        ]


async def test_answering_both_at_once_completes(tether_store: Store) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.Paused):
            await engine.run(fan_out, run_id="f2")
        responses = {"apples/ask#0": 1, "pears/ask#0": 2}
        assert await engine.resume("f2", responses=responses) == [1, 2]
        info = await stored(engine, "f2")
        responses_stored = [e for e in info.entries if e.kind is EntryKind.RESPONSE]
        assert len(responses_stored) == 2


# -- 3. settlement drains completed siblings ------------------------------------------


@tether.step
async def slow_charge(order: str) -> str:
    await trio.sleep(1)
    effects[f"charge({order})"] += 1
    return f"charged-{order}"


async def asks_with_cleanup() -> bool:
    await trio.sleep(2)
    try:
        ok: bool = await tether.ask("go on?", bool)
    finally:
        effects["cleanup-started"] += 1
        await trio.sleep(1)  # unshielded: the settlement's cancellation ends it
        effects["cleanup-finished"] += 1  # pragma: no cover - never reached
    return ok


@tether.workflow
async def busy() -> list[Any]:
    async with tether.parallel() as p:
        asked = p.start_soon(ask_branch, "first")
        charged = p.start_soon(slow_charge, "o-3")
        second = p.start_soon(asks_with_cleanup)
    return [asked.result, charged.result, second.result]


@pytest.mark.filterwarnings("ignore::tether.UnjournaledAwaitWarning")  # blocks on purpose
async def test_settlement_waits_for_running_siblings_and_keeps_their_saves(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = FaultyStore(tether.MemoryStore())
    store.inject(
        "append", Delay(5.0), when=lambda run_id, entries: entries[0].key == "slow_charge#0"
    )
    async with tether.open_engine(store) as engine:
        with pytest.raises(tether.Paused) as caught:
            await engine.run(busy, run_id="b")
        # the charge finished at 1 s, its save took 5 s: the pause came after it
        assert trio.current_time() == pytest.approx(6.0)
        assert sorted(r.key for r in caught.value.requests) == [
            "ask_branch#0/ask#0",
            "asks_with_cleanup#0/ask#0",
        ]
        assert effects["cleanup-started"] == 1
        assert effects["cleanup-finished"] == 0
        info = await stored(engine, "b")
        assert [e.key for e in info.entries] == ["slow_charge#0"]

        store.clear()
        result = await engine.resume(
            "b", responses={"ask_branch#0/ask#0": 7, "asks_with_cleanup#0/ask#0": True}
        )
        assert result == [7, "charged-o-3", True]
        assert effects["charge(o-3)"] == 1  # journaled before the pause: never again


@tether.workflow
async def waits_for_a_sleeper() -> list[Any]:
    async with tether.parallel() as p:
        asked = p.start_soon(ask_branch, "x")
        charged = p.start_soon(slow_charge, "o-4")
    return [asked.result, charged.result]


async def test_a_run_does_not_settle_while_a_step_is_still_running(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(tether.Paused):
            await engine.run(waits_for_a_sleeper, run_id="w")
        assert trio.current_time() == pytest.approx(1.0)
        assert effects["charge(o-4)"] == 1


async def inner_work_then_ask() -> int:
    async with tether.parallel() as p:
        p.start_soon(slow_charge, "o-11")
    answer: int = await tether.ask("after the inner block?", int)
    return answer


@tether.workflow
async def nested_blocks() -> list[int]:
    async with tether.parallel() as p:
        a = p.start_soon(ask_branch, "a")
        b = p.start_soon(inner_work_then_ask)
    return [a.result, b.result]


async def test_a_task_woken_by_its_last_child_is_not_taken_for_idle(
    autojump_clock: trio.abc.Clock,
) -> None:
    # When the inner block's only step finishes, its task is about to go on
    # (to ask): the run must not settle in the moment before it runs.
    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(tether.Paused) as caught:
            await engine.run(nested_blocks, run_id="n")
        assert [r.key for r in caught.value.requests] == [
            "ask_branch#0/ask#0",
            "inner_work_then_ask#0/ask#0",
        ]


# -- 4. caller cancellation stays prompt during settlement ---------------------------


@pytest.mark.parametrize("how", ["timeout", "move_on_after"])
async def test_caller_deadline_during_settlement_with_a_hung_save(
    how: str, autojump_clock: trio.abc.Clock
) -> None:
    store = FaultyStore(tether.MemoryStore())
    store.inject("append", Hang())
    async with tether.open_engine(store) as engine:
        if how == "timeout":
            with pytest.raises(trio.TooSlowError):
                await engine.run(waits_for_a_sleeper, run_id="h", timeout=1.5)
        else:
            with trio.move_on_after(1.5) as scope:
                await engine.run(waits_for_a_sleeper, run_id="h")
            assert scope.cancelled_caught
        # the charge's save hung from 1 s on; the caller's deadline was kept exactly
        assert trio.current_time() == pytest.approx(1.5)
        store.clear()
        info = await stored(engine, "h")
        assert info.status is RunStatus.RUNNING  # interrupted, resumable
        with pytest.raises(tether.Paused):
            await engine.resume("h")


async def test_caller_deadline_while_paused_waiting_is_prompt(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = FaultyStore(tether.MemoryStore())
    store.inject("update_run", Hang(), at=1)  # storing the pause hangs
    async with tether.open_engine(store) as engine:
        with pytest.raises(trio.TooSlowError):
            await engine.run(approval, "o-5", run_id="p", timeout=0.5)
        assert trio.current_time() == pytest.approx(0.5)
        info = await stored(engine, "p")
        assert info.status is RunStatus.RUNNING


# -- 5. bad responses change nothing ----------------------------------------------------


async def snapshot(engine: tether.Engine, run_id: str) -> tuple[Any, ...]:
    info = await stored(engine, run_id)
    return (info.status, info.requests, info.entries, info.updated_at, info.error)


async def test_bad_responses_raise_naming_the_key_and_change_nothing(tether_store: Store) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.Paused):
            await engine.run(fan_out, run_id="bad")
        before = await snapshot(engine, "bad")

        with pytest.raises(tether.UnknownRequestError, match="'nope'") as unknown:
            await engine.resume("bad", responses={"nope": 1})
        assert "apples/ask#0" in str(unknown.value)  # lists what is pending
        assert await snapshot(engine, "bad") == before

        # {"a": 1} is not an int, and "3" is not one either: no lenient coercion
        for wrong in ({"a": 1}, "3", True):
            with pytest.raises(tether.InvalidResponseError, match="pears/ask#0") as caught:
                await engine.resume("bad", responses={"apples/ask#0": 1, "pears/ask#0": wrong})
            assert isinstance(caught.value, tether.TetherError)
            assert await snapshot(engine, "bad") == before  # not even the good response

        with pytest.raises(tether.InvalidResponseError, match="apples/ask#0"):
            await engine.resume("bad", responses={"apples/ask#0": object()})
        assert await snapshot(engine, "bad") == before

        assert await engine.resume("bad", responses={"apples/ask#0": 1, "pears/ask#0": 2}) == [
            1,
            2,
        ]
        with pytest.raises(tether.RunConflictError, match="'apples/ask#0'"):
            await engine.resume("bad", responses={"apples/ask#0": 1})
        with pytest.raises(tether.RunNotFoundError):
            await engine.resume("missing", responses={"k": 1})


async def test_responses_to_a_failed_run_name_the_key() -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(tether.Paused):
            await engine.run(approval, "o-6", run_id="r")
        await engine.resume("r", responses={"ask#0": False})
        with pytest.raises(tether.RunConflictError, match="'ask#0'"):
            await engine.resume("r", responses={"ask#0": True})


@attrs.frozen
class Decision:
    approved: bool
    reason: str


@tether.workflow
async def decide() -> str:
    d = await tether.ask("decide", Decision, key="decision")
    return f"{d.approved}:{d.reason}"


async def test_structured_responses_decode_strictly(tether_store: Store) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.Paused) as caught:
            await engine.run(decide, run_id="d")
        assert caught.value.requests[0].response_type == "Decision"
        with pytest.raises(tether.InvalidResponseError, match="decision"):
            await engine.resume("d", responses={"decision": {"approved": "yes", "reason": "x"}})
        assert await engine.resume(
            "d", responses={"decision": Decision(approved=True, reason="ok")}
        ) == ("True:ok")


# -- 6. keys ------------------------------------------------------------------------------


@tether.workflow
async def two_questions() -> list[Any]:
    first = await tether.ask("first?", int)
    n = await total_of("x")
    second = await tether.ask("second?", int)
    named = await tether.ask("named?", str, key="named")
    return [first, n, second, named]


async def test_auto_keys_line_up_after_replay_and_explicit_keys_work(tether_store: Store) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.Paused) as caught:
            await engine.run(two_questions, run_id="k")
        assert [r.key for r in caught.value.requests] == ["ask#0"]
        with pytest.raises(tether.Paused) as caught:
            await engine.resume("k", responses={"ask#0": 1})
        # ask#0 replayed from the journal and total_of#0 ran: the next ask is ask#1
        assert [r.key for r in caught.value.requests] == ["ask#1"]
        with pytest.raises(tether.Paused) as caught:
            await engine.resume("k", responses={"ask#1": 2})
        assert [r.key for r in caught.value.requests] == ["named"]
        assert await engine.resume("k", responses={"named": "n"}) == [1, 42, 2, "n"]
        assert effects == {"total_of(x)": 1}


@tether.workflow
async def swallower() -> str:
    try:
        await tether.ask("swallow me?", bool)
    except Exception:  # user code cannot catch the pause
        return "swallowed"
    return "answered"


async def test_except_exception_does_not_swallow_the_pause(tether_store: Store) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.Paused):
            await engine.run(swallower, run_id="s")
        assert (await stored(engine, "s")).status is RunStatus.PAUSED
        assert await engine.resume("s", responses={"ask#0": True}) == "answered"


async def test_resuming_a_paused_run_without_responses_pauses_again(tether_store: Store) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.Paused):
            await engine.run(approval, "o-7", run_id="again")
        with pytest.raises(tether.Paused) as caught:
            await engine.run(approval, "o-7", run_id="again")
        assert [r.key for r in caught.value.requests] == ["ask#0"]
        with pytest.raises(tether.Paused):
            await engine.resume("again")
        assert effects == {"total_of(o-7)": 1}


@pytest.mark.filterwarnings("ignore::tether.UnjournaledAwaitWarning")  # blocks on purpose
async def test_ask_outside_a_run_or_in_an_untracked_task() -> None:
    with pytest.raises(tether.NotInRunError):
        await tether.ask("?", bool)

    @tether.workflow
    async def untracked() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tether.ask, "?", bool)

    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.RaisesGroup(tether.NotInRunError, flatten_subgroups=True):
            await engine.run(untracked)
        with pytest.raises(tether.UsageError, match="without '/'"):
            await engine.run(decide_with_bad_key)


@tether.workflow
async def decide_with_bad_key() -> bool:
    ok: bool = await tether.ask("?", bool, key="a/b")
    return ok


@tether.workflow
async def changed_payload() -> list[bool]:
    first: bool = await tether.ask({"n": effects["payload"]}, bool)
    second: bool = await tether.ask("then?", bool)
    return [first, second]


async def test_a_changed_payload_on_replay_is_non_determinism() -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(tether.Paused):
            await engine.run(changed_payload, run_id="c")
        with pytest.raises(tether.Paused):
            await engine.resume("c", responses={"ask#0": True})
        effects["payload"] = 1  # the workflow now asks its journaled question differently
        with pytest.raises(tether.NonDeterminismError, match="ask#0"):
            await engine.resume("c")


# -- 7. across engines (processes share nothing but the store) -------------------------


async def test_pause_in_one_engine_resume_in_another(tether_store: Store) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.Paused):
            await engine.run(approval, "o-8", run_id="x")
    async with tether.open_engine(tether_store) as engine:
        info = await stored(engine, "x")
        assert [r.key for r in info.requests] == ["ask#0"]
        assert await engine.resume("x", responses={"ask#0": True}) == "shipped-o-8"
    assert effects == {"total_of(o-8)": 1, "ship(o-8)": 1}


# -- asks in streams, and the live events of a pause ---------------------------------------


@tether.stream_step
async def numbers_until_told(start: int) -> AsyncIterator[int]:
    yield start
    stop: int = await tether.ask("how far?", int)  # asked by the producer task
    for n in range(start + 1, stop):
        yield n


@tether.workflow
async def streamed() -> list[int]:
    out = []
    async with tether.open_stream(numbers_until_told, 1) as items:
        async for n in items:
            out.append(n)
            if n == 1:
                out.append(await tether.ask("keep going?", int))  # asked by the consumer
    return out


async def test_asks_from_a_stream_producer_and_its_consumer_settle(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(tether.Paused) as caught:
            await engine.run(streamed, run_id="st")
        assert [r.key for r in caught.value.requests] == ["ask#0"]
        with pytest.raises(tether.Paused) as caught:
            await engine.resume("st", responses={"ask#0": 0})
        # the consumer asked for the next item: the producer runs and asks
        assert [r.key for r in caught.value.requests] == ["numbers_until_told#0/ask#0"]
        assert await engine.resume("st", responses={"numbers_until_told#0/ask#0": 4}) == [
            1,
            0,
            2,
            3,
        ]


async def test_open_run_reports_the_pause(autojump_clock: trio.abc.Clock) -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        async with engine.open_run(approval, "o-9", run_id="live") as run:
            events = [event async for event in run.events()]
            with pytest.raises(tether.Paused):
                await run.result()
        last = events[-1]
        assert isinstance(last, tether.RunPaused)
        assert [r.key for r in last.requests] == ["ask#0"]
        assert "waiting for responses to ask#0" in tether.describe_event(last)


async def test_open_resume_answers_and_reports_live(autojump_clock: trio.abc.Clock) -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(tether.Paused):
            await engine.run(approval, "o-10", run_id="live2")
        async with engine.open_resume("live2", responses={"ask#0": True}) as run:
            events = [type(e).__name__ for e in [event async for event in run.events()]]
            assert await run.result() == "shipped-o-10"
        assert events == [
            "RunStarted",
            "StepStarted",
            "CheckpointStored",
            "StepFinished",
            "RunFinished",
        ]
        async with engine.open_resume("missing") as run:
            assert [type(e).__name__ async for e in run.events()] == ["RunFinished"]
            with pytest.raises(tether.RunNotFoundError):
                await run.result()
