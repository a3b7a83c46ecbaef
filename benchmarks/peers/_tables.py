"""The report's per-scenario tables, and the comparisons they feed (used by report.py)."""

from __future__ import annotations

from typing import Any

from _figures import FLOORS, LEVEL_MS, QueueFigure, Results, percentile, verdict

NA = "—"


def ratio(value: float | None, tether: float | None) -> str:
    if value is None or tether is None or tether <= 0:
        return NA
    return f"{value / tether:.2f}x"


def num(value: float | None, fmt: str = "{:.2f}") -> str:
    return NA if value is None else fmt.format(value)


def table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


class Tables:
    """The tables of each scenario; each records its checks and its comparisons."""

    def __init__(self, results: Results) -> None:
        self.r = results
        self.problems: list[str] = []  # checks a measurement failed: its figure is not valid
        self.findings: list[tuple[str, str, str]] = []  # (topic, key, ahead|behind|level)

    def label(self, key: str) -> str:
        return f"**{self.r.name(key)}**" if key in ("tether", "queue_tether") else self.r.name(key)

    def missing(self, key: str, case: str) -> str:
        if not self.r.raw["engines"][key]["installed"]:
            return "not installed"
        e = self.r.entry(key, case)
        if e is None:
            return "not run"
        return {"unsupported": NA, "ok": "check failed"}.get(e["status"], f"{e['status']}*")

    def notes(self, case: str, prefix: str = "Notes") -> str:
        out = []
        for key in self.r.engines():
            r = self.r.result(key, case)
            if r and r.get("notes"):
                out.append(f"{self.r.name(key)}: {r['notes']}")
        return "" if not out else f"{prefix}: " + "; ".join(out) + ".\n\n"

    def compare(self, topic: str, figures: dict[str, float], abs_level: float = 0.0) -> None:
        self.compare_with("tether", topic, figures, abs_level)

    def compare_with(
        self, us: str, topic: str, figures: dict[str, float], abs_level: float = 0.0
    ) -> None:
        """Each peer's figure (lower is better) against tether's, which is *us*'s."""
        t = figures.get(us)
        if t is None:
            return
        for key, v in figures.items():
            if key != us and key not in FLOORS:
                self.findings.append((topic, key, verdict(t, v, abs_level=abs_level)))

    # -- the scenarios -----------------------------------------------------------------------

    def cancel(self) -> str:
        out = []
        for width in self.r.widths():
            case = f"cancel width={width}"
            rows, p50s, p99s = [], {}, {}
            tether = self.r.overshoots_ms("tether", width)
            t50 = percentile(tether, 50) if tether else None
            t99 = percentile(tether, 99) if tether else None
            for key in self.r.engines():
                res = self.r.result(key, case)
                if res is None or not res["samples"]:
                    rows.append([self.label(key), self.missing(key, case) or NA, *[NA] * 7])
                    continue
                ms = [s * 1e3 for s in res["samples"]]
                p50, p99 = percentile(ms, 50), percentile(ms, 99)
                hung = "yes" if res["hung_saves_ok"] else "**no**"
                if not res["hung_saves_ok"]:
                    self.problems.append(f"{self.r.name(key)}, {case}: a save did not hang")
                else:
                    p50s[key], p99s[key] = p50, p99
                capped = f" ({res['capped']} capped)" if res.get("capped") else ""
                rows.append(
                    [
                        self.label(key),
                        f"{len(ms)}{capped}",
                        f"{p50:.2f}",
                        f"{p99:.2f}",
                        f"{max(ms):.2f}",
                        ratio(p50, t50),
                        ratio(p99, t99),
                        self.r.left_running(key, width),
                        hung,
                    ]
                )
            self.compare(f"overshoot p50, width {width}", p50s, LEVEL_MS)
            if width == self.r.headline_width():
                self.compare(f"overshoot p99, width {width}", p99s, LEVEL_MS)
            leftovers = {
                k: float(max(r["leftover_tasks"]) + max(r["leftover_threads"]))
                for k in self.r.engines()
                if (r := self.r.result(k, case)) and r["samples"]
            }
            if "tether" in leftovers:
                t = leftovers["tether"]
                for k, v in leftovers.items():
                    if k != "tether" and k not in FLOORS:
                        word = "level" if v == t else ("ahead" if t < v else "behind")
                        self.findings.append((f"left running, width {width}", k, word))
            head = [
                "engine",
                "trials",
                "p50 ms",
                "p99 ms",
                "max ms",
                "p50 x tether",
                "p99 x tether",
                "left running: tasks / threads",
                "save hung",
            ]
            out.append(
                f"### {width} parallel step{'s' if width > 1 else ''}\n\n"
                + table(head, rows)
                + "\n"
                + self.notes(case)
            )
        width = self.r.headline_width()
        plot = (
            f"![The overshoot of every trial at width {width}, per engine, as a CDF]"
            "(images/bench-cancel.png)\n"
        )
        return "\n".join(out) + ("\n" + plot if width is not None else "")

    def sibling(self) -> str:
        rows = []
        for key in self.r.engines():
            res = self.r.result(key, "sibling")
            if res is None:
                rows.append([self.label(key), self.missing(key, "sibling") or NA, NA, NA, NA])
                continue
            if not res["b_failed"]:
                self.problems.append(f"{self.r.name(key)}, sibling: B did not fail")
            right = res["a_executions"] == 1 and res["completed"]
            rows.append(
                [
                    self.label(key),
                    "yes" if res["b_failed"] else "**no**",
                    str(res["a_executions"]),
                    "yes" if res["completed"] else "**no**",
                    "A ran once" if right else "**A's checkpoint was lost, or the resume failed**",
                ]
            )
            if key != "tether" and key not in FLOORS and self.r.result("tether", "sibling"):
                t = self.r.result("tether", "sibling")
                t_right = t is not None and t["a_executions"] == 1 and t["completed"]
                word = "level" if right == t_right else ("ahead" if t_right else "behind")
                self.findings.append(("sibling failure: A ran once", key, word))
        head = ["engine", "B failed", "A's body ran", "resumed to completion", "verdict"]
        return table(head, rows) + "\n" + self.notes("sibling")

    def steps(self) -> str:
        rows = []
        valid: dict[bool, dict[str, float]] = {False: {}, True: {}}
        t_mem, t_dur = self.r.step_figure("tether", False), self.r.step_figure("tether", True)
        for key in self.r.engines():
            cells = [self.label(key)]
            for durable, t in ((False, t_mem), (True, t_dur)):
                case = f"steps {'durable' if durable else 'in memory'}"
                res = self.r.result(key, case)
                if res is None:
                    cells += [self.missing(key, case) or NA, NA]
                    continue
                n = int(self.r.entry(key, case)["config"]["n"])  # type: ignore[index]
                if res["steps_ran"] != n:
                    ran = res["steps_ran"]
                    self.problems.append(f"{self.r.name(key)}, {case}: {ran} of {n} ran")
                else:
                    valid[durable][key] = float(res["us_per_step"])
                text = f"{res['us_per_step']:.2f}"
                if res.get("checkpoint_us") is not None:
                    text += f" (with one yield: {res['checkpoint_us']:.2f})"
                cells += [text, ratio(res["us_per_step"], t)]
            rows.append(cells)
        for durable, figures in valid.items():
            self.compare(f"µs per step, {'durable' if durable else 'in memory'}", figures)
        head = ["engine", "in memory µs/step", "x tether", "durable µs/step", "x tether"]
        return (
            table(head, rows)
            + "\n"
            + (self.notes("steps in memory", "In memory") + self.notes("steps durable", "Durable"))
            + "![Microseconds per step, per engine, in memory and durable]"
            "(images/bench-overhead.png)\n"
        )

    def simple(
        self, case: str, field: str, head: list[str], fmt: str, check: str, topic: str
    ) -> str:
        """A one-figure scenario (parallel, resume, memory) as a table, with its check;
        *topic* names the figure in the comparison (which leaves out failed checks)."""
        rows, figures = [], {}
        tether = self.r.result("tether", case)
        t = float(tether[field]) if tether else None
        for key in self.r.engines():
            res = self.r.result(key, case)
            if res is None:
                rows.append([self.label(key), self.missing(key, case) or NA, NA, NA])
                continue
            cfg = self.r.entry(key, case)["config"]  # type: ignore[index]
            value = float(res[field])
            before = len(self.problems)
            checked = self.check(key, case, res, cfg, check)
            if len(self.problems) == before:
                figures[key] = value
            rows.append([self.label(key), fmt.format(value), ratio(value, t), checked])
        self.compare(topic, figures)
        return table(["engine", *head[1:], "x tether", head[0]], rows) + "\n" + self.notes(case)

    def check(
        self, key: str, case: str, res: dict[str, Any], cfg: dict[str, Any], what: str
    ) -> str:
        if what == "steps_ran":
            ok, text = res["steps_ran"] == cfg["n"], f"{res['steps_ran']} of {cfg['n']}"
            why = "steps ran"
        elif what == "reexecuted":
            ok, text, why = True, str(res["steps_reexecuted"]), ""
            if key != "tether" and key not in FLOORS and self.r.result("tether", case):
                t = self.r.result("tether", case)["steps_reexecuted"]  # type: ignore[index]
                word = (
                    "level"
                    if res["steps_reexecuted"] == t
                    else ("ahead" if t < res["steps_reexecuted"] else "behind")
                )
                self.findings.append(("resume re-executed no step", key, word))
        else:
            ok = res["runs_started"] == cfg["runs"]
            text = f"{res['runs_started']} of {cfg['runs']}"
            why = "runs parked"
        if not ok:
            self.problems.append(f"{self.r.name(key)}, {case}: {text} {why}")
        return text if ok else f"**{text}**"

    def queue(self) -> str:
        """Scenario 7: per job size, a row per system (medians over the rounds)."""
        out = []
        for steps in self.r.queue_steps():
            rows = []
            rates: dict[int, dict[str, float]] = {1: {}, 2: {}}  # ms per job, exactly once
            cpu: dict[str, float] = {}
            for key in self.r.queue_engines():
                figs = {w: self.r.queue_figure(key, steps, w) for w in (1, 2)}
                if figs[1] is None and figs[2] is None:
                    case = f"queue {steps}-step x1 #1"
                    rows.append([self.label(key), self.missing(key, case) or NA, *[NA] * 6])
                    continue
                for w, f in figs.items():
                    if f is not None and self.queue_checked(key, steps, w, f):
                        rates[w][key] = 1e3 / f.jobs_per_s
                        if w == 1:
                            cpu[key] = 1e3 / f.jobs_per_cpu_s
                rows.append(self.queue_row(key, steps, figs))
            for w, figures in rates.items():
                topic = f"time per {steps}-step job, {w} worker{'s' if w > 1 else ''}"
                self.compare_with("queue_tether", topic, figures)
            topic = f"CPU per {steps}-step job (workers + server), 1 worker"
            self.compare_with("queue_tether", topic, cpu)
            head = [
                "system",
                "jobs/s, 1 worker",
                "jobs/s, 2 workers",
                "jobs/s x tether (1 / 2 workers)",
                "jobs per CPU-second (1 / 2 workers)",
                "worker / server CPU ms per job",
                "commits / write transactions / statements per job",
                "exactly once",
            ]
            out.append(
                f"### {steps}-step jobs\n\n" + table(head, rows) + "\n" + self.queue_notes(steps)
            )
        if not out:
            return "Not run.\n"
        return "\n".join(out) + (
            "\n![Jobs per second of each system, by job size and worker processes]"
            "(images/bench-queue.png)\n"
        )

    def queue_checked(self, key: str, steps: int, workers: int, f: QueueFigure) -> bool:
        """Whether every step of every job ran exactly once; a problem noted if not."""
        if not f.exactly_once:
            self.problems.append(
                f"{self.r.name(key)}, queue {steps}-step x{workers}: {f.duplicates} "
                f"(job, step) pairs ran twice or more, {f.lost} never ran"
            )
        return f.exactly_once

    def queue_row(self, key: str, steps: int, figs: dict[int, QueueFigure | None]) -> list[str]:
        """One system's row; the per-job costs are the 1-worker run's (else 2 workers')."""
        tether = {w: self.r.queue_figure("queue_tether", steps, w) for w in figs}

        def rate(f: QueueFigure | None) -> str:
            if f is None:
                return NA
            per_step = f" ({f.jobs_per_s * steps:,.0f} steps/s)" if steps > 1 else ""
            return f"{f.jobs_per_s:,.0f}{per_step}"

        def vs(w: int) -> str:
            f, t = figs[w], tether[w]
            return NA if f is None or t is None else f"{f.jobs_per_s / t.jobs_per_s:.2f}x"

        ran = [f for f in figs.values() if f is not None]
        base = ran[0]
        statements = NA if base.statements is None else f"{base.statements:.2f}"
        dup, lost = sum(f.duplicates for f in ran), sum(f.lost for f in ran)
        runs = sum(f.runs for f in ran)
        once = f"yes ({runs} runs)" if not (dup or lost) else f"**no**: {dup} twice, {lost} lost"
        per_cpu = " / ".join(NA if f is None else f"{f.jobs_per_cpu_s:,.0f}" for f in figs.values())
        return [
            self.label(key),
            rate(figs[1]),
            rate(figs[2]),
            f"{vs(1)} / {vs(2)}",
            per_cpu,
            f"{base.worker_ms:.2f} / {base.server_ms:.2f}",
            f"{base.commits:.2f} / {base.write_xacts:.2f} / {statements}",
            once,
        ]

    def queue_notes(self, steps: int) -> str:
        notes = []
        for key in self.r.queue_engines():
            for e in self.r.raw["entries"]:
                if (
                    e["engine"] == key
                    and e["scenario"] == "queue"
                    and e["status"] == "ok"
                    and e["config"]["steps"] == steps
                    and e["result"].get("notes")
                ):
                    notes.append(f"{self.r.name(key)}, {e['case']}: {e['result']['notes']}")
        return "" if not notes else "Notes: " + "; ".join(notes) + ".\n\n"
