"""A separate process for tests/test_processes.py: one owner per run, across processes.

``python tests/_lease_process.py COMMAND ... --store sqlite:PATH|file:DIR``:

- ``run RUN_ID... --logs DIR [--n N] [--pause S] [--fail-at I] [--mode M] [--ask]``
  runs (or resumes) each run id concurrently with the ``chain`` (or, with
  ``--ask``, the ``asking``) workflow;
- ``resume RUN_ID [--go] [--retry-conflict S] [--respond KEY]`` resumes one
  run (with ``--go``, once a line ``go`` arrives on stdin), retrying on
  :class:`tether.RunConflictError` for up to S seconds (each refused attempt
  is printed as a ``conflict`` event);
- ``race RUN_ID...`` resumes the runs one after the other, each when a line
  ``go`` arrives on stdin (a start barrier the test releases for two
  processes at once);
- ``cancel RUN_ID`` calls ``engine.cancel``;
- ``hold`` (SQLite only, no engine) takes the file's write lock with
  ``BEGIN IMMEDIATE`` on each ``lock`` line of stdin and releases it on each
  ``unlock`` line, answering ``locked`` / ``unlocked``.

``--ttl S`` is the engine's ``lease_ttl``. Every command prints JSON lines on
stdout: ``{"event": "open", ...}`` once the engine is open (with this process's
pid and owner name, and ``t_main``, the monotonic time at which ``main``
started), then one ``{"event": "outcome", ...}`` per run: ``outcome`` is
``"completed"`` (with ``result``) or the name of the exception's type, with
``t`` (``time.monotonic()``, which is system-wide on Linux, so comparable
across processes) and ``elapsed`` (seconds the call took).

Each step execution appends ``KEY PHASE PID MONOTONIC`` to the run's log
``DIR/RUN_ID.log``: PHASE ``start`` when it begins, ``end`` just before it
returns (what the journal then records). Each step sleeps ``pause`` seconds
(``trio.sleep``; with mode ``blocking``, ``time.sleep``, holding up the whole
event loop). Step ``fail_at`` raises unless the file ``LOG.flag`` exists; in
mode ``gated`` it then waits (once the flag is there) until ``LOG.gate``
exists, so a test can keep its run executing.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import trio

import tether
from tether._cli._main import StoreSpec

T_MAIN = time.monotonic()


def note(log: str, key: str, phase: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{key} {phase} {os.getpid()} {time.monotonic():.6f}\n".encode())
    finally:
        os.close(fd)


def exists(path: str) -> bool:
    return os.path.exists(path)


def block(seconds: float) -> None:
    time.sleep(seconds)


class StepFailed(Exception):
    """The failing step of ``chain`` ran without its flag file."""


@tether.step
async def work(log: str, i: int, pause: float, fail_at: int, mode: str) -> int:
    key = f"work#{i}"
    note(log, key, "start")
    if mode == "blocking":
        block(pause)
    else:
        await trio.sleep(pause)
    if i == fail_at:
        if not exists(log + ".flag"):
            raise StepFailed(f"{key}: no flag file {log}.flag")
        if mode == "gated":  # another process tells this step to finish by creating a file
            for _ in range(15_000):  # 30 s at most
                if exists(log + ".gate"):
                    break
                await trio.sleep(0.002)
    note(log, key, "end")
    return i * i


@tether.workflow(name="tests.lease.chain")
async def chain(log: str, n: int, pause: float, fail_at: int, mode: str) -> int:
    total = 0
    for i in range(n):
        total += await work(log, i, pause, fail_at, mode)
    return total


@tether.workflow(name="tests.lease.asking")
async def asking(log: str) -> int:
    first = await work(log, 1, 0.0, -1, "")
    if await tether.ask({"continue": True}, bool):
        return first + await work(log, 2, 0.0, -1, "")
    return first


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


async def attempt(run_id: str, call: Callable[[], Awaitable[Any]]) -> dict[str, Any]:
    """Await *call*; describe its outcome (the time is taken as soon as it returns)."""
    began = time.monotonic()
    fields: dict[str, Any] = {}
    try:
        result = await call()
    except tether.Paused as paused:
        outcome = "Paused"
        fields["requests"] = [r.key for r in paused.requests]
    except tether.RunConflictError as exc:
        outcome = "RunConflictError"
        fields["owner"] = exc.owner
        fields["expires_at"] = exc.expires_at.isoformat() if exc.expires_at else None
        fields["message"] = str(exc)
    except Exception as exc:
        outcome = type(exc).__name__
        fields["message"] = str(exc)
    else:
        outcome = "completed"
        fields["result"] = result
    now = time.monotonic()
    return {
        "event": "outcome",
        "run_id": run_id,
        "outcome": outcome,
        "t": now,
        "elapsed": now - began,
        **fields,
    }


async def wait_for_go() -> None:
    line = await trio.to_thread.run_sync(sys.stdin.readline)
    if line.strip() != "go":
        raise SystemExit(f"expected 'go' on stdin, got {line!r}")


async def main(args: argparse.Namespace) -> None:
    store = StoreSpec.parse(args.store).open_for_writing()
    async with tether.open_engine(store, lease_ttl=args.ttl) as engine:
        emit(event="open", pid=os.getpid(), owner=engine.owner, t_main=T_MAIN, t=time.monotonic())
        if args.command == "run":

            async def one(run_id: str) -> None:
                log = str(Path(args.logs) / f"{run_id}.log")
                if args.ask:
                    call = partial(engine.run, asking, log, run_id=run_id)
                else:
                    call = partial(
                        engine.run,
                        chain,
                        log,
                        args.n,
                        args.pause,
                        args.fail_at,
                        args.mode,
                        run_id=run_id,
                    )
                emit(**await attempt(run_id, call))

            async with trio.open_nursery() as nursery:
                for run_id in args.run_ids:
                    nursery.start_soon(one, run_id)
        elif args.command == "resume":
            (run_id,) = args.run_ids
            if args.go:
                await wait_for_go()
            responses = dict.fromkeys(args.respond, True)
            give_up = time.monotonic() + args.retry_conflict
            while True:
                got = await attempt(run_id, partial(engine.resume, run_id, responses or None))
                if got["outcome"] != "RunConflictError" or time.monotonic() >= give_up:
                    break
                emit(**{**got, "event": "conflict"})
                await trio.sleep(0.05)
            emit(**got)
        elif args.command == "race":
            for run_id in args.run_ids:
                await wait_for_go()
                emit(**await attempt(run_id, partial(engine.resume, run_id)))
            # Exit only once stdin closes: the test reads both racers' last outcomes first.
            await trio.to_thread.run_sync(sys.stdin.read)
        elif args.command == "cancel":
            for run_id in args.run_ids:
                emit(**await attempt(run_id, partial(engine.cancel, run_id)))
        else:
            raise SystemExit(f"unknown command {args.command!r}")


def hold(spec: str) -> None:
    """Take and release SQLite's write lock on command (see the module doc)."""
    parsed = StoreSpec.parse(spec)
    if parsed.kind != "sqlite":
        raise SystemExit("hold needs an SQLite store")
    conn = sqlite3.connect(parsed.path, isolation_level=None, timeout=10)
    try:
        emit(event="open", pid=os.getpid(), t_main=T_MAIN, t=time.monotonic())
        for line in sys.stdin:
            if line.strip() == "lock":
                conn.execute("BEGIN IMMEDIATE")
                emit(event="locked", t=time.monotonic())
            elif line.strip() == "unlock":
                conn.execute("ROLLBACK")
                emit(event="unlocked", t=time.monotonic())
    finally:
        conn.close()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="_lease_process.py")
    parser.add_argument("command", choices=["run", "resume", "race", "cancel", "hold"])
    parser.add_argument("run_ids", nargs="*")
    parser.add_argument("--store", required=True)
    parser.add_argument("--ttl", type=float, default=15.0)
    parser.add_argument("--logs", default=".")
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--pause", type=float, default=0.0)
    parser.add_argument("--fail-at", type=int, default=-1)
    parser.add_argument("--mode", choices=["", "gated", "blocking"], default="")
    parser.add_argument("--ask", action="store_true")
    parser.add_argument("--retry-conflict", type=float, default=0.0)
    parser.add_argument("--go", action="store_true")
    parser.add_argument("--respond", action="append", default=[])
    return parser.parse_args(argv)


if __name__ == "__main__":
    options = parse(sys.argv[1:])
    if options.command == "hold":
        hold(options.store)
    else:
        trio.run(main, options)
