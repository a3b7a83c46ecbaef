"""The parts of a cancel sample around the workflow: its store, its fault, its first run.

Layer: the bench (``tether.bench``).

- :class:`Holding`: under a mock clock, the store wrapped in
  :class:`~tether.testing.ClockHoldingStore` (virtual time waits for its
  threads, so the run gets as far as in real time) until the fault is
  reached; from then on virtual time moves while a thread works, so a store
  call that cannot be abandoned lets the clock pass the deadline, and shows.
- :class:`Watched`: the user's fault, remembering that it was reached.
- :func:`probe`: one undisturbed run (no fault, no deadline) that measures
  how long the workflow takes, the store calls it makes, how many steps it
  has in flight at once, and how it ends (with the requests it paused on);
  bounded by the phase timeout (:func:`~._phases.within`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs
import trio

from .._api._workflow import Workflow
from .._core._clock import Clock
from .._core._hooks import HookEvent
from .._engine._engine import open_engine
from .._errors import Paused, TetherError
from ..stores import Store
from ..stores._capabilities import Capability, has
from ..testing import ClockHoldingStore, FaultyStore, StoreFactory
from ..testing._conformance_base import maybe_await
from ..testing._faults import Call, Fault
from ._phases import within
from ._results import Probe

__all__ = ("Holding", "Watched", "delete_quietly", "make_store", "outcome_of", "probe")


async def make_store(factory: StoreFactory) -> Store:
    """A fresh, unopened store from *factory* (a sync or async callable)."""
    store: Store = await maybe_await(factory())
    return store


class Holding:
    """*inner*, holding a mock clock still while it works until :meth:`release` (see the
    module doc). Every store method is forwarded, with its keyword arguments."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.held = True
        self._holder = ClockHoldingStore(inner)

    def __repr__(self) -> str:
        return repr(self.inner)

    def __getattr__(self, name: str) -> Any:
        bare = getattr(self.inner, name)
        held = getattr(self._holder, name, None)
        if held is None or not inspect.iscoroutinefunction(bare):
            return bare

        # Decided at each call, not at the lookup: FaultyStore looks the method up
        # before it applies the fault that releases the clock.
        @functools.wraps(bare)
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await (held if self.held else bare)(*args, **kwargs)

        return call

    def release(self) -> None:
        """From now on, calls go to the store itself: virtual time moves while it works."""
        self.held = False

    def hold(self) -> None:
        """From now on, virtual time waits for the store's calls again."""
        self.held = True


@attrs.define
class Watched:
    """*fault*, counting the calls it was applied to (then calling *reached*)."""

    fault: Fault
    reached: Callable[[], None] | None = None
    count: int = 0

    async def apply(self, call: Call) -> None:
        """Count the call, call *reached*, then apply the fault."""
        self.count += 1
        if self.reached is not None:
            self.reached()
        await self.fault.apply(call)


@attrs.define
class _Width:
    """A hook that measures the most steps in flight at once."""

    now: int = 0
    most: int = 0

    async def on_step_start(self, event: HookEvent) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        await trio.lowlevel.checkpoint()

    async def on_step_end(self, event: HookEvent) -> None:
        self.now -= 1
        await trio.lowlevel.checkpoint()


def outcome_of(exc: BaseException | None) -> str:
    """``completed`` (no exception), ``paused``, or ``failed: ErrorType`` (a group's
    types in brackets)."""
    if exc is None:
        return "completed"
    if isinstance(exc, Paused):
        return "paused"
    name = type(exc).__name__
    if isinstance(exc, BaseExceptionGroup):
        leaves = sorted({type(e).__name__ for e in _leaves(exc)})
        name += f"[{', '.join(leaves)}]"
    return f"failed: {name}"


def _leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out += _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return out


async def delete_quietly(store: Store, run_id: str) -> None:
    """Delete *run_id* if *store* can (``delete_run``); a refusal leaves it. A checkpoint."""
    if not has(store, Capability.DELETE):
        await trio.lowlevel.checkpoint()
        return
    with contextlib.suppress(TetherError):  # left in the store: a bench run, harmless
        await store.delete_run(run_id)  # type: ignore[attr-defined]


async def probe(
    wf: Workflow[..., Any],
    args: tuple[Any, ...],
    *,
    factory: StoreFactory,
    virtual: bool,
    clock: Clock | None,
    keep_runs: bool,
    timeout: float,
) -> tuple[Probe, str]:
    """One undisturbed run of ``wf(*args)`` on a fresh store from *factory*, within
    *timeout* seconds; what it measured, and the store's repr.

    A checkpoint; cancellation propagates (the run is left resumable).

    Raises:
        PhaseStuckError: the run did not end within *timeout*, or waits for a message.
        TetherError: the store or tether failed (a store error, a codec error):
            the bench cannot go on.
    """
    inner = await make_store(factory)
    store: Any = Holding(inner) if virtual else inner
    faulty = FaultyStore(store)
    width = _Width()
    run_id = f"bench-probe-{uuid.uuid4().hex[:12]}"
    async with open_engine(faulty, hooks=[width], clock=clock) as engine:
        before = Counter(faulty.calls)
        start = trio.current_time()
        error: BaseException | None = None
        try:
            await within(
                lambda: engine.run(wf, *args, run_id=run_id),
                phase=f"the undisturbed run of {wf.name} (no fault, no deadline)",
                run_id=run_id,
                timeout=timeout,
                store=inner,
            )
        except TetherError:
            raise
        except Exception as exc:  # the workflow's own outcome: a failure, a pause
            error = exc
        seconds = trio.current_time() - start
        calls = Counter(faulty.calls)
        calls.subtract(before)
        record = await inner.get_run(run_id)
        if not keep_runs:
            await delete_quietly(inner, run_id)
    outcome = outcome_of(error)
    measured = Probe(
        seconds=seconds,
        calls={method: n for method, n in sorted(calls.items()) if n > 0},
        width=max(1, width.most),
        outcome=outcome,
        result=record.result if record is not None and outcome == "completed" else None,
        requests=tuple(r.key for r in error.requests) if isinstance(error, Paused) else (),
    )
    return measured, repr(inner)
