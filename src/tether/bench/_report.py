"""How a bench result is told: a plain-text table (as ``tether runs list`` prints its
runs), and JSON with every sample and finding.
Layer: the bench (``tether.bench``).

:func:`to_json` gives a JSON-ready dict of any result (its fields, its
percentiles, and ``nan`` or ``inf`` as ``null``); :func:`write_table` prints a
result's table, its findings and a verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TextIO

import attrs

from .._terminal import table
from ._results import CancelResult, CancelSample, Finding, StepsResult, ThroughputResult
from ._stats import Percentiles, percentiles

__all__ = ("duration", "to_json", "write_table")

Result = CancelResult | StepsResult | ThroughputResult


def duration(seconds: float) -> str:
    """``1.234 ms`` below a second, ``2.500 s`` above; ``-`` for nothing measured."""
    if math.isnan(seconds):
        return "-"
    if abs(seconds) < 1:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds:.3f} s" if abs(seconds) < 1000 else f"{seconds:,.0f} s"


def _clean(value: Any) -> Any:
    """*value* with every ``nan`` or infinite float replaced by ``None`` (strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def to_json(result: Result) -> dict[str, Any]:
    """*result* as a JSON-ready dict: ``bench`` (which), its fields, and what they add up to."""
    data: dict[str, Any] = {"bench": _kind(result), **attrs.asdict(result)}
    if isinstance(result, CancelResult):
        data["overshoot"] = attrs.asdict(result.overshoot)
        data["floor"] = attrs.asdict(result.floor)
        data["ratio"] = result.ratio
        data["bugs"] = len(result.bugs)
    elif isinstance(result, StepsResult):
        data["overhead"] = result.overhead
        data["checkpoints_per_step"] = result.checkpoints_per_step
        data["resolved"] = result.resolved
    else:
        data["ratio"] = result.ratio
    clean: dict[str, Any] = _clean(data)
    return clean


def _kind(result: Result) -> str:
    if isinstance(result, CancelResult):
        return "cancel"
    return "steps" if isinstance(result, StepsResult) else "throughput"


def write_table(result: Result, out: TextIO) -> None:
    """Print *result*'s table (and, for a cancel bench, its findings and verdict) to *out*."""
    if isinstance(result, CancelResult):
        _cancel(result, out)
    elif isinstance(result, StepsResult):
        _steps(result, out)
    else:
        _throughput(result, out)


#: The cancel table's last columns: samples counted by what they left.
_COUNTS = ("HELD", "ABANDONED", "LEFT", "RESUMED")


def _stat_cells(p: Percentiles) -> list[str]:
    return [duration(p.p50), duration(p.p90), duration(p.p99), duration(p.max)]


def _ratio(value: float) -> str:
    if math.isnan(value):
        return "-"
    return "inf" if math.isinf(value) else f"{value:.2f}x"


def _row(name: str, samples: Sequence[CancelSample], floor: Percentiles) -> list[str]:
    stats = percentiles(s.overshoot for s in samples if s.overshoot is not None)
    held = sum(1 for s in samples if s.held or s.held_threads)
    abandoned = sum(1 for s in samples if s.threads_left)
    left = sum(1 for s in samples if s.tasks_left or s.tasks_after_close or s.threads_after_close)
    resumed = sum(1 for s in samples if s.resumable)
    return [
        name,
        str(stats.n),
        *_stat_cells(stats),
        _ratio(stats.ratio(floor)),
        str(held),
        str(abandoned),
        str(left),
        f"{resumed}/{len(samples)}",
    ]


def _cancel(result: CancelResult, out: TextIO) -> None:
    probe = result.probe
    if result.sweep:
        where = f"one {result.at} call at a time (a sweep: the 1st, then the 2nd, ...)"
    else:
        where = f"every {result.at} call"
    calls = ", ".join(f"{m} x{n}" for m, n in probe.calls.items())
    print(f"tether bench cancel: {result.workflow} on {result.store}", file=out)
    print(
        f"  fault {result.fault} at {where}; caller deadline "
        f"{result.deadline:g} s; {result.clock} clock; {len(result.samples)} samples",
        file=out,
    )
    print(
        f"  undisturbed run: {duration(probe.seconds)}, {probe.describe()}, at most {probe.width} "
        f"step{'s' if probe.width != 1 else ''} at once; its store calls: {calls}",
        file=out,
    )
    print(file=out)
    floor = result.floor
    rows = []
    for position, samples in result.positions().items():
        name = (
            result.workflow if position is None else f"{result.workflow} @{result.at} #{position}"
        )
        rows.append(_row(name, samples, floor))
    width = f"floor: trio nursery of {result.width}"
    rows.append([width, str(floor.n), *_stat_cells(floor), "1.00x", "-", "-", "-", "-"])
    header = ("OVERSHOOT", "SAMPLES", "P50", "P90", "P99", "MAX", "X FLOOR", *_COUNTS)
    table(out, header, rows, None)
    print(
        f"\nHELD: samples whose caller was still held {result.tolerance:g} s after the "
        "deadline; ABANDONED: samples whose\nstore still worked in a thread when the caller "
        "got control back; LEFT: samples that left a task\nrunning after engine.run returned, "
        "or a task or thread after the store closed; RESUMED: resumes\nthat ended as the "
        "undisturbed run did",
        file=out,
    )
    _findings(result.findings, out)


def _findings(findings: Sequence[Finding], out: TextIO) -> None:
    bugs = [f for f in findings if f.severity == "bug"]
    if findings:
        print("\nfindings:", file=out)
    said = None
    for f in findings:
        who = f" ({f.culprit})" if f.culprit else ""
        print(f"  {f.severity}{who}, {f.code}: {f.message}", file=out)
        if f.hint:
            hint = "the same as above" if f.hint == said else f.hint
            print(f"    {'why' if f.severity == 'note' else 'fix'}: {hint}", file=out)
            said = f.hint
    if bugs:
        print(f"\n{len(bugs)} bug{'s' if len(bugs) != 1 else ''} found", file=out)
    else:
        print("\nno bug found", file=out)


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.3f}"


def _steps(result: StepsResult, out: TextIO) -> None:
    print(f"tether bench steps: {result.store}", file=out)
    print(
        f"  {result.steps} sequential steps per run, {result.repeats} repeats interleaved with "
        "as many plain awaits and checkpoints (medians)",
        file=out,
    )
    print(file=out)
    cp = result.checkpoint
    within = f"±{_us(result.resolution)}"
    if result.resolved:
        step = [f"{_us(result.per_step)} {within}", f"{result.checkpoints_per_step:,.2f}"]
    else:
        step = [f"below resolution ({within})", "-"]
    rows = [
        ["tether step (durable)", *step],
        ["plain await (no-op)", _us(result.plain_await), f"{result.plain_await / cp:,.2f}"],
        ["trio checkpoint", _us(cp), "1.00"],
    ]
    table(out, ("WHAT", "US EACH", "CHECKPOINTS"), rows, None)
    fixed = f"a run's fixed cost (create, claim, final status) is {_us(result.per_run)} us"
    if result.resolved:
        print(
            f"\na step costs {_us(result.overhead)} us over a plain await "
            f"({result.checkpoints_per_step:,.1f} checkpoints); {fixed}",
            file=out,
        )
    else:
        print(
            f"\na step costs less than this bench resolves ({within} us: the runs vary more "
            f"than {result.steps} steps add); more steps or repeats resolve it; {fixed}",
            file=out,
        )


def _throughput(result: ThroughputResult, out: TextIO) -> None:
    print(f"tether bench throughput: {result.store}", file=out)
    print(
        f"  {result.steps} durable steps per run, {result.width} at a time in tether.parallel(); "
        f"{len(result.grouped)} alternated repeats (median [lowest-highest])",
        file=out,
    )
    print(file=out)

    def cells(values: Sequence[float]) -> list[str]:
        p = percentiles(values)
        return [f"{p.p50:,.0f}", f"{min(values):,.0f}", f"{max(values):,.0f}"]

    rows = [
        ["group commit (tether's path)", *cells(result.grouped)],
        ["one save per step", *cells(result.one_per_save)],
    ]
    table(out, ("COMMITS", "STEPS/S", "LOWEST", "HIGHEST"), rows, None)
    print(f"\ngroup commit: {_ratio(result.ratio)} the steps/s of one save per step", file=out)
