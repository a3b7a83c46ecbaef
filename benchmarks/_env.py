"""What every benchmark prints about the machine and the code it measured."""

from __future__ import annotations

import os
import platform
import subprocess
import tarfile
from io import BytesIO
from pathlib import Path

import trio

import tether

#: The repository the benchmarks belong to.
REPO = Path(__file__).resolve().parent.parent


def load_text() -> str:
    try:
        one, five, _ = os.getloadavg()
    except OSError:
        return "load average unknown"
    return f"{os.cpu_count()} cpus, load average {one:.2f} (1 min) {five:.2f} (5 min)"


def source_text() -> str:
    """The tether tree measured: its git commit, and whether src/ has local changes."""
    src = os.path.dirname(os.path.dirname(os.path.abspath(tether.__file__)))
    try:
        commit = subprocess.run(
            ["git", "-C", src, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", src, "status", "--porcelain", "--", "."],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"{src} (not a git checkout)"
    return f"{src} at {commit}{' + uncommitted changes' if dirty else ''}"


def print_environment(quick: bool) -> None:
    """The ``machine:`` and ``load:`` lines of a benchmark's header."""
    print(
        f"machine:  {platform.platform()}; {platform.machine()}; "
        f"python {platform.python_version()} ({platform.python_implementation()}); "
        f"trio {trio.__version__}; tether {tether.__version__}"
        f"{' (--quick)' if quick else ''}"
    )
    print(f"load:     {load_text()}; source: {source_text()}")


def extract_src(rev: str, folder: Path) -> tuple[Path | None, str]:
    """``src/`` of commit *rev* of this repository under *folder*, or ``None`` and why not.

    The baseline a benchmark measures in the same run as the working tree.
    """
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if commit.returncode != 0:
            return None, f"commit {rev} is not available (not a git checkout, or shallow)"
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", rev, "src"],
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"git is not available ({exc!r})"
    if archive.returncode != 0:
        return None, f"git archive {rev} failed: {archive.stderr.decode(errors='replace')}"
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(folder, filter="data")
    return folder / "src", commit.stdout.strip()
