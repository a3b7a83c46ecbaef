"""``engine.respond``: responses recorded for the workers, never executed by the responder.

Every test runs on every store kind (the ``tether_store`` fixture), in virtual
time. Real processes (a worker, a responder, the dashboard) are in
``test_respond_processes.py``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import tether
from tether._cli._exits import EXIT_FAILED, EXIT_OK
from tether.stores import (
    Entry,
    RunRecord,
    RunStatus,
    Store,
    check_respond,
    decide_respond,
    dumps_record,
)
from tether.testing import StoreConformanceError, check_store

from ._cli import cli, usage_error
from ._json_store import JsonStore

#: the pid each step ran in, by step name
ran_in: dict[str, list[int]] = {}


@attrs.frozen
class Approval:
    ok: bool
    by: str


@tether.step
async def record(name: str) -> int:
    ran_in.setdefault(name, []).append(os.getpid())
    return len(ran_in[name])


@tether.workflow(name="tests.respond.approve")
async def approve(order: str) -> str:
    await record("before")
    answer = await tether.ask({"order": order}, Approval, key="approve")
    await record("after")
    return f"{order}:{answer.ok}:{answer.by}"


@tether.workflow(name="tests.respond.two")
async def two_questions() -> list[int]:
    async with tether.parallel() as p:
        a = p.start_soon(tether.ask, "a?", int, "a")
        b = p.start_soon(tether.ask, "b?", int, "b")
    return [a.result, b.result]


async def paused(
    engine: tether.Engine, wf: tether.Workflow[..., Any], *args: object, run_id: str
) -> None:
    with pytest.raises(tether.Paused):
        await engine.run(wf, *args, run_id=run_id)


async def test_respond_queues_the_run_and_executes_nothing(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    ran_in.clear()
    async with tether.open_engine(tether_store) as engine:
        await paused(engine, approve, "o-1", run_id="o-1")
        await engine.respond("o-1", {"approve": Approval(ok=True, by="ann")})
        info = await engine.get_run("o-1")
        assert info is not None and info.status is RunStatus.QUEUED
        assert info.requests == ()
        assert [e.key for e in info.entries] == ["record#0", "approve"]
        assert "after" not in ran_in  # nothing executed here
        async with tether.open_worker(engine):
            assert await engine.wait("o-1", timeout=30) == "o-1:True:ann"
        assert len(ran_in["after"]) == 1 and len(ran_in["before"]) == 1


async def test_bad_responds_store_nothing(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        await paused(engine, approve, "o-2", run_id="o-2")
        before = await engine.get_run("o-2")
        assert before is not None
        with pytest.raises(tether.RunNotFoundError, match="nope"):
            await engine.respond("nope", {"approve": True})
        with pytest.raises(tether.UnknownRequestError, match="'approve'"):
            await engine.respond("o-2", {"nope": 1})
        with pytest.raises(tether.InvalidResponseError, match="Approval"):
            await engine.respond("o-2", {"approve": {"ok": "yes", "by": "x"}})
        with pytest.raises(tether.InvalidResponseError):
            await engine.respond("o-2", {"approve": object()})
        with pytest.raises(tether.UsageError):
            await engine.respond("o-2", {})
        after = await engine.get_run("o-2")
        assert after is not None and after.status is RunStatus.PAUSED
        assert after.entries == before.entries and after.requests == before.requests
        # A JSON value that decodes strictly is as good as the typed one.
        await engine.respond("o-2", {"approve": {"ok": False, "by": "bo"}})
        assert await engine.resume("o-2") == "o-2:False:bo"
        with pytest.raises(tether.RunConflictError, match="completed"):
            await engine.respond("o-2", {"approve": {"ok": True, "by": "x"}})


async def test_two_responds_racing_for_one_request_one_wins(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        await paused(engine, approve, "o-3", run_id="o-3")
        outcomes: list[str] = []

        async def answer(by: str) -> None:
            try:
                await engine.respond("o-3", {"approve": Approval(ok=True, by=by)})
            except tether.RunConflictError:
                outcomes.append("conflict")
            else:
                outcomes.append(by)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer, "ann")
            nursery.start_soon(answer, "bob")
        assert outcomes.count("conflict") == 1 and len(outcomes) == 2
        (winner,) = [o for o in outcomes if o != "conflict"]
        info = await engine.get_run("o-3")
        assert info is not None and info.status is RunStatus.QUEUED
        assert [e.key for e in info.entries].count("approve") == 1
        assert await engine.resume("o-3") == f"o-3:True:{winner}"


async def test_answering_one_of_two_keeps_the_other_pending(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        await paused(engine, two_questions, run_id="q")
        await engine.respond("q", {"ask#0/a": 1})
        info = await engine.get_run("q")
        assert info is not None and info.status is RunStatus.QUEUED
        assert [r.key for r in info.requests] == ["ask#1/b"]
        with pytest.raises(tether.RunConflictError, match="'ask#0/a'"):
            await engine.respond("q", {"ask#0/a": 2})  # answered already
        await engine.respond("q", {"ask#1/b": 2})  # still pending: taken before a worker runs it
        assert await engine.resume("q") == [1, 2]


release = trio.Event()
holding = trio.Event()


@tether.step
async def held() -> None:
    holding.set()
    await release.wait()


@tether.workflow(name="tests.respond.hold")
async def hold() -> None:
    await held()


async def test_a_run_executing_takes_no_responses(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    global release, holding
    release, holding = trio.Event(), trio.Event()
    async with tether.open_engine(tether_store) as engine, trio.open_nursery() as nursery:
        nursery.start_soon(functools.partial(engine.run, hold, run_id="h"))
        await holding.wait()
        with pytest.raises(tether.RunConflictError, match="executing"):
            await engine.respond("h", {"x": 1})
        release.set()


RESPOND_CHECKS = ["respond", "respond_refusals", "concurrent_responds"]


async def test_every_store_passes_the_respond_checks(
    tether_raw_store_factory: Callable[[], Store],
) -> None:
    result = await check_store(tether_raw_store_factory, only=RESPOND_CHECKS)
    assert result.passed == tuple(RESPOND_CHECKS)


class RespondingJsonStore(JsonStore):
    """The little JSON store with a correct respond: one step, no checkpoint inside."""

    async def respond(self, run_id: str, entries: Sequence[Entry], *, now: datetime) -> RunRecord:
        now = check_respond(run_id, entries, now)
        await trio.lowlevel.checkpoint()
        return self.decided(run_id, entries, now, self.read(run_id))

    def decided(
        self, run_id: str, entries: Sequence[Entry], now: datetime, current: RunRecord | None
    ) -> RunRecord:
        record = decide_respond(current, run_id=run_id, keys=[e.key for e in entries], now=now)
        self.journal(run_id, entries)
        self.write(record)
        return record

    def journal(self, run_id: str, entries: Sequence[Entry]) -> None:
        for entry in entries:
            stored = entry.stored_as(len(self.journals[run_id]) + 1)
            self.journals[run_id].append(dumps_record(stored.to_json()))


class RacyRespondStore(RespondingJsonStore):
    """Decides on what it read before a checkpoint: two racing responds both win."""

    async def respond(self, run_id: str, entries: Sequence[Entry], *, now: datetime) -> RunRecord:
        current = self.read(run_id)
        await trio.lowlevel.checkpoint()  # the gap a racing respond falls into
        return self.decided(run_id, entries, now, current)


class EagerRespondStore(RespondingJsonStore):
    """Journals the responses before it decides: a refused respond leaves them stored."""

    async def respond(self, run_id: str, entries: Sequence[Entry], *, now: datetime) -> RunRecord:
        await trio.lowlevel.checkpoint()
        if run_id in self.journals:
            self.journal(run_id, entries)
        record = decide_respond(
            self.read(run_id), run_id=run_id, keys=[e.key for e in entries], now=now
        )
        self.write(record)
        return record


@pytest.mark.parametrize(
    ("broken", "check"),
    [(RacyRespondStore, "concurrent_responds"), (EagerRespondStore, "respond_refusals")],
)
async def test_the_respond_checks_catch_a_store_that_breaks_the_rule(
    broken: type[JsonStore], check: str
) -> None:
    with pytest.raises(StoreConformanceError, match=check):
        await check_store(broken, only=[check])
    await check_store(RespondingJsonStore, only=[check])


def test_tether_respond_queues_the_run_and_says_it_is_stranded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = f"sqlite:{tmp_path / 'runs.db'}"

    async def pause() -> None:
        async with tether.open_engine(tether.SQLiteStore(tmp_path / "runs.db")) as engine:
            await paused(engine, approve, "o-9", run_id="o-9")

    trio.run(pause)
    bad = usage_error(
        "respond", "o-9", 'approve={"ok": "yes", "by": "x"}', "--store", spec, capsys=capsys
    )
    assert "InvalidResponseError" in bad and "expected bool" in bad
    unknown = usage_error("respond", "o-9", "nope=1", "--store", spec, capsys=capsys)
    assert "UnknownRequestError" in unknown and "'approve'" in unknown
    good = cli("respond", "o-9", 'approve={"ok": true, "by": "cli"}', "--store", spec)
    assert good.status == EXIT_OK, good.err
    assert good.out == "responded to approve of run o-9: queued for the workers\n"
    assert "stranded: no live worker serves workflow 'tests.respond.approve'" in good.err
    shown = cli("runs", "show", "o-9", "--store", spec)
    assert "queued" in shown.out and "stranded: no live worker serves" in shown.out
    again = cli("respond", "o-9", 'approve={"ok": true, "by": "cli"}', "--store", spec)
    assert again.status == EXIT_FAILED and "does not wait for 'approve'" in again.err
    missing = cli("respond", "nope", "approve=1", "--store", spec)
    assert missing.status == EXIT_FAILED and "no run 'nope'" in missing.err


@tether.workflow(name="tests.respond.text")
async def ask_text() -> str:
    return await tether.ask("name?", str, key="name")


async def test_two_lone_surrogates_never_merge_into_one_character(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        await paused(engine, ask_text, run_id="t")
        pair = "\ud800\udc00"  # JSON would read these back as one character, "𐀀"
        with pytest.raises(tether.InvalidResponseError, match="round trip"):
            await engine.respond("t", {"name": pair})
        with pytest.raises(tether.InvalidResponseError, match="round trip"):
            await engine.resume("t", responses={"name": pair})
        await engine.respond("t", {"name": "x\ud800y"})  # one lone surrogate is kept
        assert await engine.resume("t") == "x\ud800y"


async def test_a_class_of_the_same_name_is_not_the_type_the_workflow_asks_for(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    impostor = attrs.make_class("Approval", {"name": attrs.field()})  # a client's own copy
    async with tether.open_engine(tether_store) as engine:
        await paused(engine, approve, "o-6", run_id="o-6")
        with pytest.raises(tether.InvalidResponseError, match="does not decode as Approval"):
            await engine.respond("o-6", {"approve": impostor(name="x")})
        info = await engine.get_run("o-6")
        assert info is not None and info.status is RunStatus.PAUSED


async def test_resume_takes_what_a_partial_respond_left_pending(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        await paused(engine, two_questions, run_id="q2")
        await engine.respond("q2", {"ask#0/a": 1})
        assert await engine.resume("q2", responses={"ask#1/b": 2}) == [1, 2]


async def test_a_file_store_respond_cut_between_its_writes_is_finished_by_a_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tether.FileStore(tmp_path / "runs")
    async with tether.open_engine(store) as engine:
        await paused(engine, approve, "f-1", run_id="f-1")
        replace = type(store)._replace_run

        def disk_full(self: tether.FileStore, folder: Path, record: RunRecord) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(type(store), "_replace_run", disk_full)
        with pytest.raises(tether.StoreError):
            await engine.respond("f-1", {"approve": Approval(ok=True, by="ann")})
        monkeypatch.setattr(type(store), "_replace_run", replace)
        cut = await engine.get_run("f-1")
        # Never queued without its response: still paused, the response journaled.
        assert cut is not None and cut.status is RunStatus.PAUSED
        assert [e.key for e in cut.entries] == ["record#0", "approve"]
        await engine.respond("f-1", {"approve": Approval(ok=True, by="ann")})
        done = await engine.get_run("f-1")
        assert done is not None and done.status is RunStatus.QUEUED
        assert [e.key for e in done.entries] == ["record#0", "approve"]  # kept, not stored twice
        assert await engine.resume("f-1") == "f-1:True:ann"


def test_tether_respond_refuses_a_key_given_twice_in_its_own_words(
    capsys: pytest.CaptureFixture[str],
) -> None:
    said = usage_error("respond", "r", "ok=1", "ok=2", capsys=capsys)
    assert "tether respond gives 'ok' twice" in said and "--respond" not in said


def test_submit_and_worker_refuse_a_store_no_other_process_shares() -> None:
    for argv in (("submit", "tests.test_respond:ask_text"), ("worker",)):
        done = cli(*argv, "--store", "memory:")
        assert done.status == EXIT_FAILED, done
        assert "needs a store other processes share" in done.err
