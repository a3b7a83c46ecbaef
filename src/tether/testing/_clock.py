"""Keep a mock clock from jumping while a thread-backed store works.

Layer: testing (``tether.testing``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, TypeVar, cast, final

import outcome
import trio
import trio.testing

from ..stores._capabilities import Capability, capabilities_of
from ..stores._flow import Submission
from ..stores._mailbox import MailboxStore, Message
from ..stores._memory import MemoryStore
from ..stores._owners import Renewal, Served, WorkerAd
from ..stores._queue import Claimed
from ..stores._records import Entry, RunRecord
from ..stores._respond import RespondingStore
from ..stores._store import (
    AdvertisingStore,
    BatchClaimingStore,
    QueueingStore,
    Store,
    WorkerStore,
)

__all__ = ("ClockHoldingStore", "hold_clock")

T = TypeVar("T")

#: Real seconds of complete idleness after which the holder looks again; far
#: beyond any store call, and below Trio's longest I/O wait.
_CUSHION: Final = 600.0


async def _hold() -> None:
    # While a task waits in wait_all_tasks_blocked(), Trio's run loop wakes it
    # instead of autojumping a MockClock ("those tasks will wake up without
    # jumping the clock"), so virtual time stands still until we are cancelled.
    while True:
        await trio.testing.wait_all_tasks_blocked(cushion=_CUSHION)


def hold_clock(store: Store) -> Store:
    """*store* wrapped in :class:`ClockHoldingStore` if it is thread-backed (not a MemoryStore).

    A store that is wrapped already is returned as it is.
    """
    if isinstance(store, MemoryStore | ClockHoldingStore):
        return store
    return ClockHoldingStore(store)


@final
class ClockHoldingStore:
    """Wrap a thread-backed store so ``MockClock(autojump_threshold=0)`` waits for it.

    An autojumping mock clock treats a task that waits for a worker thread as
    idle and jumps virtual time to the next deadline: a save's
    ``save_timeout`` expires while the store's thread is still writing, and
    an engine's lease (renewed every ``lease_ttl / 3`` by a timer) is lost
    while a thread reads the journal. For the duration of each call to *inner*,
    this wrapper keeps a helper task waiting in
    :func:`trio.testing.wait_all_tasks_blocked`, which stops autojumping; the
    helper is cancelled when the call ends. Virtual time then advances only
    while no store call is in flight. With a real clock it changes nothing.

    Every method is a checkpoint; cancellation reaches the inner call as it
    would without the wrapper, and errors propagate as themselves.
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"ClockHoldingStore({self.inner!r})"

    async def _held(self, afn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        # Shielded: a call cancelled while its thread cannot be abandoned goes
        # on, and virtual time must wait for it still. Ended by us alone.
        holding = trio.CancelScope(shield=True)

        async def hold() -> None:
            with holding:
                await _hold()

        answer: outcome.Outcome[T] | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold)
            try:
                answer = await outcome.acapture(afn, *args, **kwargs)
            finally:
                holding.cancel()
        assert answer is not None
        return answer.unwrap()

    async def open(self) -> None:
        await self._held(self.inner.open)

    async def close(self) -> None:
        await self._held(self.inner.close)

    async def create_run(self, record: RunRecord) -> None:
        await self._held(self.inner.create_run, record)

    async def submit_run(self, submission: Submission) -> str:
        """The inner store's ``submit_run``, holding the clock (see :attr:`capabilities`)."""
        result: str = await self._held(cast(QueueingStore, self.inner).submit_run, submission)
        return result

    async def update_run(self, record: RunRecord) -> RunRecord | None:
        return await self._held(self.inner.update_run, record)

    async def claim(
        self,
        run_id: str,
        owner: str,
        *,
        ttl: float,
        create: RunRecord | None = None,
        takeover: int | None = None,
    ) -> RunRecord:
        return await self._held(
            self.inner.claim, run_id, owner, ttl=ttl, create=create, takeover=takeover
        )

    async def renew(self, owner: str, *, ttl: float, held: Mapping[str, int]) -> Renewal:
        return await self._held(self.inner.renew, owner, ttl=ttl, held=held)

    async def cancel_run(self, run_id: str, *, takeover: int | None = None) -> RunRecord:
        return await self._held(self.inner.cancel_run, run_id, takeover=takeover)

    async def get_run(self, run_id: str) -> RunRecord | None:
        return await self._held(self.inner.get_run, run_id)

    async def list_runs(self, **filters: Any) -> Sequence[RunRecord]:
        return await self._held(self.inner.list_runs, **filters)

    async def claim_next(
        self,
        owner: str,
        *,
        ttl: float,
        workflows: Collection[Served | str],
        max_dispatches: int,
        gone: Collection[str] = (),
        now: datetime | None = None,
    ) -> RunRecord | None:
        claim_next = cast(WorkerStore, self.inner).claim_next
        result: RunRecord | None = await self._held(
            claim_next,
            owner,
            ttl=ttl,
            workflows=workflows,
            max_dispatches=max_dispatches,
            gone=gone,
            now=now,
        )
        return result

    async def claim_batch(
        self,
        owner: str,
        *,
        ttl: float,
        workflows: Collection[Served | str],
        max_dispatches: int,
        limit: int,
        gone: Collection[str] = (),
        now: datetime | None = None,
    ) -> Sequence[Claimed]:
        claim_batch = cast(BatchClaimingStore, self.inner).claim_batch
        result: Sequence[Claimed] = await self._held(
            claim_batch,
            owner,
            ttl=ttl,
            workflows=workflows,
            max_dispatches=max_dispatches,
            limit=limit,
            gone=gone,
            now=now,
        )
        return result

    async def advertise(self, owner: str, *, serves: Collection[Served], ttl: float) -> None:
        advertise = cast(AdvertisingStore, self.inner).advertise
        await self._held(advertise, owner, serves=serves, ttl=ttl)

    async def list_workers(self) -> Sequence[WorkerAd]:
        return await self._held(cast(AdvertisingStore, self.inner).list_workers)

    # Properties: present exactly when the inner store keeps messages (see mailbox_of).
    @property
    def capabilities(self) -> frozenset[Capability]:
        """The inner store's optional capabilities: this store has exactly those."""
        return capabilities_of(self.inner)

    async def send_message(self, run_id: str, name: str, value: str, *, now: datetime) -> Message:
        """The inner store's ``send_message``, holding the clock (see :attr:`capabilities`)."""
        send = cast(MailboxStore, self.inner).send_message
        return await self._held(send, run_id, name, value, now=now)

    async def respond(self, run_id: str, entries: Sequence[Entry], *, now: datetime) -> RunRecord:
        """The inner store's ``respond``, holding the clock (see :attr:`capabilities`)."""
        respond = cast(RespondingStore, self.inner).respond
        return await self._held(respond, run_id, entries, now=now)

    async def load_messages(self, run_id: str, *, after: int = 0) -> Sequence[Message]:
        """The inner store's ``load_messages``, holding the clock (see :attr:`capabilities`)."""
        load = cast(MailboxStore, self.inner).load_messages
        return await self._held(load, run_id, after=after)

    async def watch(self, changed: Callable[[], None]) -> None:
        """The wrapped store's ``watch``, if it has one; never holds the clock (it never ends)."""
        watch = getattr(self.inner, "watch", None)
        if watch is None:
            await trio.sleep_forever()
        await watch(changed)

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        return await self._held(self.inner.append, run_id, entries)

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        return await self._held(self.inner.load_entries, run_id)
