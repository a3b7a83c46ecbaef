"""Properties of runs under random timings, failures, slow saves and deadlines.

Each example builds a fan-out workflow whose steps take random (virtual)
times, some failing on their first attempt, with random save delays and a
random caller deadline; runs it; then resumes it to completion. Invariants:

- no step whose record was stored before a resume executes during it;
- the final result equals the uninterrupted one;
- a caller deadline returns at exactly the deadline (virtual time), whatever
  the saves are doing;
- a run cut short by its caller is left ``running``; by a failure, ``failed``;
- every step whose function returned is stored unless the caller cancelled.
"""

from __future__ import annotations

from collections import Counter

import attrs
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tether
from tether.stores import RunStatus
from tether.testing import Delay, FaultyStore

TICK = 0.1


@attrs.frozen
class Plan:
    durations: tuple[int, ...]  # ticks each parallel step runs
    fails_first: frozenset[int]  # parallel steps that fail on their first attempt
    save_delays: tuple[int, ...]  # ticks each parallel step's save takes (first run)
    deadline: int | None  # ticks until the caller cancels the first run


plans = st.integers(min_value=1, max_value=6).flatmap(
    lambda n: st.builds(
        Plan,
        durations=st.tuples(*[st.integers(0, 4)] * n),
        fails_first=st.frozensets(st.integers(0, n - 1)),
        save_delays=st.tuples(*[st.integers(0, 4)] * n),
        deadline=st.none() | st.integers(0, 10),
    )
)

executions: Counter[str] = Counter()
failed_once: set[int] = set()
returned: set[int] = set()  # parallel steps whose function returned
plan_now: list[Plan] = []


@tether.step
async def prepare(n: int) -> list[int]:
    executions["prepare"] += 1
    return list(range(n))


@tether.step
async def work(i: int) -> int:
    executions[f"work{i}"] += 1
    plan = plan_now[0]
    await trio.sleep(plan.durations[i] * TICK)
    if i in plan.fails_first and i not in failed_once:
        failed_once.add(i)
        raise ValueError(f"work({i}) failed once")
    returned.add(i)
    return i * i


@tether.step
async def total(values: list[int]) -> int:
    executions["total"] += 1
    return sum(values)


@tether.workflow(name="tests.properties.fan_out")
async def fan_out(n: int) -> int:
    items = await prepare(n)
    async with tether.parallel() as p:
        handles = [p.start_soon(work, i) for i in items]
    return await total([h.result for h in handles])


async def scenario(plan: Plan) -> None:
    n = len(plan.durations)
    faulty = FaultyStore(tether.MemoryStore())
    for i, ticks in enumerate(plan.save_delays):
        if ticks:
            key = f"work#{i}"
            faulty.inject(
                "append",
                Delay(ticks * TICK),
                when=lambda run_id, entries, key=key: entries[0].key == key,
                times=1,
            )
    expected = sum(i * i for i in range(n))
    async with tether.open_engine(faulty, save_timeout=100.0) as engine:
        start = trio.current_time()
        outcome: str
        result: int | None
        try:
            if plan.deadline is None:
                result = await engine.run(fan_out, n, run_id="p")
            else:
                result = await engine.run(fan_out, n, run_id="p", timeout=plan.deadline * TICK)
            outcome = "completed"
            assert result == expected
        except trio.TooSlowError:
            outcome = "timeout"
            assert plan.deadline is not None
            # exactly at the deadline, however slow the saves were
            assert trio.current_time() - start == plan.deadline * TICK
        except BaseExceptionGroup as group:
            outcome = "failed"
            assert group.subgroup(ValueError) is not None

        info = await engine.get_run("p")
        if info is None:
            # the deadline expired before the run was even created
            assert outcome == "timeout" and plan.deadline == 0
        else:
            expected_status = {
                "completed": RunStatus.COMPLETED,
                "timeout": RunStatus.RUNNING,
                "failed": RunStatus.FAILED,
            }[outcome]
            assert info.status is expected_status
        if outcome != "timeout":
            # a sibling's failure or a slow save never discards the record of a
            # step whose function returned (only the caller's deadline may)
            assert {f"work#{i}" for i in returned} <= stored_keys(info)
        faulty.clear()
        # Run again until it completes (run() resumes an unfinished run): a
        # step cancelled by a sibling's failure before it reached its own first
        # failure fails on a later attempt.
        result = None
        for _ in range(n + 1):
            stored = stored_keys(info)
            before = executions.copy()
            returned.clear()
            try:
                result = await engine.run(fan_out, n, run_id="p")
            except BaseExceptionGroup as group:
                assert group.subgroup(ValueError) is not None
            again = executions - before
            for key in stored:
                name = key.split("#")[0]
                name = f"work{key.split('#')[1]}" if name == "work" else name
                assert again[name] == 0, f"{key} ran again after it was stored: {again}"
            info = await engine.get_run("p")
            assert {f"work#{i}" for i in returned} <= stored_keys(info)
            if result is not None:
                break
        assert result == expected
        assert info is not None and info.status is RunStatus.COMPLETED
        assert len(stored_keys(info)) == n + 2  # each step stored once


def stored_keys(info: tether.RunInfo | None) -> set[str]:
    return set() if info is None else {e.key for e in info.entries}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=plans)
def test_runs_keep_their_promises_under_random_timing(plan: Plan) -> None:
    executions.clear()
    failed_once.clear()
    returned.clear()
    plan_now[:] = [plan]
    trio.run(scenario, plan, clock=trio.testing.MockClock(autojump_threshold=0))
