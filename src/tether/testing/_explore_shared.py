"""The worker explorer's store: one store that simulated processes share, and what it took.

Layer: testing (``tether.testing``).

:mod:`._explore_workers` runs several simulated worker processes (and a
submitter) on one store. Each process reaches it through a
:class:`Connection` of its own, which hands every call to the process (to
number its interleaving points and inject its faults) and then to the
:class:`SharedStore`, the store as its server sees it:

- every call that returned from the store is logged, in order, as a
  :class:`Landed` write (with the tokens it carried and the lease it took or
  renewed): the invariants on fencing and on owners are checked on that log
  (:mod:`._explore_fleet`);
- it announces changes of run records (as ``Store.watch`` does), after the
  write, so the explorer can lose one notification exactly;
- it can restart (:meth:`SharedStore.restart`): closed once no call is in it,
  down for a while (calls meanwhile fail with a transient error and are
  retried, as a store that retries its connection does), then opened again.

Lease expiry is the store's business: the explorer needs a store whose
clock is Trio's (:class:`tether.MemoryStore`), so virtual time expires leases.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, Protocol, final

import attrs
import trio

from ..stores._capabilities import Capability, capabilities_of
from ..stores._mailbox import Message
from ..stores._owners import Renewal, Served
from ..stores._records import Entry, EntryKind, EntryStatus, RunRecord, RunStatus
from ..stores._store import Store

__all__ = (
    "Connection",
    "Landed",
    "Refused",
    "SharedStore",
    "label_after",
    "label_before",
)

#: Methods whose landed call may change a run record (and so is announced).
_ANNOUNCED: Final = frozenset(
    {"create_run", "update_run", "claim", "claim_next", "cancel_run", "send_message", "respond"}
)
#: The first and the longest wait between retries while the store is down.
_FIRST_RETRY: Final = 0.01
_LONGEST_RETRY: Final = 0.5


def label_before(method: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str | None:
    """The interleaving point a call of *method* reaches before the store (``None``: none).

    ``claim`` (a worker's ``claim_next``), ``claim:RUN`` (an engine's claim of
    one run, as ``engine.resume`` makes it), ``load:RUN``, ``save:RUN/KEYS``,
    ``record:RUN/STATUS`` (``released`` for a release), ``renew`` and
    ``submit:RUN``. Reads (``get_run``, ``list_runs``) are not points.
    """
    if method == "claim_next":
        return "claim"
    if method == "claim":
        return f"claim:{args[0]}"
    if method == "load_entries":
        return f"load:{args[0]}"
    if method == "append":
        entries: Sequence[Entry] = args[1]
        return f"save:{args[0]}/" + "+".join(e.key for e in entries)
    if method == "update_run":
        return f"record:{_record_label(args[0])}"
    if method == "renew":
        return "renew"
    if method == "create_run":
        return f"submit:{args[0].run_id}"
    return None


def label_after(method: str, args: tuple[Any, ...], result: object) -> str | None:
    """The point a write reaches once it landed, before its caller hears back.

    ``claimed:RUN`` (``claimed:none`` when ``claim_next`` found nothing),
    ``stored:RUN/KEYS``, ``recorded:RUN/STATUS`` and ``submitted:RUN``.
    """
    if method == "claim_next":
        return f"claimed:{'none' if result is None else result.run_id}"  # type: ignore[attr-defined]
    if method == "claim":
        return f"claimed:{args[0]}"
    if method == "append":
        entries: Sequence[Entry] = args[1]
        return f"stored:{args[0]}/" + "+".join(e.key for e in entries)
    if method == "update_run":
        return f"recorded:{_record_label(args[0])}"
    if method == "create_run":
        return f"submitted:{args[0].run_id}"
    return None


def _record_label(record: RunRecord) -> str:
    if record.status is RunStatus.RUNNING and record.owner is None:
        return f"{record.run_id}/released"
    return f"{record.run_id}/{record.status.value}"


@final
@attrs.frozen(kw_only=True)
class Landed:
    """One call that reached the store and returned: a write the store took, in order."""

    order: int  #: its place among the calls the store answered (landed or refused), from 1
    at: float  #: when (virtual time)
    process: str  #: which simulated process made it (``w0``, ``submitter``, ...)
    method: str
    run_id: str | None = None
    #: the fencing tokens the write carried (an append's entries', a record's)
    tokens: tuple[int, ...] = ()
    #: a claim that took the run's lease: its new token
    claimed: int | None = None
    #: a record write that released the run's lease (its token)
    released: int | None = None
    #: a claim or renewal: when the process's lease expires now (store clock)
    expires: float | None = None
    entries: tuple[Entry, ...] = ()  #: an append's entries, as stored
    status: RunStatus | None = None  #: an update_run's status, as stored


@final
@attrs.frozen(kw_only=True)
class Refused:
    """One call the store answered with an error (a fenced write refused, a conflict)."""

    order: int  #: its place among the calls the store answered (landed or refused), from 1
    at: float  #: when (virtual time)
    process: str
    method: str
    run_id: str | None
    error: str  #: the error's class name, e.g. ``LeaseLostError``


def _run_of(method: str, args: tuple[Any, ...]) -> str | None:
    if method in ("create_run", "update_run"):
        record: RunRecord = args[0]
        return record.run_id
    if method in (
        "append",
        "claim",
        "get_run",
        "load_entries",
        "cancel_run",
        "send_message",
        "load_messages",
        "respond",
    ):
        run_id: str = args[0]
        return run_id
    return None


def _landed(
    order: int,
    at: float,
    process: str,
    method: str,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    result: Any,
) -> Landed | None:
    if method in ("claim", "claim_next"):
        owner = args[1] if method == "claim" else args[0]
        record: RunRecord | None = result
        took = record is not None and record.owner == owner and record.lease_expires_at is not None
        return Landed(
            order=order,
            at=at,
            process=process,
            method=method,
            run_id=None if record is None else record.run_id,
            claimed=record.token if took and record is not None else None,
            expires=at + kwargs["ttl"] if took else None,
        )
    if method == "renew":
        return Landed(
            order=order, at=at, process=process, method=method, expires=at + kwargs["ttl"]
        )
    if method == "append":
        sent: Sequence[Entry] = args[1]
        stored: Sequence[Entry] = result if result is not None else ()
        return Landed(
            order=order,
            at=at,
            process=process,
            method=method,
            run_id=args[0],
            tokens=tuple(e.token for e in sent),
            entries=tuple(stored),
        )
    if method == "update_run":
        written: RunRecord = args[0]
        kept: RunRecord = result if result is not None else written
        return Landed(
            order=order,
            at=at,
            process=process,
            method=method,
            run_id=written.run_id,
            tokens=(written.token,),
            released=written.token if kept.owner is None else None,
            status=kept.status,
        )
    if method in ("create_run", "cancel_run"):
        run_id = args[0].run_id if method == "create_run" else args[0]
        return Landed(order=order, at=at, process=process, method=method, run_id=run_id)
    return None


@final
class SharedStore:
    """The store every simulated process reaches, as its server sees the calls.

    Args:
        raw: the store (opened and closed by the explorer's trial).
    """

    def __init__(self, raw: Store) -> None:
        self.raw = raw
        self.log: list[Landed] = []
        self.refused: list[Refused] = []
        #: completed step (and stream) records that landed: (run, key) -> the append
        self.steps: dict[tuple[str, str], tuple[Landed, Entry]] = {}
        #: the process and token of each run's latest claim, until released
        self.claims: dict[str, tuple[str, int]] = {}
        self.down = False  #: restarting: calls wait (retrying) until it is back
        self.closed = False  #: the raw store is closed (in the middle of a restart)
        self.retries = 0  #: calls refused with a transient error while down, and retried
        self.answered = 0  #: calls the store answered (landed or refused)
        self._watchers: set[Callable[[], None]] = set()
        self._in_flight = 0
        self._idle = trio.Event()
        self._changed = trio.Event()

    def __repr__(self) -> str:
        return f"SharedStore({self.raw!r})"

    async def call(
        self, process: str, method: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> Any:
        """Make one call of the raw store for *process*; log it once it returned.

        A checkpoint. While the store is down the call is refused with a
        transient error and retried with backoff until it is back up;
        cancellation ends the retries (nothing was written) or reaches the
        raw call as it would without this layer. Raises what the store raises.
        """
        delay = _FIRST_RETRY
        while self.down:
            self.retries += 1
            await trio.sleep(delay)
            delay = min(delay * 2, _LONGEST_RETRY)
        self._in_flight += 1
        try:
            result = await getattr(self.raw, method)(*args, **kwargs)
        except Exception as exc:
            self.answered += 1
            refused = Refused(
                order=self.answered,
                at=trio.current_time(),
                process=process,
                method=method,
                run_id=_run_of(method, args),
                error=type(exc).__name__,
            )
            self.refused.append(refused)
            raise
        finally:
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.set()
                self._idle = trio.Event()
        # Synchronously with the store's own write (no checkpoint since it returned).
        self.answered += 1
        landed = _landed(self.answered, trio.current_time(), process, method, args, kwargs, result)
        if landed is not None:
            self._record(landed)
        return result

    def _record(self, landed: Landed) -> None:
        self.log.append(landed)
        run_id = landed.run_id
        if landed.claimed is not None and run_id is not None:
            self.claims[run_id] = (landed.process, landed.claimed)
        elif (
            landed.released is not None
            and run_id is not None
            and self.claims.get(run_id, ("", -1))[1] == landed.released
        ):
            del self.claims[run_id]
        for entry in landed.entries:
            if entry.status is EntryStatus.COMPLETED and entry.kind in (
                EntryKind.STEP,
                EntryKind.STREAM,
            ):
                self.steps.setdefault((entry.run_id, entry.key), (landed, entry))
        self._changed.set()
        self._changed = trio.Event()

    @staticmethod
    def announces(method: str, result: object) -> bool:
        """Whether a landed call of *method* changed a run record (and is announced)."""
        return method in _ANNOUNCED and not (method == "claim_next" and result is None)

    def notify(self) -> None:
        """Announce a change to every watcher (not a checkpoint)."""
        for changed in list(self._watchers):
            changed()

    async def watch(self, changed: Callable[[], None]) -> None:
        """Call *changed()* on each announced change until cancelled (``Store.watch``)."""
        self._watchers.add(changed)
        try:
            await trio.sleep_forever()
        finally:
            self._watchers.discard(changed)

    def held_by(self, process: str) -> dict[str, int]:
        """The runs whose latest claim is *process*'s and not released, with its tokens."""
        return {run: token for run, (p, token) in self.claims.items() if p == process}

    async def taken_over(self, held: Mapping[str, int]) -> None:
        """Return once each run of *held* was claimed again or released. A checkpoint."""
        await trio.lowlevel.checkpoint()
        while any(self.claims.get(run, ("", -1))[1] == token for run, token in held.items()):
            await self._changed.wait()

    async def restart(self, downtime: float) -> None:
        """Go down now; close the raw store once no call is in it; reopen it after *downtime* s.

        Calls arriving meanwhile wait in :meth:`call`. A checkpoint;
        cancelled, the store stays down (the trial is ending).
        """
        self.down = True
        while self._in_flight:
            await self._idle.wait()
        self.closed = True
        await self.raw.close()
        await trio.sleep(downtime)
        await self.raw.open()
        self.closed = False
        self.down = False


class Caller(Protocol):
    """What a :class:`Connection` hands its calls to: the simulated process."""

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Make the call (numbering its points, injecting faults); return what the store did."""


@final
class Connection:
    """One simulated process's connection to the shared store: a ``Store`` for its engine.

    Every call goes to *process* (``process.call(method, *args, **kwargs)``),
    which passes it on to :meth:`SharedStore.call`; ``watch`` is the shared
    store's. ``open`` and ``close`` do nothing: the trial owns the store's life.
    Every method is a checkpoint; cancellation reaches the call as it would
    reach the store's, and errors propagate as themselves.
    """

    def __init__(self, shared: SharedStore, process: Caller) -> None:
        self.shared = shared
        self._process = process

    def __repr__(self) -> str:
        return f"Connection({self.shared.raw!r})"

    async def open(self) -> None:
        await trio.lowlevel.checkpoint()

    async def close(self) -> None:
        await trio.lowlevel.checkpoint()

    async def create_run(self, record: RunRecord) -> None:
        await self._process.call("create_run", record)

    async def update_run(self, record: RunRecord) -> RunRecord | None:
        result: RunRecord | None = await self._process.call("update_run", record)
        return result

    async def get_run(self, run_id: str) -> RunRecord | None:
        result: RunRecord | None = await self._process.call("get_run", run_id)
        return result

    async def list_runs(self, **filters: Any) -> Sequence[RunRecord]:
        given = {k: v for k, v in filters.items() if v is not None}
        result: Sequence[RunRecord] = await self._process.call("list_runs", **given)
        return result

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        result: Sequence[Entry] = await self._process.call("append", run_id, entries)
        return result

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        result: Sequence[Entry] = await self._process.call("load_entries", run_id)
        return result

    async def claim(
        self,
        run_id: str,
        owner: str,
        *,
        ttl: float,
        create: RunRecord | None = None,
        takeover: int | None = None,
    ) -> RunRecord:
        result: RunRecord = await self._process.call(
            "claim", run_id, owner, ttl=ttl, create=create, takeover=takeover
        )
        return result

    async def renew(self, owner: str, *, ttl: float, held: Mapping[str, int]) -> Renewal:
        result: Renewal = await self._process.call("renew", owner, ttl=ttl, held=held)
        return result

    async def cancel_run(self, run_id: str, *, takeover: int | None = None) -> RunRecord:
        result: RunRecord = await self._process.call("cancel_run", run_id, takeover=takeover)
        return result

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
        result: RunRecord | None = await self._process.call(
            "claim_next",
            owner,
            ttl=ttl,
            workflows=workflows,
            max_dispatches=max_dispatches,
            gone=gone,
            now=now,
        )
        return result

    @property
    def capabilities(self) -> frozenset[Capability]:
        """The shared store's optional capabilities, and ``watch`` (:meth:`SharedStore.watch`)."""
        return capabilities_of(self.shared.raw) | {Capability.WATCH}

    async def send_message(self, run_id: str, name: str, value: str, *, now: datetime) -> Message:
        """The shared store's ``send_message``, through the process (see :attr:`capabilities`)."""
        result: Message = await self._process.call("send_message", run_id, name, value, now=now)
        return result

    async def respond(self, run_id: str, entries: Sequence[Entry], *, now: datetime) -> RunRecord:
        """The shared store's ``respond``, through the process (see :attr:`capabilities`)."""
        result: RunRecord = await self._process.call("respond", run_id, entries, now=now)
        return result

    async def load_messages(self, run_id: str, *, after: int = 0) -> Sequence[Message]:
        """The shared store's ``load_messages``, through the process (see :attr:`capabilities`)."""
        result: Sequence[Message] = await self._process.call("load_messages", run_id, after=after)
        return result

    async def watch(self, changed: Callable[[], None]) -> None:
        """The shared store's announcements (:meth:`SharedStore.watch`)."""
        await self.shared.watch(changed)
