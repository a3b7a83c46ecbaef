"""``python -m tether demo``: a checkout workflow told as a terminal story, on SQLite.

Layer: the command line (``_cli``).

Four chapters, each ending in claims the demo checks itself (the exit status
is 0 only if every one held):

1. a sibling fails while the charge's save is in flight: the save survives;
2. the resume replays the charge instead of charging again;
3. the store hangs and the caller's 0.2 s deadline is met anyway;
4. a child process running a workflow is killed with SIGKILL mid-run, and
   this process resumes the run from the SQLite file without repeating a
   step the child had stored.

The child of chapter 4 is this module again (``tether demo --child DB
EFFECTS``): it prints one line per stored checkpoint, and the parent kills it
after reading a few of them (reading lines, never sleeping to wait).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from functools import partial
from pathlib import Path
from typing import TextIO

import attrs
import trio

from .._api import _workflow as wfmod
from .._api._parallel import parallel
from .._core._hooks import HookEvent
from .._engine._engine import open_engine
from .._engine._progress import describe_event
from ..stores import SQLiteStore, Store
from ..testing import Delay, FaultyStore, Hang

__all__ = ("child_main", "main")


def _sqlite_store(path: Path) -> Store:
    return SQLiteStore(path)


class OutOfStock(Exception):
    """The warehouse has none left."""


@attrs.frozen
class Order:
    order_id: str
    item: str
    cents: int


@attrs.frozen
class Receipt:
    order_id: str
    charged_cents: int
    tracking: str


executions: Counter[str] = Counter()
stock: dict[str, int] = {}


@wfmod.step
async def load_order(order_id: str) -> Order:
    executions["load_order"] += 1
    return Order(order_id, "teapot", 4200)


@wfmod.step
async def charge(order: Order) -> int:
    executions["charge"] += 1
    return order.cents


@wfmod.step
async def reserve(order: Order) -> str:
    executions["reserve"] += 1
    await trio.sleep(0.1)  # the warehouse answers after the charge is done
    if stock.get(order.item, 0) < 1:
        raise OutOfStock(f"no {order.item} in stock")
    stock[order.item] -= 1
    return f"shelf-{order.item}"


@wfmod.step
async def ship(order: Order, shelf: str) -> str:
    executions["ship"] += 1
    return f"TRACK-{order.order_id}-{shelf}"


@wfmod.workflow(name="demo.checkout")
async def checkout(order_id: str) -> Receipt:
    order = await load_order(order_id)
    async with parallel() as p:
        charged = p.start_soon(charge, order)
        shelf = p.start_soon(reserve, order)
    tracking = await ship(order, shelf.result)
    return Receipt(order_id, charged.result, tracking)


# -- chapter 4: a workflow whose steps leave traces in a file ---------------------------

BOXES = 6  #: steps of the fulfil workflow before shipping
KILL_AFTER = 3  #: the parent kills the child once it reports this many steps stored
_effects: list[Path] = []  # where the steps write their side effects (one line each)


async def _effect(label: str) -> None:
    """The step's side effect: one line, ``PID LABEL``, appended to the effects file."""
    async with await trio.open_file(_effects[0], "a") as f:
        await f.write(f"{os.getpid()} {label}\n")


@wfmod.step
async def pack(order_id: str, box: int) -> str:
    await trio.sleep(0.1)  # packing a box takes a moment
    await _effect(f"pack#{box}")
    return f"{order_id}-box-{box}"


@wfmod.step
async def book_courier(boxes: list[str]) -> str:
    await _effect("book_courier#0")
    return f"COURIER-{len(boxes)}"


@wfmod.workflow(name="demo.fulfil")
async def fulfil(order_id: str) -> str:
    boxes = [await pack(order_id, box) for box in range(BOXES)]
    return await book_courier(boxes)


# -- telling the story ------------------------------------------------------------------


@attrs.define
class _Narrator:
    out: TextIO
    t0: float = 0.0
    quiet: bool = False

    def say(self, text: str) -> None:
        if self.quiet:
            return
        print(f"  {trio.current_time() - self.t0:6.3f}s  {text}", file=self.out, flush=True)

    async def on_step_end(self, event: HookEvent) -> None:
        if event.exception is None:
            self.say(f"{event.key} finished")
        else:
            self.say(f"{event.key} ended by {type(event.exception).__name__}: {event.exception}")

    async def on_checkpoint(self, event: HookEvent) -> None:
        assert event.entry is not None
        self.say(f"{event.key} checkpoint stored (seq {event.entry.seq})")


@attrs.define
class _Claims:
    """The promises the demo checks; each is printed as it is checked."""

    out: TextIO
    broken: list[str] = attrs.field(factory=list)

    def check(self, ok: bool, text: str) -> None:
        print(f"   {'ok' if ok else 'BROKEN'}: {text}", file=self.out, flush=True)
        if not ok:
            self.broken.append(text)


def _slow_charge_saves(store: FaultyStore) -> None:
    store.inject("append", Delay(0.3), when=lambda run_id, entries: entries[0].key == "charge#0")


async def _checkout_chapters(db: Path, out: TextIO, claims: _Claims) -> None:
    def title(text: str) -> None:
        print(f"\n{text}", file=out, flush=True)

    narrator = _Narrator(out)
    faulty = FaultyStore(_sqlite_store(db))
    async with open_engine(faulty, hooks=[narrator], save_timeout=5.0) as engine:
        title("1. checkout o-1: charge and reserve in parallel; the warehouse is empty,")
        print("   and the store takes 0.3 s to save the charge's checkpoint.", file=out)
        _slow_charge_saves(faulty)
        narrator.t0 = trio.current_time()
        try:
            await engine.run(checkout, "o-1", run_id="o-1")
        except* OutOfStock as group:
            narrator.say(f"run failed: {group.exceptions[0]!r}")
        info = await engine.get_run("o-1")
        assert info is not None
        keys = [e.key for e in info.entries]
        print(f"   status: {info.status.value}; journal: {keys}", file=out)
        claims.check(
            info.status.value == "failed" and "charge#0" in keys,
            "the charge's checkpoint survived its sibling's failure",
        )

        title("2. restock and resume o-1: the charge must not run again.")
        print(f"   replayed from the journal, not executed: {keys}", file=out)
        faulty.clear()
        stock["teapot"] = 1
        narrator.t0 = trio.current_time()
        receipt = await engine.resume("o-1")
        narrator.say(f"completed: {receipt}")
        print(f"   executions: {dict(sorted(executions.items()))}", file=out)
        claims.check(executions["charge"] == 1, "charged exactly once")

        title("3. checkout o-2 while the store hangs; the caller allows 0.2 s.")
        faulty.inject("append", Hang())
        stock["teapot"] = 1
        narrator.t0 = start = trio.current_time()
        elapsed = None
        try:
            await engine.run(checkout, "o-2", run_id="o-2", timeout=0.2)
        except trio.TooSlowError:
            elapsed = trio.current_time() - start
            narrator.say(f"TooSlowError after {elapsed:.3f} s")
        # The save_timeout is 5 s: a run held by its hung save would take that long.
        # (The bound is far from both, so a busy machine cannot flip the verdict.)
        claims.check(
            elapsed is not None and elapsed < 2.5,
            "the caller's 0.2 s deadline was met while the store hung (save_timeout is 5 s)",
        )
        info = await engine.get_run("o-2")
        assert info is not None
        print(f"   status: {info.status.value} (resumable; nothing was written)", file=out)
        faulty.clear()
        narrator.quiet = True
        try:
            receipt = await engine.resume("o-2")
        finally:
            narrator.quiet = False
        print(f"   resumed once the store recovered: {receipt}", file=out)
        claims.check(isinstance(receipt, Receipt), "o-2 completed on resume")


def _child_env() -> dict[str, str]:
    """The environment of the child: it imports this very tether."""
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


async def _read_lines(stream: trio.abc.ReceiveStream) -> list[str]:
    """Lines from *stream* until a ``stored`` line count reaches KILL_AFTER, or EOF."""
    buffer = b""
    lines: list[str] = []
    stored = 0
    while stored < KILL_AFTER:
        chunk = await stream.receive_some()
        if not chunk:
            break
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for raw in complete:
            line = raw.decode("utf-8", "replace")
            lines.append(line)
            if line.startswith("stored "):
                stored += 1
                if stored == KILL_AFTER:
                    break  # what the child printed after this is not read
    return lines


def _count_effects(path: Path) -> tuple[Counter[str], Counter[str]]:
    """Executions per step label: (in the child, in this process)."""
    child: Counter[str] = Counter()
    here: Counter[str] = Counter()
    me = str(os.getpid())
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            pid, label = line.split(" ", 1)
            (here if pid == me else child)[label] += 1
    return child, here


async def _crash_chapter(db: Path, effects: Path, out: TextIO, claims: _Claims) -> None:
    print(
        "\n4. a child process runs fulfil o-3 (6 boxes to pack, then a courier) and is\n"
        f"   killed with SIGKILL once it reports {KILL_AFTER} steps stored; this process resumes.",
        file=out,
        flush=True,
    )
    command = [sys.executable, "-m", "tether", "demo", "--child", str(db), str(effects)]
    reported: list[str] = []
    returncode: int | None = None
    with trio.move_on_after(60):  # a watchdog, should the child never report
        async with trio.open_nursery() as nursery:
            start = partial(
                trio.run_process,
                command,
                stdout=subprocess.PIPE,
                check=False,
                env=_child_env(),
            )
            proc: trio.Process = await nursery.start(start)
            assert proc.stdout is not None
            lines = await _read_lines(proc.stdout)
            for line in lines:
                print(f"   child {proc.pid}: {line}", file=out, flush=True)
            reported = [line.split()[1] for line in lines if line.startswith("stored ")]
            proc.send_signal(signal.SIGKILL)
            print(f"   SIGKILL sent to child {proc.pid}", file=out, flush=True)
        returncode = proc.returncode
    claims.check(
        returncode == -signal.SIGKILL and len(reported) == KILL_AFTER,
        f"the child was killed by SIGKILL after reporting {KILL_AFTER} steps stored "
        f"(exit status {returncode})",
    )
    if returncode is None:
        return  # the watchdog fired: the child never reported; there is no story to resume

    async with open_engine(_sqlite_store(db)) as engine:
        info = await engine.get_run("o-3")
        survived = [] if info is None else [e.key for e in info.entries]
        print(f"   journal in the SQLite file after the kill: {survived}", file=out)
        claims.check(
            info is not None and set(reported) <= set(survived),
            "every checkpoint the child reported stored is in the file",
        )
        print("   resuming o-3 in this process, watching its live events:", file=out, flush=True)
        async with engine.open_resume("o-3") as run:
            async for event in run.events():
                print(f"   {describe_event(event)}", file=out, flush=True)
            result = await run.result()

    child, here = _count_effects(effects)
    labels = [f"pack#{box}" for box in range(BOXES)] + ["book_courier#0"]
    print(
        f"\n   {'step':<16}{'child':>6}{'resume':>8}  (executions, from the steps' side effects)",
        file=out,
    )
    for label in labels:
        mark = "  stored before the kill" if label in survived else ""
        print(f"   {label:<16}{child[label]:>6}{here[label]:>8}{mark}", file=out)
    claims.check(
        all(child[k] == 1 and here[k] == 0 for k in survived),
        "no step stored before the kill ran again",
    )
    claims.check(
        all(child[k] + here[k] >= 1 for k in labels) and result == f"COURIER-{BOXES}",
        "every step ran and the run completed",
    )


async def _story(db: Path, effects: Path, out: TextIO) -> list[str]:
    print(f"tether demo: orders run durably (store: SQLite, {db})", file=out)
    claims = _Claims(out)
    await _checkout_chapters(db, out, claims)
    await _crash_chapter(db, effects, out, claims)
    return claims.broken


def main(out: TextIO | None = None, *, db: Path | None = None) -> int:
    """Run the demo; returns the process exit status (0: every promise held).

    Args:
        out: where to tell the story (default: standard output).
        db: the SQLite file to create and keep; default a temporary one.
    """
    out = out or sys.stdout
    executions.clear()
    stock.clear()
    if db is not None and db.exists():
        print(
            f"tether demo: {db} exists; the demo writes a new store (remove it or pick another)",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="tether-demo-") as tmp:
        path = db if db is not None else Path(tmp) / "demo.db"
        effects = Path(tmp) / "effects.txt"
        _effects[:] = [effects]
        broken = trio.run(_story, path, effects, out)
    if broken:
        print(f"\nBROKEN PROMISES ({len(broken)}):", file=out)
        for text in broken:
            print(f"  - {text}", file=out)
        return 1
    print("\ndone: every promise held.", file=out)
    if db is not None:
        print(f"inspect the runs: tether runs list --store sqlite:{db}", file=out)
    else:
        print("keep the store with --db PATH, then: tether runs list --store sqlite:PATH", file=out)
    return 0


# -- the child of chapter 4 -------------------------------------------------------------


@attrs.define
class _Reporter:
    """Tells the parent, one line each, which checkpoints are stored."""

    out: TextIO

    async def on_checkpoint(self, event: HookEvent) -> None:
        print(f"stored {event.key}", file=self.out, flush=True)


async def _child(db: Path, out: TextIO) -> None:
    async with open_engine(_sqlite_store(db), hooks=[_Reporter(out)]) as engine:
        result = await engine.run(fulfil, "o-3", run_id="o-3")
        print(f"completed {result}", file=out, flush=True)


def child_main(db: Path, effects: Path, out: TextIO | None = None) -> int:
    """The child process of chapter 4: run fulfil o-3 until killed."""
    _effects[:] = [effects]
    trio.run(_child, db, out or sys.stdout)
    return 0
