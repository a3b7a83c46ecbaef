"""The peers' virtual environment: made with this interpreter, one pip install per line.

The venv remembers (in ``peers-install.json``) what it installed and how each
line went: with ``requirements.txt`` and ``pyproject.toml`` unchanged nothing
is installed again; a new or changed line, or one that failed before, is
installed when the file changes; ``reinstall`` starts from an empty venv.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
VENV = HERE / ".venv"
REQUIREMENTS = HERE / "requirements.txt"
STAMP = VENV / "peers-install.json"  # what was installed, and how it went


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def requirement_lines() -> list[str]:
    lines = []
    for raw in REQUIREMENTS.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            lines.append(line)
    return lines


def distribution_of(line: str) -> str:
    """The normalised project name of a requirement line (``dbos==2.1`` -> ``dbos``)."""
    name = re.split(r"[\s\[<>=!~;@]", line, maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _pip(args: list[str]) -> tuple[bool, str]:
    proc = subprocess.run(
        [str(venv_python()), "-m", "pip", "install", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-12:]
    return proc.returncode == 0, "\n".join(tail)


def ensure_venv(reinstall: bool) -> dict[str, Any]:
    """Make or reuse the venv; returns the install record (per requirement line)."""
    stamp: dict[str, Any] = {}
    python = f"{platform.python_implementation()} {platform.python_version()}"
    if STAMP.exists() and not reinstall:
        stamp = json.loads(STAMP.read_text())
        if stamp.get("python") != python or not venv_python().exists():
            stamp = {}
    if not stamp:
        print(f"peers venv: creating {VENV} with {sys.executable}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        stamp = {"python": python, "lines": {}, "tether": None}
    if stamp.get("requirements") == _digest(REQUIREMENTS) and stamp.get("tether") == _digest(
        REPO / "pyproject.toml"
    ):
        print("peers venv: up to date (requirements.txt and pyproject.toml unchanged)")
        return stamp
    if stamp.get("tether") != _digest(REPO / "pyproject.toml"):
        print("peers venv: installing tether from the repository (editable)", flush=True)
        ok, log = _pip(["-e", str(REPO)])
        if not ok:
            raise SystemExit(f"could not install tether into {VENV}:\n{log}")
        stamp["tether"] = _digest(REPO / "pyproject.toml")
    lines = stamp.setdefault("lines", {})
    for line in requirement_lines():
        if lines.get(line, {}).get("ok"):
            continue
        print(f"peers venv: pip install {line}", flush=True)
        t0 = time.perf_counter()
        ok, log = _pip([line])
        lines[line] = {"ok": ok, "log": "" if ok else log}
        print(f"  {'ok' if ok else 'FAILED'} ({time.perf_counter() - t0:.0f} s)", flush=True)
    # Each line was installed on its own, so a later one may have moved a package an
    # earlier one (or tether) needs: pip check says so, and run.py prints it.
    check = subprocess.run(
        [str(venv_python()), "-m", "pip", "check"], capture_output=True, text=True, timeout=120
    )
    stamp["pip_check"] = "" if check.returncode == 0 else check.stdout.strip()
    stamp["requirements"] = _digest(REQUIREMENTS)
    STAMP.write_text(json.dumps(stamp, indent=1))
    return stamp


def install_status(distribution: str | None, stamp: dict[str, Any]) -> tuple[bool, str]:
    """Whether the engine's requirements line installed, and pip's reason when not."""
    if distribution is None:
        return True, ""
    want = distribution_of(distribution)
    for line, info in stamp.get("lines", {}).items():
        if distribution_of(line) == want and line in requirement_lines():
            return bool(info["ok"]), info.get("log", "")
    return False, f"{distribution} has no line in benchmarks/peers/requirements.txt"
