"""The layering of the package is a contract that ``just lint`` checks, and ``Engine``'s face.

The contract lives in ``pyproject.toml`` (``[tool.importlinter]``). These tests
copy the package to a temporary directory, plant an upward import in the
kernel, and show that the same contract refuses it, at run time and under
``TYPE_CHECKING`` alike; and that the untouched copy keeps it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import tether

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = shutil.which("lint-imports", path=str(Path(sys.executable).parent))

#: The kernel module the planted import goes into, and the upward import.
TARGET = Path("tether/_core/_frame.py")
UPWARD = "from tether._engine._engine import Engine"

#: What users see of an engine; workers use tether._engine._engine.internals.
ENGINE_METHODS = (
    "cancel",
    "clock",
    "get_run",
    "lease_ttl",
    "list_runs",
    "list_workers",
    "open_resume",
    "open_run",
    "owner",
    "respond",
    "resume",
    "run",
    "save_timeout",
    "send",
    "store",
    "submit",
    "wait",
    "workflow_names",
)


def _contract(tmp_path: Path) -> Path:
    """A copy of the package and of the import contract, in *tmp_path*."""
    shutil.copytree(ROOT / "src" / "tether", tmp_path / "tether")
    section: list[str] = []
    for line in (ROOT / "pyproject.toml").read_text().splitlines():
        if line.startswith("[") and not line.lstrip("[").startswith("tool.importlinter"):
            if section:
                break
            continue
        if line.startswith("[") or section:
            section.append(line)
    config = tmp_path / "importlinter.toml"
    config.write_text("\n".join(section) + "\n")
    assert tomllib.loads(config.read_text())["tool"]["importlinter"]["contracts"]
    return config


def _lint(tmp_path: Path, ini: Path) -> subprocess.CompletedProcess[str]:
    assert LINT_IMPORTS is not None, "import-linter is not installed (pip install -e '.[dev]')"
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    return subprocess.run(
        [LINT_IMPORTS, str(ini), "--no-cache"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_package_keeps_its_layers(tmp_path: Path) -> None:
    done = _lint(tmp_path, _contract(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 kept, 0 broken" in done.stdout


@pytest.mark.parametrize("guarded", [False, True], ids=["at-run-time", "under-TYPE_CHECKING"])
def test_an_upward_import_breaks_the_contract(tmp_path: Path, guarded: bool) -> None:
    ini = _contract(tmp_path)
    target = tmp_path / TARGET
    planted = (
        f"\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    {UPWARD}\n"
        if guarded
        else f"\n{UPWARD}\n"
    )
    target.write_text(target.read_text() + planted)
    done = _lint(tmp_path, ini)
    assert done.returncode != 0, done.stdout
    assert "tether._core is not allowed to import tether._engine" in done.stdout
    assert "tether._core._frame -> tether._engine._engine" in done.stdout


def _documented_engine_names() -> set[str]:
    """The ``engine.NAME`` the reference's section on ``tether.Engine`` documents."""
    page = (ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    section = page.split("#### `tether.Engine`", 1)[1].split("\n#### ", 1)[0]
    return set(re.findall(r"`(?:await )?engine\.([a-z_]+)", section))


def test_the_engine_shows_users_methods_only() -> None:
    public = tuple(name for name in dir(tether.Engine) if not name.startswith("_"))
    assert public == ENGINE_METHODS
    assert set(public) == _documented_engine_names()
