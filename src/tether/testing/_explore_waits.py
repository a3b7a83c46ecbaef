"""What a run waits for, seen from outside its tasks: requests, messages, timers.

Layer: testing (``tether.testing``).

A run that does not end is most often waiting for what nobody gives it: a
response to a ``tether.ask``, a message for ``tether.receive``, a durable
timer far off. The explorer and the bench (:mod:`tether.bench`) say which.
Every tracked task of an execution carries its
:class:`~tether._core._frame.Frame` in its context, and the frame its
:class:`~tether._core._run.RunState`, which counts the waits of the
execution's tasks: :func:`waits_of` reads them from the tasks it is given.
:attr:`Waits.forever` tells an execution that nothing in it can ever wake
(outside a worker, which would park it): every tracked task waits, and only
in ``tether.receive``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import final

import attrs
import trio

from .._core._frame import frame_var
from .._core._run import RunState

__all__ = ("Waits", "waits_of")


@final
@attrs.frozen(kw_only=True)
class Waits:
    """What the tracked tasks of one run wait for at one moment."""

    requests: tuple[str, ...] = ()  #: keys of the ``tether.ask`` requests waited on
    messages: tuple[str, ...] = ()  #: names of the messages ``tether.receive`` waits for
    timers: tuple[datetime, ...] = ()  #: due times of the durable timers waited on
    busy: int = 0  #: tracked tasks waiting in none of these (in a step, or in user code)
    executing: bool = False  #: an execution of the run was found among the tasks

    @property
    def forever(self) -> bool:
        """Every tracked task waits in ``tether.receive``, none for a response or a timer:
        only a message sent from outside can wake the run."""
        return bool(self.messages) and not (self.requests or self.timers or self.busy)

    def describe(self) -> str:
        """What the run waits for, in one line."""
        if not self.executing:
            return "no execution of the run is in progress"
        parts: list[str] = []
        if self.messages:
            names = ", ".join(repr(n) for n in self.messages)
            parts.append(f"tether.receive waits for message {names}")
        if self.requests:
            parts.append(f"tether.ask waits for a response to request {', '.join(self.requests)}")
        if self.timers:
            due = ", ".join(t.isoformat(timespec="seconds") for t in self.timers)
            parts.append(f"a durable timer waits until {due}")
        if self.busy:
            parts.append(
                f"{self.busy} task{'s' if self.busy != 1 else ''} of the workflow "
                f"{'are' if self.busy != 1 else 'is'} busy (in a step, or in its own code)"
            )
        return "; ".join(parts) or "nothing (the run is ending)"


def waits_of(run_id: str, tasks: Iterable[trio.lowlevel.Task]) -> Waits:
    """What the executions of *run_id* found among *tasks* wait for. Not a checkpoint."""
    states: dict[int, RunState] = {}
    for task in tasks:
        frame = task.context.get(frame_var)
        if frame is not None and frame.run.run_id == run_id:
            states.setdefault(id(frame.run), frame.run)
    requests: set[str] = set()
    messages: set[str] = set()
    timers: set[datetime] = set()
    busy = 0
    for state in states.values():
        requests.update(state.asking)
        messages.update(state.receiving.values())
        timers.update(state.timers.values())
        busy += max(0, state.live - state.idle)
    return Waits(
        requests=tuple(sorted(requests)),
        messages=tuple(sorted(messages)),
        timers=tuple(sorted(timers)),
        busy=busy,
        executing=bool(states),
    )
