"""What every benchmark prints about the machine and the code it measured."""

from __future__ import annotations

import os
import platform
import subprocess

import trio

import tether


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
