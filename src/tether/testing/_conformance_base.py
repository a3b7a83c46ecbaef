"""What the store conformance checks share: their context, and small helpers.

Layer: testing (``tether.testing``).

The checks themselves are in :mod:`._conformance` (records and journals) and
:mod:`._conformance_leases` (leases, fencing, cancel, integrity).
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Final, TypeAlias, TypeVar, final

import attrs
import trio

from .._errors import CheckpointCorruptError
from ..stores._records import Entry, RunRecord
from ..stores._store import Store

T = TypeVar("T")

#: Makes a fresh, unopened store on a fresh location (sync or async callable).
StoreFactory: TypeAlias = Callable[[], Store | Awaitable[Store]]
#: Given a closed store, makes a new unopened store on the same location.
Reopener: TypeAlias = Callable[[Store], Store | Awaitable[Store]]
#: Damages what is stored for ``(store, run_id, seq)`` so that it cannot be
#: decoded: the journal entry *seq*, or the run record when *seq* is ``None``.
#: Called while the store is open.
Corrupter: TypeAlias = Callable[[Store, str, int | None], Awaitable[None] | None]
#: Changes what is stored for journal entry ``(store, run_id, seq)``: ``remove=``
#: deletes it, ``alter=`` changes one digit of its stored value, keeping the
#: record valid JSON of the right shape (so only its checksum can tell).
Tamperer: TypeAlias = Callable[[Store, str, int], Awaitable[None] | None]


class StoreConformanceError(AssertionError):
    """One or more conformance checks failed; :attr:`failures` says which and why."""

    def __init__(self, store: str, failures: Sequence[tuple[str, BaseException]]) -> None:
        self.failures = tuple(failures)
        lines = [f"{len(self.failures)} store conformance check(s) failed for {store}:"]
        for name, exc in self.failures:
            lines.append(f"- {name}: {type(exc).__name__}: {exc}")
        super().__init__("\n".join(lines))


@final
@attrs.frozen(kw_only=True)
class ConformanceResult:
    """What :func:`check_store` ran: checks that passed, and those skipped (with why)."""

    passed: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]


class Skip(Exception):
    pass


@attrs.define
class Ctx:
    factory: StoreFactory
    reopen: Reopener | None
    corrupt: Corrupter | None
    remove: Tamperer | None = None
    alter: Tamperer | None = None
    clock: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1))

    async def make(self) -> Store:
        store: Store = await maybe_await(self.factory())
        return store

    def time(self, tz: timezone = UTC) -> datetime:
        """A distinct, increasing timestamp (so entries never collide by accident)."""
        base = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
        return (base + timedelta(microseconds=next(self.clock) * 7)).astimezone(tz)

    def run(self, run_id: str, **kw: Any) -> RunRecord:
        now = self.time()
        fields: dict[str, Any] = {
            "run_id": run_id,
            "workflow": "checkout",
            "args": '["o-1"]',
            "created_at": now,
            "updated_at": now,
        }
        fields.update(kw)
        return RunRecord(**fields)

    def entry(self, run_id: str, key: str, **kw: Any) -> Entry:
        fields: dict[str, Any] = {
            "run_id": run_id,
            "key": key,
            "value": '{"n":1}',
            "args_digest": "d1",
            "started_at": self.time(),
            "finished_at": self.time(timezone(timedelta(hours=5, minutes=30))),
        }
        fields.update(kw)
        return Entry(**fields)


async def maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


class Opened:
    """``async with Opened(store)``: open it, and always close it."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def __aenter__(self) -> Store:
        await self.store.open()
        return self.store

    async def __aexit__(self, *exc: object) -> None:
        await self.store.close()


def same(stored: Entry, given: Entry) -> bool:
    return stored.seq is not None and stored == given.stored_as(stored.seq)


async def expect_corrupt(what: str, run_id: str, call: Callable[[str], Awaitable[Any]]) -> None:
    try:
        result = await call(run_id)
    except CheckpointCorruptError as exc:
        assert run_id in str(exc), f"{what}: the error does not name run {run_id!r}: {exc}"
    else:
        raise AssertionError(f"{what}: no CheckpointCorruptError; returned {result!r:.300}")


#: Moments a cancelled call is cancelled at, as ``(step, yields, delay)`` for
#: :func:`cancelled`: at the n-th checkpoint inside the call; after n passes
#: of another task; after short real-time waits (a thread-backed store is
#: then mid-write).
CANCEL_POINTS: Final[tuple[tuple[int | None, int, float], ...]] = (
    *((n, 0, 0.0) for n in range(12)),
    *((None, n, 0.0) for n in range(6)),
    *((None, 0, d) for d in (0.0002, 0.001, 0.003, 0.01)),
)


class _CancelAtStep(trio.abc.Instrument):
    """Cancel *scope* just before *task* runs its *n*-th step from now.

    The cancellation then strikes at the checkpoint that ends that step:
    counting the task's own steps makes "cancelled at the n-th checkpoint
    inside the call" exact, whatever order the scheduler picks.
    """

    def __init__(self, task: trio.lowlevel.Task, scope: trio.CancelScope, n: int) -> None:
        self.task, self.scope, self.left = task, scope, n

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.left -= 1
            if self.left == 0:
                self.scope.cancel()


async def cancelled(
    call: Callable[[], Awaitable[T]], *, step: int | None, yields: int, delay: float
) -> T | None:
    """``await call()`` under a scope cancelled at the chosen moment (one of
    :data:`CANCEL_POINTS`); what it returned, or ``None`` if it was cancelled."""
    returned: list[T] = []
    scope = trio.CancelScope()
    if step is not None:
        instrument = _CancelAtStep(trio.lowlevel.current_task(), scope, step)
        if step == 0:
            scope.cancel()
        trio.lowlevel.add_instrument(instrument)
        try:
            with scope:
                returned.append(await call())
        finally:
            with contextlib.suppress(KeyError):
                trio.lowlevel.remove_instrument(instrument)
        return returned[0] if returned else None

    async def canceller() -> None:
        for _ in range(yields):
            await trio.lowlevel.checkpoint()
        if delay:
            await trio.to_thread.run_sync(time.sleep, delay)
        scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(canceller)
        with scope:
            returned.append(await call())
    return returned[0] if returned else None
