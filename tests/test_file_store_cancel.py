"""FileStore under a caller's deadline while the file system blocks: the caller is prompt.

Two real blocks, in real time (the bounds are generous: a block lasts 10 s or
more, a prompt caller returns in well under 1 s):

- another process holds the run's ``flock`` (a write would poll for it for
  ``LOCK_TIMEOUT`` = 10 s): the cancelled call returns at once and its
  thread withdraws, having written nothing;
- ``os.fsync`` hangs in the worker thread (:class:`HungDisk`, a disk that
  stops answering): the cancelled call returns at once, its thread is
  abandoned in the middle of its write and, once released, lands it whole;
  ``close()`` waits for it (and gives up, naming it, after its bound), and
  a resume afterwards finds what it wrote.

Then what abandoning leaves: a claim or a worker's claim that lands after
its caller gave up leaves a run that is taken again; a late thread never
refills the caches of a later ``open()``; the torn-write simulation does not
wait for an abandoned append; the threads use a limiter of the store's own;
and ``tether.bench.bench_cancel`` finds no bug on a FileStore, with a
hanging fault and with a disk that hangs.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import tether
from tether.bench import bench_cancel
from tether.stores import Entry, RunRecord, RunStatus, utcnow
from tether.testing import Call, Crash, Do, FaultyStore, Hang, SimulatedCrash

NOW = utcnow()
_real_fsync = os.fsync


def entry(key: str, run_id: str = "r") -> Entry:
    return Entry(run_id=run_id, key=key, value='{"n":1}', started_at=NOW, finished_at=NOW)


def record(run_id: str = "r", **kw: Any) -> RunRecord:
    return RunRecord(run_id=run_id, workflow="w", args="[]", created_at=NOW, updated_at=NOW, **kw)


class HungDisk:
    """``os.fsync`` in a worker thread, once armed: it hangs until released (or *hold* s).

    Armed for one fsync: the first worker thread that reaches one (in the middle
    of a write: its temporary file is written, not yet published) waits there.
    A caller that got control back while the fsync still hangs (``reached`` set,
    ``done`` not) did not wait for its write: it was prompt, whatever the clock.
    """

    def __init__(self, hold: float = 30.0) -> None:
        self.hold = hold
        self.armed = False
        self.reached = threading.Event()
        self.release = threading.Event()
        self.done = threading.Event()  # the hung fsync went on

    def arm(self) -> None:
        self.reached.clear()
        self.done.clear()
        self.armed = True

    def fsync(self, fd: int) -> None:
        if self.armed and threading.current_thread() is not threading.main_thread():
            self.armed = False
            self.reached.set()
            self.release.wait(self.hold)
            self.done.set()
        _real_fsync(fd)

    def hanging(self) -> bool:
        """The armed fsync was reached and still hangs."""
        return self.reached.is_set() and not self.done.is_set()


@pytest.fixture
def hung(monkeypatch: pytest.MonkeyPatch) -> Iterator[HungDisk]:
    disk = HungDisk()
    monkeypatch.setattr(os, "fsync", disk.fsync)
    try:
        yield disk
    finally:
        disk.release.set()  # a failed test leaves no thread waiting


@contextlib.asynccontextmanager
async def opened(directory: Path) -> AsyncIterator[tether.FileStore]:
    store = tether.FileStore(directory)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@contextlib.contextmanager
def locked_by_another_process(lock: Path) -> Iterator[None]:
    """Another process holds the ``flock`` of *lock* (a run's ``.lock``) inside the block."""
    code = (
        "import fcntl, sys\n"
        "f = open(sys.argv[1], 'a')\n"
        "fcntl.flock(f, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code, str(lock)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            assert proc.stdout.readline() == "held\n"
            yield
        finally:
            proc.stdin.close()  # the process reads to the end, exits, and its lock dies
            proc.wait(timeout=30)


async def cut_short(call: Callable[[], Awaitable[object]], *, deadline: float = 0.3) -> None:
    """Run ``call()`` under a deadline that must strike."""
    with trio.move_on_after(deadline) as scope:
        await call()
    assert scope.cancelled_caught, "the call returned before its deadline"


# -- another process holds the run's lock: the call is withdrawn -------------------------

CALLS: dict[str, Callable[[tether.FileStore], Awaitable[object]]] = {
    "append": lambda s: s.append("r", [entry("s#1")]),
    "update_run": lambda s: s.update_run(attrs.evolve(record(), status=RunStatus.PAUSED)),
    "claim": lambda s: s.claim("r", "w1", ttl=60),
    "claim_next": lambda s: s.claim_next("w1", ttl=60, workflows=["w"], max_dispatches=5),
    "cancel_run": lambda s: s.cancel_run("r"),
    "send_message": lambda s: s.send_message("r", "n", '"v"', now=NOW),
    "delete_run": lambda s: s.delete_run("r"),
}


@pytest.mark.parametrize("method", CALLS)
async def test_a_deadline_is_prompt_while_another_process_holds_the_runs_lock(
    tmp_path: Path, method: str
) -> None:
    async with opened(tmp_path) as store:
        await store.create_run(record(status=RunStatus.QUEUED))
        stored = await store.get_run("r")
        with locked_by_another_process(tmp_path / "r" / ".lock"):
            # The write would poll for the lock for 10 s; the caller leaves at its deadline.
            await cut_short(lambda: CALLS[method](store))
        # The lock is free now: a thread still waiting for it would take it and write,
        # and close() would wait for that.
        await store.close()
    # Nothing was written: the thread stopped waiting for the lock when its caller left.
    async with opened(tmp_path) as store:
        assert await store.get_run("r") == stored
        assert list(await store.load_entries("r")) == []
        assert list(await store.load_messages("r")) == []
        # And the store works on: the write, done again, lands once.
        (first,) = await store.append("r", [entry("s#1")])
        assert list(await store.load_entries("r")) == [first]


# -- the disk hangs in the middle of a write: the write lands whole, later ---------------


async def test_an_abandoned_append_lands_whole_and_close_waits_for_it(
    tmp_path: Path, hung: HungDisk
) -> None:
    store = tether.FileStore(tmp_path)
    await store.open()
    await store.create_run(record())
    hung.arm()
    await cut_short(lambda: store.append("r", [entry("s#1"), entry("s#2")]))
    assert hung.hanging()  # cut short in the middle of its write, which still hangs
    # Not published: readers see none of it, and the temporary file is all there is.
    assert list(await store.load_entries("r")) == []
    assert [p.name[:5] for p in (tmp_path / "r" / "entries").iterdir()] == [".tmp-"]
    closed = trio.Event()

    async def close() -> None:
        await store.close()
        closed.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(close)
        await trio.testing.wait_all_tasks_blocked()
        assert not closed.is_set(), "close() returned while an abandoned write was working"
        hung.release.set()
    # Landed whole, once released: both entries, in one file; a retry finds them.
    async with opened(tmp_path) as store:
        stored = list(await store.load_entries("r"))
        assert [(e.key, e.seq) for e in stored] == [("s#1", 1), ("s#2", 2)]
        again = list(await store.append("r", [entry("s#1"), entry("s#2")]))
        assert again == stored and list(await store.load_entries("r")) == stored


async def test_close_names_a_thread_that_never_ends_and_a_later_open_reads_afresh(
    tmp_path: Path, hung: HungDisk, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tether.stores._file_threads.CLOSE_TIMEOUT", 0.2)
    store = tether.FileStore(tmp_path)
    await store.open()
    await store.create_run(record())
    hung.arm()
    await cut_short(lambda: store.append("r", [entry("s#1")]))
    with pytest.raises(tether.StoreError, match=r"still running after 0\.2 s \(appending to run"):
        await store.close()
    assert hung.hanging()  # close() gave up on the thread, which still hangs
    with pytest.raises(tether.UsageError, match="is not open"):
        await store.get_run("r")  # closed all the same
    await store.open()  # a new session, while the old one's thread still hangs
    hung.release.set()
    # Another process appends once the late thread has released the run's lock (its
    # append waits for it). The late thread filled its own, dead session's caches.
    async with opened(tmp_path) as other:
        (theirs,) = await other.append("r", [entry("s#2")])
    assert "r" not in store._session.ids and "r" not in store._session.next
    # So this store reads the journal afresh, and finds the other process's entry.
    (again,) = await store.append("r", [entry("s#2")])
    assert again == theirs
    assert [e.key for e in await store.load_entries("r")] == ["s#1", "s#2"]
    await store.close()  # nothing left: the late thread ended


calls = [0]  # how many times first_step ran
#: the hung disks first_step arms, by name (a step's arguments are stored: a name is)
DISKS: dict[str, HungDisk] = {}


@tether.step(name="tests.file_cancel.first")
async def first_step(disk: str) -> int:
    calls[0] += 1
    if disk in DISKS:
        DISKS[disk].arm()  # the save of this step hangs in its fsync
    await trio.lowlevel.checkpoint()
    return 20


@tether.step(name="tests.file_cancel.second")
async def second_step(n: int) -> int:
    await trio.lowlevel.checkpoint()
    return n + 22


@tether.workflow(name="tests.file_cancel.two_steps")
async def two_steps(disk: str) -> int:
    return await second_step(await first_step(disk))


async def test_a_run_cut_short_in_a_hung_save_resumes_with_what_landed(
    tmp_path: Path, hung: HungDisk, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(DISKS, "hung", hung)
    calls[0] = 0
    async with tether.open_engine(tether.FileStore(tmp_path)) as engine:
        store = engine.store
        await cut_short(lambda: engine.run(two_steps, "hung", run_id="r"))
        assert hung.hanging()
        hung.release.set()
        # The resume waits for the run's lock until the late save landed, then replays it.
        assert await engine.resume("r") == 42
        assert calls[0] == 1, "the first step ran again: its late save was not found"
        assert [e.key for e in await store.load_entries("r")] == [
            "tests.file_cancel.first#0",
            "tests.file_cancel.second#0",
        ]


# -- late claims: the run is taken again -------------------------------------------------


@tether.workflow(name="tests.file_cancel.answer")
async def answer() -> int:
    await trio.lowlevel.checkpoint()
    return 42


async def test_a_claim_that_lands_after_its_caller_left_is_taken_again(
    tmp_path: Path, hung: HungDisk
) -> None:
    async with tether.open_engine(tether.FileStore(tmp_path)) as engine:
        store = engine.store
        await engine.submit(answer, run_id="r")
        hung.arm()  # the claim's write of run.json hangs, under the run's lock
        await cut_short(lambda: engine.run(answer, run_id="r"))
        assert hung.hanging()
        hung.release.set()
        # The same owner's next claim waits for the lock, sees the late claim, takes it.
        assert await engine.run(answer, run_id="r") == 42
        done = await store.get_run("r")
        assert done is not None and done.status is RunStatus.COMPLETED
        assert done.token == 2  # the abandoned claim took token 1: it landed


async def test_a_worker_claim_that_lands_after_its_caller_left_is_taken_again(
    tmp_path: Path, hung: HungDisk
) -> None:
    async with opened(tmp_path) as store:
        await store.create_run(record(status=RunStatus.QUEUED))
        hung.arm()
        await cut_short(lambda: store.claim_next("w1", ttl=60, workflows=["w"], max_dispatches=5))
        assert hung.hanging()
        hung.release.set()
        # Another worker that knows w1 is gone takes the run over (waiting for the lock
        # until the late claim landed: running under w1's live lease).
        taken = await store.claim_next("w2", ttl=60, workflows=["w"], max_dispatches=5, gone=["w1"])
        assert taken is not None and (taken.owner, taken.token) == ("w2", 2)
        # And w1's own next claim of the run sees it is no longer w1's.
        with pytest.raises(tether.RunConflictError):
            await store.claim("r", "w1", ttl=60)
        renewal = await store.renew("w1", ttl=60, held={"r": 1})
        assert renewal.lost == {"r"}


async def test_a_late_worker_claim_is_seen_by_its_owners_next_claim(
    tmp_path: Path, hung: HungDisk
) -> None:
    async with opened(tmp_path) as store:
        await store.create_run(record(status=RunStatus.QUEUED))
        hung.arm()
        await cut_short(lambda: store.claim_next("w1", ttl=60, workflows=["w"], max_dispatches=5))
        hung.release.set()
        mine = await store.claim("r", "w1", ttl=60)
        assert (mine.owner, mine.token, mine.status) == ("w1", 2, RunStatus.RUNNING)


# -- what else abandoning must not break -------------------------------------------------


async def test_the_torn_append_simulation_does_not_wait_for_an_abandoned_append(
    tmp_path: Path, hung: HungDisk
) -> None:
    async with opened(tmp_path) as store:
        await store.create_run(record())
        hung.arm()  # this append holds the run's thread lock while its fsync hangs
        await cut_short(lambda: store.append("r", [entry("s#1")]))
        faulty = FaultyStore(store)
        faulty.inject("append", Crash(torn=True))
        with pytest.raises(SimulatedCrash):
            await faulty.append("r", [entry("s#2")])
        assert hung.hanging()  # the event loop never waited for the abandoned append
        hung.release.set()
    async with opened(tmp_path) as store:
        assert [e.key for e in await store.load_entries("r")] == ["s#1"]  # landed whole
    # The torn file is left beside it, never read (the late append's own is gone).
    entries = tmp_path / "r" / "entries"
    assert len([p for p in entries.iterdir() if p.name.startswith(".tmp-")]) == 1


async def test_a_hung_thread_holds_a_slot_of_the_stores_limiter_not_trios(
    tmp_path: Path, hung: HungDisk
) -> None:
    async with opened(tmp_path) as store:
        await store.create_run(record())
        hung.arm()
        await cut_short(lambda: store.append("r", [entry("s#1")]))
        assert hung.reached.is_set()
        assert trio.to_thread.current_default_thread_limiter().borrowed_tokens == 0
        assert store._session.limiter.borrowed_tokens == 1
        assert await trio.to_thread.run_sync(lambda: 7) == 7
        hung.release.set()


# -- tether bench cancel on a FileStore --------------------------------------------------


@tether.step(name="tests.file_cancel.slow")
async def slow(n: int) -> int:
    await trio.sleep(0.05)
    return n


@tether.workflow(name="tests.file_cancel.slow_pair")
async def slow_pair() -> int:
    return await slow(1) + await slow(2)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["hang", "hung disk"])
async def test_bench_cancel_finds_no_bug_on_a_file_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    # The hung disk holds each append's fsync for 1 s; the deadline strikes after 0.2 s.
    disk = HungDisk(hold=1.0)
    monkeypatch.setattr(os, "fsync", disk.fsync)

    async def arm(call: Call) -> None:
        disk.arm()
        await trio.lowlevel.checkpoint()

    result = await bench_cancel(
        slow_pair,
        store=lambda: tether.FileStore(tmp_path / "bench"),
        fault=Hang() if fault == "hang" else Do(arm),
        at="append",
        samples=2,
        deadline=0.2,
        tolerance=0.25,
    )
    assert result.bugs == (), [f.message for f in result.bugs]
    for sample in result.samples:
        assert sample.fault_reached and sample.resumable
        assert sample.overshoot is not None  # cancelled by the deadline (judged: no bug)
        assert sample.threads_after_close == ()
    if fault == "hung disk":
        assert disk.reached.is_set()
