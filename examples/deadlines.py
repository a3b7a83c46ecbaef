"""Deadlines and cancellation with tether.

The runnable companion of docs/how-to/deadlines-and-cancellation.md. Run it
with ``python examples/deadlines.py`` (it takes about four seconds).
"""

from collections import Counter

import trio

import tether
from tether.testing import FaultyStore, Hang

calls: Counter[str] = Counter()  # how many times each step's body really ran


@tether.step
async def fetch_rates(day: str) -> dict[str, float]:
    calls["fetch_rates"] += 1
    await trio.sleep(0.1)
    return {"EUR": 1.08, "GBP": 1.27}


@tether.step
async def build_report(day: str, rates: dict[str, float]) -> str:
    calls["build_report"] += 1
    await trio.sleep(0.5)
    return f"report {day}: {len(rates)} rates"


@tether.workflow(name="reports.nightly")
async def nightly(day: str) -> str:
    rates = await fetch_rates(day)
    return await build_report(day, rates)


async def with_a_timeout() -> None:
    calls.clear()
    async with tether.open_engine(tether.MemoryStore()) as engine:
        try:
            await engine.run(nightly, "2026-12-01", run_id="night-1", timeout=0.3)
        except trio.TooSlowError:
            print("night-1 timed out")
        info = await engine.get_run("night-1")
        assert info is not None
        print(f"status: {info.status}, journal: {[e.key for e in info.entries]}")

        print(await engine.resume("night-1"))
        print(f"step runs: {dict(calls)}")


async def with_a_cancel_scope() -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        with trio.move_on_after(0.3) as scope:
            await engine.run(nightly, "2026-12-02", run_id="night-2")
        print(f"night-2 cancelled: {scope.cancelled_caught}")

        # run() with the id of an unfinished run resumes it
        report = await engine.run(nightly, "2026-12-02", run_id="night-2")
        print(report)


@tether.step(timeout=0.2, retries=2)
async def ping_printer(day: str) -> str:
    calls["ping_printer"] += 1
    if calls["ping_printer"] == 1:
        await trio.sleep(10)  # the first attempt hangs
    return f"printer ready for {day}"


@tether.workflow(name="reports.print")
async def print_report(day: str) -> str:
    return await ping_printer(day)


async def with_a_step_timeout() -> None:
    calls.clear()
    async with tether.open_engine(tether.MemoryStore()) as engine:
        start = trio.current_time()
        answer = await engine.run(print_report, "2026-12-03", run_id="print-1")
        print(answer)
        info = await engine.get_run("print-1")
        assert info is not None
        print(f"attempt {info.entries[0].attempt}, after {trio.current_time() - start:.1f} s")


async def with_a_hung_store() -> None:
    calls.clear()
    store = FaultyStore(tether.MemoryStore())
    store.inject("append", Hang())  # every journal write hangs forever
    async with tether.open_engine(store) as engine:
        start = trio.current_time()
        with trio.move_on_after(0.3):
            await engine.run(nightly, "2026-12-04", run_id="night-4")
        print(f"returned after {trio.current_time() - start:.1f} s")
        info = await engine.get_run("night-4")
        assert info is not None
        print(f"status: {info.status}, journal: {[e.key for e in info.entries]}")

        store.clear()  # the store recovers
        print(await engine.resume("night-4"))
        print(f"step runs: {dict(calls)}")


@tether.step
async def notify(day: str) -> str:
    return f"sent {day}"


@tether.step
async def archive(day: str) -> str:
    await trio.sleep(0.1)
    raise OSError("archive offline")


@tether.workflow(name="reports.publish")
async def publish(day: str) -> None:
    async with tether.parallel() as p:
        p.start_soon(notify, day)
        p.start_soon(archive, day)


async def with_a_save_timeout() -> None:
    store = FaultyStore(tether.MemoryStore())
    store.inject("append", Hang())
    async with tether.open_engine(store, save_timeout=0.5) as engine:
        start = trio.current_time()
        try:
            await engine.run(publish, "2026-12-05", run_id="publish-1")
        except* tether.SaveTimeoutError:
            print(f"notify's save gave up after {trio.current_time() - start:.1f} s")
        except* OSError as group:
            print(f"archive failed: {group.exceptions[0]}")
        info = await engine.get_run("publish-1")
        assert info is not None
        print(f"status: {info.status}")


async def main() -> None:
    for example in (
        with_a_timeout,
        with_a_cancel_scope,
        with_a_step_timeout,
        with_a_hung_store,
        with_a_save_timeout,
    ):
        print(f"-- {example.__name__}")
        await example()


if __name__ == "__main__":
    trio.run(main)
