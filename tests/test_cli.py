from __future__ import annotations

import io
import subprocess
import sys

from tether import _demo
from tether._cli import main


def test_demo_tells_the_story() -> None:
    out = io.StringIO()
    assert _demo.main(out) == 0
    text = out.getvalue()
    assert "run failed: OutOfStock" in text
    assert "replayed from the journal, not executed: ['load_order#0', 'charge#0']" in text
    # after the resume of o-1: charged once, reserved twice (failed, then ok)
    assert "executions: {'charge': 1, 'load_order': 1, 'reserve': 2, 'ship': 1}" in text
    assert "on time" in text
    assert "status: running (resumable" in text


def test_cli_refuses_unknown_commands() -> None:
    try:
        main(["frobnicate"])
    except SystemExit as exc:
        assert exc.code == 2
    else:  # pragma: no cover
        raise AssertionError("argparse accepted an unknown command")


def test_python_dash_m_runs_the_demo() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tether", "demo"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "done." in proc.stdout
