"""The engine's core guarantees, in virtual time.

What they are: docs/explanation/architecture.md and failure-modes.md.
"""

from __future__ import annotations

import functools
import gc
import math
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing

import tether
from tether.stores import EntryStatus, RunStatus, Store
from tether.testing import Delay, FaultyStore, Hang

from ._stores import SAVE_DELAY, BatchingStore, InlineSlowStore, SpawningStore

# -- shared workflows ----------------------------------------------------------

runs: Counter[str] = Counter()
flaky: dict[str, bool] = {}


@tether.step
async def double(x: int) -> int:
    runs[f"double({x})"] += 1
    return 2 * x


@tether.step
async def fragile(x: int) -> int:
    runs[f"fragile({x})"] += 1
    if flaky.get("fragile", False):
        raise ValueError(f"fragile({x}) failed")
    return x + 1


@tether.workflow
async def sequential(n: int) -> list[int]:
    out = [await double(i) for i in range(n)]
    out.append(await fragile(n))
    out.append(await double(100))
    return out


@pytest.fixture(autouse=True)
def _reset() -> None:
    runs.clear()
    flaky.clear()


def assert_no_unawaited_coroutines(caught: list[warnings.WarningMessage]) -> None:
    gc.collect()
    bad = [w for w in caught if "was never awaited" in str(w.message)]
    assert not bad, bad


# -- resume ----------------------------------------------------------------------


async def test_failed_run_resumes_without_repeating_completed_steps(tether_store: Store) -> None:
    flaky["fragile"] = True
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(ValueError, match=r"fragile\(3\) failed"):
            await engine.run(sequential, 3, run_id="r1")
        info = await engine.get_run("r1")
        assert info is not None
        assert info.status is RunStatus.FAILED
        assert info.error is not None
        assert info.error.type == "ValueError"
        assert info.error.key == "fragile#0"
        assert [e.key for e in info.entries] == ["double#0", "double#1", "double#2"]
        assert runs == {"double(0)": 1, "double(1)": 1, "double(2)": 1, "fragile(3)": 1}

        flaky["fragile"] = False
        assert await engine.resume("r1") == [0, 2, 4, 4, 200]
        # zero re-executions of the stored steps; the failed one ran again
        assert runs == {
            "double(0)": 1,
            "double(1)": 1,
            "double(2)": 1,
            "fragile(3)": 2,
            "double(100)": 1,
        }
        info = await engine.get_run("r1")
        assert info is not None
        assert info.status is RunStatus.COMPLETED
        assert info.result == [0, 2, 4, 4, 200]
        assert info.error is None
        assert [e.seq for e in info.entries] == [1, 2, 3, 4, 5]


async def test_completed_run_returns_stored_result_and_executes_nothing(
    tether_store: Store,
) -> None:
    async with tether.open_engine(tether_store) as engine:
        assert await engine.run(sequential, 1, run_id="r") == [0, 2, 200]
        runs.clear()
        assert await engine.run(sequential, 1, run_id="r") == [0, 2, 200]
        assert await engine.resume("r") == [0, 2, 200]
        assert runs == {}
        with pytest.raises(tether.RunConflictError, match="other arguments"):
            await engine.run(sequential, 2, run_id="r")
        assert runs == {}


async def test_run_with_existing_unfinished_id_resumes(tether_store: Store) -> None:
    flaky["fragile"] = True
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(ValueError):
            await engine.run(sequential, 2, run_id="r")
        flaky["fragile"] = False
        assert await engine.run(sequential, 2, run_id="r") == [0, 2, 3, 200]
        assert runs["double(0)"] == 1


async def test_resume_in_a_new_engine_on_the_same_store(tether_store: Store) -> None:
    flaky["fragile"] = True
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(ValueError):
            await engine.run(sequential, 2, run_id="r")
    flaky["fragile"] = False
    async with tether.open_engine(tether_store) as engine:
        assert await engine.resume("r") == [0, 2, 3, 200]
    assert runs["double(1)"] == 1


# -- sibling failure never loses a completed step's save ---------------------------

charges: Counter[str] = Counter()


@tether.step
async def charge(order: str) -> str:
    charges[order] += 1
    return f"receipt-{order}"


@tether.step
async def reserve(order: str) -> str:
    await trio.sleep(SAVE_DELAY / 2)  # fails while charge's save is in flight
    if flaky.get("reserve", False):
        raise ValueError("out of stock")
    return f"reserved-{order}"


@tether.workflow
async def checkout(order: str) -> list[str]:
    async with tether.parallel() as p:
        receipt = p.start_soon(charge, order)
        reservation = p.start_soon(reserve, order)
    return [receipt.result, reservation.result]


@pytest.mark.parametrize("kind", ["inline", "spawning", "batching"])
async def test_sibling_failure_keeps_in_flight_save(
    kind: str, autojump_clock: trio.abc.Clock
) -> None:
    charges.clear()
    flaky["reserve"] = True
    async with trio.open_nursery() as nursery:
        store: Store
        if kind == "inline":
            store = InlineSlowStore()
        elif kind == "spawning":
            store = SpawningStore(nursery)
        else:
            store = BatchingStore(nursery)
        async with tether.open_engine(store) as engine:
            with pytest.RaisesGroup(pytest.RaisesExc(ValueError, match="out of stock")):
                await engine.run(checkout, "o-1", run_id="o-1")
            # the failure surfaced only after charge's save finished
            assert trio.current_time() == SAVE_DELAY
            info = await engine.get_run("o-1")
            assert info is not None
            assert [(e.key, e.status) for e in info.entries] == [
                ("charge#0", EntryStatus.COMPLETED)
            ]

            flaky["reserve"] = False
            assert await engine.resume("o-1") == ["receipt-o-1", "reserved-o-1"]
            assert charges == {"o-1": 1}  # the charge never ran twice
        nursery.cancel_scope.cancel()


async def test_save_timeout_bounds_a_hung_save_under_sibling_failure(
    autojump_clock: trio.abc.Clock,
) -> None:
    flaky["reserve"] = True
    store = FaultyStore(tether.MemoryStore())
    store.inject("append", Hang())
    async with tether.open_engine(store, save_timeout=2.0) as engine:
        with pytest.RaisesGroup(tether.SaveTimeoutError, ValueError):
            await engine.run(checkout, "o-2", run_id="o-2")
        assert trio.current_time() == pytest.approx(2.0)
        info = await engine.get_run("o-2")
        assert info is not None
        assert info.status is RunStatus.FAILED


# -- caller cancellation is prompt, whatever the store does ---------------------------


@tether.step
async def quick(i: int) -> int:
    return i


@tether.workflow
async def fan_out(n: int) -> int:
    async with tether.parallel() as p:
        handles = [p.start_soon(quick, i) for i in range(n)]
    return sum(h.result for h in handles)


def hanging_store() -> FaultyStore:
    store = FaultyStore(tether.MemoryStore())
    store.inject("append", Hang())
    return store


CancelStyle = Callable[[tether.Engine, int], Any]


async def cancel_by_timeout(engine: tether.Engine, n: int) -> None:
    with pytest.raises(trio.TooSlowError):
        await engine.run(fan_out, n, run_id="slow", timeout=0.2)


async def cancel_by_move_on_after(engine: tether.Engine, n: int) -> None:
    with trio.move_on_after(0.2) as scope:
        await engine.run(fan_out, n, run_id="slow")
    assert scope.cancelled_caught


async def cancel_explicitly(engine: tether.Engine, n: int) -> None:
    async with trio.open_nursery() as nursery:
        scope = trio.CancelScope()

        async def caller() -> None:
            with scope:
                await engine.run(fan_out, n, run_id="slow")
            assert scope.cancelled_caught

        nursery.start_soon(caller)
        await trio.sleep(0.2)
        scope.cancel()


@pytest.mark.parametrize("n", [1, 1000])
@pytest.mark.parametrize(
    "style",
    [cancel_by_timeout, cancel_by_move_on_after, cancel_explicitly],
    ids=lambda f: f.__name__,
)
async def test_caller_cancellation_is_prompt_with_a_hung_store(
    style: CancelStyle, n: int, autojump_clock: trio.abc.Clock
) -> None:
    store = hanging_store()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with tether.open_engine(store) as engine:
            await style(engine, n)
            assert trio.current_time() == 0.2  # exactly: not save_timeout, not later
            # every save was in flight: the n steps' records, in one append (per save)
            assert store.calls["append"] == n
            info = await engine.get_run("slow")
            assert info is not None
            assert info.status is RunStatus.RUNNING  # no status written; resumable
            assert info.entries == ()
            store.clear()
            assert await engine.resume("slow") == sum(range(n))
    assert_no_unawaited_coroutines(caught)


@tether.step
async def slow_fail() -> None:
    await trio.sleep(0.1)
    raise ValueError("sibling failed")


@tether.workflow
async def fail_while_saving() -> None:
    async with tether.parallel() as p:
        p.start_soon(quick, 1)
        p.start_soon(slow_fail)


async def test_caller_deadline_during_sibling_failure_cleanup(
    autojump_clock: trio.abc.Clock,
) -> None:
    # quick#0's save hangs (shielded); slow_fail fails at 0.1 and the group
    # waits on the save; the caller's deadline at 0.2 must win, promptly.
    store = hanging_store()
    async with tether.open_engine(store) as engine:
        with pytest.raises(trio.TooSlowError):
            await engine.run(fail_while_saving, run_id="r", timeout=0.2)
        assert trio.current_time() == 0.2
        info = await engine.get_run("r")
        assert info is not None
        assert info.status is RunStatus.RUNNING  # the caller's cancellation won: nothing written


async def test_caller_cancels_twice(autojump_clock: trio.abc.Clock) -> None:
    store = hanging_store()
    async with tether.open_engine(store) as engine, trio.open_nursery() as nursery:
        scope = trio.CancelScope()
        returned: list[float] = []

        async def caller() -> None:
            with scope:
                await engine.run(fan_out, 10, run_id="r")
            returned.append(trio.current_time())

        nursery.start_soon(caller)
        await trio.sleep(0.2)
        scope.cancel()
        await trio.lowlevel.checkpoint()
        scope.cancel()
        scope.deadline = trio.current_time()
    assert returned == [0.2]


async def test_nested_caller_scopes_cancelling_at_once(autojump_clock: trio.abc.Clock) -> None:
    store = hanging_store()
    async with tether.open_engine(store) as engine:
        with trio.move_on_after(0.2) as outer, trio.move_on_after(0.2) as inner:
            await engine.run(fan_out, 5, run_id="r")
        assert outer.cancelled_caught or inner.cancelled_caught
        assert trio.current_time() == 0.2


@tether.step
async def finishes_at_deadline() -> int:
    await trio.sleep(0.2)
    return 7


@tether.workflow
async def races_deadline() -> int:
    async with tether.parallel() as p:
        h = p.start_soon(finishes_at_deadline)
        p.start_soon(finishes_at_deadline)
    return h.result


@pytest.mark.parametrize("hang", [True, False])
async def test_cancel_at_the_moment_a_step_completes(
    hang: bool, autojump_clock: trio.abc.Clock
) -> None:
    store = FaultyStore(tether.MemoryStore())
    if hang:
        store.inject("append", Hang())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with tether.open_engine(store) as engine:
            with pytest.raises(trio.TooSlowError):
                await engine.run(races_deadline, run_id="r", timeout=0.2)
            assert trio.current_time() == 0.2
            store.clear()
            assert await engine.resume("r") == 7
    assert_no_unawaited_coroutines(caught)


async def test_save_scope_opened_after_caller_cancelled_starts_cancelled(
    autojump_clock: trio.abc.Clock,
) -> None:
    # A step that completes while the run is already unwinding from the caller's
    # cancellation (its body shields itself) must not start a save that waits.
    @tether.step
    async def stubborn() -> int:
        with trio.CancelScope(shield=True):
            await trio.sleep(1.0)
        return 1

    @tether.workflow
    async def wf() -> int:
        return await stubborn()

    store = FaultyStore(tether.MemoryStore())
    store.inject("append", Delay(100.0))
    async with tether.open_engine(store) as engine:
        with trio.move_on_after(0.5):
            await engine.run(wf, run_id="r")
        # 1.0 for the stubborn body, then no wait at all for the save: it is
        # refused before it reaches the store
        assert trio.current_time() == 1.0
        assert store.calls["append"] == 0


# -- snapshots, keys, determinism ---------------------------------------------------


@attrs.define
class Basket:
    items: list[str]


@tether.step
async def make_basket() -> Basket:
    return shared_basket


@tether.step
async def mutate_basket() -> None:
    await trio.sleep(0.5)  # after make_basket returned, before its save finished
    shared_basket.items.append("mutated")


shared_basket = Basket(["apple"])


@tether.workflow
async def snapshot_race() -> Basket:
    async with tether.parallel() as p:
        h = p.start_soon(make_basket)
        p.start_soon(mutate_basket)
    return h.result


async def test_value_mutated_after_completion_is_stored_as_it_was(
    autojump_clock: trio.abc.Clock,
) -> None:
    shared_basket.items[:] = ["apple"]
    store = FaultyStore(tether.MemoryStore())
    # make_basket's save takes a while, so mutate_basket runs before it is stored
    store.inject(
        "append", Delay(1.0), when=lambda run_id, entries: entries[0].key == "make_basket#0"
    )
    async with tether.open_engine(store) as engine:
        result = await engine.run(snapshot_race, run_id="r")
        assert shared_basket.items == ["apple", "mutated"]
        assert result == Basket(["apple"])
        info = await engine.get_run("r")
        assert info is not None
        stored = {e.key: e.value for e in info.entries}
        assert stored["make_basket#0"] == '{"items":["apple"]}'
        assert await engine.run(snapshot_race, run_id="r") == Basket(["apple"])


@tether.step
async def sleepy_echo(delay: float, label: str) -> str:
    runs[label] += 1
    await trio.sleep(delay)
    return label


@tether.workflow
async def reverse_finish(n: int) -> list[str]:
    async with tether.parallel() as p:
        # the first started finishes last
        handles = [p.start_soon(sleepy_echo, float(n - i), f"call-{i}") for i in range(n)]
    if flaky.get("after", False):
        raise RuntimeError("fail after the block")
    return [h.result for h in handles]


async def test_parallel_results_replay_to_the_calls_that_made_them(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    flaky["after"] = True
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(RuntimeError):
            await engine.run(reverse_finish, 4, run_id="r")
        info = await engine.get_run("r")
        assert info is not None
        # stored in finishing order: the last started first
        assert [e.key for e in info.entries] == [f"sleepy_echo#{i}" for i in (3, 2, 1, 0)]
        flaky["after"] = False
        before = trio.current_time()
        assert await engine.resume("r") == ["call-0", "call-1", "call-2", "call-3"]
        assert trio.current_time() == before  # replayed, nothing slept
        assert all(count == 1 for count in runs.values())


@tether.workflow
async def with_input(x: int) -> int:
    y = await double(x if not flaky.get("change", False) else x + 1)
    return await fragile(y)


async def test_changed_arguments_on_replay_raise_non_determinism(tether_store: Store) -> None:
    flaky["fragile"] = True
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(ValueError):
            await engine.run(with_input, 5, run_id="r")
        flaky["fragile"] = False
        flaky["change"] = True
        with pytest.raises(tether.NonDeterminismError, match=r"run 'r' .* at step double#0"):
            await engine.resume("r")
        info = await engine.get_run("r")
        assert info is not None
        # The divergence is not stored: the run keeps its own failure.
        assert info.status is RunStatus.FAILED
        assert info.error is not None
        assert info.error.type == "ValueError"


@tether.step
async def inner_step(x: int) -> int:
    runs[f"inner({x})"] += 1
    return x * 10


@tether.step
async def outer_step(x: int) -> int:
    a = await inner_step(x)
    b = await inner_step(x + 1)
    return a + b


@tether.workflow
async def nested() -> int:
    async with tether.parallel() as p:
        h = p.start_soon(outer_step, 1)
        g = p.start_soon(outer_step.with_key("special"), 2)
    return h.result + g.result


async def test_nested_and_explicit_keys(tether_store: Store) -> None:
    async with tether.open_engine(tether_store) as engine:
        assert await engine.run(nested, run_id="r") == 10 + 20 + 20 + 30
        info = await engine.get_run("r")
        assert info is not None
        assert sorted(e.key for e in info.entries) == [
            "outer_step#0",
            "outer_step#0/inner_step#0",
            "outer_step#0/inner_step#1",
            "special",
            "special/inner_step#0",
            "special/inner_step#1",
        ]


# -- hooks -------------------------------------------------------------------------


@attrs.define
class Recorder:
    events: list[tuple[str, str | None, str | None]] = attrs.field(factory=list)

    def _add(self, what: str, event: tether.HookEvent) -> None:
        exc = None if event.exception is None else type(event.exception).__name__
        self.events.append((what, event.key, exc))

    async def on_run_start(self, event: tether.HookEvent) -> None:
        self._add("run_start", event)

    async def on_run_end(self, event: tether.HookEvent) -> None:
        self._add("run_end", event)

    async def on_step_start(self, event: tether.HookEvent) -> None:
        self._add("start", event)

    async def on_step_end(self, event: tether.HookEvent) -> None:
        self._add("end", event)

    async def on_checkpoint(self, event: tether.HookEvent) -> None:
        assert event.entry is not None and event.entry.seq is not None
        self._add("checkpoint", event)

    def matched(self) -> None:
        starts = Counter(k for w, k, _ in self.events if w == "start")
        ends = Counter(k for w, k, _ in self.events if w == "end")
        assert starts == ends
        assert all(n == 1 for n in ends.values())


@tether.step
async def long_step() -> int:
    await trio.sleep(10)
    return 1


@tether.workflow
async def mixed() -> None:
    await quick(0)
    async with tether.parallel() as p:
        p.start_soon(long_step)
        p.start_soon(slow_fail)


async def test_hooks_match_every_start_with_one_end(autojump_clock: trio.abc.Clock) -> None:
    rec = Recorder()
    async with tether.open_engine(tether.MemoryStore(), hooks=[rec]) as engine:
        with pytest.RaisesGroup(ValueError):
            await engine.run(mixed, run_id="r")
    rec.matched()
    assert ("end", "quick#0", None) in rec.events
    assert ("checkpoint", "quick#0", None) in rec.events
    assert ("end", "long_step#0", "Cancelled") in rec.events
    assert ("end", "slow_fail#0", "ValueError") in rec.events
    assert rec.events[0] == ("run_start", None, None)
    assert rec.events[-1] == ("run_end", None, "ExceptionGroup")


async def test_hooks_on_caller_cancellation_are_called_and_prompt(
    autojump_clock: trio.abc.Clock,
) -> None:
    rec = Recorder()
    async with tether.open_engine(hanging_store(), hooks=[rec]) as engine:
        with trio.move_on_after(0.2):
            await engine.run(fan_out, 3, run_id="r")
        assert trio.current_time() == 0.2
    rec.matched()
    assert sorted(e for e in rec.events if e[0] == "end") == [
        ("end", f"quick#{i}", "Cancelled") for i in range(3)
    ]
    assert rec.events[-1] == ("run_end", None, "Cancelled")


async def test_hook_error_fails_the_step_and_never_replaces_a_propagating_one() -> None:
    class BadEnd:
        async def on_step_end(self, event: tether.HookEvent) -> None:
            raise KeyError("hook broke")

    async with tether.open_engine(tether.MemoryStore(), hooks=[BadEnd()]) as engine:
        with pytest.raises(KeyError, match="hook broke"):
            await engine.run(sequential, 0, run_id="ok")
        flaky["fragile"] = True
        with pytest.raises(ValueError, match="fragile"):
            await engine.run(sequential, 0, run_id="bad")


def test_hooks_are_checked() -> None:
    class Typo:
        async def on_step_stat(self, event: tether.HookEvent) -> None: ...

    class NotAsync:
        def on_step_start(self, event: tether.HookEvent) -> None: ...

    with pytest.raises(tether.UsageError, match="defines none"):
        tether.Engine(tether.MemoryStore(), hooks=[Typo()], save_timeout=1)
    with pytest.raises(tether.UsageError, match="async def"):
        tether.Engine(tether.MemoryStore(), hooks=[NotAsync()], save_timeout=1)


# -- errors and misuse ----------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::tether.UnjournaledAwaitWarning")  # blocks on purpose
async def test_step_outside_a_run_or_in_an_untracked_task() -> None:
    with pytest.raises(tether.NotInRunError, match="outside a tether run"):
        await double(1)

    @tether.workflow
    async def plain_nursery() -> None:
        async with trio.open_nursery() as n:
            n.start_soon(double, 1)

    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.RaisesGroup(pytest.RaisesExc(tether.NotInRunError, match=r"tether\.parallel")):
            await engine.run(plain_nursery, run_id="r")


async def test_handle_result_inside_the_block_is_refused() -> None:
    @tether.workflow
    async def early() -> int:
        async with tether.parallel() as p:
            h = p.start_soon(quick, 1)
            await trio.lowlevel.checkpoint()
            return h.result
        raise AssertionError("unreachable")

    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.RaisesGroup(pytest.RaisesExc(tether.UsageError, match="after the block")):
            await engine.run(early, run_id="r")


async def test_duplicate_explicit_keys_are_refused() -> None:
    @tether.workflow
    async def dup() -> None:
        await quick.with_key("k")(1)
        await quick.with_key("k")(2)

    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(tether.UsageError, match="used twice"):
            await engine.run(dup, run_id="r")


async def test_unknown_run_and_wrong_types() -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        assert await engine.get_run("nope") is None
        with pytest.raises(tether.RunNotFoundError, match="nope"):
            await engine.resume("nope")
        with pytest.raises(tether.UsageError, match=r"@tether\.workflow"):
            await engine.run(double, 1)  # type: ignore[arg-type]
        with pytest.raises(tether.UsageError, match="sequential"):
            await engine.run(sequential, 1, 2)
        flaky["fragile"] = True
        with pytest.raises(ValueError):
            await engine.run(sequential, 0, run_id="failed")
        with pytest.raises(tether.UnknownRequestError, match="'k'"):
            await engine.resume("failed", responses={"k": 1})
    with pytest.raises(tether.UsageError, match="closed"):
        await engine.run(sequential, 0)
    with pytest.raises(tether.UsageError, match="save_timeout"):
        async with tether.open_engine(tether.MemoryStore(), save_timeout=0):
            pass
    with pytest.raises(tether.UsageError, match="store"):
        async with tether.open_engine("runs.db"):  # type: ignore[arg-type]
            pass


async def test_responses_to_a_completed_run_are_refused() -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        await engine.run(sequential, 0, run_id="done")
        with pytest.raises(tether.RunConflictError, match="completed"):
            await engine.resume("done", responses={"k": 1})


async def test_store_failure_is_a_store_error_and_the_step_runs_again(tether_store: Store) -> None:
    faulty = FaultyStore(tether_store)
    faulty.inject("append", tether.testing.Raise(lambda: OSError("disk full")), at=2)
    async with tether.open_engine(faulty) as engine:
        with pytest.raises(tether.StoreError, match="saving step double#1") as info:
            await engine.run(sequential, 2, run_id="r")
        assert isinstance(info.value.__cause__, OSError)
        assert await engine.resume("r") == [0, 2, 3, 200]
        assert runs["double(0)"] == 1 and runs["double(1)"] == 2


async def test_retries_and_step_timeout(autojump_clock: trio.abc.Clock) -> None:
    attempts: list[float] = []

    @tether.step(retries=2, timeout=1.0)
    async def sometimes() -> str:
        attempts.append(trio.current_time())
        if len(attempts) == 1:
            await trio.sleep(5)  # times out
        if len(attempts) == 2:
            raise ConnectionError("flaky")
        return "ok"

    @tether.workflow
    async def wf() -> str:
        return await sometimes()

    async with tether.open_engine(tether.MemoryStore()) as engine:
        assert await engine.run(wf, run_id="r") == "ok"
        info = await engine.get_run("r")
        assert info is not None
        assert info.entries[0].attempt == 3
    assert attempts == [0.0, 1.0, 1.0]


async def test_retries_never_retry_cancellation(autojump_clock: trio.abc.Clock) -> None:
    attempts: list[int] = []

    @tether.step(retries=5)
    async def forever() -> None:
        attempts.append(1)
        await trio.sleep(math.inf)

    @tether.workflow
    async def wf() -> None:
        await forever()

    async with tether.open_engine(tether.MemoryStore()) as engine:
        with trio.move_on_after(1):
            await engine.run(wf, run_id="r")
    assert attempts == [1]


async def test_list_runs(tether_store: Store) -> None:
    async with tether.open_engine(tether_store) as engine:
        await engine.run(sequential, 0, run_id="a")
        flaky["fragile"] = True
        with pytest.raises(ValueError):
            await engine.run(sequential, 0, run_id="b")
        listed = {r.run_id: r.status for r in await engine.list_runs()}
        assert listed == {"a": RunStatus.COMPLETED, "b": RunStatus.FAILED}


async def test_workflow_result_that_cannot_be_stored_fails_the_run() -> None:
    @tether.workflow
    async def bad() -> Any:
        return object()

    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(tether.CodecError, match="result of workflow"):
            await engine.run(bad, run_id="r")
        info = await engine.get_run("r")
        assert info is not None and info.status is RunStatus.FAILED


async def test_concurrent_runs_of_one_id_are_refused(autojump_clock: trio.abc.Clock) -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine, trio.open_nursery() as n:
        n.start_soon(functools.partial(engine.run, reverse_finish, 2, run_id="r"))
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(tether.RunConflictError, match="already executing"):
            await engine.run(reverse_finish, 2, run_id="r")


async def test_run_start_hook_error_fails_the_run_and_run_end_is_called() -> None:
    ended: list[BaseException | None] = []

    class Broken:
        async def on_run_start(self, event: tether.HookEvent) -> None:
            raise LookupError("no tracer")

        async def on_run_end(self, event: tether.HookEvent) -> None:
            ended.append(event.exception)

    async with tether.open_engine(tether.MemoryStore(), hooks=[Broken()]) as engine:
        with pytest.raises(LookupError, match="no tracer"):
            await engine.run(sequential, 0, run_id="r")
        info = await engine.get_run("r")
        assert info is not None and info.status is RunStatus.FAILED
    assert len(ended) == 1 and isinstance(ended[0], LookupError)
    assert runs == {}


async def test_every_hook_sees_every_end_even_after_one_raised() -> None:
    class Raising:
        async def on_step_end(self, event: tether.HookEvent) -> None:
            raise KeyError("first hook broke")

    rec = Recorder()
    async with tether.open_engine(tether.MemoryStore(), hooks=[Raising(), rec]) as engine:
        with pytest.raises(KeyError, match="first hook broke"):
            await engine.run(sequential, 0, run_id="r")
    rec.matched()
    assert ("end", "fragile#0", None) in rec.events


async def test_store_read_failures_are_store_errors(tether_store: Store) -> None:
    faulty = FaultyStore(tether_store)
    faulty.inject("get_run", tether.testing.Raise(lambda: OSError("disk gone")))
    async with tether.open_engine(faulty) as engine:
        with pytest.raises(tether.StoreError, match="reading run 'r'") as info:
            await engine.run(sequential, 0, run_id="r")
        assert isinstance(info.value.__cause__, OSError)
        with pytest.raises(tether.StoreError, match="disk gone"):
            await engine.get_run("r")


@tether.workflow
async def cancel_points() -> list[str]:
    seen: list[str] = []
    with trio.CancelScope() as scope:
        if flaky.get("cancelled", False):
            scope.cancel()
        try:
            await double(5)
            seen.append("returned")
        except trio.Cancelled:
            seen.append("cancelled")
            raise
    if flaky.get("fail", False):
        raise ValueError("fail after the step")
    return seen


async def test_a_step_call_is_a_cancel_point_replayed_or_not() -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        flaky["cancelled"] = True
        assert await engine.run(cancel_points, run_id="fresh") == ["cancelled"]
        assert runs == {}  # not executed under a cancelled scope

        flaky["cancelled"], flaky["fail"] = False, True
        with pytest.raises(ValueError):
            await engine.run(cancel_points, run_id="replay")
        assert runs == {"double(5)": 1}
        flaky["cancelled"], flaky["fail"] = True, False
        assert await engine.resume("replay") == ["cancelled"]  # the replay raised Cancelled
        assert runs == {"double(5)": 1}


async def test_stored_error_of_a_group_names_what_failed(autojump_clock: trio.abc.Clock) -> None:
    flaky["reserve"] = True
    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.RaisesGroup(ValueError):
            await engine.run(checkout, "o-9", run_id="o-9")
        info = await engine.get_run("o-9")
        assert info is not None and info.error is not None
        assert info.error.type == "ExceptionGroup"
        assert "ValueError: out of stock" in info.error.message
        assert info.error.key == "reserve#0"


async def test_a_monkeypatched_append_that_returns_nothing_still_journals(
    autojump_clock: trio.abc.Clock,
) -> None:
    # The pinned fault-injection point is Store.append: tests wrap it by hand.
    store = tether.MemoryStore()
    original = store.append

    async def slow_append(run_id: str, entries: Any) -> None:
        await trio.sleep(1.0)
        await original(run_id, entries)

    store.append = slow_append  # type: ignore[method-assign,assignment]
    charges.clear()
    flaky["reserve"] = True
    async with tether.open_engine(store) as engine:
        with pytest.RaisesGroup(ValueError):
            await engine.run(checkout, "o-5", run_id="o-5")
        flaky["reserve"] = False
        assert await engine.resume("o-5") == ["receipt-o-5", "reserved-o-5"]
    assert charges == {"o-5": 1}


async def test_many_concurrent_runs_share_one_engine(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    flaky["after"] = False
    results: dict[str, list[str]] = {}
    async with tether.open_engine(tether_store) as engine:

        async def one(i: int) -> None:
            results[f"r{i}"] = await engine.run(reverse_finish, 3, run_id=f"r{i}")

        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(one, i)
        assert trio.current_time() == 3.0  # all ran concurrently
        assert all(r == ["call-0", "call-1", "call-2"] for r in results.values())
        assert len(results) == 200
        assert runs == {f"call-{i}": 200 for i in range(3)}
        infos = await engine.list_runs()
        assert {i.status for i in infos} == {RunStatus.COMPLETED}


def test_keyboard_interrupt_is_a_prompt_caller_cancellation() -> None:
    import signal

    store = hanging_store()
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with tether.open_engine(store) as engine:

            async def interrupt() -> None:
                await trio.sleep(0.2)
                signal.raise_signal(signal.SIGINT)

            # the interrupt comes from a system task, as a real Ctrl-C would
            trio.lowlevel.spawn_system_task(interrupt)
            try:
                await engine.run(fan_out, 50, run_id="ki")
            finally:
                seen["at"] = trio.current_time()
                with trio.CancelScope(shield=True):
                    seen["info"] = await engine.get_run("ki")

    with pytest.raises(KeyboardInterrupt):
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert seen["at"] == pytest.approx(0.2)
    assert seen["info"].status is RunStatus.RUNNING
