"""Signals across real processes, on real time (issue 17, Done-when 3).

A receiver process (``tests/_messages_process.py``) runs a workflow that loops
ten times over ``await tether.receive("n", int)``, each followed by a step.
This process sends the ten messages with ``engine.send``, from its own
engine, and each one wakes the receiver in the other process (SQLite and
FileStore: the receiver polls; PostgreSQL: ``LISTEN``/``NOTIFY``). The receiver is SIGKILLed
while a received message's step executes and two more messages wait in the
mailbox; a new receiver process resumes the run, and the last messages wake
it too. The journal then holds ten ``message`` entries, seqs 1 to 10 in
order, each taken once, and the result is the ten values in send order.

Nothing here sleeps to wait for another process: it polls the store (and the
steps' log) for a condition, with a generous deadline.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from functools import partial
from pathlib import Path

import pytest
import trio

import tether
from tether.stores import Entry, EntryKind, RunStatus, Store, mailbox_of

from . import _messages_process as receiving
from ._cli import tether_env
from ._poll import PATIENCE, apoll

HELPER = Path(__file__).resolve().with_name("_messages_process.py")
#: The receiver's step for message 6 (``took#5``) blocks in the first process.
BLOCK_AT = 5


def value_of(seq: int) -> int:
    """The value of the message with *seq*: not the seq itself, so mix-ups show."""
    return 100 + seq


async def journal(engine: tether.Engine) -> tuple[Entry, ...]:
    info = await engine.get_run(receiving.RUN_ID)
    return () if info is None else info.entries


def of_kind(entries: tuple[Entry, ...], kind: EntryKind) -> list[Entry]:
    return [e for e in entries if e.kind is kind]


def taken(entries: tuple[Entry, ...]) -> list[int]:
    """The seqs of the messages the journal's ``message`` entries took, in journal order."""
    return [json.loads(e.value or "null")["seq"] for e in of_kind(entries, EntryKind.MESSAGE)]


def steps_done(entries: tuple[Entry, ...]) -> int:
    return len(of_kind(entries, EntryKind.STEP))


def executions(log: Path) -> Counter[str]:
    """How many times each ``took`` step's body ran, in every process."""
    return Counter(log.read_text().splitlines() if log.exists() else ())


async def start(nursery: trio.Nursery, argv: list[str]) -> trio.Process:
    """Start a receiver process, its output piped here."""
    process: trio.Process = await nursery.start(
        partial(
            trio.run_process,
            [sys.executable, str(HELPER), *argv],
            check=False,
            stdout=subprocess.PIPE,
            env=tether_env(),
        )
    )
    return process


async def output(process: trio.Process) -> str:
    """What a process printed, once it has exited."""
    assert process.stdout is not None
    printed = b"".join([chunk async for chunk in process.stdout])
    with trio.fail_after(PATIENCE):
        await process.wait()
    return printed.decode()


def where(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> list[str]:
    """The store's location, as the receiver process takes it (after KIND)."""
    if kind == "postgres":
        server = request.getfixturevalue("postgres_server")
        return [server.conninfo(), server.new_schema()]
    return [str(tmp_path / ("messages.db" if kind == "sqlite" else "messages"))]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "file", "postgres"])
async def test_ten_messages_from_another_process_arrive_in_order_once_each_through_a_sigkill(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    location = where(kind, tmp_path, request)
    log = tmp_path / "took.log"
    args = [str(log), kind, *location]
    store: Store = receiving.open_store(kind, *location)

    async def send(seq: int) -> None:
        await engine.send(receiving.RUN_ID, "n", value_of(seq))

    async with tether.open_engine(store) as engine, trio.open_nursery() as nursery:
        first = await start(nursery, [*args, "--block-at", str(BLOCK_AT)])

        async def executing() -> bool:
            info = await engine.get_run(receiving.RUN_ID)
            return info is not None and info.executing

        await apoll(executing, "the receiver process to execute the run")
        # Messages 1 to 5, one at a time: each wakes the receiver in the other
        # process, which journals it, runs its step and waits for the next.
        for seq in range(1, BLOCK_AT + 1):
            await send(seq)

            async def took_it(seq: int = seq) -> bool:
                entries = await journal(engine)
                return taken(entries) == list(range(1, seq + 1)) and steps_done(entries) == seq

            await apoll(took_it, f"message {seq} and its step in the journal")
        # Messages 6, 7 and 8 at once: the receiver takes 6 and blocks in its
        # step; 7 and 8 wait in the mailbox.
        for seq in (6, 7, 8):
            await send(seq)

        async def blocked() -> bool:
            return executions(log)[f"took#{BLOCK_AT} {value_of(6)}"] == 1

        await apoll(blocked, "the step of message 6 to execute")
        first.send_signal(signal.SIGKILL)
        await output(first)

        entries = await journal(engine)
        assert taken(entries) == [1, 2, 3, 4, 5, 6]  # 6: journaled before its step ran
        assert steps_done(entries) == BLOCK_AT
        info = await engine.get_run(receiving.RUN_ID)
        assert info is not None and info.status is RunStatus.RUNNING and not info.executing
        mailbox = mailbox_of(store)
        assert mailbox is not None
        assert [m.seq for m in await mailbox.load_messages(receiving.RUN_ID)] == list(range(1, 9))

        # A new receiver process resumes the run (the dead owner's lease is
        # taken over at once): it takes 7 and 8 from the mailbox, then waits.
        second = await start(nursery, args)

        async def caught_up() -> bool:
            entries = await journal(engine)
            return taken(entries) == list(range(1, 9)) and steps_done(entries) == 8

        await apoll(caught_up, "the resumed receiver to take messages 7 and 8")
        for seq in (9, 10):
            await send(seq)
        result = json.loads(await output(second))
        assert second.returncode == 0

        info = await engine.get_run(receiving.RUN_ID)
        messages = await mailbox.load_messages(receiving.RUN_ID)
    assert info is not None and info.status is RunStatus.COMPLETED
    values = [value_of(seq) for seq in range(1, 11)]
    assert result == info.result == values
    received = of_kind(info.entries, EntryKind.MESSAGE)
    assert taken(info.entries) == list(range(1, 11))  # in order, each once
    assert len({e.key for e in received}) == 10
    assert [json.loads(e.value or "null")["value"] for e in received] == values
    assert [(m.seq, m.name, json.loads(m.value)) for m in messages] == [
        (seq, "n", value_of(seq)) for seq in range(1, 11)
    ]
    # Each step ran once, but the one in flight at the kill, which ran again.
    ran = executions(log)
    assert ran == {f"took#{i} {value_of(i + 1)}": 2 if i == BLOCK_AT else 1 for i in range(10)}
