"""The benchmarks keep running (their figures are reported, never asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.mark.slow
@pytest.mark.parametrize("script", ["cancel_latency.py", "step_overhead.py"])
def test_benchmark_runs_in_quick_mode(script: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "bare trio" in proc.stdout or "plain" in proc.stdout
    assert "target" in proc.stdout
