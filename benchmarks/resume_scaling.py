"""Time to load and replay a run's journal, by journal size and by store size.

Run: ``python benchmarks/resume_scaling.py [--quick]``

Part 1, journal size. For N = 100, 1k, 10k and 100k journal entries (``--quick``:
up to 1k), a run of the workflow ``repeat(N)``, which awaits one step N
times, is written straight into each store (``store.create_run`` and
``store.append`` of the N entries the engine would have journaled, in
batches of 1000; not timed). Then two things are timed, each the median of
several repeats:

* ``load``: ``store.load_entries(run_id)``, the store's read alone;
* ``resume``: ``engine.resume(run_id)``: claiming the run, reading its
  journal, re-executing the workflow with all N steps replayed from the
  journal (none executes: checked), and storing its outcome. The workflow
  ends by asking for a response (``tether.ask``) that nobody gives, so each
  resume replays everything and pauses again: the next repeat resumes the
  same run, with nothing written around the engine.

The per-entry cost is ``(T(N) - T(0)) / N``, with T(0) the same operation
on a run with an empty journal (a fixed cost: reading the run record,
storing the pause). Constant per-entry cost across N means linear
scaling. ``MemoryStore`` is the baseline: ``vs memory`` divides a store's
resume time by MemoryStore's at the same N. The FileStore (one fsynced file
per entry) is capped at 10k entries: writing 100k files takes minutes.

Part 2, store size: ``engine.get_run(run_id)`` (run record and journal) of
one run with 100 entries, in a store that holds only that run and in one
that also holds 10k other runs (``--quick``: 1k), each with one entry.
A flat ratio means the load does not scan the other runs.

Timing is reported, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import attrs
import trio

import tether
from _env import print_environment

try:  # the codec's home since the package was laid out in layers
    from tether._codec._values import codec, digest
except ImportError:  # an older tree, which regression.py measures with this same file
    from tether._codec import codec, digest  # type: ignore[no-redef]
from tether.stores import Entry, RunRecord, RunStatus, Store, utcnow

BATCH = 1000  # entries per store.append while populating
FILE_CAP = 10_000  # most entries written to a FileStore
TARGET = "flat per-entry cost (linear) and a flat load time with 10k other runs"

executed = 0  # step executions: replay must leave it at 0


@tether.step(name="inc")
async def inc(i: int) -> int:
    global executed
    executed += 1
    return i + 1


@tether.workflow(name="benchmarks.resume_scaling.repeat")
async def repeat(n: int) -> int:
    total = 0
    for i in range(n):
        total += await inc(i)
    # Never answered: every resume replays the journal and pauses here again.
    await tether.ask({"total": total}, bool)
    return total


# -- stores --------------------------------------------------------------------------------


@attrs.frozen
class Kind:
    name: str
    make: Callable[[Path], Store]  # a fresh store under this directory
    cap: int | None = None  # most entries to write to it


def _file_store(tmp: Path) -> Store:
    folder = tmp / "files"
    folder.mkdir()
    return tether.FileStore(folder)


KINDS = (
    Kind("memory", lambda tmp: tether.MemoryStore()),
    Kind("sqlite", lambda tmp: tether.SQLiteStore(tmp / "runs.db")),
    Kind("file", _file_store, cap=FILE_CAP),
)


def journal(run_id: str, n: int) -> list[Entry]:
    """The entries the engine journals for ``repeat(n)``: keys, digests and values alike."""
    now = utcnow()
    out = []
    for i in range(n):
        what = f"step inc#{i} of run {run_id!r}"
        out.append(
            Entry(
                run_id=run_id,
                key=f"inc#{i}",
                value=json.dumps(i + 1),
                args_digest=digest(codec.encode_args((i,), {}, what=what)),
                started_at=now,
                finished_at=now,
            )
        )
    return out


def record(run_id: str, n: int) -> RunRecord:
    now = utcnow()
    return RunRecord(
        run_id=run_id, workflow=repeat.name, args=json.dumps([n]), created_at=now, updated_at=now
    )


async def populate(store: Store, run_id: str, n: int) -> None:
    await store.create_run(record(run_id, n))
    entries = journal(run_id, n)
    for start in range(0, n, BATCH):
        await store.append(run_id, entries[start : start + BATCH])


async def populate_many(store: Store, count: int, width: int = 50) -> None:
    """*count* runs of one entry each, *width* at a time (a group commit can batch them)."""
    ids = iter(range(count))

    async def worker() -> None:
        for i in ids:
            await populate(store, f"other-{i:06d}", 1)

    async with trio.open_nursery() as nursery:
        for _ in range(width):
            nursery.start_soon(worker)


async def timed(fn: Callable[[], Awaitable[object]], repeats: int) -> float:
    """Median seconds of *repeats* calls."""
    samples = []
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


# -- part 1 --------------------------------------------------------------------------------


@attrs.frozen
class Row:
    kind: str
    n: int
    load: float  # seconds
    resume: float


async def measure_sizes(kind: Kind, tmp: Path, sizes: tuple[int, ...]) -> list[Row]:
    rows = []
    store = kind.make(tmp)
    async with tether.open_engine(store) as engine:
        for n in (0, *sizes):
            if kind.cap is not None and n > kind.cap:
                continue
            run_id = f"run-{n}"
            await populate(store, run_id, n)
            repeats = 3 if n >= 10_000 else 7

            async def load(run_id: str = run_id, n: int = n) -> None:
                assert len(await store.load_entries(run_id)) == n

            load_s = await timed(load, repeats)
            samples = []
            for _ in range(repeats):
                gc.collect()
                t0 = time.perf_counter()
                try:
                    await engine.resume(run_id)
                except tether.Paused as paused:
                    asked = paused.requests[0].payload
                samples.append(time.perf_counter() - t0)
                assert asked == {"total": n * (n + 1) // 2}, (run_id, asked)
                stored = await store.get_run(run_id)
                assert stored is not None and stored.status is RunStatus.PAUSED
            assert executed == 0, f"{executed} steps executed: the replay did not replay"
            rows.append(Row(kind.name, n, load_s, statistics.median(samples)))
            print(f"  measured {kind.name} N={n}", flush=True)
    return rows


def print_sizes(rows: list[Row], sizes: tuple[int, ...]) -> list[str]:
    cols = (
        f"{'store':<7} {'entries':>8} {'load ms':>9} {'load us/entry':>14} "
        f"{'resume ms':>10} {'resume us/entry':>16} {'vs memory':>10}"
    )
    print(cols)
    print("-" * len(cols))
    by = {(r.kind, r.n): r for r in rows}
    summary = []
    for kind in KINDS:
        zero = by[(kind.name, 0)]
        per_entry: dict[int, float] = {}
        for n in sizes:
            row = by.get((kind.name, n))
            if row is None:
                print(f"{kind.name:<7} {n:>8,} {'(not run: FileStore capped at 10k entries)':>71}")
                continue
            load_us = max(0.0, (row.load - zero.load) / n * 1e6)  # noise can dip below 0
            resume_us = (row.resume - zero.resume) / n * 1e6
            per_entry[n] = resume_us
            base = by[("memory", n)].resume
            print(
                f"{kind.name:<7} {n:>8,} {row.load * 1e3:>9.2f} {load_us:>14.2f} "
                f"{row.resume * 1e3:>10.2f} {resume_us:>16.2f} {row.resume / base:>9.1f}x",
                flush=True,
            )
        fixed = f"{zero.load * 1e3:>9.2f} {'':>14} {zero.resume * 1e3:>10.2f}"
        print(f"{kind.name:<7} {'T(0)':>8} {fixed}")
        ns = sorted(per_entry)
        first, last = ns[1] if len(ns) > 2 else ns[0], ns[-1]
        growth = per_entry[last] / per_entry[first]
        verdict = "linear" if growth < 1.5 else "NOT linear"
        summary.append(
            f"{kind.name}: resume costs {per_entry[first]:.1f} us/entry at {first:,} entries, "
            f"{per_entry[last]:.1f} at {last:,} ({growth:.2f}x: {verdict})"
        )
    print(
        "load = store.load_entries; resume = engine.resume, every step replayed;\n"
        "us/entry = (T(N) - T(0)) / N; vs memory = resume time / MemoryStore's at the same N"
    )
    return summary


# -- part 2 --------------------------------------------------------------------------------


async def measure_crowd(kind: Kind, tmp: Path, others: int, repeats: int) -> tuple[float, float]:
    """Seconds to get_run a 100-entry run: (alone in the store, among *others* runs)."""
    out = []
    for crowd in (0, others):
        folder = tmp / f"crowd-{crowd}"
        folder.mkdir()
        store = kind.make(folder)
        async with tether.open_engine(store) as engine:
            await populate_many(store, crowd)
            await populate(store, "target", 100)

            async def load() -> None:
                info = await engine.get_run("target")
                assert info is not None and len(info.entries) == 100

            await load()  # warm up (reader connections, caches)
            out.append(await timed(load, repeats))
        print(f"  measured {kind.name} with {crowd:,} other runs", flush=True)
    return out[0], out[1]


async def main(quick: bool) -> None:
    sizes = (100, 1000) if quick else (100, 1000, 10_000, 100_000)
    others = 1000 if quick else 10_000
    repeats = 5 if quick else 21
    print("tether benchmark: resume (load + replay) by journal size and by store size")
    print(
        "measures: store.load_entries and engine.resume of a run with N entries, all\n"
        "          replayed; engine.get_run of one run among many; MemoryStore baseline"
    )
    print_environment(quick)
    print(f"target:   {TARGET}")
    print()
    rows: list[Row] = []
    crowd: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as name:
        tmp = Path(name)
        for kind in KINDS:
            folder = tmp / f"sizes-{kind.name}"
            folder.mkdir()
            rows += await measure_sizes(kind, folder, sizes)
        for kind in KINDS:
            folder = tmp / f"crowd-{kind.name}"
            folder.mkdir()
            crowd[kind.name] = await measure_crowd(kind, folder, others, repeats)
    print()
    print("part 1: resume by journal size (median of 7 repeats, 3 from 10k entries)")
    summary = print_sizes(rows, sizes)
    print()
    print(f"part 2: engine.get_run of a 100-entry run, alone vs among {others:,} other runs")
    cols = f"{'store':<7} {'alone ms':>9} {f'with {others:,} ms':>14} {'ratio':>7}"
    print(cols)
    print("-" * len(cols))
    for kind in KINDS:
        alone, among = crowd[kind.name]
        print(f"{kind.name:<7} {alone * 1e3:>9.3f} {among * 1e3:>14.3f} {among / alone:>6.2f}x")
    print(f"median of {repeats}; ratio = with others / alone (1.00x = flat)")
    print()
    for line in summary:
        print(line)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="up to 1k entries: a smoke run")
    ns = parser.parse_args()
    trio.run(main, ns.quick)
