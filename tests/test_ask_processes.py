"""Human input across processes: pause in one, resume in another, on durable stores."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_pause_in_one_process_resume_in_another(kind: str, tmp_path: Path) -> None:
    script = Path(__file__).with_name("_ask_process.py")
    location = str(tmp_path / "store")

    def process(command: str) -> str:
        done = subprocess.run(
            [sys.executable, str(script), command, kind, location],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert process("pause") == "first/ask#0 second/ask#0"
    assert process("resume") == "shipped o-1 for 42"
    effects_log = Path(location + ".effects").read_text(encoding="utf-8").splitlines()
    assert effects_log == ["quote o-1", "ship o-1"]  # quote ran once, in the first process
