"""From samples to findings: what broke the promise, who is to blame, and the fix.

Layer: the bench (``tether.bench``).

The promise: a caller's deadline is kept as promptly as trio itself keeps
it (the floor), nothing the run started is left running once the store is
closed, and the run stays resumable. The rules:

- **overshoot**. Real clock: a sample is *late* when its overshoot passes
  the floor's p99 by more than the tolerance. A late median is a bug;
  fewer late samples are a warning (a busy machine can delay one). Virtual
  clock: every overshoot must be exactly 0; any other is a bug.
- **held past the deadline**: a thread, or a task waiting in the store or
  in the user's code, that still held the caller *tolerance* seconds after
  the deadline is named, with the fix for its kind.
- **left running**: a task of the run alive after ``engine.run`` returned, or
  a task or thread alive after the store closed, is a bug. A thread still
  working when the caller returned is a note: an abandoned store call, which
  is what prompt cancellation costs (the store must make it harmless).
- **resumable**: a resume that does not end as the undisturbed run did is a
  bug; a completed resume whose result differs is a warning (a workflow that
  is not deterministic differs on its own).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final, Literal

from ._census import Culprit
from ._results import CancelSample, Finding, Probe, Severity
from ._stats import Percentiles

__all__ = ("judge",)

_THREAD_HINT: Final = (
    "{where} blocks in a worker thread that is not abandoned on cancel: use "
    "`trio.to_thread.run_sync(..., abandon_on_cancel=True)` and make the write idempotent "
    "(a retried save carries the same idempotency_key: store it once), so a write that lands "
    "after its caller left is harmless; close() must then wait for the threads still writing"
)
_STORE_HINT: Final = (
    "{where} goes on waiting after its caller was cancelled (a shielded scope, a lock taken "
    "under a shield, or a wait whose abort fails): let the caller's cancellation through; a "
    "write that must finish belongs in a thread that is abandoned on cancel"
)
_WORKFLOW_HINT: Final = (
    "{where} goes on after the run was cancelled: a shielded cancel scope, or an "
    "`except BaseException` / `except trio.Cancelled` that does not re-raise; let "
    "trio.Cancelled propagate (tether already saves completed steps safely)"
)
_TETHER_HINT: Final = (
    "tether itself waited after the caller's deadline ({where}): this is tether's bug; "
    "please report it with this output"
)
_BLOCKED_HINT: Final = (
    "nothing was seen waiting, so the event loop itself was blocked: a store method or a "
    "step that does blocking I/O (or long CPU work) in the event loop's thread; run it in "
    "`trio.to_thread.run_sync(..., abandon_on_cancel=True)`"
)

Who = Literal["store", "workflow", "tether"]


_KINDS: Final[tuple[Who, ...]] = ("store", "workflow", "tether")


def _blame(held: Sequence[Culprit]) -> tuple[Who | None, str]:
    """Who is to blame for *held* (the store first), and the hint for them."""
    for kind in _KINDS:
        mine = [c for c in held if c.kind == kind]
        if not mine:
            continue
        where = f"`{Counter(c.where for c in mine).most_common(1)[0][0]}`"
        if kind == "store":
            hint = _THREAD_HINT if any(c.in_thread for c in mine) else _STORE_HINT
        else:
            hint = _WORKFLOW_HINT if kind == "workflow" else _TETHER_HINT
        return kind, hint.format(where=where)
    return None, _BLOCKED_HINT


def _names(names: Iterable[str]) -> str:
    """Thread names, each once: a trio worker's as its function (``FUNCTION from TASK``)."""
    return ", ".join(sorted({name.split(" from ")[0] for name in names}))


def _seconds(value: float) -> str:
    return f"{value * 1e3:.3f} ms" if abs(value) < 1 else f"{value:.3f} s"


def _overshoot(
    samples: Sequence[CancelSample], *, virtual: bool, tolerance: float, floor: Percentiles
) -> list[Finding]:
    cancelled = [s for s in samples if s.overshoot is not None]
    if not cancelled:
        return []
    if virtual:
        late = [s for s in cancelled if s.overshoot != 0]
        limit = 0.0
    else:
        limit = floor.p99 + tolerance
        late = [s for s in cancelled if s.overshoot is not None and s.overshoot > limit]
    if not late:
        return []
    held = [c for s in late for c in s.held]
    who, hint = _blame(held)
    worst = max(s.overshoot or 0.0 for s in late)
    seen = sorted({c.describe(task=False) for c in held})
    where = f"; held by {'; '.join(seen)}" if seen else ""
    ids = tuple(s.index for s in late)
    if virtual:
        message = (
            f"in virtual time the run must return at its deadline's exact moment, and it returned "
            f"up to {_seconds(worst)} after it, in {len(late)} of {len(cancelled)} samples: "
            f"something waited after the deadline while virtual time moved on{where}"
        )
    else:
        message = (
            f"{len(late)} of {len(cancelled)} samples overshot the deadline by more than the "
            f"floor's p99 + tolerance ({_seconds(limit)}), up to {_seconds(worst)}{where}"
        )
        if 2 * len(late) <= len(cancelled):
            message += (
                "; the median is on time, so this may be the machine (rerun with more --samples)"
            )
            return [
                Finding(
                    severity="warning",
                    code="late-samples",
                    culprit=who,
                    message=message,
                    hint=hint if held else None,
                    samples=ids,
                )
            ]
    return [
        Finding(
            severity="bug", code="overshoot", culprit=who, message=message, hint=hint, samples=ids
        )
    ]


def _held_threads(samples: Sequence[CancelSample]) -> list[Finding]:
    late = [s for s in samples if s.held_threads]
    if not late:
        return []
    held = [c for s in late for c in s.held]
    who, hint = _blame(held)
    message = (
        f"threads still ran past the deadline, holding the caller, in {len(late)} of "
        f"{len(samples)} samples: {_names(n for s in late for n in s.held_threads)}"
    )
    return [
        Finding(
            severity="bug",
            code="held-past-deadline",
            culprit=who or "store",
            message=message,
            hint=hint,
            samples=tuple(s.index for s in late),
        )
    ]


#: What is left running, field by field: (field, code, what, severity, culprit, hint).
_LEFT: Final[tuple[tuple[str, str, str, Severity, Who | None, str], ...]] = (
    (
        "tasks_left",
        "tasks-left",
        "tasks of the run outlived engine.run",
        "bug",
        None,
        "a task the run started outlived it: one started in a nursery from outside the run "
        "(the workflow's code), or tether's bug",
    ),
    (
        "threads_left",
        "threads-left",
        "threads were still working when the caller got control back (store calls "
        "abandoned on cancel)",
        "note",
        "store",
        "that is what a prompt cancellation costs with a thread-backed store: the write goes "
        "on and may land; it must be idempotent, and close() must wait for it",
    ),
    (
        "tasks_after_close",
        "tasks-after-close",
        "tasks were still running after the store was closed",
        "bug",
        "store",
        "the store's close() must stop every task it started",
    ),
    (
        "threads_after_close",
        "threads-after-close",
        "threads were still running after the store was closed",
        "bug",
        "store",
        "the store's close() must wait for (or stop) every thread it started, the abandoned "
        "writes included",
    ),
)


def _left(samples: Sequence[CancelSample]) -> list[Finding]:
    found: list[Finding] = []
    for field, code, what, severity, who, hint in _LEFT:
        hit = [s for s in samples if getattr(s, field)]
        if not hit:
            continue
        names = (n for s in hit for n in getattr(s, field))
        found.append(
            Finding(
                severity=severity,
                code=code,
                culprit=who,
                message=f"{what} in {len(hit)} of {len(samples)} samples: {_names(names)}",
                hint=hint,
                samples=tuple(s.index for s in hit),
            )
        )
    return found


def _resumes(samples: Sequence[CancelSample], probe: Probe) -> list[Finding]:
    found: list[Finding] = []
    broken = [s for s in samples if not s.resumable]
    if broken:
        seen = sorted({s.resumed for s in broken})
        found.append(
            Finding(
                severity="bug",
                code="not-resumable",
                culprit=None,
                message=f"{len(broken)} runs did not resume to what an undisturbed run ends "
                f"with ({probe.outcome}): {'; '.join(seen)} (runs "
                f"{', '.join(s.run_id for s in broken)}, kept in the store)",
                hint="resume one with `tether resume RUN_ID --import MODULE` to see its error",
                samples=tuple(s.index for s in broken),
            )
        )
    differs = [s for s in samples if s.resumed == "completed, with another result"]
    if differs:
        found.append(
            Finding(
                severity="warning",
                code="result-differs",
                culprit="workflow",
                message=f"{len(differs)} resumed runs completed with another result than an "
                "undisturbed run's",
                hint="fine for a workflow that is not deterministic (times, random ids); otherwise "
                "a step ran again with another outcome",
                samples=tuple(s.index for s in differs),
            )
        )
    return found


def _notes(samples: Sequence[CancelSample], at: str) -> list[Finding]:
    found: list[Finding] = []
    early = [s for s in samples if s.overshoot is None]
    if early:
        found.append(
            Finding(
                severity="note",
                code="before-deadline",
                culprit=None,
                message=f"{len(early)} samples ended before the deadline ({early[0].outcome}): "
                "no overshoot to measure there",
                hint="a hang at a call the run makes always reaches the deadline; a delay may not",
                samples=tuple(s.index for s in early),
            )
        )
    missed = [s for s in samples if s.overshoot is not None and not s.fault_reached]
    if missed:
        found.append(
            Finding(
                severity="note",
                code="fault-not-reached",
                culprit=None,
                message=f"the deadline struck before the run reached the faulty {at} call in "
                f"{len(missed)} samples: those measure the cancellation of whatever ran then",
                hint=None,
                samples=tuple(s.index for s in missed),
            )
        )
    return found


def judge(
    samples: Sequence[CancelSample],
    *,
    probe: Probe,
    at: str,
    virtual: bool,
    tolerance: float,
    floor: Percentiles,
) -> tuple[Finding, ...]:
    """Every finding about *samples*, bugs first."""
    found = [
        *_overshoot(samples, virtual=virtual, tolerance=tolerance, floor=floor),
        *_held_threads(samples),
        *_left(samples),
        *_resumes(samples, probe),
        *_notes(samples, at),
    ]
    order = {"bug": 0, "warning": 1, "note": 2}
    return tuple(sorted(found, key=lambda f: order[f.severity]))
