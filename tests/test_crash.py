"""Durable stores survive SIGKILL and concurrent processes.

- Two processes appending to one SQLite file, or one FileStore folder, at
  once lose no record: every entry is kept, seqs are distinct and gapless.
- A process running a 50-step fan-out workflow is SIGKILLed at a random
  moment (fixed seeds, 20 times per store); the store then opens cleanly, a
  resume completes with the uninterrupted result, and the side-effect log the
  steps append to shows that no step whose record was stored ran again.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import trio

import tether
from tether.stores import RunStatus, Store

from . import _crash_workflow as crash
from ._cli import tether_env

HERE = Path(__file__).resolve().parent
KILLS = 20


def location(kind: str, folder: Path) -> str:
    return str(folder / ("store.db" if kind == "sqlite" else "store"))


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_two_processes_appending_at_once_lose_nothing(kind: str, tmp_path: Path) -> None:
    where = location(kind, tmp_path)
    store = crash.open_store(kind, where)
    n = 60

    async def create() -> None:
        async with tether.open_engine(store):
            now = tether.stores.utcnow()
            await store.create_run(
                tether.stores.RunRecord(
                    run_id="shared", workflow="w", args="[]", created_at=now, updated_at=now
                )
            )

    trio.run(create)
    workers = [
        subprocess.Popen(
            [sys.executable, str(HERE / "_store_worker.py"), kind, where, "shared", name, str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    try:
        for w in workers:
            assert w.stdout is not None and w.stdout.readline() == "ready\n"
        for w in workers:  # both start appending at the same moment
            assert w.stdin is not None
            w.stdin.write("go\n")
            w.stdin.close()
        for w in workers:
            assert w.wait(timeout=120) == 0
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
            for pipe in (w.stdin, w.stdout):
                if pipe is not None:
                    pipe.close()

    async def load() -> list[tether.stores.Entry]:
        async with tether.open_engine(store):
            return list(await store.load_entries("shared"))

    entries = trio.run(load)
    assert [e.seq for e in entries] == list(range(1, 2 * n + 1))
    assert sorted(e.key for e in entries) == sorted(f"{w}#{i}" for w in "ab" for i in range(n))
    # Each process's own entries are in its own order.
    for name in "ab":
        mine = [int(e.key.split("#")[1]) for e in entries if e.key.startswith(f"{name}#")]
        assert mine == list(range(n))


def _journal_and_result(store: Store) -> tuple[set[str], int]:
    """What the killed process left stored; then resume it here to completion."""

    async def main() -> tuple[set[str], int]:
        await store.open()
        try:
            stored = {e.key for e in await store.load_entries(crash.RUN_ID)}
            record = await store.get_run(crash.RUN_ID)
            assert record is None or record.status in (RunStatus.RUNNING, RunStatus.COMPLETED)
        finally:
            await store.close()
        result = await crash.run_to_completion(store)
        return stored, result

    return trio.run(main)


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "seed"), [("sqlite", 1), ("file", 2)])
def test_sigkill_at_a_random_moment_loses_nothing_and_repeats_nothing(
    kind: str, seed: int, tmp_path: Path
) -> None:
    rng = random.Random(seed)
    crash.log_path[:] = [tmp_path / "unused.log"]

    def start(folder: Path) -> tuple[subprocess.Popen[str], str, Path]:
        folder.mkdir()
        where, log = location(kind, folder), folder / "effects.log"
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "_crash_workflow.py"), kind, where, str(log)],
            stdout=subprocess.PIPE,
            text=True,
            env=tether_env(),  # (it imports tests._scripts)
        )
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        return proc, where, log

    # An uninterrupted run: its result, and how long the run itself takes.
    proc, _, log = start(tmp_path / "baseline")
    began = time.monotonic()
    assert proc.stdout is not None
    result_line = proc.stdout.readline()
    duration = time.monotonic() - began
    proc.communicate(timeout=120)
    assert proc.returncode == 0 and int(result_line) == crash.EXPECTED
    assert Counter(log.read_text().split()) == {f"work#{i}": 1 for i in range(50)}

    partial = 0
    for attempt in range(KILLS):
        proc, where, log = start(tmp_path / f"kill-{attempt}")
        time.sleep(rng.uniform(0, duration))
        proc.kill()
        proc.communicate()
        before = Counter(log.read_text().split()) if log.exists() else Counter()

        crash.log_path[:] = [log]
        stored, result = _journal_and_result(crash.open_store(kind, where))
        assert result == crash.EXPECTED, f"attempt {attempt}"
        after = Counter(log.read_text().split())
        for key in stored:  # stored before the kill: never ran again
            assert after[key] == before[key] == 1, f"attempt {attempt}: {key} ran again"
        for i in range(50):  # everything ran; nothing ran more than once per process
            assert 1 <= after[f"work#{i}"] <= 2, f"attempt {attempt}: work#{i}"
        partial += 0 < len(stored) < 50
    print(f"{kind}: {partial} of {KILLS} kills landed mid-run")
    assert partial >= KILLS // 4, f"only {partial} kills landed mid-run"
