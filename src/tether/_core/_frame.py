"""Where a tracked task is in its run, and the key and position its next call takes.

Layer: the kernel (``_core``).

Every task tether tracks runs with a :class:`Frame` in a context variable:
which run it belongs to, the key path of the step (or branch) it is inside,
and the counters that give the next call's key and position (see
:mod:`._replay`). A frame remembers the task it was made for, so a task
started in a plain ``trio.open_nursery`` (which inherits the context
variable) is recognised and refused.

Separate from :mod:`._run` (the state a run's tasks share) because most
callers need only this: the APIs that take a key (``tether.ask``,
``tether.receive``, timers, patches, child runs) find their frame and
number their call here, and nothing more of the run.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING

import trio

from .._errors import NotInRunError, UsageError

if TYPE_CHECKING:
    from ._run import RunState

__all__ = ("STEP_ALONE", "Frame", "check_key", "current_frame", "frame_var")

#: The advice of a step (or stream step) awaited outside a run (see :func:`current_frame`).
STEP_ALONE = "to test a step's logic alone, call step.fn"

#: The counter of a frame's positions, kept with its per-name counters (so a
#: ``parallel()`` block, which shares them, shares it too). Never a step name:
#: those cannot contain "#".
_POSITION = "#"


class Frame:
    """Where a tracked task is: its run, its key path and its call counters."""

    __slots__ = ("counters", "path", "run", "task")

    def __init__(self, run: RunState, path: str, task: trio.lowlevel.Task) -> None:
        self.run = run
        #: "" for the workflow itself, else the key of the enclosing step or branch
        self.path = path
        self.task = task
        self.counters: dict[str, int] | None = None  # made by the first call

    def next_call(self, name: str, explicit: str | None) -> tuple[str, int]:
        """The key (``name#n``, or *explicit*) and position of the next call of *name* here."""
        counters = self.counters
        if counters is None:
            counters = self.counters = {}
        position = counters.get(_POSITION, 0)
        counters[_POSITION] = position + 1
        if explicit is None:
            n = counters.get(name, 0)
            counters[name] = n + 1
            explicit = f"{name}#{n}"
        return (f"{self.path}/{explicit}" if self.path else explicit), position

    def key_of(self, name: str) -> str:
        """The key of a call named *name* here, taking no counter (patch markers)."""
        return f"{self.path}/{name}" if self.path else name

    @property
    def position(self) -> int:
        """The position the next call here takes."""
        return 0 if self.counters is None else self.counters.get(_POSITION, 0)

    def skip_position(self) -> None:
        """Take the next position without a key (a patch marker's)."""
        if self.counters is None:
            self.counters = {}
        self.counters[_POSITION] = self.position + 1


frame_var: ContextVar[Frame | None] = ContextVar("tether_frame", default=None)


def current_frame(what: str, *, alone: str = "") -> Frame:
    """The frame of the calling task; *what* names the API in the error.

    *alone*, if given, is the error's advice on the code's use outside a run
    (a step's: ``call step.fn``).

    Raises:
        NotInRunError: outside a run, or in a task tether does not track.
    """
    frame = frame_var.get()
    if frame is None:
        advice = f" ({alone})" if alone else ""
        raise NotInRunError(
            f"{what} was used outside a tether run; await it inside a workflow run by "
            f"engine.run(){advice}"
        )
    if frame.task is not trio.lowlevel.current_task():
        raise NotInRunError(
            f"{what} was used in a task tether does not track (one started in a plain "
            f"trio nursery inside run {frame.run.run_id!r}); start it with tether.parallel() "
            "so its key is fixed and its result journaled"
        )
    return frame


def check_key(key: object) -> str:
    """An explicit step key, validated: a non-empty string without ``/``."""
    if not isinstance(key, str) or not key or "/" in key:
        raise UsageError(f"a step key is a non-empty string without '/', not {key!r}")
    return key
