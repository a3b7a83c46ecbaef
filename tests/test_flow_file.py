"""FileStore's ``submit_run`` across processes: the queue's ``flock`` keeps the rules.

The conformance checks race submits in one process (threads); here OS
processes sharing one directory race them: one dedupe id gives one run, and
a queue's ``max_queued`` holds. And the lock's edges: a submit waiting for
another process's queue lock is withdrawn by its caller's deadline, having
stored nothing, while a plain submit (no dedupe id, no ``max_queued``) takes
no lock at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

from tether.stores import RunStatus, Submission

from .test_file_store_cancel import cut_short, locked_by_another_process, opened, record

#: One racing process: opens the store, says ``ready``, waits for a line on stdin, then
#: makes *count* submits at once (trio tasks, each in a thread of the store) and prints
#: what each returned (``null``: QueueFullError).
_RACER = """
import json, sys
import trio
import tether
from tether.stores import RunRecord, RunStatus, Submission, utcnow

directory, name, count, dedupe, max_queued = sys.argv[1:]

async def main():
    store = tether.FileStore(directory)
    await store.open()
    got = []

    async def submit(n):
        now = utcnow()
        record = RunRecord(
            run_id=f"{name}-{n}", workflow="w", args="[]", status=RunStatus.QUEUED,
            created_at=now, updated_at=now, queue="q", dedupe=dedupe or None,
        )
        try:
            got.append(await store.submit_run(Submission(record, max_queued=max_queued)))
        except tether.QueueFullError:
            got.append(None)

    print("ready", flush=True)
    await trio.to_thread.run_sync(sys.stdin.readline)
    async with trio.open_nursery() as nursery:
        for n in range(int(count)):
            nursery.start_soon(submit, n)
    await store.close()
    print(json.dumps(got), flush=True)

max_queued = int(max_queued) if max_queued else None
trio.run(main)
"""

_PROCESSES = 4
_EACH = 4


def race(directory: Path, *, dedupe: str = "", max_queued: int | None = None) -> list[Any]:
    """What every submit of :data:`_PROCESSES` racing processes returned."""
    argv = [str(directory), "", str(_EACH), dedupe, "" if max_queued is None else str(max_queued)]
    procs = []
    try:
        for n in range(_PROCESSES):
            argv[1] = f"p{n}"
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", _RACER, *argv],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        for proc in procs:  # all have opened the store: start them together
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        got: list[Any] = []
        for proc in procs:
            out, _ = proc.communicate(timeout=60)
            assert proc.returncode == 0, f"a racing process failed: {out}"
            got.extend(json.loads(out))
        return got
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


async def test_processes_racing_submits_of_one_dedupe_id_make_one_run(tmp_path: Path) -> None:
    got = await trio.to_thread.run_sync(lambda: race(tmp_path, dedupe="once"))
    async with opened(tmp_path) as store:
        runs = [r.run_id for r in await store.list_runs()]
    assert len(runs) == 1, f"{_PROCESSES * _EACH} racing submits of one dedupe id stored {runs}"
    assert set(got) == set(runs), f"racing submits returned {got}, stored {runs}"


async def test_processes_racing_for_the_last_places_of_a_queue_store_max_queued(
    tmp_path: Path,
) -> None:
    got = await trio.to_thread.run_sync(lambda: race(tmp_path, max_queued=5))
    async with opened(tmp_path) as store:
        runs = sorted(r.run_id for r in await store.list_runs())
    assert len(runs) == 5, f"{_PROCESSES * _EACH} racing submits, max_queued 5: stored {runs}"
    assert sorted(g for g in got if g is not None) == runs, f"returned {got}, stored {runs}"


async def test_a_submit_waiting_for_another_processs_queue_lock_is_withdrawn(
    tmp_path: Path,
) -> None:
    def submit(run_id: str, **kw: Any) -> Submission:
        return Submission(record(run_id, status=RunStatus.QUEUED, queue="q", **kw))

    async with opened(tmp_path) as store:
        assert await store.submit_run(submit("first", dedupe="a")) == "first"
        with locked_by_another_process(tmp_path / ".queues" / "q"):
            # It would poll for the queue's lock for 10 s; the caller leaves at its deadline.
            await cut_short(lambda: store.submit_run(submit("second", dedupe="b")))
            # A plain submit reads nothing, so it takes no lock.
            with trio.fail_after(5):
                assert await store.submit_run(submit("plain")) == "plain"
        await store.close()  # a thread still waiting for the lock would take it now
    async with opened(tmp_path) as store:
        assert await store.get_run("second") is None, "a withdrawn submit stored its run"
        assert await store.submit_run(submit("second", dedupe="b")) == "second"
        assert await store.submit_run(submit("third", dedupe="a")) == "first"
