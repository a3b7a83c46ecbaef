"""What is still running: trio tasks and threads, counted against a snapshot, and named.

Layer: the bench (``tether.bench``).

A :class:`Census` is taken at a moment (before a sample, before a store
opens) and later compared with what runs then:

- **tasks**: every task of the trio run, found by walking the task tree from
  ``trio.lowlevel.current_root_task()`` through each task's child
  nurseries; the tasks that are new since the snapshot are still running;
- **threads**: ``threading.enumerate()``, less the threads that were there
  at the snapshot under the same name. A worker thread of trio's own cache
  (``trio.to_thread.run_sync``) stays alive, idle, for a while after its
  job, named ``Trio thread N``; while it runs a job it carries the job's
  name (``FUNCTION from TASK``). Idle ones are not counted: they run
  nothing. A cached thread that was idle at the snapshot and runs a job
  now is counted.

:func:`culprits` says where tasks are waiting: in the store (a method of the
store object, and whether it waits for a worker thread there), in the
user's code (the workflow, its steps), or in tether itself.
"""

from __future__ import annotations

import re
import sysconfig
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import FrameType
from typing import Final, Literal, final

import attrs
import trio

__all__ = ("Census", "Culprit", "busy_threads", "culprits", "live_tasks")

#: The name of an idle worker thread of trio's thread cache.
_IDLE_TRIO_THREAD: Final = re.compile(r"Trio thread \d+")
_TRIO_DIR: Final = str(Path(trio.__file__).resolve().parent)
_TETHER_DIR: Final = str(Path(__file__).resolve().parent.parent)
_STDLIB_DIR: Final = str(Path(sysconfig.get_paths()["stdlib"]).resolve())
#: The function of trio's that a task waiting for a worker thread is in.
_TO_THREAD: Final = "to_thread_run_sync"


def live_tasks() -> set[trio.lowlevel.Task]:
    """Every task of the current trio run (a walk of the task tree; not a checkpoint)."""
    found: set[trio.lowlevel.Task] = set()
    root = trio.lowlevel.current_root_task()
    stack = [] if root is None else [root]
    while stack:
        task = stack.pop()
        found.add(task)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return found


def busy_threads(before: dict[threading.Thread, str]) -> list[threading.Thread]:
    """Threads running now that are not in *before* (by name), idle trio workers excepted."""
    here = threading.current_thread()
    return [
        t
        for t in threading.enumerate()
        if t is not here and not _IDLE_TRIO_THREAD.fullmatch(t.name) and before.get(t) != t.name
    ]


@final
@attrs.frozen(kw_only=True)
class Census:
    """The tasks and threads running at one moment (:meth:`take` it inside a trio run)."""

    tasks: frozenset[trio.lowlevel.Task]
    threads: dict[threading.Thread, str]

    @classmethod
    def take(cls) -> Census:
        """What runs now. Not a checkpoint."""
        return cls(
            tasks=frozenset(live_tasks()),
            threads={t: t.name for t in threading.enumerate()},
        )

    def new_tasks(self, *, besides: Iterable[trio.lowlevel.Task] = ()) -> list[trio.lowlevel.Task]:
        """Tasks running now that were not at the snapshot, except *besides*."""
        mine = set(besides)
        return [t for t in live_tasks() if t not in self.tasks and t not in mine]

    def new_threads(self) -> list[threading.Thread]:
        """Threads running now that were not at the snapshot (see the module doc)."""
        return busy_threads(self.threads)


@final
@attrs.frozen(kw_only=True)
class Culprit:
    """Where one task was waiting."""

    #: ``store``: in a method of the store; ``workflow``: in the user's code (the
    #: workflow or its steps); ``tether``: in neither (tether or trio themselves)
    kind: Literal["store", "workflow", "tether"]
    where: str  #: ``SlowDiskStore.append`` or ``shop.py:42 in charge``
    in_thread: bool  #: waiting for a worker thread (``trio.to_thread.run_sync``)
    task: str  #: the task's name

    def describe(self, *, task: bool = True) -> str:
        """One line: where, and how it waits (and in which task)."""
        how = " for a worker thread" if self.in_thread else ""
        return f"{self.where} (waiting{how}{f'; task {self.task}' if task else ''})"


def _frames(task: trio.lowlevel.Task) -> Iterator[FrameType]:
    for frame, _ in task.iter_await_frames():
        yield frame


def _foreign(frame: FrameType) -> bool:
    """The frame is the user's code: neither trio's, tether's nor the standard library's."""
    name = frame.f_code.co_filename
    return not name.startswith((_TRIO_DIR, _TETHER_DIR, _STDLIB_DIR, "<"))


def culprit(task: trio.lowlevel.Task, store: object) -> Culprit | None:
    """Where *task* waits: in *store* (a frame whose ``self`` is it), in the user's code, or
    in tether; ``None`` for a task that is not waiting in a coroutine (it is running)."""
    frames = list(_frames(task))
    if not frames:
        return None
    in_thread = any(f.f_code.co_name == _TO_THREAD for f in frames)
    store_frames = [f for f in frames if f.f_locals.get("self") is store]
    if store_frames:
        method = store_frames[0].f_code.co_name
        return Culprit(
            kind="store",
            where=f"{type(store).__qualname__}.{method}",
            in_thread=in_thread,
            task=task.name,
        )
    user = [f for f in frames if _foreign(f)]
    if user:
        inner = user[-1]
        place = f"{Path(inner.f_code.co_filename).name}:{inner.f_lineno} in {inner.f_code.co_name}"
        return Culprit(kind="workflow", where=place, in_thread=in_thread, task=task.name)
    inner = frames[-1]
    place = f"{inner.f_code.co_qualname}"
    return Culprit(kind="tether", where=place, in_thread=in_thread, task=task.name)


def culprits(tasks: Iterable[trio.lowlevel.Task], store: object) -> list[Culprit]:
    """The :func:`culprit` of each of *tasks* that is waiting, store ones first."""
    found = [c for t in tasks if (c := culprit(t, store)) is not None]
    order = {"store": 0, "workflow": 1, "tether": 2}
    return sorted(found, key=lambda c: order[c.kind])
