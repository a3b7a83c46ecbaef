"""The command line's options for reading runs, ``--version``, and what ``--help`` says.

- ``runs list --json`` and ``runs show --json`` print the same fields for a
  run (``show`` adds its result, requests and journal), values as JSON;
- ``runs show --full`` prints values whole instead of cut at the width;
- ``tether --version`` is ``tether._version``'s;
- every command's ``--help`` says whether it creates a missing store, and
  lists exactly the exit statuses it can return, the same numbers everywhere.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import trio

import tether
from tether._cli._exits import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PAUSED,
    EXIT_TIMED_OUT,
    EXIT_USAGE,
)
from tether._cli._main import main
from tether._version import __version__

from ._cli import cli

FLOWS = "tests._cli_flows"


@pytest.fixture
def spec(tmp_path: Path) -> str:
    """A store with a completed run ``c-1`` (a long result) and a paused run ``p-1``."""
    store = f"sqlite:{tmp_path / 'runs.db'}"
    r = cli("run", f"{FLOWS}:packed", "o-" + "9" * 300, "5", "--run-id", "c-1", "--store", store)
    assert r.status == 0, r.err
    flow = f"{FLOWS}:sum_then_confirm"
    assert cli("run", flow, "2", "3", "o-2", "--run-id", "p-1", "--store", store).status == 3
    return store


def test_list_and_show_print_the_same_json_fields(spec: str) -> None:
    r = cli("runs", "list", "--json", "--store", spec)
    assert r.status == 0, r.err
    listed = {run["run_id"]: run for run in json.loads(r.out)}
    assert set(listed) == {"c-1", "p-1"}
    for run_id, summary in listed.items():
        r = cli("runs", "show", run_id, "--json", "--store", spec)
        assert r.status == 0, r.err
        shown = json.loads(r.out)
        assert set(shown) == set(summary) | {"result", "requests", "entries"}
        assert {k: shown[k] for k in summary} == summary
    completed = json.loads(cli("runs", "show", "c-1", "--json", "--store", spec).out)
    parcel = {"order_id": "o-" + "9" * 300, "weight_grams": 5}
    assert completed["result"] == parcel  # a JSON value, not text, and not cut
    assert [e["key"] for e in completed["entries"]] == ["pack#0"]
    assert completed["entries"][0]["value"] == parcel
    assert completed["status"] == "completed" and completed["executing"] is False
    paused = json.loads(cli("runs", "show", "p-1", "--json", "--store", spec).out)
    assert paused["pending"] == ["ask#0"]
    assert paused["requests"] == [
        {"key": "ask#0", "response_type": "bool", "payload": {"total": 5}}
    ]
    assert paused["result"] is None


def test_show_full_prints_values_whole(spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    cut = cli("runs", "show", "c-1", "--store", spec).out.splitlines()
    result = next(line for line in cut if line.startswith("result:"))
    assert result.endswith("…") and len(result) <= 80
    whole = cli("runs", "show", "c-1", "--full", "--store", spec).out.splitlines()
    result = next(line for line in whole if line.startswith("result:"))
    assert result == 'result:    {"order_id": "o-' + "9" * 300 + '", "weight_grams": 5}'
    journal = whole[whole.index("journal (1 entry):") + 2]
    assert journal.endswith('"o-' + "9" * 300 + '", "weight_grams": 5}')
    assert not any(line.endswith("…") for line in whole)


def test_full_and_json_are_one_or_the_other(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["runs", "show", "c-1", "--full", "--json", "--store", spec])
    assert info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"tether {__version__}\n"
    assert tether.__version__ == __version__


def help_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    assert info.value.code == 0
    return capsys.readouterr().out


def exit_statuses(text: str) -> list[int]:
    """The statuses the ``exit status:`` section of a help lists, in order."""
    section = text[text.index("exit status:") :]
    return [int(n) for n in re.findall(r"^  (\d+) ", section, re.MULTILINE)]


READS = [EXIT_OK, EXIT_FAILED, EXIT_USAGE]
EXECUTES = [EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PAUSED, EXIT_TIMED_OUT, EXIT_INTERRUPTED]


@pytest.mark.parametrize(
    ("argv", "creates", "statuses"),
    [
        (["run"], True, EXECUTES),
        (["resume"], False, EXECUTES),
        (["submit"], True, READS),
        (["worker"], True, READS),
        (["runs", "list"], False, READS),
        (["runs", "show"], False, READS),
        (["runs", "cancel"], False, READS),
        (["runs", "prune"], False, READS),
    ],
)
def test_help_says_whether_the_store_is_created_and_lists_the_exit_statuses(
    argv: list[str], creates: bool, statuses: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    text = help_of(argv, capsys)
    assert ("This command creates the store if it does not exist yet." in text) == creates
    assert ("This command never creates a store" in text) == (not creates)
    assert "(it must exist)" not in text
    assert exit_statuses(text) == statuses
    assert "TETHER_STORE" in text and "sqlite:tether.db" in text


def test_the_top_help_lists_every_status_with_the_same_meaning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    top = help_of([], capsys)
    assert exit_statuses(top) == [0, 1, 2, 3, 4, 130]
    assert "`run`, `submit`, `worker` and `bench` create the store if it does not exist" in top
    run = help_of(["run"], capsys)
    for status in (EXIT_PAUSED, EXIT_TIMED_OUT, EXIT_INTERRUPTED):
        line = next(line for line in run.splitlines() if line.startswith(f"  {status} "))
        assert line in top.splitlines()


async def _no_runs(path: Path) -> None:
    async with tether.open_engine(tether.SQLiteStore(path)):
        pass


def test_runs_list_json_of_an_empty_store(tmp_path: Path) -> None:
    trio.run(_no_runs, tmp_path / "empty.db")
    r = cli("runs", "list", "--json", "--store", f"sqlite:{tmp_path / 'empty.db'}")
    assert (r.status, json.loads(r.out)) == (0, [])
