"""One execution of an explorer's trial: its points, its outcome, and the invariants it keeps.

Layer: testing (``tether.testing``).

A trial (:mod:`._explore_trial`) runs the explored workflow once, then
resumes it until it finishes; each ``engine.run`` or resume is an
:class:`Execution`. This module holds what one execution records (the points
it reaches, named from the store calls by :func:`point_labels`; the steps it
executed; when its fault fired; its :class:`Outcome`; the tasks left behind,
watched by :class:`Tasks`) and :func:`check_execution`, the invariants
(a)-(f) of :mod:`._explore` checked on it: what the trial observes, apart from
how it injects faults.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Final, final

import attrs
import trio

from ..stores._records import Entry, EntryKind, EntryStatus, RunRecord
from ._explore_leases import Race, Takeover, check_once, check_race, check_takeover
from ._explore_plan import Injection
from ._faults import SimulatedCrash

__all__ = (
    "RUN_ID",
    "Execution",
    "Outcome",
    "Tasks",
    "check_execution",
    "describe_error",
    "point_labels",
    "run_of",
    "split_crash",
)

#: The id of the explored run (any other run is one of its children).
RUN_ID: Final = "explored"


# -- outcomes -------------------------------------------------------------------


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def describe_error(exc: BaseException) -> str:
    """*exc* as an outcome's text: ``raised Type: message``, a group's leaves sorted."""
    leaves = sorted(f"{type(e).__qualname__}: {e}" for e in _leaves(exc))
    return f"raised {'; '.join(leaves)}"


@attrs.frozen
class Outcome:
    """An execution's outcome, comparable across trials."""

    kind: str  # "value", "error", "paused", "cancelled", "crashed"
    value: Any = None
    text: str = ""

    def same_as(self, other: Outcome) -> bool:
        if self.kind != other.kind:
            return False
        if self.kind == "value":
            return bool(self.value == other.value)
        return self.text == other.text

    def __str__(self) -> str:
        return f"returned {self.value!r}" if self.kind == "value" else self.text


def split_crash(exc: BaseException) -> tuple[BaseException | None, BaseException | None]:
    """*exc* split into its simulated crashes and the rest (``None``: nothing of that part)."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(SimulatedCrash)
    return (exc, None) if isinstance(exc, SimulatedCrash) else (None, exc)


# -- one execution --------------------------------------------------------------


@attrs.define
class Execution:
    """What one execution of a trial (its ``engine.run``, or one resume) did."""

    index: int
    injection: Injection | None
    points: list[str] = attrs.field(factory=list)
    started: list[str] = attrs.field(factory=list)  # step keys executed (not replayed)
    begun: dict[str, int] = attrs.field(factory=dict)  # appends begun, by label
    landed: dict[str, int] = attrs.field(factory=dict)  # ...and that reached the store
    fired_at: float | None = None  # when the injection fired (virtual time)
    deadline: float | None = None  # the caller deadline a hang set
    occurrences: dict[str, int] = attrs.field(factory=dict)
    outcome: Outcome | None = None
    began: float = 0.0
    returned_at: float = 0.0
    leftover: list[str] = attrs.field(factory=list)  # tasks alive after engine.run returned
    takeover: Takeover | None = None  # another owner took the run over (lease_lost, pause)
    race: Race | None = None  # what the two engines of a race did

    def point(self, label: str) -> str:
        """The point *label* reached now, named: ``label``, then ``label~2``, ..."""
        n = self.occurrences.get(label, 0) + 1
        self.occurrences[label] = n
        name = label if n == 1 else f"{label}~{n}"
        self.points.append(name)
        return name


@final
class Tasks(trio.abc.Instrument):
    """Tasks spawned while an execution is being watched, and not exited yet."""

    def __init__(self) -> None:
        self.watching = False
        self.alive: dict[trio.lowlevel.Task, None] = {}

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        if self.watching and not _of_the_engine(task):
            self.alive[task] = None

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self.alive.pop(task, None)


def _of_the_engine(task: trio.lowlevel.Task) -> bool:
    """Whether *task* is the engine's own, not a run's: started by its lease task.

    (Such as a thread-backed store's helper for a lease release, which a child
    run's claim cut short by the caller may start while the parent unwinds.)
    """
    nursery = task.parent_nursery
    while nursery is not None:
        parent = nursery.parent_task
        if parent.name == "tether leases":
            return True
        nursery = parent.parent_nursery
    return False


# -- its points ----------------------------------------------------------------


def run_of(method: str, args: tuple[Any, ...]) -> str:
    """The run a write is about."""
    if method in ("append", "claim"):
        run_id: str = args[0]
        return run_id
    record: RunRecord = args[0]
    return record.run_id


def point_labels(method: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[str]:
    """The points a write reaches: one per entry for an append, else one."""
    if method == "append":
        entries: Sequence[Entry] = args[1]
        labels = [f"save:{e.key}" for e in entries]
    else:
        labels = [_label(method, args, kwargs)]
    run_id = run_of(method, args)
    if run_id == RUN_ID:
        return labels
    # A child run of the explored one (tether.child): its claim is the child's start.
    if method == "claim":
        return [f"child:{run_id}"]
    return [f"child:{run_id}/{label}" for label in labels]


def _label(method: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    if method == "create_run":
        return "record:created"
    if method == "claim":
        # engine.run claims with the record to create (a new run is created
        # claimed); engine.resume claims a stored run, marking it running.
        return "record:created" if kwargs.get("create") is not None else "record:running"
    record: RunRecord = args[0]
    return f"record:{record.status.value}"


# -- its invariants ------------------------------------------------------------


def _completed_keys(entries: Sequence[Entry]) -> dict[str, int]:
    return {
        e.key: e.seq or 0
        for e in entries
        if e.status is EntryStatus.COMPLETED and e.kind in (EntryKind.STEP, EntryKind.STREAM)
    }


def check_execution(
    ex: Execution,
    before: tuple[Entry, ...],
    after: tuple[Entry, ...],
    record: RunRecord | None,
    *,
    slow: float,
    lease_ttl: float,
) -> list[str]:
    """The invariants *ex* broke, described: from the run's entries *before* and *after* it.

    *record* is the run record after it; *slow* and *lease_ttl* are the
    explorer's (how long a held write waits; the engines' lease).
    """
    violations: list[str] = []
    where = f"execution {ex.index} ({'first run' if ex.index == 0 else 'resume'})"
    # (a) nothing stored runs again
    stored = _completed_keys(before)
    for key in ex.started:
        if key in stored:
            violations.append(
                f"(a) step {key} ran again in {where}, though its record was stored "
                f"(seq {stored[key]}) before"
            )
    # (b) the caller's cancellation is exact
    inj = ex.injection
    if inj is not None and ex.fired_at is not None and inj.kind in ("cancel", "hang"):
        due = ex.deadline if inj.kind == "hang" else ex.fired_at
        assert due is not None
        assert ex.outcome is not None
        if ex.returned_at != due:
            what = "deadline" if inj.kind == "hang" else "cancellation"
            violations.append(
                f"(b) engine.run returned at t={ex.returned_at:g}, {ex.returned_at - due:g}s "
                f"of virtual time after the caller's {what} at t={due:g} ({where})"
            )
        elif ex.outcome.kind != "cancelled":
            violations.append(
                f"(b) after the caller's cancellation engine.run {ex.outcome} ({where})"
            )
    # (c) nothing stored is lost...
    kept = {e.seq: e for e in after}
    for entry in before:
        if kept.get(entry.seq) != entry:
            violations.append(
                f"(c) entry seq {entry.seq} ({entry.key}) was stored before {where} and is "
                f"{'changed' if entry.seq in kept else 'gone'} after it"
            )
    # ...and a sibling's failure does not discard a completed step's save.
    if inj is None or ex.fired_at is None or inj.kind == "fail":
        for label, n in ex.begun.items():
            if ex.landed.get(label, 0) < n:
                violations.append(
                    f"(c) the {label} began in {where} and never reached the store, though "
                    "the store worked and the caller did not cancel: a sibling's failure "
                    "discarded a completed step's record"
                )
    # (e) no task outlives the run
    if ex.leftover:
        violations.append(f"(e) tasks outlived engine.run in {where}: {', '.join(ex.leftover)}")
    # (f) one owner at a time
    if inj is not None and ex.fired_at is not None and ex.takeover is not None:
        # It knows when the held write is refused (lease_lost), or once no
        # renewal succeeded for lease_ttl (pause).
        wait = slow if inj.kind == "lease_lost" else lease_ttl
        due = ex.fired_at + wait
        violations += check_takeover(
            ex.takeover, after, record, str(ex.outcome), ex.returned_at, due, where
        )
    if ex.race is not None:
        violations += check_race(ex.race, before, after, record, where=where)
    violations += check_once(before, after, Counter(ex.started), where=where)
    return violations
