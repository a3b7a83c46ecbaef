"""``tether.patched()`` and ``tether.deprecate_patch()``: changing a workflow with runs in flight.

Runs started before and after a change, both resumed by the new code, each
take their own path: the old run (journaled before the change) the old one,
the new run (which recorded the marker) the new one; in one process and
across processes, on every store.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import tether
from tether.stores import EntryKind, RunStatus, Store

from . import _patch_process as flows
from ._cli import cli, usage_error
from ._patch_process import CODE, checkout, effects


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    CODE["code"] = "old"
    effects.clear()
    yield
    CODE["code"] = "old"


def journal(info: tether.RunInfo | None) -> list[tuple[str, EntryKind, int | None]]:
    assert info is not None
    return [(e.key, e.kind, e.position) for e in info.entries]


async def test_runs_from_before_and_after_a_change_each_take_their_own_path(
    tether_store: Store,
) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.Paused):
            await engine.run(checkout, "o-old", run_id="o-old")  # the code before the change
        CODE["code"] = "new"
        with pytest.raises(tether.Paused):
            await engine.run(checkout, "o-new", run_id="o-new")  # a run started after it
        assert journal(await engine.get_run("o-old")) == [
            ("quote#0", EntryKind.STEP, 0),
            ("reserve#0", EntryKind.STEP, 1),
        ]
        # The marker takes the position of the patched() call; it is stored
        # with (before) the first entry after it.
        assert journal(await engine.get_run("o-new")) == [
            ("quote#0", EntryKind.STEP, 0),
            ("patched(fee)", EntryKind.MARKER, 1),
            ("fee#0", EntryKind.STEP, 2),
            ("reserve#0", EntryKind.STEP, 3),
        ]
        before = effects.copy()
        # Both resumed by the new code: each takes its own path.
        assert await engine.resume("o-old", responses={"ask#0": True}) == "o-old: 42"
        assert await engine.resume("o-new", responses={"ask#0": True}) == "o-new: 47"
        assert effects == before  # everything journaled replayed; nothing ran again
        assert before == Counter(
            {
                "quote o-old": 1,
                "reserve o-old": 1,
                "quote o-new": 1,
                "fee o-new": 1,
                "reserve o-new": 1,
            }
        )
        # The old run's later calls kept their positions: False took none.
        assert journal(await engine.get_run("o-old"))[-1] == ("ask#0", EntryKind.RESPONSE, 2)
        assert journal(await engine.get_run("o-new"))[-1] == ("ask#0", EntryKind.RESPONSE, 4)


async def test_deprecate_patch_replays_runs_with_and_without_the_marker(
    tether_store: Store,
) -> None:
    async with tether.open_engine(tether_store) as engine:
        CODE["code"] = "new"
        with pytest.raises(tether.Paused):
            await engine.run(checkout, "marked", run_id="marked")
        CODE["code"] = "deprecated"  # the old path is gone
        with pytest.raises(tether.Paused):
            await engine.run(checkout, "fresh", run_id="fresh")
        assert journal(await engine.get_run("fresh")) == [
            ("quote#0", EntryKind.STEP, 0),
            ("fee#0", EntryKind.STEP, 1),  # deprecate_patch journals nothing, takes no position
            ("reserve#0", EntryKind.STEP, 2),
        ]
        assert await engine.resume("marked", responses={"ask#0": True}) == "marked: 47"
        with pytest.raises(tether.Paused):
            await engine.run(checkout, "later", run_id="later")
        CODE["code"] = "final"  # the call deleted: runs without the marker replay as they are
        assert await engine.resume("fresh", responses={"ask#0": True}) == "fresh: 47"
        assert await engine.resume("later", responses={"ask#0": True}) == "later: 47"
    assert effects["fee marked"] == effects["fee fresh"] == effects["fee later"] == 1


async def test_deleting_the_call_while_a_marked_run_is_unfinished_diverges() -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        CODE["code"] = "new"
        with pytest.raises(tether.Paused):
            await engine.run(checkout, "marked", run_id="marked")
        CODE["code"] = "final"
        match = (
            r"at step fee#0 \(position 1 in the workflow\): the journal holds it at position 2 "
            r"\(seq 3\), and the patch marker patched\(fee\) \(seq 2\) at this one"
        )
        with pytest.raises(tether.NonDeterminismError, match=match):
            await engine.resume("marked", responses={"ask#0": True})
        info = await engine.get_run("marked")
        assert info is not None and info.status is RunStatus.PAUSED


async def test_an_old_run_failed_before_the_change_point_takes_the_new_path() -> None:
    # Its journal ends before the patched() call: nothing says it went the old way.
    @tether.workflow(name="tests.patched.early")
    async def early(order: str) -> str:
        total = await flows.quote(order)
        if CODE["code"] == "old":
            raise ValueError("fails before the change")
        if tether.patched("fee"):
            total += await flows.fee(order)
        return str(total)

    async with tether.open_engine(tether.MemoryStore()) as engine:
        with pytest.raises(ValueError):
            await engine.run(early, "o", run_id="e")
        CODE["code"] = "new"
        assert await engine.resume("e") == "47"


# -- positions, repeated calls, retries, pauses ---------------------------------------------


@tether.step(retries=1)
async def packed(order: str) -> str:
    first = tether.patched("box")
    again = tether.patched("box")  # the first call in this parent decided
    assert first is again
    if first:
        await flows.reserve(order)
    effects[f"pack attempt {order}"] += 1
    if effects[f"pack attempt {order}"] == 1:
        raise ValueError("the tape ran out")
    return "packed"


@tether.workflow(name="tests.patched.retried")
async def retried(order: str) -> str:
    return await packed(order)


async def test_a_retried_step_decides_once_and_journals_one_marker() -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        assert await engine.run(retried, "o", run_id="r") == "packed"
        info = await engine.get_run("r")
    assert journal(info) == [
        ("packed#0/patched(box)", EntryKind.MARKER, 0),
        ("packed#0/reserve#0", EntryKind.STEP, 1),  # the second attempt replayed it
        ("packed#0", EntryKind.STEP, 0),
    ]
    assert effects["reserve o"] == 1


@tether.workflow(name="tests.patched.gate")
async def gated() -> bool:
    if tether.patched("gate"):
        ok: bool = await tether.ask("open the gate?", bool)
        return ok
    return False


async def test_a_run_that_pauses_right_after_patched_stores_its_marker(tether_store: Store) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(tether.Paused):
            await engine.run(gated, run_id="g")
        assert journal(await engine.get_run("g")) == [("patched(gate)", EntryKind.MARKER, 0)]
        assert await engine.resume("g", responses={"ask#0": True}) is True


async def test_change_ids_are_checked_and_calls_outside_a_run_refused() -> None:
    for bad in ("", "a/b", 3, None):
        with pytest.raises(tether.UsageError, match="change id"):
            tether.patched(bad)  # type: ignore[arg-type]
        with pytest.raises(tether.UsageError, match="change id"):
            tether.deprecate_patch(bad)  # type: ignore[arg-type]
    with pytest.raises(tether.NotInRunError, match=r"tether.patched\(\) was used outside"):
        tether.patched("fee")
    with pytest.raises(tether.NotInRunError, match=r"tether.deprecate_patch\(\) was used outside"):
        tether.deprecate_patch("fee")


# -- across processes ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "file", "postgres"])
def test_runs_resumed_by_another_process_take_their_own_paths(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    script = Path(__file__).with_name("_patch_process.py")
    effects_file = tmp_path / "effects"
    if kind == "postgres":
        server = request.getfixturevalue("postgres_server")
        where = [server.conninfo(), server.new_schema()]
    else:
        where = [str(tmp_path / "store")]

    def process(code: str, command: str, run_id: str) -> str:
        done = subprocess.run(
            [sys.executable, str(script), code, command, run_id, str(effects_file), kind, *where],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert process("old", "start", "o-old") == "ask#0"  # deployed before the change
    assert process("new", "start", "o-new") == "ask#0"  # after it
    assert process("new", "resume", "o-old") == "o-old: 42"
    assert process("new", "resume", "o-new") == "o-new: 47"
    ran = effects_file.read_text(encoding="utf-8").splitlines()
    assert ran == ["quote o-old", "reserve o-old", "quote o-new", "fee o-new", "reserve o-new"]


# -- tether runs list --patch -----------------------------------------------------------------


async def _runs_on_both_paths(path: Path) -> None:
    async with tether.open_engine(tether.SQLiteStore(path)) as engine:
        for run_id in ("o-old", "done-old"):
            with pytest.raises(tether.Paused):
                await engine.run(checkout, run_id, run_id=run_id)
        assert await engine.resume("done-old", responses={"ask#0": True}) == "done-old: 42"
        CODE["code"] = "new"
        with pytest.raises(tether.Paused):
            await engine.run(checkout, "o-new", run_id="o-new")
        await engine.submit(checkout, "queued", run_id="queued")  # nothing journaled yet


def test_runs_list_patch_finds_the_runs_still_on_the_old_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "runs.db"
    trio.run(_runs_on_both_paths, path)
    base = ("runs", "list", "--store", f"sqlite:{path}", "--workflow", checkout.name)
    listed = cli(*base, "--json")
    assert listed.status == 0
    assert [r["run_id"] for r in json.loads(listed.out)] == ["o-old", "done-old", "o-new", "queued"]
    patch = cli(*base, "--patch", "fee", "--json")
    assert patch.status == 0, patch.err
    # completed, recorded the marker, or journaled nothing yet: not on the old path
    assert [r["run_id"] for r in json.loads(patch.out)] == ["o-old"]
    assert "o-old" in cli(*base, "--patch", "fee").out
    assert "--patch takes a change id" in usage_error(*base, "--patch", "a/b", capsys=capsys)
