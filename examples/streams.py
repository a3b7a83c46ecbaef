"""Streaming steps and live run events with tether.

The runnable companion of docs/how-to/streams.md. Run it with
``python examples/streams.py`` (it takes about two seconds).
"""

from collections import Counter
from collections.abc import AsyncIterator

import trio

import tether

started: Counter[str] = Counter()  # how many times each generator really started


@tether.stream_step
async def read_orders(day: str) -> AsyncIterator[dict[str, int]]:
    started["read_orders"] += 1
    print(f"  cursor opened for {day}")
    try:
        for n in range(1, 6):
            await trio.sleep(0.1)  # fetch the next row
            yield {"order": n, "total": 10 * n}
    finally:
        with tether.cleanup_scope(1.0):
            await trio.sleep(0.1)  # tell the database we are done
        print("  cursor closed")


@tether.workflow(name="orders.until_limit")
async def until_limit(day: str, limit: int) -> int:
    total = 0
    async with tether.open_stream(read_orders, day) as orders:
        async for row in orders:
            total += row["total"]
            if total >= limit:
                print(f"  limit reached at order {row['order']}")
                break  # the cursor is closed before the block exits
    print("  block exited")
    return total


class StreamLogger:
    async def on_step_end(self, event: tether.HookEvent) -> None:
        ended = "exhausted" if event.exception is None else type(event.exception).__name__
        print(f"  on_step_end {event.key}: {ended}")


async def stop_early() -> None:
    async with tether.open_engine(tether.MemoryStore(), hooks=[StreamLogger()]) as engine:
        total = await engine.run(until_limit, "2026-12-01", 50, run_id="limit-1")
        print(f"total: {total}")


mail_server = {"up": False}


@tether.step
async def send_invoice(total: int) -> str:
    if not mail_server["up"]:
        raise OSError("mail server down")
    return f"invoice sent: {total}"


@tether.workflow(name="orders.invoice")
async def invoice(day: str) -> str:
    async with tether.open_stream(read_orders, day) as orders:
        total = sum([row["total"] async for row in orders])
    return await send_invoice(total)


async def resume_replays_the_stream() -> None:
    started.clear()
    async with tether.open_engine(tether.MemoryStore()) as engine:
        try:
            await engine.run(invoice, "2026-12-02", run_id="invoice-1")
        except OSError as exc:
            print(f"failed: {exc}")
        info = await engine.get_run("invoice-1")
        assert info is not None
        print(f"journal: {[(e.key, str(e.status)) for e in info.entries]}")

        mail_server["up"] = True
        print(await engine.resume("invoice-1"))
        print(f"generator started: {started['read_orders']} time(s)")


@tether.stream_step
async def telemetry(shielded: bool) -> AsyncIterator[int]:
    try:
        for i in range(100):
            await trio.sleep(0.1)
            yield i
    finally:
        if shielded:
            with tether.cleanup_scope(1.0):
                await trio.sleep(0.2)  # flush the buffer: shielded, at most 1 s
                print("  buffer flushed")
        else:
            await trio.sleep(0.2)  # raises trio.Cancelled: the stream is being closed
            print("  buffer flushed (never printed)")


@tether.workflow(name="telemetry.sample")
async def sample(shielded: bool) -> list[int]:
    start = trio.current_time()
    first: list[int] = []
    async with tether.open_stream(telemetry, shielded) as readings:
        async for value in readings:
            first.append(value)
            if len(first) == 2:
                break
    print(f"  block exited after {trio.current_time() - start:.1f} s")
    return first


async def cleanup_that_awaits() -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        print("unshielded:")
        await engine.run(sample, False)
        print("with cleanup_scope:")
        await engine.run(sample, True)


@tether.stream_step
async def countdown(n: int) -> AsyncIterator[int]:
    for i in range(n, 0, -1):
        await trio.sleep(0.1)
        yield i


@tether.step
async def launch(count: int) -> str:
    return f"launched after {count}"


@tether.workflow(name="demo.launch")
async def countdown_launch(n: int) -> str:
    async with tether.open_stream(countdown, n) as numbers:
        seen = [i async for i in numbers]
    return await launch(len(seen))


async def watch_a_run() -> None:
    async with (
        tether.open_engine(tether.MemoryStore()) as engine,
        engine.open_run(countdown_launch, 3, run_id="launch-1") as run,
    ):
        await tether.show_progress(run)  # one line per event, until the run ends
        print(await run.result())


async def main() -> None:
    for example in (stop_early, resume_replays_the_stream, cleanup_that_awaits, watch_a_run):
        print(f"-- {example.__name__}")
        await example()


if __name__ == "__main__":
    trio.run(main)
