"""The workflows benchmarks/postgres.py submits, and the worker process of its part 2.

Imported by the benchmark (which submits and waits) and by its worker
processes: ``tether worker --import _postgres_flows`` (part 1, run with this
directory as the current one) and ``python _postgres_flows.py`` (part 2), a
worker on a :class:`WithoutWatch` store or on the plain one, so that the
notifications are the only difference between the two.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime

import trio

import tether
from tether.stores import Entry, Renewal, RunRecord, RunStatus, Store

STEPS = 10  # sequential steps per run of `ten_steps`


@tether.step(name="bench_pg.add")
async def add(total: int, i: int) -> int:
    return total + i


@tether.workflow(name="benchmarks.postgres.ten_steps")
async def ten_steps(start: int) -> int:
    """STEPS trivial sequential steps (part 1): returns start + 0 + 1 + ... + STEPS - 1."""
    total = start
    for i in range(STEPS):
        total = await add(total, i)
    return total


@tether.step(name="bench_pg.now")
async def now() -> float:
    return time.time()  # wall clock: comparable across the processes of one machine


@tether.workflow(name="benchmarks.postgres.started")
async def started(i: int) -> float:
    """One step that returns the time it started (part 2)."""
    return await now()


class WithoutWatch:
    """*inner* without ``watch()``: waiters and workers on it only poll.

    Every other method is the wrapped store's, unchanged (``open_engine``
    starts a change listener only for a store that has ``watch``).
    Subclassed by the benchmark's part 3 to change ``append``.
    """

    def __init__(self, inner: tether.PostgresStore) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"WithoutWatch({self.inner!r})"

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    async def create_run(self, record: RunRecord) -> None:
        await self.inner.create_run(record)

    async def update_run(self, record: RunRecord) -> RunRecord:
        return await self.inner.update_run(record)

    async def get_run(self, run_id: str) -> RunRecord | None:
        return await self.inner.get_run(run_id)

    async def list_runs(
        self,
        *,
        status: Collection[RunStatus] | None = None,
        workflow: str | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> Sequence[RunRecord]:
        return await self.inner.list_runs(
            status=status, workflow=workflow, after=after, limit=limit
        )

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        return await self.inner.append(run_id, entries)

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        return await self.inner.load_entries(run_id)

    async def claim(
        self,
        run_id: str,
        owner: str,
        *,
        ttl: float,
        create: RunRecord | None = None,
        takeover: int | None = None,
    ) -> RunRecord:
        return await self.inner.claim(run_id, owner, ttl=ttl, create=create, takeover=takeover)

    async def claim_next(
        self,
        owner: str,
        *,
        ttl: float,
        workflows: Collection[str],
        max_dispatches: int,
        gone: Collection[str] = (),
        now: datetime | None = None,
    ) -> RunRecord | None:
        return await self.inner.claim_next(
            owner, ttl=ttl, workflows=workflows, max_dispatches=max_dispatches, gone=gone, now=now
        )

    async def renew(self, owner: str, *, ttl: float, held: Mapping[str, int]) -> Renewal:
        return await self.inner.renew(owner, ttl=ttl, held=held)

    async def cancel_run(self, run_id: str, *, takeover: int | None = None) -> RunRecord:
        return await self.inner.cancel_run(run_id, takeover=takeover)


async def serve(conninfo: str, schema: str, *, notify: bool, concurrency: int, poll: float) -> None:
    """A worker on *schema* until SIGTERM or SIGINT; prints ``ready`` once it claims."""
    pg = tether.PostgresStore(conninfo, schema=schema)
    store: Store = pg if notify else WithoutWatch(pg)
    watched: Callable[..., object] | None = getattr(store, "watch", None)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with (
            tether.open_engine(store) as engine,
            tether.open_worker(engine, concurrency=concurrency, poll_interval=poll),
        ):
            print(f"ready (watch: {watched is not None})", flush=True)
            async for _ in signals:
                break


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="a worker process for benchmarks/postgres.py")
    parser.add_argument("conninfo")
    parser.add_argument("schema")
    parser.add_argument("--polling-only", action="store_true", help="a store without watch()")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--poll-interval", type=float, default=1.0)
    ns = parser.parse_args()
    trio.run(
        lambda: serve(
            ns.conninfo,
            ns.schema,
            notify=not ns.polling_only,
            concurrency=ns.concurrency,
            poll=ns.poll_interval,
        )
    )
    sys.exit(0)
