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
from tether.bench import (
    CancelResult,
    bench_cancel,
    bench_steps,
    bench_throughput,
    plot_cancel,
    to_json,
    write_table,
)
from tether.testing import Delay, Hang

from ._bad_store import WRITE_SECONDS
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
        assert 0 <= s["overshoot"] < 0.5 and 0 <= s["floor"] < 0.5
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
        # waited for the disk, about 0.25 s past its deadline.
        assert s["overshoot"] > WRITE_SECONDS / 2
        assert s["overshoot"] > 10 * s["floor"]
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
    # A durable (fsynced) step costs more than a checkpoint, which costs more than nothing.
    assert steps["per_step"] > steps["checkpoint"] > 0 and steps["checkpoints_per_step"] > 1
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
    err = usage_error(*probed, "--clock", "virtual", "--at", "create_run", capsys=capsys)
    # The engine creates runs with their first claim: the bench says what the run calls.
    assert "makes no create_run call" in err and "append x3" in err
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
    assert "pip install 'tether[bench]'" in err
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
    assert steps.per_step > 0 and steps.plain_await > 0 and len(steps.repeats_measured) == 2
    assert math.isfinite(steps.checkpoints_per_step)
    rates = await bench_throughput(store=tether.MemoryStore, width=5, steps=10, repeats=1)
    assert rates.steps == 10 and rates.grouped[0] > 0 and rates.ratio > 0
