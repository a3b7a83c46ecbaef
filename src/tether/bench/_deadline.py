"""One sample under a caller deadline: the harness the workflow and its floor share.

Layer: the bench (``tether.bench``).

:func:`under_deadline` runs a body inside ``trio.move_on_at(deadline)``, as
a caller with a deadline would, and measures the overshoot: the time from
the deadline until the scope has exited in the caller's task. A watcher
task looks at the run once, *late* seconds after the deadline, if the body
has not returned by then, and names what the run is waiting for (the tasks
and threads that hold the caller, :mod:`._census`).

The floor (:func:`bare_nursery`) is the least any trio code can do: a
nursery of *width* tasks, each in ``trio.sleep_forever()``, cancelled by the
same deadline, measured by the same harness.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, final

import attrs
import trio

from ._census import Census, Culprit, culprits

__all__ = ("Timed", "bare_nursery", "under_deadline")


@final
@attrs.frozen(kw_only=True)
class Timed:
    """What one sample under a deadline measured."""

    #: seconds from the deadline until the scope exited (``None``: the body returned or
    #: raised before the deadline, and was not cancelled by it)
    overshoot: float | None
    outcome: BaseException | None  #: what the body raised, when it did not return
    value: Any  #: what the body returned
    #: what held the caller *late* seconds after the deadline (empty: returned by then)
    held: tuple[Culprit, ...]
    #: names of the threads that ran, not idle, *late* seconds after the deadline
    held_threads: tuple[str, ...]
    #: names of the tasks of the sample still running when the caller had returned
    tasks_left: tuple[str, ...]
    #: names of the threads still running (not idle) when the caller had returned
    threads_left: tuple[str, ...]


async def under_deadline(
    body: Callable[[], Awaitable[Any]],
    *,
    deadline: float,
    late: float,
    store: object = None,
    on_late: Callable[[tuple[Culprit, ...], tuple[str, ...]], None] | None = None,
) -> Timed:
    """Await ``body()`` under ``trio.move_on_at(deadline)``; what it measured.

    *late* seconds after *deadline*, if the body is still running, a watcher
    names the tasks of the sample that are waiting (in *store*, in the
    user's code) and the threads that run, and calls ``on_late`` with them.
    Tasks and threads still running after the body returned are counted
    against a census taken just before it started (the watcher excepted).

    A checkpoint. Exceptions of the body are returned, not raised (in
    :attr:`Timed.outcome`); a cancellation from outside (not the deadline)
    propagates.
    """
    before = Census.take()
    held: tuple[Culprit, ...] = ()
    held_threads: tuple[str, ...] = ()
    finished = False

    async def watch() -> None:
        nonlocal held, held_threads
        await trio.sleep_until(deadline + late)
        if finished:
            return
        held = tuple(culprits(before.new_tasks(besides=[me]), store))
        held_threads = tuple(t.name for t in before.new_threads())
        if on_late is not None:
            on_late(held, held_threads)

    outcome: BaseException | None = None
    value: Any = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        me = next(iter(nursery.child_tasks))
        with trio.move_on_at(deadline) as scope:
            try:
                value = await body()
            except Exception as exc:  # the body's own outcome: reported, not raised
                outcome = exc
        returned = trio.current_time()
        finished = True
        tasks_left = tuple(t.name for t in before.new_tasks(besides=[me]))
        threads_left = tuple(t.name for t in before.new_threads())
        nursery.cancel_scope.cancel()
    overshoot = returned - deadline if scope.cancelled_caught else None
    return Timed(
        overshoot=overshoot,
        outcome=outcome,
        value=value,
        held=held,
        held_threads=held_threads,
        tasks_left=tasks_left,
        threads_left=threads_left,
    )


def bare_nursery(width: int) -> Callable[[], Awaitable[None]]:
    """The floor's body: a nursery of *width* tasks that each sleep forever."""

    async def body() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(width):
                nursery.start_soon(trio.sleep_forever)

    return body
