"""``tether run`` and ``tether resume``: execute a workflow with live progress.

Layer: the command line (``_cli``).

Both print one line per event of the run as it happens (built on
``engine.open_run``/``engine.open_resume`` and ``describe_event``), then its
outcome, once: the result as JSON on stdout (exit 0), the requests of a
paused run and the command that answers them (exit 3), or one line on stderr
for everything else: a failure (1), an expired ``--timeout`` (4), Ctrl-C
(130), a refusal (1: another owner holds the run, it is cancelled, ...).
Every line that leaves a run resumable says the command that resumes it,
with the ``--import`` and ``--store`` it needs, so it works copied as is.
A run that was refused before it executed is never shown as ``started``.

The command line is checked first (:mod:`._args`: the workflow, its
arguments, the answers); ``resume`` never creates a store.
"""

from __future__ import annotations

import argparse
import signal
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TextIO, final

import attrs
import trio

from .._api._workflow import Workflow
from .._core._events import RunFinished, RunPaused, RunStarted
from .._engine._engine import Engine, open_engine
from .._engine._live import OpenRun
from .._engine._progress import describe_event
from .._errors import (
    InvalidResponseError,
    LeaseLostError,
    Paused,
    RunCancelledError,
    RunConflictError,
    RunNotFoundError,
    StoreError,
    TetherError,
    UnknownRequestError,
    WorkflowNotFoundError,
)
from .._terminal import escape_controls
from ..stores import RunRecord, RunStatus, Store
from ._args import decode_args, import_modules, parse_responses, resolve_workflow
from ._exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_PAUSED, EXIT_TIMED_OUT, BadUsage
from ._stores import StoreSpec
from ._text import cli_message, command, json_text

__all__ = ("Execution", "ctrl_c", "execute", "execute_command")

#: Errors of a resume that mean the command line is wrong (exit 2): nothing was journaled.
_USAGE: tuple[type[Exception], ...] = (
    InvalidResponseError,
    UnknownRequestError,
    WorkflowNotFoundError,
)
#: How long the outcome of a run that ended abnormally may take to read back.
_READ_BACK = 10.0


@final
@attrs.frozen(kw_only=True)
class Execution:
    """What ``run``/``resume`` executes, and what it needs to say how to resume it."""

    run_id: str
    start: Callable[[Engine], OpenRun[Any]]
    imports: tuple[str, ...]  #: modules that define the workflow (``--import`` of hints)
    store: str  #: the store, as shown (``--store`` of hints; never a password)
    timeout: float | None

    @classmethod
    def of_run(
        cls,
        wf: Workflow[..., Any],
        values: tuple[Any, ...],
        *,
        target: str,
        imports: Sequence[str],
        store: str,
        run_id: str | None,
        timeout: float | None,
    ) -> Execution:
        # The id is chosen here, not by the engine, so every message can name it.
        run_id = run_id or uuid.uuid4().hex
        module = target.partition(":")[0]
        return cls(
            run_id=run_id,
            start=lambda engine: engine.open_run(wf, *values, run_id=run_id, timeout=timeout),
            imports=tuple(dict.fromkeys([module, *imports])),
            store=store,
            timeout=timeout,
        )

    @classmethod
    def of_resume(
        cls,
        run_id: str,
        responses: dict[str, Any],
        *,
        imports: Sequence[str],
        store: str,
        timeout: float | None,
    ) -> Execution:
        return cls(
            run_id=run_id,
            start=lambda engine: engine.open_resume(run_id, responses or None, timeout=timeout),
            imports=tuple(dict.fromkeys(imports)),
            store=store,
            timeout=timeout,
        )

    def resume(self, *extra: str) -> str:
        """The command that resumes this run, as typed (with *extra* options last)."""
        return command(
            "tether", "resume", self.run_id, imports=self.imports, store=self.store, extra=extra
        )


@attrs.define
class _Progress:
    """What the live display printed: the run's start line waits until it executes."""

    out: TextIO
    start: RunStarted | None = None
    started: bool = False
    #: the run had completed before: it returns its stored result, executing nothing
    completed: bool = False

    def show_start(self) -> None:
        if self.start is not None and not self.started and not self.completed:
            self.started = True
            print(describe_event(self.start), file=self.out, flush=True)


async def _show(run: Any, progress: _Progress) -> None:
    """Print the run's events as they happen, except its outcome (told once, after)."""
    async for event in run.events():
        if isinstance(event, RunStarted):
            progress.start = event  # shown once the run is seen executing
        elif not isinstance(event, RunFinished | RunPaused):
            progress.show_start()
            print(describe_event(event), file=progress.out, flush=True)


async def _cancel_on_sigint(
    scope: trio.CancelScope, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """The first Ctrl-C cancels *scope*, as a caller cancellation; a second one is
    Python's own (``KeyboardInterrupt``), for a run whose cancellation hangs."""
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        task_status.started()
        async for _ in signals:
            scope.cancel()
            return


async def _read_back(engine: Engine, run_id: str) -> RunRecord | TetherError | None:
    """The run's record as stored now (``None``: not stored; its journal is not read);
    the store's error if it cannot tell within :data:`_READ_BACK` seconds. A
    checkpoint; cancellation propagates."""
    try:
        with trio.fail_after(_READ_BACK):
            return await engine.store.get_run(run_id)
    except TetherError as exc:
        return exc
    except trio.TooSlowError:
        return StoreError(f"reading run {run_id!r} back took more than {_READ_BACK:g} s")


async def run_live(store: Store, plan: Execution, out: TextIO, err: TextIO) -> int | BadUsage:
    """Open an engine on *store*, run *plan* with live progress; the exit status (or the
    usage error to report).

    The first Ctrl-C (in the main thread) cancels the run as a caller
    cancellation, so it stays resumable; a cancellation from outside
    propagates the same way. Tether's own errors while opening the store
    propagate (``execute`` reports them).
    """
    progress = _Progress(out)
    outcome: object = None
    async with open_engine(store) as engine:
        before = await _read_back(engine, plan.run_id)
        progress.completed = isinstance(before, RunRecord) and before.status is RunStatus.COMPLETED
        with trio.CancelScope() as ctrl_c:
            async with trio.open_nursery() as nursery:
                if threading.current_thread() is threading.main_thread():
                    await nursery.start(_cancel_on_sigint, ctrl_c)
                async with plan.start(engine) as run:
                    await _show(run, progress)
                    try:
                        outcome = await run.result()
                    except Exception as exc:
                        outcome = exc
                nursery.cancel_scope.cancel()
        if ctrl_c.cancelled_caught:
            stored = await _read_back(engine, plan.run_id)
            print(f"tether: interrupted (Ctrl-C); {_left(plan, stored)}", file=err)
            return EXIT_INTERRUPTED
        return await _report(engine, plan, outcome, progress, err)


def _left(plan: Execution, stored: RunRecord | TetherError | None) -> str:
    """How an execution that was cut short left the run, and what to do next."""
    if isinstance(stored, TetherError):
        return f"run {plan.run_id} may be resumable: `{plan.resume()}` ({cli_message(stored)})"
    if stored is None:
        return f"run {plan.run_id} was not stored: nothing was executed"
    if stored.status is RunStatus.RUNNING:
        return f"run {plan.run_id} is interrupted, not failed: resume it with `{plan.resume()}`"
    return f"run {plan.run_id} is {stored.status.value}"


async def _report(
    engine: Engine, plan: Execution, outcome: object, progress: _Progress, err: TextIO
) -> int | BadUsage:
    out, run_id = progress.out, plan.run_id
    if isinstance(outcome, Paused):
        progress.show_start()
        print(f"\nrun {run_id} is paused, waiting for:", file=out)
        for request in outcome.requests:
            payload = json_text(request.payload)
            print(f"  {request.key} ({request.response_type}): {payload}", file=out)
        responds = [x for r in outcome.requests for x in ("--respond", f"{r.key}=...")]
        print(f"respond with: {plan.resume(*responds)}", file=out)
        return EXIT_PAUSED
    if not isinstance(outcome, Exception):
        progress.show_start()
        earlier = " (earlier: nothing was executed now)" if progress.completed else ""
        print(f"run {run_id}: completed{earlier}", file=out)
        print(json_text(outcome), file=out)
        return EXIT_OK
    if isinstance(outcome, _USAGE):
        message = cli_message(outcome, resume=plan.resume())
        if isinstance(outcome, WorkflowNotFoundError):
            message += " (name it with --import MODULE)"
        return BadUsage(message)
    if isinstance(outcome, RunNotFoundError):
        print(f"tether: no run {run_id!r} in {plan.store}", file=err)
        return EXIT_FAILED
    if isinstance(outcome, RunCancelledError | RunConflictError | LeaseLostError):
        # Not the workflow failing: the run is cancelled, or another owner
        # holds it (or took it over). Saying "failed" would mislead.
        message = cli_message(outcome, resume=plan.resume())
        print(f"tether: run {run_id}: {message}", file=err)
        return EXIT_FAILED
    stored = await _read_back(engine, run_id)
    if (
        isinstance(outcome, trio.TooSlowError)
        and plan.timeout is not None
        and not (isinstance(stored, RunRecord) and stored.status is RunStatus.FAILED)
    ):
        if stored is not None:
            progress.show_start()
        print(
            f"tether: run {run_id} timed out after {plan.timeout:g} s (--timeout); "
            f"{_left(plan, stored)}",
            file=err,
        )
        return EXIT_TIMED_OUT
    if isinstance(stored, RunRecord) and stored.status is RunStatus.FAILED:
        progress.show_start()
        # The stored error is the workflow's: shown on one line, escaped.
        error = cli_message(outcome) if stored.error is None else escape_controls(str(stored.error))
        print(
            f"tether: run {run_id} failed: {error}; it is resumable: `{plan.resume()}`",
            file=err,
        )
        return EXIT_FAILED
    # Not stored as failed: the store could not record it, or tether refused the run.
    print(f"tether: run {run_id}: {cli_message(outcome, resume=plan.resume())}", file=err)
    return EXIT_FAILED


def ctrl_c(exc: BaseException) -> bool:
    """Whether *exc* is ``KeyboardInterrupt``, or a group of nothing else."""
    if isinstance(exc, BaseExceptionGroup):
        rest = exc.subgroup(lambda e: not isinstance(e, KeyboardInterrupt | BaseExceptionGroup))
        return rest is None
    return isinstance(exc, KeyboardInterrupt)


def execute(store: Store, plan: Execution, out: TextIO, err: TextIO) -> int:
    """``trio.run`` of :func:`run_live`; tether's own errors are exit status 1.

    Raises:
        BadUsage: the answers or the workflow named do not fit the run.
    """
    try:
        status = trio.run(run_live, store, plan, out, err)
    except TetherError as exc:
        print(f"tether: run {plan.run_id}: {cli_message(exc, resume=plan.resume())}", file=err)
        return EXIT_FAILED
    except BaseException as exc:
        if not ctrl_c(exc):
            raise
        # A Ctrl-C before the run began, or a second one while it was stopping.
        print(
            f"tether: interrupted (Ctrl-C); if run {plan.run_id} was stored, it is resumable: "
            f"`{plan.resume()}`",
            file=err,
        )
        return EXIT_INTERRUPTED
    if isinstance(status, BadUsage):
        raise status
    return status


def execute_command(spec: StoreSpec, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``tether run`` / ``tether resume``: check the command line, then execute.

    Raises:
        BadUsage: the command line is wrong (nothing was executed).
    """
    import_modules(args.imports)
    if args.command == "run":
        wf = resolve_workflow(args.workflow)
        plan = Execution.of_run(
            wf,
            decode_args(wf, args.workflow, args.args),
            target=args.workflow,
            imports=args.imports,
            store=str(spec),
            run_id=args.run_id,
            timeout=args.timeout,
        )
        return execute(spec.open_for_writing(), plan, out, err)
    plan = Execution.of_resume(
        args.run_id,
        parse_responses(args.respond),
        imports=args.imports,
        store=str(spec),
        timeout=args.timeout,
    )
    # The run to resume is in a store that exists: never create one here.
    why = f"resume needs the store that holds run {args.run_id!r}"
    store = spec.open_existing_or_say(err, why, retry_timeout=None)
    if store is None:
        return EXIT_FAILED
    return execute(store, plan, out, err)
