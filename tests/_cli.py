"""Running the command line from tests: in this process (:func:`cli`), or as a process.

``cli`` calls ``tether._cli.main`` with captured output; a usage error
raises ``SystemExit(2)`` there (:func:`usage_error`). :func:`run_tether`
runs ``python -m tether`` in a fresh process, where only what the command
line imports is defined (``tests._cli_flows`` is importable: the repository
is on its path).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

import tether
from tether._cli._main import main

from ._poll import PATIENCE

SRC = Path(tether.__file__).resolve().parent.parent
ROOT = SRC.parent


@attrs.frozen
class Result:
    status: int
    out: str
    err: str


def cli(*argv: str) -> Result:
    """``tether ARGV`` in this process; its exit status and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    status = main(list(argv), out=out, err=err)
    return Result(status, out.getvalue(), err.getvalue())


def usage_error(*argv: str, capsys: pytest.CaptureFixture[str]) -> str:
    """What ``tether ARGV`` prints to stderr as it exits with status 2 (a usage error)."""
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("usage: tether"), captured.err
    return captured.err


def tether_env(**extra: str) -> dict[str, str]:
    """The environment of a ``tether`` process: this tether and the tests importable, the
    venv's ``tether`` script on the PATH, a wide terminal, no ``$TETHER_STORE``."""
    env = dict(os.environ)
    paths = (str(SRC), str(ROOT), env.get("PYTHONPATH"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    env["COLUMNS"] = "200"
    env.pop("TETHER_STORE", None)
    env.update(extra)
    return env


def run_tether(*argv: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m tether ARGV`` as a process in *cwd*, to completion."""
    return subprocess.run(
        [sys.executable, "-m", "tether", *argv],
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        cwd=cwd,
        env=tether_env(**env),
    )
