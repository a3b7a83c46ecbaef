"""Every phase of a bench ends: a timeout per phase, and a run that can never end is named.

Layer: the bench (``tether.bench``).

A bench runs the user's workflow without a caller's deadline twice: the
undisturbed run (the probe) and each sample's resume. A workflow that waits
for what a bench never gives it (a message for ``tether.receive``, a
response for ``tether.ask`` while a day-long timer keeps the run from
pausing, a step that never returns) would hold the bench forever, silently.
:func:`within` awaits such a phase beside a watcher that looks at the run
every :data:`LOOK` seconds: past the phase's timeout, or once every task of
the run has waited only in ``tether.receive`` for :data:`FOREVER` seconds
(nothing in the bench can wake it), it cancels the phase and raises
:class:`PhaseStuckError`, naming the phase and what the run waits for.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar, final

import trio

from .._errors import TetherError
from ..testing._explore_waits import Waits, waits_of
from ._census import Census, culprits

__all__ = ("FOREVER", "LOOK", "PhaseStuckError", "within")

T = TypeVar("T")

#: Seconds between two looks at the run (on the bench's clock).
LOOK: Final = 0.05
#: Seconds a run must wait only in ``tether.receive`` before it is taken to wait forever:
#: longer than a waiting receive reads its mailbox apart, so a message a step of the
#: run itself sent would have been taken by then.
FOREVER: Final = 2.0


@final
class PhaseStuckError(TetherError):
    """A phase of a bench did not end: it ran past its timeout, or its run waits for a
    message that nothing in the bench will send. The message names the phase and what
    the run waits for."""

    def __init__(self, message: str, *, phase: str, waits: Waits) -> None:
        super().__init__(message)
        self.phase = phase  #: the phase, as the message names it
        self.waits = waits  #: what the run waited for when the bench gave up on it


#: What the timeout error advises by default (a phase the phase timeout bounds).
_LONGER: Final = "give it longer (--phase-timeout SECONDS, phase_timeout=)"


def _stuck(
    phase: str, waits: Waits, timeout: float | None, held: str, longer: str
) -> PhaseStuckError:
    if timeout is None:
        message = (
            f"{phase} cannot end: {waits.describe()}, and nothing sends a bench run messages; "
            "bench a workflow that ends without them (one that takes the message's value as "
            "an argument)"
        )
    else:
        message = (
            f"{phase} did not end within its timeout of {timeout:g} s: {waits.describe()}"
            f"{held}; {longer}, or bench a workflow that ends without what it waits for"
        )
    return PhaseStuckError(message, phase=phase, waits=waits)


async def within(
    body: Callable[[], Awaitable[T]],
    *,
    phase: str,
    run_id: str,
    timeout: float,
    store: object = None,
    longer: str = _LONGER,
) -> T:
    """``await body()``, a phase of a bench about the run *run_id*, bounded (see the module).

    *phase* names it in the error (``the undisturbed run of shop.checkout``);
    *store* is the store whose methods are named when they hold the run;
    *longer* says, in the error, how to give the phase more time.

    A checkpoint; a cancellation from outside propagates.

    Raises:
        PhaseStuckError: the phase did not end within *timeout* seconds, or its run waits
            forever for a message (the body was cancelled first, as a caller would).
        Exception: whatever ``body()`` raised.
    """
    before = Census.take()
    stuck: list[PhaseStuckError] = []
    value: Any = None
    error: Exception | None = None

    async def watch(started: trio.Event) -> None:
        me = trio.lowlevel.current_task()
        started.set()
        deadline = trio.current_time() + timeout
        since: float | None = None
        while True:
            await trio.sleep(max(0.0, min(LOOK, deadline - trio.current_time())))
            now = trio.current_time()
            tasks = before.new_tasks(besides=[me])
            waits = waits_of(run_id, tasks)
            if not waits.forever:
                since = None
            elif since is None:
                since = now
            if since is not None and now - since >= FOREVER:
                stuck.append(_stuck(phase, waits, None, "", longer))
                break
            if now >= deadline:
                seen = [
                    c.describe(task=False) for c in culprits(tasks, store) if c.kind != "tether"
                ]
                held = f"; held in {', '.join(sorted(set(seen)))}" if seen else ""
                stuck.append(_stuck(phase, waits, timeout, held, longer))
                break
        scope.cancel()

    async with trio.open_nursery() as nursery:
        scope = nursery.cancel_scope
        ready = trio.Event()
        nursery.start_soon(watch, ready)
        await ready.wait()
        try:
            value = await body()
        except Exception as exc:  # the phase's own outcome: raised once the watcher is gone
            error = exc
        finally:
            scope.cancel()
    if stuck:
        raise stuck[0]
    if error is not None:
        raise error
    return value  # type: ignore[no-any-return]
