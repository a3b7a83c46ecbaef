"""``python -m tether demo`` keeps every promise it makes, on SQLite."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tether
from tether._cli import _demo
from tether._cli._main import main

SRC = Path(tether.__file__).resolve().parent.parent


def run_demo(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "tether", "demo", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
    )


def test_the_demo_tells_the_story_and_keeps_its_promises(tmp_path: Path) -> None:
    proc = run_demo(cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = proc.stdout
    assert "store: SQLite" in text
    # 1-2: the charge's checkpoint survives its sibling's failure; no second charge
    assert "run failed: OutOfStock" in text
    assert "replayed from the journal, not executed: ['load_order#0', 'charge#0']" in text
    assert "executions: {'charge': 1, 'load_order': 1, 'reserve': 2, 'ship': 1}" in text
    # 3: the hung store does not hold the caller
    # (the deadline's TooSlowError, not the hung save's SaveTimeoutError after 5 s)
    assert re.search(r"TooSlowError after \d+\.\d+ s", text), text
    assert "ok: the caller's 0.2 s deadline was met while the store hung" in text
    assert "status: running (resumable" in text
    # 4: the child is killed mid-run and the run resumes from the file
    assert len(re.findall(r"child \d+: stored pack#\d", text)) == _demo.KILL_AFTER
    assert re.search(r"SIGKILL sent to child \d+", text)
    assert "(exit status -9)" in text
    assert "completed: 'COURIER-6'" in text
    for box in range(_demo.KILL_AFTER):
        # stored before the kill: ran once, in the child, never in the resume
        assert re.search(rf"pack#{box}\s+1\s+0  stored before the kill", text), text
    assert "BROKEN" not in text
    assert text.count("   ok: ") == 8
    assert "done: every promise held." in text
    # The store was a temporary file, removed at the end; nothing was written here.
    db = re.search(r"store: SQLite, (.+)\)", text.splitlines()[0])
    assert db is not None and db.group(1).endswith("demo.db")
    assert not Path(db.group(1)).exists()
    assert sorted(os.listdir(tmp_path)) == []


def test_the_demo_keeps_its_store_with_db(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    out = io.StringIO()
    assert main(["demo", "--db", str(db)], out=out) == 0, out.getvalue()
    assert f"inspect the runs: tether runs list --store sqlite:{db}" in out.getvalue()
    listing = io.StringIO()
    assert main(["runs", "list", "--store", f"sqlite:{db}"], out=listing) == 0
    rows = [line.split() for line in listing.getvalue().splitlines()[1:4]]
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("o-1", "demo.checkout", "completed"),
        ("o-2", "demo.checkout", "completed"),
        ("o-3", "demo.fulfil", "completed"),
    ]
    # A second demo refuses to write over the kept store.
    proc = run_demo("--db", str(db), cwd=tmp_path)
    assert proc.returncode == 2
    assert f"{db} exists" in proc.stderr


@tether.step(name="reserve")
async def always_in_stock(order: _demo.Order) -> str:
    return "shelf-anything"


def test_the_demo_exits_1_when_a_promise_breaks(monkeypatch: pytest.MonkeyPatch) -> None:
    # With the warehouse never empty, chapter 1 has no failing sibling to survive.
    monkeypatch.setattr(_demo, "reserve", always_in_stock)
    out = io.StringIO()
    assert _demo.main(out) == 1
    text = out.getvalue()
    assert "   BROKEN: the charge's checkpoint survived its sibling's failure" in text
    assert "BROKEN PROMISES (1):" in text
    assert "done: every promise held." not in text
