"""The figures of a results.json, as the report reads them (shared by report.py and _plots.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

FLOORS = ("trio", "asyncio")
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
        """Engine keys in the report's order: tether, the floors, then the peers."""
        return list(self.raw["engines"])

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


def verdict(tether: float, other: float, *, abs_level: float = 0.0) -> str:
    """``ahead`` when tether's figure (lower is better) beats *other*, ``behind``, ``level``."""
    if abs(other - tether) <= abs_level or (1 - LEVEL) <= other / tether <= (1 + LEVEL):
        return "level"
    return "ahead" if tether < other else "behind"
