"""``tether bench`` and ``tether.bench``: the user's workflow on the user's store.

Through the command line (``python -m tether`` in a process, and ``main`` in
this one) on the shop example (``examples/shop/shop.py``, imported as
``examples.shop.shop``): on SQLite it prints the table, writes the JSON and
the PNG, and in virtual time measures an overshoot of exactly 0; on a
deliberately bad third-party store (``tests._bad_store.SlowDiskStore``,
whose ``append`` blocks in a thread it does not abandon) it flags the
overshoot and the thread that held the caller, names the store and exits 1.
Through the Python API, under the ``autojump_clock`` fixture (virtual time):
a workflow that shields itself from cancellation is named, a store that
leaks a thread past its ``close()`` is caught, a run that cannot resume is a
bug. Real-time tests are marked ``slow``.
"""

from __future__ import annotations

import io
import json
import math
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import tether
from tether._cli._main import main
from tether.bench import (
    CancelResult,
    PhaseStuckError,
    StepsResult,
    bench_cancel,
    bench_steps,
    bench_throughput,
    plot_cancel,
    to_json,
    write_table,
)
from tether.bench._stats import paired_cost
from tether.testing import Delay, Hang

from ._cli import ROOT, cli, run_tether, usage_error
from ._json_store import JsonStore

SHOP = "examples.shop.shop:checkout"
PNG = b"\x89PNG\r\n\x1a\n"


# The shop's workflows are imported by the command line in this process: the registry
# is put back afterwards.
pytestmark = pytest.mark.usefixtures("tether_registry")


@pytest.fixture(autouse=True)
def _root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Import from the repository's root (as a user would run it from theirs)."""
    monkeypatch.chdir(ROOT)


def _samples(data: dict[str, Any]) -> list[dict[str, Any]]:
    samples: list[dict[str, Any]] = data["samples"]
    return samples


def _codes(data: dict[str, Any], severity: str) -> set[str]:
    return {f["code"] for f in data["findings"] if f["severity"] == severity}


# -- the command line, on the shop's checkout ------------------------------------------


@pytest.mark.slow
def test_cancel_on_sqlite_prints_the_table_and_writes_json_and_plot(tmp_path: Path) -> None:
    db, out, png = tmp_path / "shop.db", tmp_path / "bench.json", tmp_path / "cdf.png"
    proc = run_tether(
        "bench", "cancel", SHOP, "o-1", "--store", f"sqlite:{db}", "--samples", "3",
        "--json", str(out), "--plot", str(png),
        # A loaded CI machine can be late by tens of ms; a store that holds the caller
        # is late by the whole hang (the bad-store tests): a wide margin tells them apart.
        "--tolerance", "0.25", cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "tether bench cancel: shop.checkout on sqlite:" in proc.stdout
    assert "OVERSHOOT" in proc.stdout and "floor: trio nursery of 1" in proc.stdout
    assert "no bug found" in proc.stdout
    assert "sample 3/3: overshoot" in proc.stderr  # progress, one line per sample
    data = json.loads(out.read_text())
    assert data["bench"] == "cancel" and data["clock"] == "real" and data["bugs"] == 0
    # An undisturbed checkout: three steps, three saves; the hang stops the first.
    assert data["probe"]["calls"]["append"] == 3 and data["probe"]["outcome"] == "completed"
    for s in _samples(data):
        assert s["outcome"] == "cancelled" and s["fault_reached"]
        assert s["overshoot"] >= 0 and s["floor"] >= 0  # measured from the deadline on
        assert s["resumed"] == "completed" and s["resumable"]
        assert not s["threads_after_close"] and not s["tasks_left"]
    assert data["overshoot"]["n"] == data["floor"]["n"] == 3
    assert png.read_bytes()[:8] == PNG


def test_cancel_in_virtual_time_on_sqlite_overshoots_by_exactly_zero(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    r = cli(
        "bench", "cancel", SHOP, "o-1", "--store", f"sqlite:{tmp_path / 'shop.db'}",
        "--clock", "virtual", "--sweep", "--samples", "1", "--json", str(out),
    )  # fmt: skip
    assert r.status == 0, r.err
    assert "virtual clock" in r.out and "no bug found" in r.out
    data = json.loads(out.read_text())
    samples = _samples(data)
    assert [s["position"] for s in samples] == [1, 2, 3]  # one per save of the checkout
    for s in samples:
        assert s["overshoot"] == 0.0 and s["floor"] == 0.0  # exactly: virtual time
        assert s["resumable"]
    # The first two saves come before the deadline (0.1 s, 0.1 s), the third after it.
    assert [s["fault_reached"] for s in samples] == [True, True, False]
    assert _codes(data, "bug") == set()
    assert _codes(data, "note") == {"fault-not-reached"}


@pytest.mark.slow
def test_cancel_flags_a_store_that_blocks_in_a_thread_it_does_not_abandon(
    tmp_path: Path,
) -> None:
    out, png = tmp_path / "bench.json", tmp_path / "cdf.png"
    r = cli(
        "bench", "cancel", SHOP, "o-1", "--store-factory", "tests._bad_store:SlowDiskStore",
        "--fault", "delay:0.05", "--samples", "2", "--json", str(out), "--plot", str(png),
    )  # fmt: skip
    assert r.status == 1, r.err  # a finding is a bug
    assert "OVERSHOOT" in r.out and "2 bugs found" in r.out
    assert "abandon_on_cancel=True" in r.out  # the fix, printed
    assert "not returned 0.02 s after its deadline" in r.err  # said while it happened
    data = json.loads(out.read_text())
    assert _codes(data, "bug") == {"overshoot", "held-past-deadline"}
    for finding in data["findings"]:
        if finding["severity"] == "bug":
            assert finding["culprit"] == "store"
            assert "`SlowDiskStore.append` blocks in a worker thread" in finding["hint"]
    held = next(f for f in data["findings"] if f["code"] == "held-past-deadline")
    assert "_sync_to_disk" in held["message"]  # the thread, by its function
    for s in _samples(data):
        # The deadline (0.2 s) struck during the save that began at 0.15 s: the caller
        # waited for the disk's thread, which still ran after the deadline.
        assert any(t.startswith("_sync_to_disk from ") for t in s["held_threads"])
        assert {c["where"] for c in s["held"]} == {"SlowDiskStore.append"}
        assert all(c["in_thread"] for c in s["held"])
        assert s["resumable"]  # slow, not broken: the run still resumes
    assert png.read_bytes()[:8] == PNG


@pytest.mark.slow
def test_cancel_in_virtual_time_flags_the_bad_store_as_a_bug(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    r = cli(
        "bench", "cancel", SHOP, "o-1", "--store-factory", "tests._bad_store:SlowDiskStore",
        "--fault", "delay:0.05", "--samples", "1", "--clock", "virtual", "--json", str(out),
    )  # fmt: skip
    assert r.status == 1, r.err
    data = json.loads(out.read_text())
    (sample,) = _samples(data)
    # Virtual time moved on while the thread worked: any overshoot at all is the bug.
    assert sample["overshoot"] > 0
    overshoot = next(f for f in data["findings"] if f["code"] == "overshoot")
    assert overshoot["severity"] == "bug" and overshoot["culprit"] == "store"
    assert "virtual time" in overshoot["message"]


@pytest.mark.slow
def test_steps_and_throughput_on_sqlite(tmp_path: Path) -> None:
    spec = f"sqlite:{tmp_path / 'steps.db'}"
    r = cli("bench", "steps", "--store", spec, "--steps", "5", "--repeats", "1")
    assert r.status == 0, r.err
    assert "tether step (durable)" in r.out and "trio checkpoint" in r.out
    r = cli("bench", "steps", "--store", spec, "--steps", "5", "--repeats", "2", "--json", "-")
    assert r.status == 0, r.err
    steps = json.loads(r.out)  # only JSON on stdout with --json -
    assert steps["bench"] == "steps" and len(steps["repeats_measured"]) == 2
    # Never a negative cost, whatever the machine's load: noise is the resolution.
    assert steps["per_step"] >= 0 and steps["resolution"] >= 0
    assert steps["resolved"] == (steps["per_step"] > steps["resolution"])
    r = cli(
        "bench", "throughput", "--store", spec, "--parallel", "4", "--steps", "8",
        "--repeats", "1", "--json", "-",
    )  # fmt: skip
    assert r.status == 0, r.err
    rates = json.loads(r.out)
    assert rates["bench"] == "throughput" and rates["steps"] == 8
    assert rates["grouped"][0] > 0 and rates["one_per_save"][0] > 0
    # The bench's runs were deleted: the store is empty again.
    listed = cli("runs", "list", "--json", "--store", spec)
    assert json.loads(listed.out) == []


def test_usage_errors_name_what_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    probed = ("bench", "cancel", SHOP, "o-1", "--store", f"sqlite:{tmp_path / 'probed.db'}")
    with pytest.raises(SystemExit) as refused:
        main([*probed, "--clock", "virtual", "--at", "create_run"])
    assert refused.value.code == 2
    # The undisturbed run's progress, then the refusal: the engine creates runs with
    # their first claim, and the bench says what the run calls and how it ends.
    said, _, err = capsys.readouterr().err.partition("usage: tether")
    assert said.splitlines()[1] == "undisturbed run: 400.000 ms, completed"
    assert "makes no create_run call" in err and "append x3" in err
    assert "(and ends completed)" in err
    untouched = tmp_path / "untouched.db"
    cancel = ("bench", "cancel", SHOP, "o-1", "--store", f"sqlite:{untouched}")
    err = usage_error(*cancel, "--fault", "explode", capsys=capsys)
    assert "--fault takes hang or delay:SECONDS" in err
    err = usage_error(*cancel, "--store-factory", "tests._bad_store:SlowDiskStore", capsys=capsys)
    assert "not both" in err
    err = usage_error(
        "bench", "steps", "--store-factory", "tests._bad_store:nothing", capsys=capsys
    )
    assert "has no attribute 'nothing'" in err
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # the bench extra, not installed
    err = usage_error(*cancel, "--plot", str(tmp_path / "x.png"), capsys=capsys)
    assert "pip install -e '.[bench]'" in err
    assert not untouched.exists()  # each refused before anything ran


def test_help_lists_the_options_and_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli("bench", "cancel", "--help")
    text = capsys.readouterr().out
    for option in ("--fault", "--at", "--sweep", "--deadline", "--samples", "--parallel",
                   "--clock", "--json", "--plot", "--store-factory", "--import"):  # fmt: skip
        assert option in text
    assert "a finding is a bug" in text and "creates the store" in text


# -- the Python API, in virtual time -----------------------------------------------------

held_for = 0.5  # how long the stubborn step waits under its shield


@tether.step(name="tests.bench.stubborn_step")
async def stubborn_step(n: int) -> int:
    with trio.CancelScope(shield=True):  # the mistake: a caller's deadline cannot reach it
        await trio.sleep(held_for)
    return n


@tether.step(name="tests.bench.quick")
async def quick(n: int) -> int:
    await trio.sleep(0.01)
    return n + 1


@tether.workflow(name="tests.bench.stubborn")
async def stubborn(n: int) -> int:
    return await stubborn_step(await quick(n))


@tether.workflow(name="tests.bench.fan_out")
async def fan_out(width: int) -> int:
    async with tether.parallel() as p:
        handles = [p.start_soon(quick, i) for i in range(width)]
    return sum(h.result for h in handles)


async def test_a_good_store_in_virtual_time(autojump_clock: trio.abc.Clock) -> None:
    result = await bench_cancel(fan_out, 3, store=tether.MemoryStore, samples=2, deadline=0.2)
    assert isinstance(result, CancelResult) and result.clock == "virtual"
    assert result.probe.width == 3 and result.width == 3  # the floor is as wide as the run
    assert [s.overshoot for s in result.samples] == [0.0, 0.0]
    assert result.overshoot.max == 0.0 and result.ratio == 1.0
    assert result.findings == () and result.bugs == ()
    # Nothing left behind: the runs resumed and were deleted.
    assert all(s.resumable and s.fault_reached for s in result.samples)


async def test_the_workflow_that_shields_itself_is_named(autojump_clock: trio.abc.Clock) -> None:
    # The hang is at the second save: the shielded step runs when the deadline strikes.
    result = await bench_cancel(
        stubborn, 1, store=tether.MemoryStore, fault=Hang(), at="update_run", samples=1
    )
    (sample,) = result.samples
    assert sample.overshoot == pytest.approx(held_for + 0.01 - 0.2)
    (bug,) = result.bugs
    assert (bug.code, bug.culprit) == ("overshoot", "workflow")
    assert "test_bench_tool.py" in bug.message and "stubborn_step" in bug.message
    assert bug.hint is not None and "let trio.Cancelled propagate" in bug.hint


leaked: list[threading.Event] = []


class LeakyStore(JsonStore):
    """Starts a thread in open() that close() never stops."""

    async def open(self) -> None:
        await super().open()
        stop = threading.Event()
        leaked.append(stop)
        threading.Thread(target=stop.wait, name="leaky flusher", daemon=True).start()


async def test_a_thread_left_after_close_is_a_bug(autojump_clock: trio.abc.Clock) -> None:
    try:
        result = await bench_cancel(fan_out, 1, store=LeakyStore, fault=Delay(0.1), samples=1)
    finally:
        for stop in leaked:
            stop.set()  # the test's own cleanup: no thread outlives it
    bug = next(f for f in result.bugs if f.code == "threads-after-close")
    assert "leaky flusher" in bug.message and bug.culprit == "store"
    assert result.samples[0].threads_after_close == ("leaky flusher",)


draws = [0]  # how many times forgetful's first step was called


def draw() -> int:
    draws[0] += 1
    return draws[0]


@tether.step(name="tests.bench.record")
async def record(n: int) -> int:
    await trio.sleep(0.1)
    return n


@tether.workflow(name="tests.bench.forgetful")
async def forgetful() -> int:
    first = await record(draw())  # not deterministic: a resume calls it otherwise
    return await record(first)


async def test_a_run_that_does_not_resume_is_a_bug(autojump_clock: trio.abc.Clock) -> None:
    # Hang the 1st save, then the 2nd; the deadline (0.15 s) strikes in the 2nd step.
    result = await bench_cancel(
        forgetful, store=tether.MemoryStore, fault=Hang(), samples=1, deadline=0.15, sweep=True
    )
    first, second = result.samples
    # Nothing was stored: the resume runs anew, to another result (a warning only).
    assert (first.resumed, first.resumable) == ("completed, with another result", True)
    assert {f.code for f in result.findings if f.severity == "warning"} == {"result-differs"}
    # The first step was stored with its argument: the resume calls it with another.
    assert not second.resumable and "NonDeterminismError" in second.resumed
    (broken,) = (f for f in result.bugs if f.code == "not-resumable")
    assert second.run_id in broken.message  # kept in the store, and named


def test_a_mock_clock_that_does_not_autojump_is_refused() -> None:
    async def bench() -> None:
        await bench_cancel(fan_out, 1, store=tether.MemoryStore)

    with pytest.raises(tether.UsageError, match="autojump_threshold=0"):
        trio.run(bench, clock=trio.testing.MockClock())


async def test_results_print_and_serialize(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    result = await bench_cancel(fan_out, 2, store=tether.MemoryStore, samples=1)
    data = to_json(result)
    assert json.loads(json.dumps(data, allow_nan=False)) == data  # strict JSON
    assert data["overshoot"]["p99"] == 0.0 and data["bugs"] == 0
    out = io.StringIO()
    write_table(result, out)
    assert "tests.bench.fan_out" in out.getvalue() and "no bug found" in out.getvalue()
    plot_cancel(result, tmp_path / "zero.png")  # all zeros: still a readable plot
    assert (tmp_path / "zero.png").read_bytes()[:8] == PNG


async def test_steps_and_throughput_api() -> None:
    steps = await bench_steps(store=tether.MemoryStore, steps=20, repeats=2)
    assert steps.per_step >= 0 and steps.overhead >= 0 and len(steps.repeats_measured) == 2
    assert math.isfinite(steps.checkpoints_per_step)
    rates = await bench_throughput(store=tether.MemoryStore, width=5, steps=10, repeats=1)
    assert rates.steps == 10 and rates.grouped[0] > 0 and rates.ratio > 0


# -- every phase ends: a run that waits forever is named, not waited for ------------------


@tether.workflow(name="tests.bench.waits_for_go", messages={"go": int})
async def waits_for_go(n: int) -> int:
    return n + await tether.receive("go", int)


@tether.workflow(name="tests.bench.asks")
async def asks(n: int) -> int:
    return n + await tether.ask({"n": n}, int, key="approve")


@tether.workflow(name="tests.bench.asks_with_a_reminder")
async def asks_with_a_reminder(n: int) -> int:
    async def remind() -> None:
        await tether.sleep(86400)  # a day: until then, the ask does not pause the run

    async with tether.parallel() as p:
        answer = p.start_soon(tether.ask, {"n": n}, int, "approve")
        p.start_soon(remind)
    value: int = answer.result
    return n + value


async def test_an_undisturbed_run_that_waits_for_a_message_stops_the_bench(
    autojump_clock: trio.abc.Clock,
) -> None:
    said: list[str] = []
    with pytest.raises(PhaseStuckError) as stuck:
        await bench_cancel(waits_for_go, 1, store=tether.MemoryStore, progress=said.append)
    message = str(stuck.value)
    assert message.startswith("the undisturbed run of tests.bench.waits_for_go")
    assert "tether.receive waits for message 'go'" in message
    assert stuck.value.waits.messages == ("go",) and stuck.value.waits.forever
    # Said as the phase began; it never ended.
    assert said == [
        "undisturbed run of tests.bench.waits_for_go: no fault, no deadline (at most 60 s)"
    ]


async def test_an_undisturbed_run_past_its_phase_timeout_names_what_it_waits_for(
    autojump_clock: trio.abc.Clock,
) -> None:
    with pytest.raises(PhaseStuckError) as stuck:
        await bench_cancel(
            asks_with_a_reminder, 1, store=tether.MemoryStore, at="update_run", phase_timeout=5
        )
    message = str(stuck.value)
    assert "did not end within its timeout of 5 s" in message
    assert "tether.ask waits for a response to request ask#0/approve" in message
    assert "a durable timer waits until" in message
    assert stuck.value.waits.requests == ("ask#0/approve",) and not stuck.value.waits.forever


async def test_an_ask_pauses_the_undisturbed_run_and_the_bench_says_on_what(
    autojump_clock: trio.abc.Clock,
) -> None:
    said: list[str] = []
    result = await bench_cancel(
        asks, 1, store=tether.MemoryStore, at="update_run", samples=1, progress=said.append
    )
    assert (result.probe.outcome, result.probe.requests) == ("paused", ("approve",))
    assert said[1] == "undisturbed run: 0.000 ms, paused on request approve"
    assert [s.resumed for s in result.samples] == ["paused"] and result.bugs == ()
    out = io.StringIO()
    write_table(result, out)
    assert "undisturbed run: 0.000 ms, paused on request approve," in out.getvalue()


draws_after = [0]  # how many times waits_on_resume has started


def started_again() -> bool:
    draws_after[0] += 1
    return draws_after[0] > 1


@tether.workflow(name="tests.bench.waits_on_resume", messages={"go": int})
async def waits_on_resume() -> int:
    value = await record(1)
    if started_again():  # not deterministic: every run after the first waits for a message
        value += await tether.receive("go", int)
    return value


async def test_a_resume_that_waits_forever_is_a_sample_that_did_not_resume(
    autojump_clock: trio.abc.Clock,
) -> None:
    draws_after[0] = 0
    result = await bench_cancel(waits_on_resume, store=tether.MemoryStore, samples=1)
    (sample,) = result.samples
    assert not sample.resumable
    assert sample.resumed.startswith("the resume cannot end: tether.receive waits for message")
    (bug,) = (f for f in result.bugs if f.code == "not-resumable")
    assert "message 'go'" in bug.message and sample.run_id in bug.message


def test_the_command_line_names_the_message_a_run_waits_for(tmp_path: Path) -> None:
    r = cli(
        "bench", "cancel", "tests.test_bench_tool:waits_for_go", "1", "--store",
        f"sqlite:{tmp_path / 'go.db'}", "--clock", "virtual", "--phase-timeout", "30",
    )  # fmt: skip
    assert r.status == 1 and r.out == ""
    assert r.err.splitlines() == [
        "undisturbed run of tests.bench.waits_for_go: no fault, no deadline (at most 30 s)",
        "tether: bench cancel on sqlite:" + str(tmp_path / "go.db") + ": PhaseStuckError: the "
        "undisturbed run of tests.bench.waits_for_go (no fault, no deadline) cannot end: "
        "tether.receive waits for message 'go', and nothing sends a bench run messages; bench a "
        "workflow that ends without them (one that takes the message's value as an argument)",
    ]


# -- a step's cost: never negative, and below resolution within the noise ------------------


def test_a_step_cost_is_the_median_of_paired_differences_never_below_zero() -> None:
    # Per step: (12-10)/2 = 1, (9-10)/2 = -0.5, (16-10)/2 = 3: median 1.
    assert paired_cost([10, 10, 10], [12, 9, 16], 2) == (1.0, 1.5)
    # Noise larger than the steps: the median difference is below 0, the cost is not.
    cost, resolution = paired_cost([10, 14, 12], [9, 11, 13], 1)
    assert cost == 0.0 and resolution == 2.0
    # The runs of no step alone vary by 4 over 2 steps: a resolution of 1 per step.
    assert paired_cost([10], [20], 2, more_base=[6, 10, 14]) == (5.0, 1.0)


def _steps_result(per_step: float, resolution: float) -> StepsResult:
    return StepsResult(
        store="MemoryStore()", steps=100, repeats=3, per_step=per_step, resolution=resolution,
        per_run=1e-3, plain_await=1e-7, checkpoint=2e-6, repeats_measured=(),
    )  # fmt: skip


def test_a_step_cost_within_its_resolution_is_told_as_such() -> None:
    unresolved = _steps_result(per_step=0.0, resolution=3.5e-6)
    assert not unresolved.resolved and unresolved.overhead == 0.0
    out = io.StringIO()
    write_table(unresolved, out)
    table = out.getvalue()
    assert "below resolution (±3.500)" in table
    assert "a step costs less than this bench resolves (±3.500 us" in table
    assert "-0" not in table
    assert to_json(unresolved)["resolved"] is False

    resolved = _steps_result(per_step=4e-5, resolution=3.5e-6)
    out = io.StringIO()
    write_table(resolved, out)
    assert "40.000 ±3.500" in out.getvalue() and "below resolution" not in out.getvalue()
    assert "a step costs 39.900 us over a plain await (20.0 checkpoints)" in out.getvalue()
