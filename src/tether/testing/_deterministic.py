"""Seeded, reproducible trio schedules, through a private trio hook.

Layer: testing (``tether.testing``).

Trio's run loop randomizes the order of each batch of runnable tasks. When
the module global ``trio._core._run._ALLOW_DETERMINISTIC_SCHEDULING`` is true
(Hypothesis' trio plugin sets it), each batch is first sorted by the order
its tasks were spawned in and then shuffled with ``trio._core._run._r``, a
:class:`random.Random`. Seeding ``_r`` then fixes the order tasks run in, and
a :class:`trio.testing.MockClock` that autojumps fixes the time they see. The
hook is private to trio, so tether pins the trio versions it was checked
against (:data:`SUPPORTED_TRIO`) and refuses others with
:class:`~tether.UnsupportedTrioError` rather than silently losing
reproducibility.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import re
import types
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Final, TypeAlias, TypeVar, TypeVarTuple, Unpack, final

import trio
import trio.abc
import trio.lowlevel
import trio.testing

from .._errors import UnsupportedTrioError, UsageError

__all__ = (
    "SUPPORTED_TRIO",
    "ScheduleTrace",
    "TraceEvent",
    "check_trio_support",
    "run_deterministic",
    "seeded_schedule",
)

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

#: The trio versions seeded scheduling supports: ``>=SUPPORTED_TRIO[0],<SUPPORTED_TRIO[1]``.
#: The same range is pinned in pyproject.toml. The hook's source is the same in
#: 0.30.0 and 0.35.0, and both give the same traces; move the upper bound only after
#: checking the new release's run loop (the ``batch.sort`` by ``_counter``).
SUPPORTED_TRIO: Final = ("0.30", "0.36")

_FLAG: Final = "_ALLOW_DETERMINISTIC_SCHEDULING"
_RANGE: Final = f">={SUPPORTED_TRIO[0]},<{SUPPORTED_TRIO[1]}"

# PEP 440, loosely: release, then optional pre-, post- and dev-release parts,
# then an optional local label ("+dev", which trio's own main branch uses).
_VERSION: Final = re.compile(
    r"""v?(?P<release>\d+(?:\.\d+)*)
    (?P<pre>[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_.]?\d*)?
    (?P<post>[-_.]?(?:post|rev|r)[-_.]?\d*)?
    (?P<dev>[-_.]?dev[-_.]?\d*)?
    (?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?""",
    re.VERBOSE | re.IGNORECASE,
)


def _release(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _padded(release: tuple[int, ...], length: int) -> tuple[int, ...]:
    return release + (0,) * (length - len(release))


def in_supported_range(version: str) -> bool:
    """Whether *version* satisfies ``>=LOW,<HIGH`` the way pip reads it.

    A pre- or dev-release of LOW is older than LOW, so it is outside; one of
    HIGH is excluded by ``<HIGH`` (PEP 440), as is anything unparsable.
    """
    match = _VERSION.fullmatch(version.strip())
    if match is None:
        return False
    release = _release(match["release"])
    low, high = _release(SUPPORTED_TRIO[0]), _release(SUPPORTED_TRIO[1])
    n = max(len(release), len(low), len(high))
    release, low, high = _padded(release, n), _padded(low, n), _padded(high, n)
    prerelease = match["pre"] is not None or match["dev"] is not None
    if release < low or (release == low and prerelease):
        return False
    return release < high


def _unsupported(problem: str) -> UnsupportedTrioError:
    return UnsupportedTrioError(
        f"{problem}. Seeded scheduling supports trio{_RANGE} only: it drives trio's "
        f"scheduler through a hook private to trio (trio._core._run.{_FLAG} and "
        f"trio._core._run._r), which other versions may change or remove. "
        f"Install a supported trio: pip install 'trio{_RANGE}'"
    )


def check_trio_support() -> types.ModuleType:
    """Check that the installed trio has the scheduling hook, and return its module.

    Returns:
        ``trio._core._run``, the module holding the hook.

    Raises:
        UnsupportedTrioError: if ``trio.__version__`` is outside
            :data:`SUPPORTED_TRIO`, or the hook's attributes are missing or of
            an unexpected type. Nothing is changed either way.
    """
    installed = str(getattr(trio, "__version__", "unknown"))
    if not in_supported_range(installed):
        raise _unsupported(f"trio {installed} is installed")
    from trio._core import _run as run_module  # here: only in-range trios are known to have it

    if not isinstance(getattr(run_module, _FLAG, None), bool):
        raise _unsupported(f"trio {installed} has no boolean trio._core._run.{_FLAG}")
    if not isinstance(getattr(run_module, "_r", None), random.Random):
        raise _unsupported(f"trio {installed} has no random.Random at trio._core._run._r")
    if not hasattr(trio.lowlevel.Task, "_counter"):
        raise _unsupported(f"trio {installed} has no spawn counter trio.lowlevel.Task._counter")
    return run_module


@contextlib.contextmanager
def seeded_schedule(seed: int) -> Iterator[None]:
    """Make every trio run started inside the block schedule its tasks by *seed*.

    Turns trio's deterministic scheduling on and seeds its scheduler's random
    generator; on exit, however the block ends, both are restored to what they
    were (so nested blocks, and Hypothesis' own use of the hook, are left as
    they were found). The same seed gives the same task order only together
    with a clock that does not depend on real time:
    :func:`run_deterministic` adds one.

    The hook is process-wide: do not run trio in another thread meanwhile.
    Enter the block before ``trio.run`` (in a sync test, or a sync fixture),
    not inside a run, whose scheduler is already going.

    Args:
        seed: a non-negative int.

    Raises:
        UsageError: if *seed* is not a non-negative int, or the block is
            entered inside a trio run.
        UnsupportedTrioError: if the installed trio does not have the hook
            (see :data:`SUPPORTED_TRIO`). Nothing is changed.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UsageError(f"seeded_schedule() takes a non-negative int seed, not {seed!r}")
    if trio.lowlevel.in_trio_run():
        raise UsageError(
            "seeded_schedule() must be entered before trio.run, not inside a run: "
            "call run_deterministic(), or use seeded_schedule() in a sync test or a sync fixture"
        )
    run_module = check_trio_support()
    scheduler: random.Random = run_module._r
    saved_flag: bool = getattr(run_module, _FLAG)
    saved_state = scheduler.getstate()
    try:
        setattr(run_module, _FLAG, True)  # Final in trio's stubs, hence setattr
        scheduler.seed(seed)
        yield
    finally:
        setattr(run_module, _FLAG, saved_flag)
        scheduler.setstate(saved_state)


def run_deterministic(
    async_fn: Callable[[Unpack[Ts]], Awaitable[T]],
    *args: *Ts,
    seed: int = 0,
    clock: trio.abc.Clock | None = None,
    instruments: Sequence[trio.abc.Instrument] = (),
) -> T:
    """``trio.run(async_fn, *args)`` with a schedule that *seed* fixes.

    Runs inside :func:`seeded_schedule` with, unless *clock* is given, a
    ``MockClock(autojump_threshold=0)``: virtual time that jumps to the next
    deadline whenever every task is blocked.

    Reproducible, for the same seed, code and trio: the order tasks are
    spawned, stepped and finish in, and the virtual time each sees -- so
    everything a workflow on a :class:`tether.MemoryStore` does. A different
    seed gives (usually) another valid interleaving.

    Not reproducible: anything that waits on the real world. Threads (including
    ``trio.to_thread``) and real I/O finish in real time, and the autojumping
    clock treats a task waiting for them as idle. Thread-backed stores, such as
    :class:`tether.SQLiteStore` and :class:`tether.FileStore`, therefore
    complete their calls in an order the seed does not decide. Default run ids
    are random: pass ``run_id=`` to ``engine.run`` to compare runs.

    Args:
        async_fn: the async function to run, called as ``async_fn(*args)``.
        *args: its positional arguments.
        seed: the schedule's seed, a non-negative int.
        clock: the clock for the run (default: an autojumping MockClock).
        instruments: trio instruments for the run, e.g. a :class:`ScheduleTrace`.

    Returns:
        What *async_fn* returns.

    Raises:
        UsageError: for a bad seed, or when called inside a trio run.
        UnsupportedTrioError: if the installed trio lacks the hook.
        BaseException: whatever *async_fn* raises, unchanged.
    """
    with seeded_schedule(seed):
        if clock is None:
            clock = trio.testing.MockClock(autojump_threshold=0)
        return trio.run(async_fn, *args, clock=clock, instruments=instruments)


#: One scheduling event: ``(virtual_time, kind, task_index, task_name)``.
TraceEvent: TypeAlias = tuple[float, str, int, str]


@final
class ScheduleTrace(trio.abc.Instrument):
    """A trio instrument that records the schedule of a run, for comparing runs.

    Pass it to :func:`run_deterministic` (or ``trio.run``) as an instrument.
    :attr:`events` lists, in order, one :data:`TraceEvent`
    ``(virtual_time, kind, task_index, task_name)`` each time a task is
    spawned (``"spawn"``), takes a step (``"step"``) or exits (``"exit"``).
    ``task_index`` is the order the task was spawned in within the run (0 for
    the first), so object ids and addresses never enter the trace, and two
    runs with the same schedule give equal traces. Each run instrumented
    starts a fresh trace.

    Task names include what tasks were named after, and tether names a run's
    tasks after its run id, which ``engine.run`` picks at random by default:
    pass a fixed ``run_id=`` to compare traces. With a real clock the times
    are real, and no two traces compare equal.
    """

    def __init__(self) -> None:
        self.events: list[TraceEvent] = []
        self._index: dict[trio.lowlevel.Task, int] = {}

    def __repr__(self) -> str:
        return f"<ScheduleTrace of {len(self.events)} events, digest {self.digest()[:12]}>"

    def _record(self, kind: str, task: trio.lowlevel.Task) -> None:
        # A task spawned before the instrument was added gets an index when first seen.
        index = self._index.setdefault(task, len(self._index))
        self.events.append((trio.current_time(), kind, index, task.name))

    def before_run(self) -> None:
        self.events = []
        self._index = {}

    def after_run(self) -> None:
        self._index = {}  # let the run's tasks go

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self._record("spawn", task)

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._record("step", task)

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self._record("exit", task)

    def lines(self) -> list[str]:
        """The events as text, one line each, for diffs in assertion messages."""
        return [
            f"{time!r:>12} {kind:<5} #{index} {name}" for time, kind, index, name in self.events
        ]

    def digest(self) -> str:
        """A SHA-256 hex digest of the events, equal for equal traces."""
        text = "\n".join(
            f"{time!r}\t{kind}\t{index}\t{name!r}" for time, kind, index, name in self.events
        )
        return hashlib.sha256(text.encode("utf-8")).hexdigest()
