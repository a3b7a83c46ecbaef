"""``tether send RUN NAME VALUE``, and the messages ``tether runs show`` lists.

- a message sent from the command line to a paused run waits in its mailbox
  and goes to the run's ``tether.receive`` when it is resumed; ``runs show``
  lists each message pending, then taken by the receive's key (``--json``
  too);
- VALUE is read as ``--respond`` reads an answer: JSON, or else the plain
  text, then decoded strictly into the declared type;
- a refused message (a value that does not decode, an undeclared name) and a
  run whose workflow is not imported are usage errors (exit 2), naming what
  is wrong; nothing is stored;
- no such run, a finished run, a missing store: exit 1, and nothing is
  created;
- a run parked waiting for a message says so in ``runs list`` and ``show``.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
import trio

import tether
from tether._cli._exits import EXIT_FAILED, EXIT_OK, EXIT_PAUSED, EXIT_USAGE
from tether._cli._main import main
from tether.stores import Message, mailbox_of

from . import _message_flows
from ._cli import cli, run_tether, usage_error

FLOWS = "tests._message_flows"


def sqlite_spec(tmp_path: Path) -> str:
    return f"sqlite:{tmp_path / 'runs.db'}"


def paused_cart(spec: str, run_id: str = "c-1") -> None:
    """A run of ``cart`` paused on its ``ask``, before its receives."""
    r = cli("run", f"{FLOWS}:cart", "ada", "--run-id", run_id, "--store", spec)
    assert r.status == EXIT_PAUSED, r.err


def message_rows(shown: str, title: str) -> list[list[str]]:
    """The table under *title* in what ``runs show`` printed: its header, then its rows."""
    start = shown.index(f"\n{title}\n") + len(title) + 2
    lines = shown[start:].split("\n\n")[0].splitlines()
    return [re.split(r"  +", line) for line in lines]


def messages_of(spec: str, run_id: str) -> list[Message]:
    async def read() -> list[Message]:
        store = tether.SQLiteStore(Path(spec.removeprefix("sqlite:")))
        async with tether.open_engine(store) as engine:
            mailbox = mailbox_of(engine.store)
            assert mailbox is not None
            return list(await mailbox.load_messages(run_id))

    return trio.run(read)


def test_a_message_sent_from_the_command_line_is_received_on_resume(tmp_path: Path) -> None:
    spec = sqlite_spec(tmp_path)
    paused_cart(spec)
    item = cli("send", "c-1", "item", '{"sku": "lamp", "quantity": 2}', "--store", spec)
    assert (item.status, item.err) == (EXIT_OK, "")
    assert item.out == 'sent item to run c-1: {"quantity": 2, "sku": "lamp"}\n'
    note = cli("send", "c-1", "note", "gift wrap", "--store", spec)
    assert note.out == 'sent note to run c-1: "gift wrap"\n'
    assert [(m.seq, m.name, json.loads(m.value)) for m in messages_of(spec, "c-1")] == [
        (1, "item", {"sku": "lamp", "quantity": 2}),
        (2, "note", "gift wrap"),
    ]
    shown = cli("runs", "show", "c-1", "--full", "--store", spec).out
    header, *rows = message_rows(shown, "messages (2, 2 pending):")
    assert header == ["SEQ", "NAME", "SENT (UTC)", "TAKEN BY", "VALUE"]
    assert [[r[0], r[1], r[3], r[4]] for r in rows] == [
        ["1", "item", "pending", '{"quantity": 2, "sku": "lamp"}'],
        ["2", "note", "pending", '"gift wrap"'],
    ]

    done = cli("resume", "c-1", "--respond", "ask#0=true", "--import", FLOWS, "--store", spec)
    assert done.status == EXIT_OK, done.err
    assert done.out.splitlines()[-1] == '"ada: 2 x lamp (gift wrap)"'
    assert "  receive receive.item#0: message item (seq 1)" in done.out.splitlines()
    shown = cli("runs", "show", "c-1", "--store", spec).out
    _, *rows = message_rows(shown, "messages (2, 0 pending):")
    assert [r[3] for r in rows] == ["receive.item#0", "receive.note#0"]
    # The journal tells which message each receive took.
    assert re.search(r"receive.note#0 +message .* message 2: \"gift wrap\"\n", shown)
    data = json.loads(cli("runs", "show", "c-1", "--json", "--store", spec).out)
    assert [(m["seq"], m["name"], m["value"], m["taken_by"]) for m in data["messages"]] == [
        (1, "item", {"sku": "lamp", "quantity": 2}, "receive.item#0"),
        (2, "note", "gift wrap", "receive.note#0"),
    ]
    assert all(m["sent_at"].endswith("+00:00") for m in data["messages"])


@pytest.mark.parametrize(
    ("text", "stored"),
    [("hello", "hello"), ('"42"', "42"), ("o-1", "o-1"), ('"true"', "true")],
)
def test_a_value_is_json_or_else_the_plain_text(text: str, stored: str, tmp_path: Path) -> None:
    spec = sqlite_spec(tmp_path)
    paused_cart(spec)
    r = cli("send", "c-1", "note", text, "--store", spec)
    assert r.status == EXIT_OK, r.err
    assert [json.loads(m.value) for m in messages_of(spec, "c-1")] == [stored]


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        # JSON 42 is no str, as for --respond; the error says how to send the text.
        ("note", "42", """give it as a JSON string: '"42"'"""),
        ("item", '{"sku": "lamp"}', "quantity"),
        ("item", '{"sku": "lamp", "quantity": "2"}', "MessageRejectedError"),
        ("discount", "10", "'item', 'note'"),  # the declared names
    ],
)
def test_a_refused_message_is_a_usage_error_and_nothing_is_stored(
    name: str, text: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = sqlite_spec(tmp_path)
    paused_cart(spec)
    err = usage_error("send", "c-1", name, text, "--store", spec, capsys=capsys)
    assert "MessageRejectedError" in err and says in err and "c-1" in err
    assert messages_of(spec, "c-1") == []


def test_a_run_whose_workflow_takes_no_messages_refuses_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = sqlite_spec(tmp_path)
    assert cli("run", f"{FLOWS}:plain", "--run-id", "p-1", "--store", spec).status == EXIT_OK
    # Completed: refused as finished, before anything else.
    r = cli("send", "p-1", "note", "hi", "--store", spec)
    assert r.status == EXIT_FAILED and r.out == ""
    assert r.err.startswith("tether: run 'p-1' is completed: a finished run takes no messages")
    shown = json.loads(cli("runs", "show", "p-1", "--json", "--store", spec).out)
    assert "messages" not in shown  # (only for a run that was sent any)
    assert "messages (" not in cli("runs", "show", "p-1", "--store", spec).out


def test_no_such_run_or_store_exits_1_and_creates_nothing(tmp_path: Path) -> None:
    spec = sqlite_spec(tmp_path)
    paused_cart(spec)
    r = cli("send", "nope", "note", "hi", "--store", spec)
    assert (r.status, r.out) == (EXIT_FAILED, "")
    assert r.err == f"tether: no run 'nope' in {spec}\n"
    missing = tmp_path / "missing.db"
    r = cli("send", "c-1", "note", "hi", "--store", f"sqlite:{missing}")
    assert r.status == EXIT_FAILED and "never creates a store" in r.err
    assert not missing.exists()


def test_without_the_workflows_module_it_is_a_usage_error_naming_import(tmp_path: Path) -> None:
    spec = sqlite_spec(tmp_path)
    paused_cart(spec)
    # A fresh process, where only what the command line imports is defined.
    alone = run_tether("send", "c-1", "note", "hi", "--store", spec, cwd=tmp_path)
    assert alone.returncode == EXIT_USAGE, alone.stderr
    assert "tests.messages.cart" in alone.stderr and "--import MODULE" in alone.stderr
    assert messages_of(spec, "c-1") == []
    imported = run_tether(
        "send", "c-1", "note", "hi", "--import", FLOWS, "--store", spec, cwd=tmp_path
    )
    assert imported.returncode == EXIT_OK, imported.stderr
    assert imported.stdout == 'sent note to run c-1: "hi"\n'


def test_a_bad_module_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = sqlite_spec(tmp_path)
    err = usage_error(
        "send", "c-1", "note", "hi", "--import", "no_such_mod", "--store", spec, capsys=capsys
    )
    assert "cannot import module 'no_such_mod'" in err
    assert not (tmp_path / "runs.db").exists()


def test_a_run_parked_waiting_for_a_message_says_so(tmp_path: Path) -> None:
    spec = sqlite_spec(tmp_path)
    path = tmp_path / "runs.db"

    async def park() -> None:
        store = tether.SQLiteStore(path)
        async with tether.open_engine(store) as engine:
            now = tether.stores.utcnow()
            await engine.store.create_run(
                tether.stores.RunRecord(
                    run_id="w-1",
                    workflow=_message_flows.cart.name,
                    args='["ada"]',
                    status=tether.stores.RunStatus.WAITING,
                    created_at=now,
                    updated_at=now,
                )
            )

    trio.run(park)
    listed = cli("runs", "list", "--store", spec).out
    assert "parked, waiting for a message" in listed and "(due now)" not in listed
    shown = cli("runs", "show", "w-1", "--store", spec).out
    assert "status:    waiting — parked, waiting for a message, holding no lease" in shown
    assert "wakes:     when a message is sent to it" in shown


def test_help_says_it_never_creates_a_store_and_lists_its_exit_statuses(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["send", "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert "usage: tether send [-h] [--store SPEC] [--import MODULE] RUN_ID NAME VALUE" in text
    assert "This command never creates a store" in text
    section = text[text.index("exit status:") :]
    assert re.findall(r"^  (\d+) ", section, re.MULTILINE) == ["0", "1", "2"]


def test_a_damaged_message_is_reported_not_skipped(tmp_path: Path) -> None:
    spec = sqlite_spec(tmp_path)
    paused_cart(spec)
    assert cli("send", "c-1", "note", "gift wrap", "--store", spec).status == EXIT_OK
    with sqlite3.connect(tmp_path / "runs.db") as db:
        db.execute("UPDATE messages SET data = replace(data, 'gift', 'lift')")
    db.close()
    r = cli("runs", "show", "c-1", "--store", spec)
    assert r.status == EXIT_FAILED and r.out == ""
    assert "CheckpointCorruptError" in r.err and "c-1" in r.err and "seq 1" in r.err
