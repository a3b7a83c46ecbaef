"""``tether run`` and ``tether resume``: what they print, and how they exit.

Each problem found trying the command line as a new user would has a test
here, named for what is true now:

- a result that is not a string is printed as JSON, as ``runs show`` shows it;
- an expired ``--timeout`` says so, and how to resume the run (exit 4);
- two answers for one request key are a usage error; nothing is journaled;
- the "respond with" hint works copied as is, and ``resume`` never creates a store;
- a missing ``MODULE:ATTR`` is reported missing; a conflict names ``tether
  resume``, not ``engine.resume``; a bad argument names its parameter; a
  failure is printed once (on stderr); a refused run is never "started";
- usage errors exit 2, tether's own as argparse's;
- Ctrl-C stops ``run`` and ``resume`` with one line and the command that
  resumes the run (exit 130), in a real process sent SIGINT.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import trio

import tether
from tether._cli._exits import EXIT_INTERRUPTED, EXIT_PAUSED, EXIT_TIMED_OUT

from . import _cli_flows
from ._cli import cli, run_tether, tether_env, usage_error
from ._poll import PATIENCE

FLOWS = "tests._cli_flows"


def sqlite_spec(tmp_path: Path) -> str:
    return f"sqlite:{tmp_path / 'runs.db'}"


def hint_in(line: str) -> str:
    """The command between backquotes in a message."""
    found = re.search(r"`([^`]+)`", line)
    assert found is not None, line
    return found[1]


# -- results ---------------------------------------------------------------------------


def test_a_result_that_is_not_a_string_is_printed_as_json(tmp_path: Path) -> None:
    spec = sqlite_spec(tmp_path)
    r = cli("run", f"{FLOWS}:packed", "o-7", "1250", "--run-id", "r-1", "--store", spec)
    assert r.status == 0, r.err
    parcel = '{"order_id": "o-7", "weight_grams": 1250}'
    assert r.out.splitlines()[-2:] == ["run r-1: completed", parcel]
    assert "Parcel(" not in r.out  # not its repr
    # ... which is how `runs show` shows it, in this process and without the code.
    assert f"result:    {parcel}" in cli("runs", "show", "r-1", "--store", spec).out
    shown = run_tether("runs", "show", "r-1", "--store", spec, cwd=tmp_path)
    assert f"result:    {parcel}" in shown.stdout.splitlines()


def test_pause_then_resume_with_live_progress(tmp_path: Path) -> None:
    spec = sqlite_spec(tmp_path)
    flow = f"{FLOWS}:sum_then_confirm"
    r = cli("run", flow, "2", "3", "o-1", "--run-id", "c-1", "--store", spec)
    assert r.status == EXIT_PAUSED, r.err
    assert r.out.splitlines() == [
        "run c-1: started (tests.cli.sum_then_confirm)",
        "  step add#0: started",
        "  add#0: stored (seq 1)",
        "  step add#0: finished",
        "",
        "run c-1 is paused, waiting for:",
        '  ask#0 (bool): {"total": 5}',
        f"respond with: tether resume c-1 --import {FLOWS} --store {spec} --respond 'ask#0=...'",
    ]
    r = cli("resume", "c-1", "--import", FLOWS, "--respond", "ask#0=true", "--store", spec)
    assert r.status == 0, r.err
    assert r.out.splitlines() == [
        "run c-1: started (tests.cli.sum_then_confirm)",
        "run c-1: completed",
        '"o-1: 5 confirmed"',
    ]
    # Resumed again, a completed run executes nothing: it is not "started" again.
    r = cli("resume", "c-1", "--import", FLOWS, "--store", spec)
    assert r.status == 0, r.err
    assert r.out.splitlines() == [
        "run c-1: completed (earlier: nothing was executed now)",
        '"o-1: 5 confirmed"',
    ]


def test_an_answer_of_the_wrong_type_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = sqlite_spec(tmp_path)
    cli("run", f"{FLOWS}:sum_then_confirm", "2", "3", "o-1", "--run-id", "c-1", "--store", spec)
    before = cli("runs", "show", "c-1", "--json", "--store", spec).out
    resume = ("resume", "c-1", "--import", FLOWS, "--store", spec)
    err = usage_error(*resume, "--respond", "ask#0=maybe", capsys=capsys)
    assert "InvalidResponseError" in err and "ask#0" in err
    err = usage_error(*resume, "--respond", "nokey=1", capsys=capsys)
    assert "UnknownRequestError" in err and "'nokey'" in err
    assert cli("runs", "show", "c-1", "--json", "--store", spec).out == before


# -- timeouts --------------------------------------------------------------------------


def test_an_expired_timeout_says_so_and_how_to_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = sqlite_spec(tmp_path)
    flow = f"{FLOWS}:waits"
    r = cli("run", flow, "o-1", "--run-id", "t-1", "--timeout", "0.5", "--store", spec)
    assert r.status == EXIT_TIMED_OUT == 4
    (line,) = r.err.splitlines()
    resume = f"tether resume t-1 --import {FLOWS} --store {spec}"
    assert line == (
        "tether: run t-1 timed out after 0.5 s (--timeout); run t-1 is interrupted, not "
        f"failed: resume it with `{resume}`"
    )
    assert "failed:" not in r.out and "TooSlowError" not in r.out + r.err
    shown = cli("runs", "show", "t-1", "--store", spec).out.splitlines()
    assert shown[2].startswith("status:    running — interrupted")
    # The command it gives resumes the run (the gate is open now).
    monkeypatch.setenv(_cli_flows.GATE, "open")
    r = cli(*shlex.split(hint_in(line))[1:])
    assert r.status == 0, r.err
    assert r.out.splitlines()[-1] == '"through o-1 (3)"'


# -- answers ---------------------------------------------------------------------------


def test_two_answers_for_one_request_are_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = sqlite_spec(tmp_path)
    flow = f"{FLOWS}:sum_then_confirm"
    assert cli("run", flow, "2", "3", "o-1", "--run-id", "c-1", "--store", spec).status == 3
    before = cli("runs", "show", "c-1", "--json", "--store", spec).out
    err = usage_error(
        "resume",
        "c-1",
        "--import",
        FLOWS,
        "--respond",
        "ask#0=true",
        "--respond",
        "ask#0=false",
        "--store",
        spec,
        capsys=capsys,
    )
    assert (
        "error: --respond gives 'ask#0' twice ('ask#0=true' and 'ask#0=false'); "
        "respond to each request once"
    ) in err
    after = cli("runs", "show", "c-1", "--json", "--store", spec).out
    assert after == before  # nothing executed, nothing journaled
    assert json.loads(after)["status"] == "paused"


def test_the_answer_hint_works_copied_as_is(tmp_path: Path) -> None:
    argv = ("run", f"{FLOWS}:sum_then_confirm", "2", "3", "o-1", "--run-id", "c-1")
    proc = run_tether(*argv, "--store", "sqlite:runs.db", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    (hint,) = [
        line.removeprefix("respond with: ")
        for line in proc.stdout.splitlines()
        if line.startswith("respond with: ")
    ]
    assert hint == (
        f"tether resume c-1 --import {FLOWS} --store sqlite:runs.db --respond 'ask#0=...'"
    )
    answered = subprocess.run(
        hint.replace("=...", "=true"),
        shell=True,
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        cwd=tmp_path,
        env=tether_env(),
    )
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.splitlines()[-1] == '"o-1: 5 confirmed"'
    assert not (tmp_path / "tether.db").exists()


def test_resume_never_creates_a_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TETHER_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    # The hint as it was printed before: no --store, no --import.
    r = cli("resume", "c-1", "--respond", "ask#0=true")
    assert r.status == 1
    assert r.err == (
        "tether: the SQLite file tether.db does not exist (resume needs the store that holds "
        "run 'c-1'; name it with --store or $TETHER_STORE)\n"
    )
    r = cli("resume", "c-1", "--store", f"file:{tmp_path / 'runs'}")
    assert r.status == 1
    assert "the FileStore directory" in r.err and "does not exist" in r.err
    assert os.listdir(tmp_path) == []  # no ./tether.db, no directory


# -- error messages --------------------------------------------------------------------


def test_a_missing_attribute_is_reported_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = sqlite_spec(tmp_path)
    err = usage_error("run", f"{FLOWS}:nosuch", "--store", spec, capsys=capsys)
    assert (
        f"error: module '{FLOWS}' has no attribute 'nosuch'; its workflows: boom, packed, "
        "relabel, sum_then_confirm, waits"
    ) in err
    assert "None" not in err
    err = usage_error("run", f"{FLOWS}:not_a_workflow", "--store", spec, capsys=capsys)
    assert f"error: {FLOWS}:not_a_workflow is int 42, not a @tether.workflow" in err
    assert not (tmp_path / "runs.db").exists()  # nothing was executed, no store made


def test_a_conflict_names_the_command_not_the_library_call(tmp_path: Path) -> None:
    spec = sqlite_spec(tmp_path)
    flow = f"{FLOWS}:packed"
    assert cli("run", flow, "o-1", "5", "--run-id", "k-1", "--store", spec).status == 0
    r = cli("run", flow, "o-1", "6", "--run-id", "k-1", "--store", spec)
    assert r.status == 1
    assert r.out == ""  # refused before it executed: not "started"
    assert r.err.startswith("tether: run k-1: RunConflictError: run 'k-1' was started with ")
    assert r.err.endswith(
        f"resume it with `tether resume k-1 --import {FLOWS} --store {spec}` or choose a new "
        "--run-id\n"
    )
    assert "engine.resume" not in r.err

    async def from_the_library() -> None:
        async with tether.open_engine(tether.SQLiteStore(tmp_path / "runs.db")) as engine:
            with pytest.raises(tether.RunConflictError, match=r"engine\.resume\('k-1'\)"):
                await engine.run(_cli_flows.packed, "o-1", 6, run_id="k-1")

    trio.run(from_the_library)  # the library's own message is unchanged


def test_a_bad_argument_names_its_parameter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = sqlite_spec(tmp_path)
    flow = f"{FLOWS}:relabel"
    parcel = '{"order_id": "o-1", "weight_grams": 5}'
    err = usage_error("run", flow, '{"order_id": "o-1"}', "2", "x", "--store", spec, capsys=capsys)
    assert f"error: argument 1 of {flow}, parameter 'parcel': " in err
    assert "does not decode as Parcel" in err and "weight_grams" in err
    err = usage_error("run", flow, parcel, "two", "x", "--store", spec, capsys=capsys)
    assert f"error: argument 2 of {flow}, parameter 'copies': 'two' does not decode as int" in err
    err = usage_error("run", flow, parcel, "--store", spec, capsys=capsys)
    assert f"error: {flow} takes (parcel: Parcel, copies: int, note: str): missing" in err
    assert not (tmp_path / "runs.db").exists()
    # Each argument is decoded by its annotation: JSON when it fits, else the text itself.
    r = cli("run", flow, parcel, "2", "1001", "--store", spec)
    assert r.status == 0, r.err
    assert json.loads(r.out.splitlines()[-1]) == [
        {"order_id": "o-1/1001", "weight_grams": 5},
        {"order_id": "o-1/1001", "weight_grams": 5},
    ]


def test_a_failure_is_printed_once_on_stderr(tmp_path: Path) -> None:
    spec = sqlite_spec(tmp_path)
    r = cli("run", f"{FLOWS}:boom", "--run-id", "b-1", "--store", spec)
    assert r.status == 1
    assert r.out == "run b-1: started (tests.cli.boom)\n"
    assert r.err == (
        "tether: run b-1 failed: ValueError: boom; it is resumable: "
        f"`tether resume b-1 --import {FLOWS} --store {spec}`\n"
    )
    assert (r.out + r.err).count("ValueError: boom") == 1
    assert "failed" not in r.out


def test_a_run_that_never_started_is_not_shown_started(tmp_path: Path) -> None:
    spec = sqlite_spec(tmp_path)
    r = cli("submit", f"{FLOWS}:packed", "o-1", "5", "--run-id", "q-1", "--store", spec)
    assert (r.status, r.out) == (0, "q-1\n")
    assert cli("runs", "cancel", "q-1", "--store", spec).status == 0
    r = cli("resume", "q-1", "--import", FLOWS, "--store", spec)
    assert r.status == 1
    assert r.out == ""
    assert r.err.startswith("tether: run q-1: RunCancelledError: run 'q-1' is cancelled")
    r = cli("resume", "nope", "--store", spec)
    assert (r.status, r.out, r.err) == (1, "", f"tether: no run 'nope' in {spec}\n")


# -- exit statuses ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ("run", "no_such_module_here:wf"),
        ("run", "no-colon"),
        ("run", f"{FLOWS}:not_a_workflow"),
        ("run", f"{FLOWS}:packed", "o-1", "five"),
        ("run", f"{FLOWS}:packed", "--timeout", "soon"),
        ("run", f"{FLOWS}:packed", "--no-such-option"),
        ("resume", "c-1", "--respond", "no-equals-sign"),
        ("resume", "c-1", "--import", "no_such_module_here"),
        ("submit", f"{FLOWS}:packed", "o-1"),
        ("worker", "--import", "no_such_module_here"),
        ("runs", "list", "--limit", "-1"),
        ("runs", "list", "--status", "sleeping"),
        ("runs", "show"),
    ],
)
def test_usage_errors_exit_2(
    argv: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = sqlite_spec(tmp_path)
    assert cli("run", f"{FLOWS}:packed", "o-1", "5", "--store", spec).status == 0
    before = cli("runs", "list", "--json", "--store", spec).out
    usage_error(*argv, "--store", spec, capsys=capsys)
    assert cli("runs", "list", "--json", "--store", spec).out == before


def test_usage_errors_exit_2_as_a_process(tmp_path: Path) -> None:
    proc = run_tether("run", "no-colon", "--store", "sqlite:runs.db", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == (
        "tether run: error: 'no-colon' is not MODULE:WORKFLOW (for example shop.flows:checkout)"
    )
    assert os.listdir(tmp_path) == []


# -- Ctrl-C ----------------------------------------------------------------------------


def read_until(proc: subprocess.Popen[str], wanted: str) -> list[str]:
    """Lines of *proc*'s stdout up to the one that is *wanted* (fails after PATIENCE)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
            if line.rstrip("\n") == wanted:
                return
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    while True:
        line = lines.get(timeout=PATIENCE)
        assert line is not None, f"the process ended before {wanted!r}; it printed {seen}"
        seen.append(line)
        if line == wanted:
            return seen


@pytest.mark.parametrize("command", ["run", "resume"])
def test_ctrl_c_prints_one_line_and_the_command_that_resumes(command: str, tmp_path: Path) -> None:
    spec = "sqlite:runs.db"
    if command == "run":
        argv = ["run", f"{FLOWS}:waits", "o-1", "--run-id", "i-1", "--store", spec]
    else:  # a run interrupted once already, by a deadline
        first = run_tether(
            "run", f"{FLOWS}:waits", "o-1", "--run-id", "i-1", "--timeout", "0.5",
            "--store", spec, cwd=tmp_path,
        )  # fmt: skip
        assert first.returncode == EXIT_TIMED_OUT, first.stderr
        argv = ["resume", "i-1", "--import", FLOWS, "--store", spec]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=tether_env(),
    )
    try:
        read_until(proc, "  step gate#0: started")  # the run executes: interrupt it now
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=PATIENCE)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == EXIT_INTERRUPTED == 130
    assert "Traceback" not in err
    resume = f"tether resume i-1 --import {FLOWS} --store {spec}"
    assert err.splitlines() == [
        f"tether: interrupted (Ctrl-C); run i-1 is interrupted, not failed: resume it with "
        f"`{resume}`"
    ]
    done = subprocess.run(
        hint_in(err),
        shell=True,
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        cwd=tmp_path,
        env=tether_env(**{_cli_flows.GATE: "open"}),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == '"through o-1 (3)"'
