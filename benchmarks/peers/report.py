"""Turn results.json into docs/benchmarks.md, docs/images/bench-*.png and README's headline.

Run: ``python benchmarks/peers/report.py [--results FILE]`` (after ``run.py``).

Every sentence about who is ahead is generated from the figures; nothing here
is a claim the numbers could contradict. Needs matplotlib (tether's ``bench``
extra, also in the peers' venv, which this script re-runs itself under when
the current interpreter lacks it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

from _figures import QUEUE_FLOOR, Results, percentile  # noqa: E402
from _report_text import SCENARIO_TEXT, TEMPLATE  # noqa: E402
from _tables import NA, Tables, num, table  # noqa: E402

DOC = REPO / "docs" / "benchmarks.md"
IMAGES = REPO / "docs" / "images"
README = REPO / "README.md"
START, END = "<!-- bench-peers:start -->", "<!-- bench-peers:end -->"


class Report(Tables):
    """The whole page, the README headline, from one results.json."""

    def unavailable(self) -> str:
        lines = []
        for key in self.r.all_engines():
            info = self.r.raw["engines"][key]
            if not info["installed"]:
                why = (info["install_error"] or "pip failed").strip().splitlines()[-1]
                lines.append(f"- **{info['name']}** could not be installed: `{why}`")
                continue
            for e in self.r.raw["entries"]:
                if e["engine"] == key and e["status"] not in ("ok",):
                    kind = {"unsupported": "cannot express"}.get(e["status"], e["status"])
                    lines.append(f"- {info['name']}, {e['case']}: {kind}: {e.get('reason', '')}")
        return "\n".join(lines) + "\n" if lines else "Every engine ran every scenario.\n"

    def summary(self) -> str:
        by_topic: dict[str, dict[str, list[str]]] = {}
        for topic, key, word in self.findings:
            by_topic.setdefault(topic, {}).setdefault(word, []).append(self.r.name(key))
        if not by_topic:
            return "No peer produced a figure to compare with tether's in this run.\n"
        lines = []
        for topic, words in by_topic.items():
            parts = [f"ahead of {', '.join(words['ahead'])}"] if "ahead" in words else []
            if "level" in words:
                parts.append(f"level with {', '.join(words['level'])}")
            if "behind" in words:
                parts.append(f"**behind** {', '.join(words['behind'])}")
            lines.append(f"- {topic}: tether is {'; '.join(parts)}.")
        floors = []
        for width in self.r.widths():
            t = self.r.overshoots_ms("tether", width)
            b = self.r.overshoots_ms("trio", width)
            if t and b:
                floors.append(
                    f"{percentile(t, 50) / percentile(b, 50):.2f}x bare trio's overshoot "
                    f"p50 at width {width}"
                )
        t, b = self.r.step_figure("tether", False), self.r.step_figure("trio", False)
        if t and b:
            floors.append(f"{t / b:.0f}x a plain await per step in memory")
        for steps in self.r.queue_steps():
            t = self.r.queue_figure("queue_tether", steps, 1)
            b = self.r.queue_figure(QUEUE_FLOOR, steps, 1)
            if t and b and t.exactly_once and b.exactly_once:
                floors.append(
                    f"{t.jobs_per_s / b.jobs_per_s:.2f}x the jobs/s of the bare SKIP LOCKED "
                    f"loop with {steps}-step jobs and one worker"
                )
        if floors:
            lines.append(f"- Against the floors: tether is {', '.join(floors)}.")
        return "\n".join(lines) + "\n"

    def page(self) -> str:
        m = self.r.raw["machine"]
        quick = (
            '\n!!! warning "A --quick smoke run"\n    These figures come from `run.py --quick` '
            "(tiny sizes, a few trials): they show the report works, not how the engines "
            "compare. `just bench-peers` produces the real figures.\n"
            if self.r.quick
            else ""
        )
        versions = table(
            ["engine", "version", "installed"],
            [
                [self.r.name(k), str(i["version"] or NA), "yes" if i["installed"] else "**no**"]
                for k, i in self.r.raw["engines"].items()
            ],
        )
        body = {
            "1. A caller deadline while every checkpoint save hangs": self.cancel(),
            "2. A sibling fails while a completed step's save is slow": self.sibling(),
            "3. Sequential no-op steps": self.steps(),
            "4. Parallel durable no-op steps": self.simple(
                "parallel",
                "seconds",
                ["steps ran", "seconds (wall)"],
                "{:.4f}",
                "steps_ran",
                "parallel steps: wall time",
            ),
            "5. Resuming a long run": self.simple(
                "resume",
                "seconds",
                ["steps re-executed", "seconds"],
                "{:.3f}",
                "reexecuted",
                "resume: time",
            ),
            "6. Memory of concurrent two-step runs": self.simple(
                "memory",
                "peak_bytes",
                ["runs parked", "peak bytes"],
                "{:,.0f}",
                "runs",
                "memory: peak",
            ),
            "7. A queue of jobs drained by worker processes (PostgreSQL)": self.queue(),
        }
        sizes = self.sizes()
        sections = "\n".join(
            f"## {title}\n\n{SCENARIO_TEXT[i].format(**sizes)}\n\n{text}"
            for i, (title, text) in enumerate(body.items())
        )
        problems = "".join(f"- {p}\n" for p in self.problems) or "None: every check passed.\n"
        return TEMPLATE.format(
            quick=quick,
            generated=self.r.raw["generated"],
            platform=m["platform"],
            cpu=m["cpu"],
            cpus=m["cpus"],
            python=m["python"],
            load=m["load"],
            source=m["source"],
            versions=versions,
            summary=self.summary(),
            sections=sections,
            problems=problems,
            unavailable=self.unavailable(),
        )

    def sizes(self) -> dict[str, str]:
        """The sizes the scenario texts name, from the configurations that ran."""

        def config(case: str, key: str, default: object) -> str:
            for e in self.r.raw["entries"]:
                if e["case"] == case:
                    return f"{e['config'][key]:,}"
            return f"{default:,}" if isinstance(default, int) else str(default)

        return {
            "steps": config("steps in memory", "n", 1000),
            "repeats": config("steps in memory", "repeats", 5),
            "parallel": config("parallel", "n", 1000),
            "resume": config("resume", "n", 10_000),
            "runs": config("memory", "runs", 10_000),
            "jobs": next(
                (
                    f"{e['config']['jobs']:,}"
                    for e in self.r.raw["entries"]
                    if e["scenario"] == "queue"
                ),
                "1,500",
            ),
            "rounds": str(
                max(
                    (
                        e["config"]["round"]
                        for e in self.r.raw["entries"]
                        if e["scenario"] == "queue"
                    ),
                    default=3,
                )
            ),
            "postgres": " ".join(str(self.r.raw.get("postgres", "PostgreSQL")).split()),
        }

    def headline(self) -> str:
        width = self.r.headline_width()
        rows = []
        for key in self.r.engines():
            ms = self.r.overshoots_ms(key, width) if width else None
            dur = self.r.step_figure(key, True)
            cancel = f"{percentile(ms, 50):.2f} / {percentile(ms, 99):.2f}" if ms else None
            rows.append(
                [
                    self.label(key),
                    cancel or self.missing(key, f"cancel width={width}") or NA,
                    (self.r.left_running(key, width) if width else None) or NA,
                    num(dur) if dur is not None else self.missing(key, "steps durable") or NA,
                ]
            )
        quick = " (a `--quick` smoke run)" if self.r.quick else ""
        return (
            f"How tether compares with the engines you might pick instead{quick}: the overshoot "
            f"past a caller's 0.2 s deadline with {width} parallel steps whose checkpoint saves "
            "all hang, what the engine left running when it returned, and the time per step of "
            "a durable run. Every figure, the other scenarios "
            "and the machine: [docs/benchmarks.md](docs/benchmarks.md) (`just bench-peers`).\n\n"
            + table(
                [
                    "engine",
                    "deadline overshoot p50 / p99, ms",
                    "left running: tasks / threads",
                    "durable µs per step",
                ],
                rows,
            )
            + "\n![The overshoot past the caller's deadline, per engine]"
            "(docs/images/bench-cancel.png)\n"
        )


def write_readme(headline: str) -> bool:
    text = README.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(START) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        print(f"note: {README} has no {START} ... {END} markers; headline not written")
        return False
    README.write_text(pattern.sub(lambda _: f"{START}\n{headline}{END}", text), encoding="utf-8")
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--results", type=Path, default=HERE / "results.json")
    ns = parser.parse_args()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        venv = HERE / ".venv" / "bin" / "python"
        if venv.exists() and Path(sys.executable).resolve() != venv.resolve():
            os.execv(str(venv), [str(venv), __file__, *sys.argv[1:]])
        raise SystemExit(
            "report.py needs matplotlib: pip install 'tether[bench]' (or run run.py, "
            "whose benchmarks/peers/.venv has it)"
        ) from None
    import _plots

    results = Results(json.loads(ns.results.read_text()))
    report = Report(results)
    DOC.write_text(report.page(), encoding="utf-8")
    IMAGES.mkdir(parents=True, exist_ok=True)
    wrote = [str(DOC.relative_to(REPO))]
    for name, draw in (
        ("bench-cancel.png", _plots.cancel_cdf),
        ("bench-overhead.png", _plots.overhead_bars),
        ("bench-queue.png", _plots.queue_bars),
    ):
        if draw(results, IMAGES / name):
            wrote.append(f"docs/images/{name}")
    if write_readme(report.headline()):
        wrote.append("README.md (between the bench-peers markers)")
    print("wrote " + ", ".join(wrote))


if __name__ == "__main__":
    main()
