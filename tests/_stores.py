"""Small stores for tests: each saves in a different way.

All honour the Store contract that a cancelled ``append`` wrote nothing, so
an engine that lets framework cancellation reach a save loses the record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import trio

from tether.stores import Entry, MemoryStore, Renewal, RunRecord

SAVE_DELAY = 1.0


class _Wrapping:
    def __init__(self, inner: MemoryStore | None = None) -> None:
        self.inner = inner or MemoryStore()

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    async def create_run(self, record: RunRecord) -> None:
        await self.inner.create_run(record)

    async def update_run(self, record: RunRecord) -> RunRecord:
        return await self.inner.update_run(record)

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

    async def renew(self, owner: str, *, ttl: float, held: Mapping[str, int]) -> Renewal:
        return await self.inner.renew(owner, ttl=ttl, held=held)

    async def cancel_run(self, run_id: str, *, takeover: int | None = None) -> RunRecord:
        return await self.inner.cancel_run(run_id, takeover=takeover)

    async def get_run(self, run_id: str) -> RunRecord | None:
        return await self.inner.get_run(run_id)

    async def list_runs(self, **filters: Any) -> Sequence[RunRecord]:
        return await self.inner.list_runs(**filters)

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        return await self.inner.load_entries(run_id)


class InlineSlowStore(_Wrapping):
    """Saves in the calling task, taking SAVE_DELAY seconds."""

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        await trio.sleep(SAVE_DELAY)
        return await self.inner.append(run_id, entries)


class SpawningStore(_Wrapping):
    """Saves from a task it spawns in its own nursery; a cancelled waiter
    aborts its write (the write happens whole or not at all)."""

    def __init__(self, nursery: trio.Nursery) -> None:
        super().__init__()
        self._nursery = nursery

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        done = trio.Event()
        result: list[Sequence[Entry]] = []
        scope = trio.CancelScope()

        async def write() -> None:
            with scope:
                await trio.sleep(SAVE_DELAY)
                result.append(await self.inner.append(run_id, entries))
            done.set()

        self._nursery.start_soon(write)
        try:
            await done.wait()
        except BaseException:
            scope.cancel()
            raise
        if not result:
            raise AssertionError("write aborted")
        return result[0]


@attrs.define(eq=False)
class _Pending:
    run_id: str
    entries: Sequence[Entry]
    done: trio.Event = attrs.field(factory=trio.Event)
    stored: Sequence[Entry] = ()


class BatchingStore(_Wrapping):
    """Group commit: waiting saves are written together by a flusher task
    every SAVE_DELAY seconds; a waiter cancelled before the flush is
    withdrawn from the batch."""

    def __init__(self, nursery: trio.Nursery) -> None:
        super().__init__()
        self._pending: list[_Pending] = []
        self.batches: list[int] = []
        nursery.start_soon(self._flusher)

    async def _flusher(self) -> None:
        while True:
            await trio.sleep(SAVE_DELAY)
            batch, self._pending = self._pending, []
            if batch:
                self.batches.append(sum(len(p.entries) for p in batch))
            for p in batch:
                p.stored = await self.inner.append(p.run_id, p.entries)
                p.done.set()

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        pending = _Pending(run_id, entries)
        self._pending.append(pending)
        try:
            await pending.done.wait()
        except BaseException:
            if pending in self._pending:
                self._pending.remove(pending)
            raise
        return pending.stored
