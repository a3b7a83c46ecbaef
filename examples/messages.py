"""Messages: send a running workflow messages, from any process.

The runnable companion of docs/how-to/messages.md: each of its code blocks
appears here verbatim, and what the page shows is what this prints. Run it
with ``python examples/messages.py`` (a few seconds, on real time: it starts
another process). A parcel's run receives the carrier's scans, in order,
each once: from another process, through a stopped process, parked under a
worker; and a scan that does not fit is refused when it is sent. The other
process is a copy of this file: ``python examples/messages.py carrier FOLDER
PARCEL PLACE...``.
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from functools import partial
from pathlib import Path

import attrs
import trio

import tether

folder = Path()  # the store and the step log; set by main() and carrier()


def did(what: str) -> None:
    """Note that a step's body ran (it stands for the step's side effect)."""
    with (folder / "steps.log").open("a") as log:
        log.write(f"{what}\n")


def done() -> Counter[str]:
    """How many times each step's body ran, in every process."""
    log = folder / "steps.log"
    return Counter(log.read_text().splitlines() if log.exists() else ())


@attrs.frozen
class Scan:
    place: str
    delivered: bool = False


@tether.step
async def notify(parcel: str, place: str) -> str:
    did(f"notify {parcel} at {place}")
    return place


@tether.workflow(name="shop.track", messages={"scan": Scan})
async def track(parcel: str) -> list[str]:
    route: list[str] = []
    while True:
        scan = await tether.receive("scan", Scan)
        route.append(await notify(parcel, scan.place))
        if scan.delivered:
            return route


# -- the other process -----------------------------------------------------------------


async def carrier(where: str, parcel: str, *places: str) -> None:
    """The carrier's webhook, in another process: one scan per place, the last delivered."""
    store = tether.SQLiteStore(Path(where) / "shop.db")
    async with tether.open_engine(store) as engine:
        for place in places:
            await engine.send(parcel, "scan", Scan(place, delivered=place == places[-1]))


async def scanned_by_the_carrier(engine: tether.Engine, parcel: str, *places: str) -> None:
    """Once *parcel*'s run exists, run ``carrier`` as another process."""
    while await engine.get_run(parcel) is None:  # noqa: ASYNC110 (polls the store)
        await trio.sleep(0.02)
    argv = [sys.executable, __file__, "carrier", str(folder), parcel, *places]
    await trio.run_process(argv)


# -- this process ----------------------------------------------------------------------


async def journaled(engine: tether.Engine, parcel: str, n: int) -> None:
    """Wait until *parcel*'s run exists and its journal holds *n* entries."""
    while (info := await engine.get_run(parcel)) is None or len(info.entries) < n:  # noqa: ASYNC110
        await trio.sleep(0.02)


async def stored_as(engine: tether.Engine, parcel: str, status: str) -> tether.RunInfo:
    """Wait until *parcel*'s run is stored with *status*; return it."""
    while (info := await engine.get_run(parcel)) is None or info.status != status:  # noqa: ASYNC110
        await trio.sleep(0.02)
    return info


def show_messages(info: tether.RunInfo) -> None:
    """The journal's received messages: which receive took which message."""
    for entry in info.entries:
        if entry.kind is tether.stores.EntryKind.MESSAGE:
            print(f"  {entry.key}: {entry.value}")


async def from_another_process(engine: tether.Engine) -> None:
    print("1. scans sent from another process")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(scanned_by_the_carrier, engine, "p-1", "Lyon", "Paris", "home")
        route = await engine.run(track, "p-1", run_id="p-1")
    print(f"route of p-1: {route}")
    info = await engine.get_run("p-1")
    assert info is not None
    show_messages(info)


async def through_a_stop(store: tether.stores.Store) -> None:
    print("2. in order, each once, through a stopped process")
    async with tether.open_engine(store) as engine:
        with trio.move_on_after(30) as process:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(partial(engine.run, track, "p-2", run_id="p-2"))
                await journaled(engine, "p-2", 0)
                await engine.send("p-2", "scan", Scan("Lyon"))
                await journaled(engine, "p-2", 2)  # Lyon received, and notified
                process.cancel()  # the process stops here
    async with tether.open_engine(store) as engine:  # meanwhile, another process sends
        await engine.send("p-2", "scan", Scan("Paris"))
        await engine.send("p-2", "scan", Scan("home", delivered=True))
    async with tether.open_engine(store) as engine:  # a new process resumes the run
        print(f"resumed: {await engine.resume('p-2')}")
        info = await engine.get_run("p-2")
        assert info is not None
        show_messages(info)
    print(f"notify ran {done()['notify p-2 at Lyon']} time for Lyon")


async def parked(engine: tether.Engine) -> None:
    print("3. under a worker, a run waiting for a message parks")
    async with tether.open_worker(engine, park_after=60, poll_interval=0.1) as worker:
        await engine.submit(track, "p-3", run_id="p-3")
        info = await stored_as(engine, "p-3", "waiting")
        print(f"{info.status}, wake_at {info.wake_at}, owner {info.owner}")
        print(f"runs held by the worker: {len(worker.running)}")
        await engine.send("p-3", "scan", Scan("Lyon"))
        await engine.send("p-3", "scan", Scan("home", delivered=True))
        print(f"route of p-3: {await engine.wait('p-3', timeout=30)}")


async def refused(engine: tether.Engine) -> None:
    print("4. a message that does not fit is refused at send")
    await engine.submit(track, "p-4", run_id="p-4")
    for name, value in [("scan", Scan(42)), ("scan", "Lyon"), ("weight", 3)]:
        try:
            await engine.send("p-4", name, value)
        except tether.MessageRejectedError as exc:
            print(f"{name} {value!r}: {type(exc).__name__}")
            assert "nothing was stored" in str(exc)
    try:
        await engine.send("p-1", "scan", Scan("Lyon"))
    except tether.RunConflictError as exc:
        print(f"to p-1: {type(exc).__name__}: {str(exc).partition(';')[0]}")


async def main() -> None:
    global folder
    with tempfile.TemporaryDirectory() as where:
        folder = Path(where)
        store = tether.SQLiteStore(folder / "shop.db")
        async with tether.open_engine(store) as engine:
            await from_another_process(engine)
        await through_a_stop(store)
        async with tether.open_engine(store) as engine:
            await parked(engine)
            await refused(engine)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        command, where, parcel, *places = sys.argv[1:]
        trio.run(carrier, where, parcel, *places)
    else:
        trio.run(main)
