"""tether in several processes: one owner per run.

The runnable companion of docs/how-to/several-processes.md: each of its code
blocks appears here verbatim, and what the page shows is what this prints.
Run it with ``python examples/processes.py`` (it takes a few seconds). The
other processes are copies of this file, started with arguments:
``python examples/processes.py run|resume|deliver FOLDER RUN_ID``.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import trio

import tether

#: The workers' lease: they renew it every LEASE_TTL / 3 = 1 s, so a cancel
#: recorded by another process reaches them within about a second.
LEASE_TTL = 3.0

folder = Path()  # the store and the step log; set by main() and worker()


def did(what: str) -> None:
    """Note that a step's body ran (it stands for the step's side effect)."""
    with (folder / "steps.log").open("a") as log:
        log.write(f"{what}\n")


def done() -> Counter[str]:
    """How many times each step's body ran, in every process."""
    log = folder / "steps.log"
    return Counter(log.read_text().splitlines() if log.exists() else ())


@tether.step
async def charge(order_id: str) -> str:
    if (folder / "declined").exists():
        raise RuntimeError("card declined")
    did(f"charge {order_id}")
    return f"receipt {order_id}"


@tether.step
async def ship(order_id: str) -> str:
    did(f"ship {order_id}")
    # The warehouse takes its time: until this example lets it go, from any process.
    while not (folder / f"{order_id}.go").exists():  # noqa: ASYNC110
        await trio.sleep(0.02)
    return f"parcel {order_id}"


@tether.workflow(name="orders.fulfil")
async def fulfil(order_id: str) -> list[str]:
    return [await charge(order_id), await ship(order_id)]


# -- another system: the warehouse, with a database of its own -------------------------


def open_warehouse() -> None:
    with contextlib.closing(sqlite3.connect(folder / "warehouse.db")) as db, db:
        db.execute("CREATE TABLE fences (order_id TEXT PRIMARY KEY, token INTEGER)")
        db.execute("CREATE TABLE log (order_id TEXT, token INTEGER, shipped INTEGER)")


def warehouse_ship(order_id: str, token: int) -> bool:
    """Ship *order_id*, unless a writer with a greater fencing token came first."""
    with contextlib.closing(sqlite3.connect(folder / "warehouse.db")) as db, db:
        shipped = db.execute(
            "INSERT INTO fences VALUES (?, ?) ON CONFLICT (order_id) DO UPDATE"
            " SET token = excluded.token WHERE excluded.token >= fences.token",
            (order_id, token),
        ).rowcount
        db.execute("INSERT INTO log VALUES (?, ?, ?)", (order_id, token, shipped))
    return shipped == 1


def warehouse_log(order_id: str) -> str:
    """What the warehouse did for *order_id*, in order."""
    with contextlib.closing(sqlite3.connect(folder / "warehouse.db")) as db:
        rows = db.execute(
            "SELECT token, shipped FROM log WHERE order_id = ? ORDER BY rowid", (order_id,)
        )
        return ", ".join(f"token {t} {'shipped' if s else 'refused'}" for t, s in rows)


def wait_for_go(order_id: str) -> None:
    """The courier takes its time: until this example lets it go, from any process."""
    while not (folder / f"{order_id}.go").exists():
        time.sleep(0.02)


@tether.step
async def hand_over(order_id: str) -> str:
    token = tether.fencing_token()  # this execution's: greater after a takeover
    did(f"ship {order_id}")
    # A call already on its way: in a thread, which a lost lease does not stop.
    await trio.to_thread.run_sync(wait_for_go, order_id)
    if not warehouse_ship(order_id, token):
        raise RuntimeError(f"the warehouse refused token {token} for {order_id}")
    return f"parcel {order_id}, token {token}"


@tether.workflow(name="orders.deliver")
async def deliver(order_id: str) -> list[str]:
    return [await hand_over(order_id)]


# -- the other processes ---------------------------------------------------------------


async def worker(command: str, where: str, run_id: str) -> None:
    """Run or resume *run_id* on the store in *where*; print the outcome as JSON."""
    global folder
    folder = Path(where)
    store = tether.SQLiteStore(folder / "shop.db")
    async with tether.open_engine(store, lease_ttl=LEASE_TTL) as engine:
        try:
            if command == "run":
                result = await engine.run(fulfil, run_id, run_id=run_id)
            elif command == "deliver":
                result = await engine.run(deliver, run_id, run_id=run_id)
            else:
                result = await engine.resume(run_id)
        except tether.RunConflictError as exc:
            report: dict[str, Any] = {"conflict": exc.owner}
        except tether.RunCancelledError:
            report = {"cancelled": True}
        except tether.LeaseLostError:
            report = {"lost": True}
        else:
            report = {"result": result}
    print(json.dumps(report))


async def start(nursery: trio.Nursery, command: str, run_id: str) -> trio.Process:
    """Start a worker: ``python processes.py COMMAND FOLDER RUN_ID``, its output piped here."""
    argv = [sys.executable, __file__, command, str(folder), run_id]
    process: trio.Process = await nursery.start(
        partial(trio.run_process, argv, check=False, stdout=subprocess.PIPE)
    )
    return process


async def outcome(process: trio.Process) -> dict[str, Any]:
    """What a worker printed, once it has exited (``{"exit": code}`` if nothing)."""
    assert process.stdout is not None
    printed = b"".join([chunk async for chunk in process.stdout])
    await process.wait()
    return json.loads(printed) if printed else {"exit": process.returncode}


def pid(owner: str | None) -> int | None:
    """The process id in an owner name, ``host:pid:engine-id``."""
    return None if owner is None else int(owner.split(":")[1])


async def shipping(engine: tether.Engine, run_id: str) -> tether.RunInfo:
    """Wait until another owner executes *run_id* and its ``ship`` step has started."""
    while True:
        info = await engine.get_run(run_id)
        if info is not None and info.executing and done()[f"ship {run_id}"]:
            return info
        await trio.sleep(0.02)


# -- this process ----------------------------------------------------------------------


async def resume_when_free(engine: tether.Engine, run_id: str, *, every: float) -> Any:
    """Resume *run_id*; while another live owner executes it, try again later."""
    while True:
        try:
            return await engine.resume(run_id)
        except tether.RunConflictError as exc:
            if exc.owner is None:
                raise  # not a held lease: trying again would fail the same way
            await trio.sleep(every)


async def two_resume_at_once(engine: tether.Engine) -> None:
    print("1. two processes resume a failed run at once")
    (folder / "declined").touch()
    try:
        await engine.run(fulfil, "order-1", run_id="order-1")
    except RuntimeError as exc:
        print(f"order-1 failed: {exc}")
    (folder / "declined").unlink()
    async with trio.open_nursery() as nursery:
        a = await start(nursery, "resume", "order-1")
        b = await start(nursery, "resume", "order-1")
        info = await shipping(engine, "order-1")
        owner, other = (a, b) if pid(info.owner) == a.pid else (b, a)
        refused = await outcome(other)
        print(f"the other got RunConflictError naming it: {pid(refused['conflict']) == owner.pid}")
        (folder / "order-1.go").touch()
        print(f"the owner's result: {(await outcome(owner))['result']}")
    steps = done()
    print(f"charge ran {steps['charge order-1']} time(s), ship {steps['ship order-1']}")


async def killed_owner(engine: tether.Engine) -> None:
    print("2. a process killed mid-run is taken over at once")
    async with trio.open_nursery() as nursery:
        a = await start(nursery, "run", "order-2")
        info = await shipping(engine, "order-2")
        print(f"order-2 executes in the other process: {pid(info.owner) == a.pid}")
        a.send_signal(signal.SIGKILL)
        await outcome(a)
    after = await engine.get_run("order-2")
    assert after is not None
    print(f"after SIGKILL: {after.status}, executing: {after.executing}")
    (folder / "order-2.go").touch()
    began = trio.current_time()
    print(f"resumed here: {await engine.resume('order-2')}")
    print(f"without waiting for its lease to expire: {trio.current_time() - began < LEASE_TTL / 2}")
    steps = done()
    print(f"charge ran {steps['charge order-2']} time(s), ship {steps['ship order-2']}")


async def paused_owner(engine: tether.Engine) -> None:
    print("3. a paused process loses its lease")
    async with trio.open_nursery() as nursery:
        a = await start(nursery, "run", "order-3")
        await shipping(engine, "order-3")
        a.send_signal(signal.SIGSTOP)  # as a long GC pause, or a closed laptop lid
        (folder / "order-3.go").touch()
        began = trio.current_time()
        result = await resume_when_free(engine, "order-3", every=0.2)
        print(f"resumed here once its lease expired: {result}")
        print(f"after waiting for it to expire: {trio.current_time() - began > LEASE_TTL / 3}")
        a.send_signal(signal.SIGCONT)
        lost = await outcome(a) == {"lost": True}
        print(f"the old owner's engine.run raised LeaseLostError: {lost}")
    info = await engine.get_run("order-3")
    assert info is not None
    print(f"order-3: {info.status}, journal: {[e.key for e in info.entries]}")
    print(f"ship ran {done()['ship order-3']} times, and is journaled once")


async def cancel_elsewhere(engine: tether.Engine) -> None:
    print("4. a cancel from another process")
    async with trio.open_nursery() as nursery:
        a = await start(nursery, "run", "order-4")
        await shipping(engine, "order-4")
        began = trio.current_time()
        await engine.cancel("order-4")
        info = await engine.get_run("order-4")
        assert info is not None
        print(f"cancel recorded: {info.status}, cancel_requested: {info.cancel_requested}")
        stopped = await outcome(a) == {"cancelled": True}
        print(f"the owner's engine.run raised RunCancelledError: {stopped}")
        print(f"within a renewal interval: {trio.current_time() - began < LEASE_TTL / 3 + 1}")
    info = await engine.get_run("order-4")
    assert info is not None
    print(f"order-4: {info.status}, journal: {[e.key for e in info.entries]}")
    try:
        await engine.resume("order-4")
    except tether.RunCancelledError:
        print("resuming it raises RunCancelledError")


async def zombie_refused(engine: tether.Engine) -> None:
    print("5. another system refuses a paused process's late write")
    async with trio.open_nursery() as nursery:
        a = await start(nursery, "deliver", "order-5")
        await shipping(engine, "order-5")
        a.send_signal(signal.SIGSTOP)  # paused while its call to the warehouse is on its way
        (folder / "order-5.go").touch()
        result = await resume_when_free(engine, "order-5", every=0.2)
        print(f"resumed here once its lease expired: {result}")
        a.send_signal(signal.SIGCONT)  # its call goes on, with its old token
        lost = await outcome(a) == {"lost": True}
        print(f"the old owner's engine.run raised LeaseLostError: {lost}")
    print(f"the warehouse: {warehouse_log('order-5')}")


async def main() -> None:
    global folder
    with tempfile.TemporaryDirectory() as where:
        folder = Path(where)
        open_warehouse()
        async with tether.open_engine(tether.SQLiteStore(folder / "shop.db")) as engine:
            await two_resume_at_once(engine)
            await killed_owner(engine)
            await paused_owner(engine)
            await cancel_elsewhere(engine)
            await zombie_refused(engine)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        command, where, run_id = sys.argv[1:]
        trio.run(worker, command, where, run_id)
    else:
        trio.run(main)
