"""The faults a :class:`~tether.testing.FaultyStore` applies, and the crash it simulates.

Layer: testing (``tether.testing``).

:class:`Call` (one store call, as a fault sees it), the :class:`Fault`
protocol, the built-in kinds (:class:`Delay`, :class:`Hang`, :class:`Raise`,
:class:`Crash`, :class:`Do`), :class:`SimulatedCrash`, one life of the
store's process (which a crash ends), and the lookup of the torn-write
simulation that ``Crash(torn=True)`` needs in the wrapped store. Apart from
the store because a fault acts only on the call it is given, through
``call.store``: it needs none of the wrapper's bookkeeping (its rules, its
counts, its store methods), and the explorers' own faults and crash checks
(``_explore_leases``, ``_explore_execution``) need only this module.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol, final, runtime_checkable

import attrs
import trio

from .._errors import StoreError, UsageError
from ..stores._store import Store


class FaultTarget(Protocol):
    """The :class:`FaultyStore` a call went to, as a fault uses it.

    A protocol, so that the faults need not import the store that applies them.
    """

    @property
    def inner(self) -> Store:
        """The wrapped store."""
        ...

    @property
    def crashed(self) -> bool:
        """Whether the store has crashed (and not restarted since)."""
        ...

    def crash(self, where: str = ...) -> None:
        """Crash the store now; *where* says where, in every later call's error."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Sleep *seconds*, or until the store crashes."""
        ...

    async def sleep_forever(self) -> None:
        """Wait until the store crashes."""
        ...


__all__ = (
    "Call",
    "FaultTarget",
    "Crash",
    "Delay",
    "Do",
    "Fault",
    "Hang",
    "Raise",
    "SimulatedCrash",
)

#: The private method a store implements to simulate a torn write of a call.
_TORN: Final = {"append": "_simulate_torn_append", "update_run": "_simulate_torn_update"}

TORN_AFTER: Final = (
    "Crash(torn=True) cannot apply after the call: by then the write has landed whole; "
    "inject it with after=False, or use Crash() with after=True for a crash right after "
    "the write"
)

_AFTERWARDS: Final = (
    "open a new engine on the inner store (store.inner) to resume, as a new process "
    "would, or call store.restart() and open a new engine on the FaultyStore"
)


class SimulatedCrash(BaseException):
    """The process that owns the store died (simulated by :class:`FaultyStore`).

    Raised by the call that crashed the store (a :class:`Crash` fault), by
    every later call until :meth:`FaultyStore.restart`, and by the calls in
    flight at the moment of the crash. A ``BaseException``, like
    ``KeyboardInterrupt``: ``except Exception`` in workflow or step code
    cannot swallow it, so the run stops where a real crash would stop it.

    What was stored before the crash stays stored (and a write that was in
    the inner store when the crash came may have landed); resuming from a
    new engine is safe, and is what the crash test should do next.
    """


@final
@attrs.frozen(kw_only=True)
class Call:
    """One call to a :class:`FaultyStore`, as a fault sees it."""

    store: FaultTarget  #: the FaultyStore called (its ``inner`` is the wrapped store)
    method: str  #: the store method, e.g. ``"append"``
    #: which call of *method* this is, counted from 1 (a restart keeps counting); for
    #: ``append``, which save its first entry is (appends are counted per save)
    n: int
    args: tuple[Any, ...]  #: the call's arguments (for ``append``: ``run_id, entries``)
    after: bool  #: the fault applies after the inner call returned (the write landed)
    #: the call's keyword arguments (``claim``'s ``ttl``, ``create``, ``takeover``, ...)
    kwargs: Mapping[str, Any] = attrs.field(factory=dict)


@runtime_checkable
class Fault(Protocol):
    """What :meth:`FaultyStore.inject` takes: an object with an async ``apply``.

    ``apply(call)`` runs before the inner call (or, with ``inject(...,
    after=True)``, after it returned). Returning lets the call go on;
    raising fails the call with that exception. A fault that waits should use
    :meth:`FaultyStore.sleep` or :meth:`FaultyStore.sleep_forever` (through
    ``call.store``), so that a crash of the store wakes it.
    """

    async def apply(self, call: Call) -> None:
        """Act on *call*: wait, raise, record, crash the store, or nothing."""


@final
@attrs.frozen
class Delay:
    """Sleep *seconds*, then let the call go on (a slow store, or a slow acknowledgement).

    The sleep is a checkpoint: cancellable. A crash of the store during it
    raises :class:`SimulatedCrash`.
    """

    seconds: float

    async def apply(self, call: Call) -> None:
        """Sleep with :meth:`FaultyStore.sleep`."""
        await call.store.sleep(self.seconds)


@final
@attrs.frozen
class Hang:
    """Never return (a hung store, or an acknowledgement that never comes).

    Cancellable; a crash of the store wakes it with :class:`SimulatedCrash`.
    Before the call, the inner store is not called.
    """

    async def apply(self, call: Call) -> None:
        """Wait with :meth:`FaultyStore.sleep_forever`."""
        await call.store.sleep_forever()


@final
@attrs.frozen
class Raise:
    """Fail the call: raise ``error()``, by default a ``StoreError`` naming the call.

    Before the call, the inner store is not called. After it (``inject(...,
    after=True)``), the write landed but the caller sees an error: an
    *unclear failure*, after which a retry must not store twice.
    """

    error: Callable[[], BaseException] | None = None

    async def apply(self, call: Call) -> None:
        """A checkpoint, then the exception."""
        await trio.lowlevel.checkpoint()
        if self.error is not None:
            raise self.error()
        if call.after:
            raise StoreError(
                f"injected failure of {describe(call)} after the inner store "
                "returned (the write landed)"
            )
        raise StoreError(f"injected failure of {describe(call)}")


@final
@attrs.frozen
class Crash:
    """Crash the store at this call: it raises :class:`SimulatedCrash`, as every later call does.

    Before the call, the inner store is not called; after it
    (``inject(..., after=True)``) the write landed and the process died before
    answering. See :class:`FaultyStore` for what a crashed store does.

    With ``torn=True`` (``append`` and ``update_run``, before the call only),
    the crash comes in the middle of the write: the inner store is left as a
    real crash there would leave it, half a temporary file on disk for a
    :class:`~tether.FileStore`. Only stores that can simulate it support
    it; :meth:`FaultyStore.inject` refuses the others.
    """

    torn: bool = False

    async def apply(self, call: Call) -> None:
        """Crash ``call.store`` (tearing the write first if asked), then raise."""
        where = f"at {describe(call)}"
        if call.after:
            where += ", after the inner store returned (the write landed)"
        if self.torn:
            if call.after:
                raise UsageError(TORN_AFTER)
            tear = torn_writer(call.store.inner, call.method)
            where += ", in the middle of its write (torn)"
            try:
                tear(*call.args)
            finally:
                call.store.crash(where)
        else:
            call.store.crash(where)
        # A schedule point, never a cancel point: the crash is what this call reports.
        await trio.lowlevel.cancel_shielded_checkpoint()
        raise SimulatedCrash(f"simulated crash of {call.store!r} {where}; {_AFTERWARDS}")


@final
@attrs.frozen
class Do:
    """Await ``afn(call)``: a fault of your own.

    *afn* may sleep (use ``call.store.sleep`` so that a crash wakes it),
    raise to fail the call, record what it sees (``call.args``, or the inner
    store's state through ``call.store.inner``), or crash the store with
    ``call.store.crash()``, after which the call raises
    :class:`SimulatedCrash`. Returning normally lets the call go on.
    """

    afn: Callable[[Call], Awaitable[None]]

    async def apply(self, call: Call) -> None:
        """Await ``afn(call)``."""
        await self.afn(call)


def torn_writer(store: object, method: str) -> Callable[..., None]:
    """The torn-write simulation for *method* of *store* or a store it wraps (``.inner``).

    Raises:
        UsageError: *method* has no torn form, or no store in the chain supports it.
    """
    name = _TORN.get(method)
    if name is None:
        raise UsageError(
            f"Crash(torn=True) applies to append and update_run, not {method}: torn "
            f"writes are simulated for those two only; crash {method} with Crash()"
        )
    seen: set[int] = set()
    node: object = store
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        writer = getattr(node, name, None)
        if callable(writer):
            return writer  # type: ignore[no-any-return]
        node = getattr(node, "inner", None)
    # SQLite's real crash behaviour is tested by SIGKILLing a writer (tests/test_crash.py).
    raise UsageError(
        f"Crash(torn=True) needs a store that can simulate a torn {method}, and {store!r} "
        "(with the stores it wraps) cannot. FileStore can: a crash in the middle of its "
        "write leaves half a temporary file. MemoryStore writes are atomic within the "
        "process, and SQLiteStore rolls back an uncommitted transaction, so a torn write "
        "there is the same as no write: use Crash() for those."
    )


@attrs.define(eq=False)
class Life:
    """One life of the store's process: ends with a crash (or a restart)."""

    ended: trio.Event = attrs.field(factory=trio.Event)
    cause: str | None = None  # where it crashed, once it has

    def end(self, cause: str) -> None:
        if self.cause is None:
            self.cause = cause
            self.ended.set()

    def dead(self, what: str) -> SimulatedCrash:
        """The error for *what* (a call, or a wait) on this ended life."""
        return SimulatedCrash(f"{what}: the store crashed {self.cause}; {_AFTERWARDS}")


def describe(call: Call) -> str:
    """``append call #3``; for an append of several saves, ``append call #3-5``."""
    count = len(call.args[1]) if call.method == "append" else 1
    if count <= 1:
        return f"{call.method} call #{call.n}"
    return f"{call.method} call #{call.n}-{call.n + count - 1}"
