"""A store wrapper that injects faults into chosen calls."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, final

import attrs
import trio

from .._errors import StoreError
from ..stores._protocol import Entry, RunRecord, Store

__all__ = ("Delay", "Fault", "FaultyStore", "Hang", "Raise")

_METHODS = (
    "open",
    "close",
    "create_run",
    "update_run",
    "get_run",
    "list_runs",
    "append",
    "load_entries",
)


@final
@attrs.frozen
class Delay:
    """Sleep *seconds* (a checkpoint: cancellable), then make the call."""

    seconds: float

    async def apply(self, method: str, n: int) -> None:
        await trio.sleep(self.seconds)


@final
@attrs.frozen
class Hang:
    """Never return (until cancelled); the call is not made."""

    async def apply(self, method: str, n: int) -> None:
        await trio.sleep_forever()


@final
@attrs.frozen
class Raise:
    """Raise an exception instead of making the call (a ``StoreError`` by default)."""

    error: Callable[[], BaseException] | None = None

    async def apply(self, method: str, n: int) -> None:
        await trio.lowlevel.checkpoint()
        if self.error is not None:
            raise self.error()
        raise StoreError(f"injected failure of {method} call #{n}")


Fault = Delay | Hang | Raise


@attrs.define
class _Rule:
    method: str
    fault: Fault
    at: frozenset[int] | None
    when: Callable[..., bool] | None
    times: float


@final
class FaultyStore:
    """Wrap *inner* and inject faults into the calls chosen with :meth:`inject`.

    Calls are counted per method, from 1, in :attr:`calls`. The first rule
    that matches a call applies; a call no rule matches goes straight to the
    inner store. Fault injection happens *before* the inner call, so an
    injected failure or hang means the inner store was not written.

    >>> store = FaultyStore(MemoryStore())
    >>> store.inject("append", Hang(), at=2)   # the second append hangs forever
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self._rules: list[_Rule] = []

    def __repr__(self) -> str:
        return f"FaultyStore({self.inner!r})"

    def inject(
        self,
        method: str,
        fault: Fault,
        *,
        at: int | Sequence[int] | None = None,
        when: Callable[..., bool] | None = None,
        times: int | None = None,
    ) -> None:
        """Apply *fault* to calls of *method*.

        Args:
            at: call number(s) of *method*, counted from 1; default every call.
            when: a predicate called with the call's arguments; the fault
                applies only where it returns true.
            times: apply at most this many times (default: no limit).
        """
        if method not in _METHODS:
            raise ValueError(f"unknown store method {method!r}; one of {', '.join(_METHODS)}")
        calls = None if at is None else frozenset([at] if isinstance(at, int) else at)
        self._rules.append(_Rule(method, fault, calls, when, math.inf if times is None else times))

    def clear(self) -> None:
        """Remove every rule (call counts stay)."""
        self._rules.clear()

    async def _call(self, method: str, *args: Any) -> Any:
        self.calls[method] += 1
        n = self.calls[method]
        for rule in self._rules:
            if (
                rule.method == method
                and rule.times > 0
                and (rule.at is None or n in rule.at)
                and (rule.when is None or rule.when(*args))
            ):
                rule.times -= 1
                await rule.fault.apply(method, n)
                break
        return await getattr(self.inner, method)(*args)

    async def open(self) -> None:
        await self._call("open")

    async def close(self) -> None:
        await self._call("close")

    async def create_run(self, record: RunRecord) -> None:
        await self._call("create_run", record)

    async def update_run(self, record: RunRecord) -> None:
        await self._call("update_run", record)

    async def get_run(self, run_id: str) -> RunRecord | None:
        result: RunRecord | None = await self._call("get_run", run_id)
        return result

    async def list_runs(self) -> Sequence[RunRecord]:
        result: Sequence[RunRecord] = await self._call("list_runs")
        return result

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        result: Sequence[Entry] = await self._call("append", run_id, entries)
        return result

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        result: Sequence[Entry] = await self._call("load_entries", run_id)
        return result
