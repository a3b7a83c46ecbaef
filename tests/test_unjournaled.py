"""``tether.UnjournaledAwaitWarning``: a workflow blocking outside any tether call.

- Never emitted by a workflow of tether calls (steps, a helper of steps,
  retries, ``parallel`` with steps and a branch, ``ask``, ``tether.sleep``,
  ``receive``, ``child``, a stream, ``patched``), nor by awaits that do not
  block (a bare checkpoint, ``trio.sleep(0)``, a cancelled wait), on
  MemoryStore and SQLite with the warning an error.
- Emitted on the first execution, located at the user's file and line, for a
  ``trio.sleep`` in the body, an undecorated ``async def`` that sleeps, an
  async generator or context manager that sleeps, a ``parallel()`` branch,
  a child workflow's body, and an engine call (tether, but not journaled).
- As an error (tether's pytest plugin makes it one), the run fails with it
  at once, even on a wait that never ends or a plain trio nursery (whose
  child is cancelled), and keeps what it journaled; in a branch, the
  ``parallel()`` block raises it.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

import tether
from tether._core._unjournaled import enable
from tether.stores import EntryKind, RunStatus, Store
from tether.testing import TrioWallClock

from ._wall_clock import START

pytestmark = [
    pytest.mark.usefixtures("tether_registry"),
    pytest.mark.tether_stores("memory", "sqlite"),
]

Warning_ = tether.UnjournaledAwaitWarning


def line_of(fn: Callable[..., Any], text: str) -> int:
    """The line number of the (only) line of *fn*'s source containing *text*."""
    lines, first = inspect.getsourcelines(fn)
    found = [first + i for i, line in enumerate(lines) if text in line]
    assert len(found) == 1, (text, found)
    return found[0]


@contextmanager
def as_errors() -> Iterator[None]:
    """The warning raised as an error (as tether's pytest plugin sets it), in this block."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", Warning_)
        yield


@contextmanager
def recorded() -> Iterator[list[warnings.WarningMessage]]:
    """The warnings emitted in this block (every one, not once per location)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", Warning_)
        yield caught


def unjournaled(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in caught if issubclass(w.category, Warning_)]


def engine_on(store: Store) -> AbstractAsyncContextManager[tether.Engine]:
    return tether.open_engine(store, clock=TrioWallClock(START))


# -- never flagged -----------------------------------------------------------------------

effects: list[str] = []


@tether.step
async def slow(what: str) -> str:
    await trio.sleep(5)  # blocks inside a step: journaled
    effects.append(what)
    return what


flaky_calls: list[int] = []


@tether.step(retry=tether.Retry(attempts=3, initial=10, jitter=False, on=(ConnectionError,)))
async def flaky() -> str:
    flaky_calls.append(1)
    if len(flaky_calls) < 2:
        raise ConnectionError("down")
    return "up"


@tether.stream_step
async def rows(n: int) -> AsyncIterator[int]:
    for i in range(n):
        await trio.sleep(1)  # the stream's producer blocks: journaled item by item
        yield i


async def two_steps(prefix: str) -> list[str]:
    """An undecorated helper: it awaits only steps, so it is workflow code."""
    return [await slow(f"{prefix}-a"), await slow(f"{prefix}-b")]


async def branch() -> str:
    await tether.sleep(60)
    return await slow("in-branch")


@tether.workflow(name="tests.unjournaled.kid")
async def kid(n: int) -> int:
    await slow(f"kid-{n}")
    return n + 1


async def returns_at_once() -> int:
    return 1


@tether.workflow(name="tests.unjournaled.everything", messages={"item": int})
async def everything() -> list[Any]:
    out: list[Any] = [await slow("step"), *(await two_steps("helper")), await flaky()]
    async with tether.parallel() as p:
        a = p.start_soon(slow, "parallel")
        b = p.start_soon(branch)
    out += [a.result, b.result]
    await tether.sleep(3600)
    out.append(await tether.receive("item", int))
    out.append(await tether.child(kid, 1))
    async with tether.open_stream(rows, 3) as items:
        out += [item async for item in items]
    out.append(tether.patched("new-path"))
    # awaits that do not block
    await trio.lowlevel.checkpoint()
    await trio.lowlevel.checkpoint()
    out.append(await returns_at_once())
    done = trio.Event()
    done.set()
    await done.wait()
    with trio.CancelScope() as scope:
        scope.cancel()
        await trio.sleep(10)  # cancelled: ends at once, never blocks
    out.append(await tether.ask("ship?", bool))
    return out


async def run_until_paused(engine: tether.Engine, wf: Any, run_id: str) -> None:
    with pytest.raises(tether.Paused):
        await engine.run(wf, run_id=run_id)


async def test_a_workflow_of_tether_calls_never_warns(
    tether_store: Store, autojump_clock: trio.testing.MockClock
) -> None:
    effects.clear()
    flaky_calls.clear()
    with as_errors():
        async with engine_on(tether_store) as engine:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_until_paused, engine, everything, "e")
                await trio.sleep(1)  # (virtual time) the run is in its first step
                await engine.send("e", "item", 7)
            # resumed: every call above replays, then the ask returns
            result = await engine.resume("e", responses={"ask#0": True})
    assert result == [
        *("step", "helper-a", "helper-b", "up", "parallel", "in-branch"),
        *(7, 2, 0, 1, 2, True, 1, True),
    ]
    assert len(flaky_calls) == 2  # retried after a backoff: blocking inside the step
    assert sorted(effects) == sorted(
        ["step", "helper-a", "helper-b", "parallel", "in-branch", "kid-1"]
    )  # each step ran once: the blocking happened inside tether calls


# -- flagged, with the user's file and line ------------------------------------------------


@tether.workflow(name="tests.unjournaled.trio_sleep")
async def trio_sleep() -> str:
    first = await slow("before")
    await trio.sleep(1)  # not durable: flagged here
    return first


async def charge(order: str) -> str:  # (forgot @tether.step)
    await trio.sleep(1)  # the payment provider
    return f"charged-{order}"


@tether.workflow(name="tests.unjournaled.undecorated")
async def undecorated(order: str) -> str:
    return await charge(order)  # awaited here


def only_warning(caught: list[warnings.WarningMessage]) -> warnings.WarningMessage:
    found = unjournaled(caught)
    assert len(found) == 1, [str(w.message) for w in found]
    return found[0]


async def test_a_trio_sleep_in_the_body_warns_with_its_file_and_line(
    tether_store: Store, autojump_clock: trio.testing.MockClock
) -> None:
    line = line_of(trio_sleep.fn, "await trio.sleep(1)")
    with recorded() as caught:
        async with engine_on(tether_store) as engine:
            assert await engine.run(trio_sleep, run_id="t") == "before"
    warning = only_warning(caught)
    assert (warning.filename, warning.lineno) == (__file__, line)  # the user's, for warnings
    message = str(warning.message)
    assert f"{__file__}:{line}" in message
    assert "workflow 'tests.unjournaled.trio_sleep'" in message
    assert "awaiting sleep() of trio" in message
    assert "@tether.step" in message and "tether.sleep()" in message


async def test_an_undecorated_async_def_warns_where_it_blocks_and_where_it_is_awaited(
    tether_store: Store, autojump_clock: trio.testing.MockClock
) -> None:
    inner = line_of(charge, "await trio.sleep(1)")
    outer = line_of(undecorated.fn, "await charge(order)")
    with recorded() as caught:
        async with engine_on(tether_store) as engine:
            assert await engine.run(undecorated, "o-1", run_id="u") == "charged-o-1"
    warning = only_warning(caught)
    assert (warning.filename, warning.lineno) == (__file__, inner)
    message = str(warning.message)
    assert f"{__file__}:{inner} (in charge(), awaited at {__file__}:{outer})" in message
    assert "workflow 'tests.unjournaled.undecorated'" in message


async def test_each_location_warns_once_per_process_by_default(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default", Warning_)  # the warnings module's default
        async with engine_on(tether.MemoryStore()) as engine:
            for run_id in ("t1", "t2", "t3"):
                await engine.run(trio_sleep, run_id=run_id)
    assert len(unjournaled(caught)) == 1


async def test_a_parallel_branch_a_child_body_and_generators_warn_too(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def sleepy_branch() -> int:
        await trio.sleep(1)
        return 1

    @tether.workflow(name="tests.unjournaled.sleepy_kid")
    async def sleepy_kid() -> int:
        await trio.sleep(1)
        return 2

    async def ticker() -> AsyncIterator[int]:
        await trio.sleep(1)
        yield 3

    @asynccontextmanager
    async def connection() -> AsyncIterator[int]:
        await trio.sleep(1)
        yield 4

    @tether.workflow(name="tests.unjournaled.many")
    async def many() -> list[int]:
        async with tether.parallel() as p:
            branch = p.start_soon(sleepy_branch)
        out = [branch.result, await tether.child(sleepy_kid)]
        out += [i async for i in ticker()]
        async with connection() as c:
            out.append(c)
        return out

    with recorded() as caught:
        async with engine_on(tether.MemoryStore()) as engine:
            assert await engine.run(many, run_id="m") == [1, 2, 3, 4]
    found = sorted((w.lineno, str(w.message)) for w in unjournaled(caught))
    assert [(line, message.split(" blocked ")[0]) for line, message in found] == sorted(
        [
            (
                line_of(sleepy_branch, "trio.sleep"),
                "branch 'sleepy_branch#0' of workflow 'tests.unjournaled.many'",
            ),
            (line_of(sleepy_kid.fn, "trio.sleep"), "workflow 'tests.unjournaled.sleepy_kid'"),
            (line_of(ticker, "trio.sleep"), "workflow 'tests.unjournaled.many'"),
            (line_of(connection, "trio.sleep"), "workflow 'tests.unjournaled.many'"),
        ]
    )


@pytest.mark.tether_stores("sqlite")
async def test_an_engine_call_in_the_body_warns(
    tether_store: Store, autojump_clock: trio.testing.MockClock
) -> None:
    engines: list[tether.Engine] = []

    @tether.workflow(name="tests.unjournaled.reads_the_store")
    async def reads_the_store() -> bool:
        info = await engines[0].get_run("reads")  # a store read: not journaled
        return info is not None

    with recorded() as caught:
        async with engine_on(tether_store) as engine:
            engines.append(engine)
            assert await engine.run(reads_the_store, run_id="reads") is True
    message = str(only_warning(caught).message)
    assert f"{__file__}:{line_of(reads_the_store.fn, 'get_run')}" in message
    assert "awaiting Engine.get_run() of tether" in message


async def test_checks_off_nothing_is_looked_at(autojump_clock: trio.testing.MockClock) -> None:
    enable(False)
    try:
        with recorded() as caught:
            async with engine_on(tether.MemoryStore()) as engine:
                await engine.run(trio_sleep, run_id="off")
    finally:
        enable(True)
    assert unjournaled(caught) == []


# -- as an error ---------------------------------------------------------------------------


def test_the_pytest_plugin_makes_it_an_error(request: pytest.FixtureRequest) -> None:
    assert "error::tether.UnjournaledAwaitWarning" in request.config.getini("filterwarnings")


@tether.workflow(name="tests.unjournaled.hangs")
async def hangs() -> str:
    await slow("journaled first")
    await trio.Event().wait()  # would wait forever
    return "never"


async def test_as_an_error_the_run_fails_with_it_at_once_and_keeps_its_journal(
    tether_store: Store, autojump_clock: trio.testing.MockClock
) -> None:
    effects.clear()
    with as_errors(), trio.fail_after(3600):  # (virtual time: a hang would end here)
        async with engine_on(tether_store) as engine:
            with pytest.raises(Warning_, match=r"workflow 'tests.unjournaled.hangs' blocked"):
                await engine.run(hangs, run_id="h")
            info = await engine.get_run("h")
    assert trio.current_time() == 5  # the step's sleep, then at once
    assert info is not None and info.status is RunStatus.FAILED
    assert info.error is not None and info.error.type.endswith("UnjournaledAwaitWarning")
    assert f"{__file__}:{line_of(hangs.fn, 'Event().wait()')}" in info.error.message
    assert [(e.key, e.kind) for e in info.entries] == [("slow#0", EntryKind.STEP)]
    assert effects == ["journaled first"]


async def test_as_an_error_a_plain_nursery_in_the_body_is_cancelled_and_the_run_fails(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ended: list[str] = []

    async def forever() -> None:
        try:
            await trio.sleep_forever()
        finally:
            ended.append("child cancelled")

    @tether.workflow(name="tests.unjournaled.nursery")
    async def with_a_nursery() -> str:
        async with trio.open_nursery() as nursery:  # waits for its child: flagged here
            nursery.start_soon(forever)
        return "never"

    with as_errors(), trio.fail_after(3600):
        async with engine_on(tether.MemoryStore()) as engine:
            with pytest.raises(Warning_) as raised:
                await engine.run(with_a_nursery, run_id="n")
            info = await engine.get_run("n")
    message = str(raised.value)
    assert f"{__file__}:{line_of(with_a_nursery.fn, 'open_nursery()')}" in message
    assert "use tether.parallel() instead of a trio nursery" in message
    assert ended == ["child cancelled"] and trio.current_time() == 0
    assert info is not None and info.status is RunStatus.FAILED


async def test_made_an_error_after_the_body_started_it_fails_the_run_once_the_body_returns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # No filter could make it an error when the body started, so the body runs
    # without the check's cancel scope (which would cost memory for as long as the
    # run is held): the wait is not cut short, and the run fails when it returns.
    @tether.workflow(name="tests.unjournaled.late_error")
    async def late_error() -> str:
        warnings.simplefilter("error", Warning_)
        await trio.sleep(1)  # not durable: flagged here, an error by now
        return "returned"

    with warnings.catch_warnings():
        warnings.resetwarnings()  # (not even the pytest plugin's filter)
        async with engine_on(tether.MemoryStore()) as engine:
            with pytest.raises(Warning_, match=r"workflow 'tests.unjournaled.late_error' blocked"):
                await engine.run(late_error, run_id="late")
            info = await engine.get_run("late")
    assert trio.current_time() == 1  # the sleep ran its course
    assert info is not None and info.status is RunStatus.FAILED and info.error is not None
    assert f"{__file__}:{line_of(late_error.fn, 'trio.sleep(1)')}" in info.error.message


async def test_as_an_error_in_a_branch_the_block_raises_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def sleeps() -> None:
        await trio.sleep(1)

    @tether.workflow(name="tests.unjournaled.branch_error")
    async def branch_error() -> None:
        async with tether.parallel() as p:
            p.start_soon(slow, "sibling")
            p.start_soon(sleeps)

    with as_errors():
        async with engine_on(tether.MemoryStore()) as engine:
            with pytest.RaisesGroup(
                pytest.RaisesExc(Warning_, match=r"branch 'sleeps#0' of workflow"),
            ):
                await engine.run(branch_error, run_id="b")
            info = await engine.get_run("b")
    assert info is not None and info.status is RunStatus.FAILED
