"""What the group-committing writers (SQLite's and PostgreSQL's) share about their jobs.

Layer: stores (``tether.stores``).

Each writer is one thread that takes the jobs queued for it in batches and
commits a batch in one transaction (:mod:`._sqlite_writer`,
:mod:`._postgres_writer`). The mechanics around the transaction are the
same for both and live here: a job's states (a caller who leaves withdraws
a pending job; the thread takes only pending ones), taking a batch off the
queue, and handing the results back, with one callback into each Trio run
that waits for some of them.
"""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol, TypeVar

import trio

__all__ = ("PENDING", "TAKEN", "WITHDRAWN", "Job", "drain", "hand_back", "take_pending")

#: A job's states, guarded by the lock of the writer's connections.
PENDING: Final = 0  #: queued, not taken yet
TAKEN: Final = 1  #: in the writer's batch: it may commit
WITHDRAWN: Final = 2  #: its caller left before the writer took it: never stored


class Job(Protocol):
    """What the shared mechanics use of a writer's job."""

    token: trio.lowlevel.TrioToken  #: the Trio run of the task waiting for it
    state: int  #: :data:`PENDING`, :data:`TAKEN` or :data:`WITHDRAWN`
    result: Any
    error: BaseException | None


J = TypeVar("J", bound=Job)


def drain(
    jobs: queue.SimpleQueue[J | None], first: J | None, *, more: bool
) -> tuple[list[J], bool]:
    """*first* and, with *more*, every job queued right now; and whether a stop came.

    ``None`` on the queue asks the writer to stop: nothing after it is taken.
    Never blocks (the writer's thread blocks for *first*).
    """
    if first is None:
        return [], True
    batch = [first]
    while more:
        try:
            job = jobs.get_nowait()
        except queue.Empty:
            break
        if job is None:
            return batch, True
        batch.append(job)
    return batch, False


def take_pending(batch: list[J]) -> list[J]:
    """The jobs of *batch* still pending, now taken (call it holding the states' lock)."""
    taken = [job for job in batch if job.state == PENDING]
    for job in taken:
        job.state = TAKEN
    return taken


def hand_back(
    jobs: list[J],
    results: Sequence[tuple[Any, BaseException | None]],
    wake: Callable[[list[J]], object],
) -> None:
    """Give each of *jobs* its result, then call ``wake(waiters)`` once in each Trio run that
    waits for some of them (from the writer's thread: ``run_sync_soon``).

    When that run is gone, nobody waits for its jobs.
    """
    by_token: dict[trio.lowlevel.TrioToken, list[J]] = {}
    for job, (result, error) in zip(jobs, results, strict=True):
        job.result, job.error = result, error
        by_token.setdefault(job.token, []).append(job)
    for token, waiters in by_token.items():
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(wake, waiters)
