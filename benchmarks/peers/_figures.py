"""The figures of a results.json, as the report reads them (shared by report.py and _plots.py)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

QUEUE_FLOOR = "queue_skip_locked"  #: the queue scenario's floor: a bare SKIP LOCKED loop
FLOORS = ("trio", "asyncio", QUEUE_FLOOR)
LEVEL = 0.10  #: a ratio within 1 +- LEVEL counts as level with tether
LEVEL_MS = 0.1  #: cancel: overshoots within this many ms of tether's count as level


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (as benchmarks/cancel_latency.py computes it)."""
    v = sorted(values)
    return v[max(1, math.ceil(q / 100 * len(v))) - 1]


@dataclass
class Results:
    raw: dict[str, Any]

    @property
    def quick(self) -> bool:
        return bool(self.raw.get("quick"))

    def engines(self) -> list[str]:
        """Engine keys in the report's order: tether, the floors, then the peers (scenarios
        1 to 6; the queue systems are :meth:`queue_engines`)."""
        return [k for k, info in self.raw["engines"].items() if not info.get("queue")]

    def all_engines(self) -> list[str]:
        return list(self.raw["engines"])

    def queue_engines(self) -> list[str]:
        """The systems of scenario 7: tether first, then the floor, then the peers."""
        keys = [k for k, info in self.raw["engines"].items() if info.get("queue")]
        order = {"queue_tether": 0, QUEUE_FLOOR: 1}
        return sorted(keys, key=lambda k: (order.get(k, 2), keys.index(k)))

    def queue_steps(self) -> list[int]:
        """The job sizes (steps per job) the queue scenario ran, in order."""
        return sorted({int(e["config"]["steps"]) for e in self._queue_entries()})

    def _queue_entries(self) -> list[dict[str, Any]]:
        return [e for e in self.raw["entries"] if e["scenario"] == "queue"]

    def queue_figure(self, key: str, steps: int, workers: int) -> QueueFigure | None:
        """The medians over the rounds that ran of one system's configuration."""
        runs = [
            (e["config"], e["result"])
            for e in self._queue_entries()
            if e["engine"] == key
            and e["status"] == "ok"
            and e["config"]["steps"] == steps
            and e["config"]["workers"] == workers
        ]
        if not runs:
            return None

        def med(f: Any) -> float:
            return float(statistics.median(f(c, r) for c, r in runs))

        counted = [r["statements"] for _, r in runs if r["statements"] is not None]
        return QueueFigure(
            runs=len(runs),
            jobs=int(runs[0][0]["jobs"]),
            jobs_per_s=med(lambda c, r: c["jobs"] / r["seconds"]),
            jobs_per_cpu_s=med(
                lambda c, r: c["jobs"] / max(r["worker_cpu"] + r["server_cpu"], 1e-9)
            ),
            worker_ms=med(lambda c, r: 1e3 * r["worker_cpu"] / c["jobs"]),
            server_ms=med(lambda c, r: 1e3 * r["server_cpu"] / c["jobs"]),
            commits=med(lambda c, r: r["commits"] / c["jobs"]),
            write_xacts=med(lambda c, r: r["write_xacts"] / c["jobs"]),
            statements=(
                float(statistics.median(n / runs[0][0]["jobs"] for n in counted))
                if counted
                else None
            ),
            duplicates=sum(int(r["duplicates"]) for _, r in runs),
            lost=sum(int(r["lost"]) for _, r in runs),
        )

    def peers(self) -> list[str]:
        return [k for k in self.engines() if k != "tether" and k not in FLOORS]

    def name(self, key: str) -> str:
        return str(self.raw["engines"][key]["name"])

    def entry(self, key: str, case: str) -> dict[str, Any] | None:
        for e in self.raw["entries"]:
            if e["engine"] == key and e["case"] == case:
                return dict(e)
        return None

    def result(self, key: str, case: str) -> dict[str, Any] | None:
        """The result of an ``ok`` entry, else None."""
        e = self.entry(key, case)
        return e["result"] if e is not None and e["status"] == "ok" else None

    def cases(self, scenario: str) -> list[str]:
        seen: list[str] = []
        for e in self.raw["entries"]:
            if e["scenario"] == scenario and e["case"] not in seen:
                seen.append(e["case"])
        return seen

    def widths(self) -> list[int]:
        return sorted(
            {int(e["config"]["width"]) for e in self.raw["entries"] if e["scenario"] == "cancel"}
        )

    def headline_width(self) -> int | None:
        """100 on a full run; the widest width up to 100 otherwise."""
        widths = [w for w in self.widths() if w <= 100]
        return max(widths) if widths else None

    def overshoots_ms(self, key: str, width: int) -> list[float] | None:
        """The trials' overshoots, when every trial's save really hung."""
        r = self.result(key, f"cancel width={width}")
        if r is None or not r["samples"] or not r["hung_saves_ok"]:
            return None
        return [s * 1e3 for s in r["samples"]]

    def left_running(self, key: str, width: int) -> str | None:
        """The most tasks and threads a trial left running, as ``tasks / threads``."""
        r = self.result(key, f"cancel width={width}")
        if r is None or not r["leftover_tasks"]:
            return None
        return f"{max(r['leftover_tasks'])} / {max(r['leftover_threads'])}"

    def step_figure(self, key: str, durable: bool) -> float | None:
        """µs per step, when every step ran."""
        case = f"steps {'durable' if durable else 'in memory'}"
        r, e = self.result(key, case), self.entry(key, case)
        if r is None or e is None or r["steps_ran"] != e["config"]["n"]:
            return None
        return float(r["us_per_step"])


@dataclass(frozen=True)
class QueueFigure:
    """One queue configuration of one system: medians over its rounds, per job."""

    runs: int  #: rounds that ran
    jobs: int
    jobs_per_s: float
    jobs_per_cpu_s: float  #: jobs / CPU seconds of the workers and the server
    worker_ms: float  #: worker CPU ms per job
    server_ms: float  #: server CPU ms per job
    commits: float  #: pg_stat_database xact_commit per job
    write_xacts: float  #: transactions that wrote (xids assigned) per job
    statements: float | None  #: pg_stat_statements calls per job
    duplicates: int  #: over every round: (job, step) pairs that ran twice or more
    lost: int  #: ... that never ran

    @property
    def exactly_once(self) -> bool:
        return not (self.duplicates or self.lost)


def verdict(tether: float, other: float, *, abs_level: float = 0.0) -> str:
    """``ahead`` when tether's figure (lower is better) beats *other*, ``behind``, ``level``."""
    if abs(other - tether) <= abs_level or (1 - LEVEL) <= other / tether <= (1 + LEVEL):
        return "level"
    return "ahead" if tether < other else "behind"
