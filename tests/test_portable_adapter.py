"""``benchmarks/portable/tether-bench``: tether's adapter keeps the portable benchmark's contract.

Its settings and percentiles are checked here in-process; the process itself
runs against a fresh database of the test server: a descriptor first, whose
tables and indexes (the manifest's) exist; then, at each wall-clock second, the
six required metrics, well formed; SIGTERM ends it with exit status 0.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from . import _postgres
from ._poll import poll

ADAPTER = Path(__file__).resolve().parent.parent / "benchmarks" / "portable" / "tether-bench"
METRICS = {
    "claim_p50_ms": 30.0,
    "claim_p95_ms": 30.0,
    "claim_p99_ms": 30.0,
    "enqueue_rate": 1,
    "completion_rate": 1,
    "queue_depth": 0,
}  # each required metric, and its window at SAMPLE_EVERY_S=1
URL = "postgresql://bench@localhost/tether_bench"


def _adapter() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tether_bench_main", ADAPTER / "main.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


adapter = _adapter()


def _env(**variables: str) -> dict[str, str]:
    return {"DATABASE_URL": URL, **variables}


# -- settings -------------------------------------------------------------------------------


def test_settings_take_the_contracts_variables_and_defaults() -> None:
    settings = adapter.Settings.from_env(_env())
    assert (settings.producer_mode, settings.producer_rate, settings.worker_count) == (
        "fixed",
        100.0,
        16,
    )
    assert (settings.payload_bytes, settings.work_ms, settings.sample_every) == (256, 1.0, 5)
    settings = adapter.Settings.from_env(
        _env(
            PRODUCER_MODE="depth-target",
            TARGET_DEPTH="50",
            WORKER_COUNT="3",
            JOB_WORK_MS="2.5",
            SAMPLE_EVERY_S="10",
            JOB_PAYLOAD_BYTES="0",
        )
    )
    assert (settings.producer_mode, settings.target_depth, settings.worker_count) == (
        "depth-target",
        50,
        3,
    )
    assert (settings.work_ms, settings.sample_every, settings.payload_bytes) == (2.5, 10, 0)


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"DATABASE_URL": ""}, "DATABASE_URL must be a postgresql:// URL, not ''"),
        ({"DATABASE_URL": "sqlite:x.db"}, "DATABASE_URL must be a postgresql:// URL"),
        ({"SCENARIO": "chaos"}, "SCENARIO='chaos': only 'long_horizon' is implemented"),
        ({"PRODUCER_MODE": "burst"}, "PRODUCER_MODE='burst': 'fixed' or 'depth-target'"),
        ({"PRODUCER_RATE": "fast"}, "PRODUCER_RATE='fast': must be a number >= 0.0"),
        ({"PRODUCER_RATE": "-1"}, "PRODUCER_RATE='-1': must be a number >= 0.0"),
        ({"PRODUCER_RATE": "nan"}, "PRODUCER_RATE='nan'"),
        ({"JOB_WORK_MS": "inf"}, "JOB_WORK_MS='inf'"),
        ({"WORKER_COUNT": "0"}, "WORKER_COUNT='0': must be an integer >= 1"),
        ({"SAMPLE_EVERY_S": "1.5"}, "SAMPLE_EVERY_S='1.5': must be an integer >= 1"),
        ({"TARGET_DEPTH": "1e9"}, "TARGET_DEPTH='1e9': must be an integer"),
    ],
)
def test_a_bad_variable_is_named(variables: dict[str, str], message: str) -> None:
    env = {**_env(), **variables}
    with pytest.raises(adapter.SettingsError) as caught:
        adapter.Settings.from_env(env)
    assert str(caught.value).startswith(message)


def test_a_bad_variable_exits_2_naming_it() -> None:
    env = {**os.environ, **_env(SCENARIO="chaos")}
    done = subprocess.run(
        [sys.executable, str(ADAPTER / "main.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""  # nothing the harness would read as telemetry
    assert "SCENARIO='chaos': only 'long_horizon' is implemented" in done.stderr


# -- percentiles ----------------------------------------------------------------------------


def test_percentiles_are_nearest_rank_over_the_last_30_seconds() -> None:
    pickups = adapter.Pickups()
    assert pickups.percentiles(100.0, 0.5) == (0.0,)
    for _ in range(5):
        pickups.add(50.5, 1000.0)  # 50 s before: out of the window
    for ms in range(100, 0, -1):  # 1..100 ms
        pickups.add(90.5, float(ms))
    assert pickups.percentiles(100.0, 0.5, 0.95, 0.99, 1.0) == (50.0, 95.0, 99.0, 100.0)
    assert [s for s, _ in pickups.seconds] == [90]  # the old second dropped
    pickups.add(99.2, 7.25)
    assert pickups.percentiles(121.0, 0.5) == (7.25,)  # 90 s is out of the window now


@pytest.mark.parametrize("ms", [0.0, 0.0004, 0.0123, 1.0, 3.14159, 271.828, 86_400_000.0])
def test_a_latency_comes_back_to_three_significant_figures(ms: float) -> None:
    pickups = adapter.Pickups()
    pickups.add(1.0, ms)
    (back,) = pickups.percentiles(1.0, 0.5)
    assert back == pytest.approx(ms, rel=1e-3, abs=adapter.SMALLEST_MS)


def test_memory_is_bounded_by_the_window_and_the_bins_not_the_rate() -> None:
    pickups = adapter.Pickups()
    for i in range(200_000):  # 2,000 pickups a second for 100 s
        pickups.add(i / 2_000, 1 + i % 50)
    pickups.percentiles(100.0, 0.5)
    assert len(pickups.seconds) <= adapter.LATENCY_WINDOW + 1
    assert all(len(histogram) <= 50 for _, histogram in pickups.seconds)


def test_timestamps_are_written_as_the_contract_does() -> None:
    assert adapter.iso(1_781_000_010.25) == "2026-06-09T10:13:30.250Z"


# -- the process ----------------------------------------------------------------------------


PRODUCERS = {
    "fixed": {"PRODUCER_RATE": "40", "WORKER_COUNT": "4", "JOB_WORK_MS": "1"},
    # one job at a time, 50 ms each: the 30 runs the producer keeps queued wait
    "depth-target": {"TARGET_DEPTH": "30", "WORKER_COUNT": "1", "JOB_WORK_MS": "50"},
}


@pytest.mark.slow
@pytest.mark.parametrize("mode", PRODUCERS)
def test_the_process_reports_every_metric_each_second_and_exits_0_on_sigterm(
    fleet_database: str, postgres_server: _postgres.PostgresServer, tmp_path: Path, mode: str
) -> None:
    out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
    env = {
        **os.environ,
        "DATABASE_URL": fleet_database,
        "SCENARIO": "long_horizon",
        "PRODUCER_MODE": mode,
        "SAMPLE_EVERY_S": "1",
        **PRODUCERS[mode],
    }
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(ADAPTER / "main.py")], env=env, stdout=out, stderr=err
        )
    try:

        def records() -> list[dict[str, Any]]:
            lines = out_path.read_text(encoding="utf-8").splitlines()
            return [json.loads(line) for line in lines if line.endswith("}")]

        def completing() -> bool:  # a tick in which jobs completed, and the one after it
            ticks = [r for r in records() if r.get("metric") == "completion_rate"]
            done = [i for i, r in enumerate(ticks) if r["value"] > 0]
            return bool(done) and len(ticks) > done[0] + 1

        poll(completing, "samples with completions")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, err_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    lines = out_path.read_text(encoding="utf-8").splitlines()
    found = [json.loads(line) for line in lines]  # every line is JSON
    descriptor, samples = found[0], found[1:]
    manifest = json.loads((ADAPTER / "adapter.json").read_text())
    assert descriptor["kind"] == "descriptor" and descriptor["system"] == manifest["system"]
    assert set(descriptor["event_tables"]) >= set(manifest["event_tables"])
    assert descriptor["extensions"] == manifest["extensions"] == []
    assert descriptor["db_name"] == fleet_database.rsplit("/", 1)[1]
    assert descriptor["schema_version"].isdigit() and descriptor["version"]
    name = descriptor["db_name"]
    for relation in manifest["event_tables"] + manifest["event_indexes"]:
        found_it = postgres_server.sql("SELECT to_regclass(%s) IS NOT NULL", relation, dbname=name)
        assert found_it == [(True,)], relation

    by_tick: dict[str, dict[str, dict[str, Any]]] = collections.defaultdict(dict)
    for record in samples:
        assert record.keys() == {
            "t", "system", "kind", "subject_kind", "subject", "metric", "value", "window_s"
        }  # fmt: skip
        assert (record["system"], record["kind"], record["subject_kind"], record["subject"]) == (
            "tether",
            "adapter",
            "adapter",
            "",
        )
        assert record["metric"] not in by_tick[record["t"]], record  # once per tick
        by_tick[record["t"]][record["metric"]] = record
    assert len(by_tick) >= 2
    for t, tick in by_tick.items():
        assert t.endswith(".000Z"), t  # aligned on the wall clock's seconds
        assert tick.keys() == METRICS.keys(), t
        assert {m: r["window_s"] for m, r in tick.items()} == METRICS
        assert all(math.isfinite(r["value"]) and r["value"] >= 0 for r in tick.values())
        p50, p95, p99 = (tick[f"claim_p{q}_ms"]["value"] for q in (50, 95, 99))
        assert p50 <= p95 <= p99
    assert sorted(by_tick) == list(by_tick)  # in time order
    assert any(tick["enqueue_rate"]["value"] > 0 for tick in by_tick.values())
    if mode == "depth-target":
        assert any(tick["queue_depth"]["value"] > 0 for tick in by_tick.values())
    # What it reported completed is stored completed.
    completed = postgres_server.sql(
        "SELECT count(*) FROM tether.runs WHERE status = 'completed'", dbname=name
    )[0][0]
    assert completed > 0
