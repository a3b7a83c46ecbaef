"""A store wrapper that injects faults (failures, hangs, crashes) into chosen calls.

Layer: testing (``tether.testing``).

A fault is any object with ``async def apply(self, call: Call) -> None``; the
built-ins are :class:`Delay`, :class:`Hang`, :class:`Raise`, :class:`Crash`
and :class:`Do` (an async function of your own).

Crashes simulate the death of the process that owns the store: after a
:class:`Crash` fault (or :meth:`FaultyStore.crash`), nothing more reaches the
inner store, and every call raises :class:`SimulatedCrash`, a
``BaseException`` that workflow code's ``except Exception`` cannot swallow.
The pattern for a crash test::

    store = FaultyStore(inner)
    store.inject("append", Crash(), at=3)         # the process dies at the third save
    async with tether.open_engine(store) as engine:
        with pytest.raises(SimulatedCrash):
            await engine.run(wf, run_id="r")
    async with tether.open_engine(store.inner) as engine:   # a new process
        await engine.resume("r")                  # stored steps replay, not re-run

(or ``store.restart()`` and a new engine on ``store`` itself).

What ``engine.run`` raises: the engine lets a ``BaseException`` from the store
through (it is not an outcome of the run: no status is stored and no
``on_run_end`` hook runs) and unwraps single-exception groups. So a
sequential workflow, or a streaming step, raises the :class:`SimulatedCrash`
as itself. When several tasks met the dead store (the save that crashed it,
saves in flight in other ``tether.parallel()`` branches, calls made after),
``engine.run`` raises a ``BaseExceptionGroup`` with one
:class:`SimulatedCrash` per task. ``except* SimulatedCrash`` catches both
shapes; in tests, ``pytest.raises(SimulatedCrash)`` or
``pytest.RaisesGroup(SimulatedCrash, SimulatedCrash, ...)``.

The fault kinds and :class:`SimulatedCrash` are in ``_faults``; which calls
a fault applies to, in ``_fault_rules``; here is the store that applies them.
"""

from __future__ import annotations

import contextvars
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, final

import trio

from ..stores._capabilities import Capability, capabilities_of
from ..stores._flow import Submission
from ..stores._mailbox import Message
from ..stores._owners import Renewal, Served, WorkerAd
from ..stores._queue import Claimed
from ..stores._records import Entry, RunRecord
from ..stores._store import Store
from ._fault_rules import METHODS as METHODS
from ._fault_rules import Rule, matches, new_rule
from ._faults import Call as Call
from ._faults import Fault, Life, SimulatedCrash, describe

__all__ = ("FaultyStore",)


#: The call whose fault is being applied in this task (names it in a woken wait's error).
_applying: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "tether.testing._applying", default=None
)


def _waiter() -> str:
    return _applying.get() or "a store.sleep() outside any call"


@final
class FaultyStore:
    """Wrap *inner* and inject faults into the calls chosen with :meth:`inject`.

    Calls are counted per method, from 1, in :attr:`calls` (a
    ``collections.Counter``); ``append`` is counted per *save*, one for each
    journal entry it carries, because the engine writes the saves that wait
    at the same moment in one call (group commit). Before each call, the
    first rule that matches it (method, ``at``, ``when``, ``times``,
    ``after=False``) applies its fault; then the inner store is called; then
    the first matching ``after=True`` rule applies. A call no rule matches
    goes straight to the inner store. An append matches a rule when one of
    its saves does; a fault applies to the whole call, so it fails (or
    hangs, or crashes) every save in it.

    >>> store = FaultyStore(MemoryStore())
    >>> store.inject("append", Hang(), at=2)   # the append of the second save hangs forever
    >>> store.inject("append", Crash(), at=5)  # the process dies at the fifth save

    **Crashes.** A :class:`Crash` fault, or :meth:`crash`, marks the store
    :attr:`crashed`. From then on nothing reaches the inner store:

    - every call raises :class:`SimulatedCrash` (after a checkpoint), except
      :meth:`close`, which closes the inner store, as the OS releases a dead
      process's files, and returns, so that ``async with open_engine(store)``
      can exit;
    - calls waiting in a fault (:class:`Delay`, :class:`Hang`,
      :meth:`sleep`) wake at once with :class:`SimulatedCrash`;
    - calls inside the inner store finish there (the write may land) and
      then raise :class:`SimulatedCrash` instead of returning, as after a real
      crash: the caller never hears back.

    To resume, open a new engine on :attr:`inner` (a new process on the same
    storage), or :meth:`restart` this store and open a new engine on it.

    Every method is a checkpoint (the inner store's methods are). Cancellation
    reaches a fault's wait and the inner call as it would without the
    wrapper. Each raises what its fault or the inner store raises, and
    :class:`SimulatedCrash` as above.
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self._rules: list[Rule] = []
        self._life = Life()

    def __repr__(self) -> str:
        return f"FaultyStore({self.inner!r})"

    @property
    def capabilities(self) -> frozenset[Capability]:
        """The inner store's optional capabilities: this store has exactly those.

        It defines every optional method, each forwarding to the inner store;
        declaring the inner store's capabilities keeps it from being taken for
        more (see :mod:`tether.stores._capabilities`).
        """
        return capabilities_of(self.inner)

    @property
    def crashed(self) -> bool:
        """Whether the store has crashed (and not restarted since)."""
        return self._life.cause is not None

    def inject(
        self,
        method: str,
        fault: Fault,
        *,
        at: int | Sequence[int] | None = None,
        when: Callable[..., bool] | None = None,
        times: int | None = None,
        after: bool = False,
    ) -> None:
        """Apply *fault* to calls of *method*.

        Args:
            method: one of ``open``, ``close``, ``create_run``, ``update_run``,
                ``get_run``, ``list_runs``, ``append``, ``load_entries``,
                ``claim``, ``renew``, ``cancel_run`` (a fault on ``renew``
                models a store that stops answering an engine's renewals),
                ``claim_next``, ``claim_batch``, ``advertise``, ``list_workers``,
                ``delete_run``,
                ``send_message``, ``load_messages`` or ``respond`` (the last
                ones reach the inner store only when it has them).
            fault: a :class:`Fault`: an object with ``async def apply(call)``.
            at: call number(s) of *method*, counted from 1; default every
                call. For ``append``, save numbers: an append applies the
                fault if one of its saves has one of these numbers.
            when: a predicate called with the call's arguments; the fault
                applies only where it returns true. For ``append``, it is
                called with ``run_id`` and a list of one entry, for each save
                of the call: ``when=lambda run_id, entries: entries[0].key ==
                "charge#0"`` picks the append that carries ``charge#0``. For
                ``send_message``, with ``run_id, name, value`` (``now`` is in
                :attr:`Call.kwargs`); for ``load_messages``, with ``run_id``.
            times: apply at most this many times (default: no limit).
            after: apply after the inner call returned instead of before:
                ``Raise`` is then an unclear failure (stored, but the caller
                sees an error), ``Crash`` a crash right after the write,
                ``Delay`` and ``Hang`` a slow or lost acknowledgement.

        Raises:
            ValueError: an unknown *method*, an ``at`` below 1, a negative *times*.
            TypeError: *fault* has no ``apply`` method, or another argument
                has the wrong type.
            UsageError: a ``Crash(torn=True)`` for a method without a torn form,
                with ``after=True``, or on a store that cannot simulate it.
        """
        self._rules.append(
            new_rule(self.inner, method, fault, at=at, when=when, times=times, after=after)
        )

    def clear(self) -> None:
        """Remove every rule (call counts stay)."""
        self._rules.clear()

    def crash(self, where: str = "by FaultyStore.crash()") -> None:
        """Crash the store now: from outside any call (a test, another task), or from a fault.

        *where* says where it crashed, in the :class:`SimulatedCrash` of every
        later call. Not a checkpoint. Calls waiting in faults wake with
        :class:`SimulatedCrash`; see the class doc for the rest. Crashing a
        crashed store changes nothing.
        """
        self._life.end(where)

    def restart(self) -> None:
        """The process came back: the store is no longer crashed, and has no rules.

        Call counts stay. Re-open the store by opening a new engine on it;
        the engine that saw the crash should have exited (its ``close()``
        closed the inner store). Restarting a store that has not crashed
        crashes it first: calls still in flight belong to the old process
        and raise :class:`SimulatedCrash`.
        """
        self._life.end("before FaultyStore.restart()")
        self._life = Life()
        self._rules.clear()

    async def sleep(self, seconds: float) -> None:
        """Sleep *seconds*, or until the store crashes; for faults that wait.

        A checkpoint; cancellable like ``trio.sleep``.

        Raises:
            SimulatedCrash: the store crashed before or during the sleep.
        """
        life = self._life
        with trio.move_on_after(seconds):
            await life.ended.wait()
        if life.cause is not None:
            raise life.dead(f"{_waiter()} was waiting")

    async def sleep_forever(self) -> None:
        """Wait until the store crashes; for faults that hang.

        A checkpoint; cancellable like ``trio.sleep_forever``.

        Raises:
            SimulatedCrash: the store crashed (it never returns otherwise).
        """
        life = self._life
        await life.ended.wait()
        raise life.dead(f"{_waiter()} was hanging")

    def _rule(self, method: str, n: int, args: tuple[Any, ...], after: bool) -> Rule | None:
        for rule in self._rules:
            if (
                rule.method == method
                and rule.after is after
                and rule.times > 0
                and matches(rule, method, n, args)
            ):
                rule.times -= 1
                return rule
        return None

    async def _apply(self, rule: Rule, call: Call) -> None:
        token = _applying.set(describe(call) + (" (after)" if call.after else ""))
        try:
            await rule.fault.apply(call)
        finally:
            _applying.reset(token)

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await self._call_with(method, getattr(self.inner, method), *args, **kwargs)

    async def _call_with(
        self, method: str, target: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any
    ) -> Any:
        # An append is counted per save (entry): the engine may write several
        # saves in one call, and "the third save" must stay the third.
        count = len(args[1]) if method == "append" else 1
        n = self.calls[method] + 1
        self.calls[method] += count
        what = f"{method} call #{n}" if count <= 1 else f"{method} call #{n}-{n + count - 1}"
        life = self._life
        if life.cause is not None:
            await trio.lowlevel.checkpoint()
            raise life.dead(what)
        rule = self._rule(method, n, args, after=False)
        if rule is not None:
            call = Call(store=self, method=method, n=n, args=args, after=False, kwargs=kwargs)
            await self._apply(rule, call)
        if life.cause is not None:  # a fault (a Do) crashed the store, or a task did meanwhile
            raise life.dead(what)
        try:
            result = await target(*args, **kwargs)
        except Exception as exc:
            if life.cause is not None:  # a dead process reports nothing
                raise life.dead(f"{what} was in the inner store") from exc
            raise
        if life.cause is not None:
            raise life.dead(f"{what} returned from the inner store (the write may have landed)")
        rule = self._rule(method, n, args, after=True)
        if rule is not None:
            call = Call(store=self, method=method, n=n, args=args, after=True, kwargs=kwargs)
            await self._apply(rule, call)
            if life.cause is not None:
                raise life.dead(f"{what} (the inner store had returned)")
        return result

    async def open(self) -> None:
        """Open the inner store (faults permitting).

        Raises:
            SimulatedCrash: the store has crashed (:meth:`restart` it first).
        """
        await self._call("open")

    async def close(self) -> None:
        """Close the inner store (faults permitting); never raises :class:`SimulatedCrash`.

        On a crashed store, or one that crashes during this call, the inner
        store is closed (once), as the OS releases a dead process's files,
        and the call returns normally.
        """
        if self._life.cause is not None:
            self.calls["close"] += 1
            await self.inner.close()
            return
        closing = self.inner.close
        closed = False

        async def close_once() -> None:
            nonlocal closed
            closed = True
            await closing()

        try:
            await self._call_with("close", close_once)
        except SimulatedCrash:
            if not closed:
                await closing()

    async def create_run(self, record: RunRecord) -> None:
        await self._call("create_run", record)

    async def submit_run(self, submission: Submission) -> str:
        """The inner store's ``submit_run``, faults permitting (see :attr:`capabilities`)."""
        result: str = await self._call("submit_run", submission)
        return result

    async def update_run(self, record: RunRecord) -> RunRecord | None:
        result: RunRecord | None = await self._call("update_run", record)
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
        result: RunRecord = await self._call(
            "claim", run_id, owner, ttl=ttl, create=create, takeover=takeover
        )
        return result

    async def renew(self, owner: str, *, ttl: float, held: Mapping[str, int]) -> Renewal:
        result: Renewal = await self._call("renew", owner, ttl=ttl, held=held)
        return result

    async def cancel_run(self, run_id: str, *, takeover: int | None = None) -> RunRecord:
        result: RunRecord = await self._call("cancel_run", run_id, takeover=takeover)
        return result

    async def get_run(self, run_id: str) -> RunRecord | None:
        result: RunRecord | None = await self._call("get_run", run_id)
        return result

    async def delete_run(self, run_id: str) -> bool:
        """The inner store's ``delete_run``, faults permitting (see :attr:`capabilities`)."""
        result: bool = await self._call("delete_run", run_id)
        return result

    async def list_runs(self, **filters: Any) -> Sequence[RunRecord]:
        result: Sequence[RunRecord] = await self._call("list_runs", **filters)
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
        result: RunRecord | None = await self._call(
            "claim_next",
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
        """The inner store's ``claim_batch``, faults permitting (see :attr:`capabilities`)."""
        result: Sequence[Claimed] = await self._call(
            "claim_batch",
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
        """The inner store's ``advertise``, faults permitting (see :attr:`capabilities`)."""
        await self._call("advertise", owner, serves=serves, ttl=ttl)

    async def list_workers(self) -> Sequence[WorkerAd]:
        """The inner store's ``list_workers``, faults permitting (see :attr:`capabilities`)."""
        result: Sequence[WorkerAd] = await self._call("list_workers")
        return result

    async def send_message(self, run_id: str, name: str, value: str, *, now: datetime) -> Message:
        """The inner store's ``send_message``, faults permitting (see :attr:`capabilities`)."""
        result: Message = await self._call("send_message", run_id, name, value, now=now)
        return result

    async def respond(self, run_id: str, entries: Sequence[Entry], *, now: datetime) -> RunRecord:
        """The inner store's ``respond``, faults permitting (see :attr:`capabilities`)."""
        result: RunRecord = await self._call("respond", run_id, entries, now=now)
        return result

    async def load_messages(self, run_id: str, *, after: int = 0) -> Sequence[Message]:
        """The inner store's ``load_messages``, faults permitting (see :attr:`capabilities`)."""
        result: Sequence[Message] = await self._call("load_messages", run_id, after=after)
        return result

    async def watch(self, changed: Callable[[], None]) -> None:
        """The wrapped store's ``watch`` (no faults: notifications are hints), if it has one."""
        watch = getattr(self.inner, "watch", None)
        if watch is None:
            await trio.sleep_forever()
        await watch(changed)

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        result: Sequence[Entry] = await self._call("append", run_id, entries)
        return result

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        result: Sequence[Entry] = await self._call("load_entries", run_id)
        return result
