"""The contract between ``run.py`` and the engine drivers in ``engines/``.

A driver is a module ``engines/<name>.py`` with, at module level::

    ENGINE = "DBOS"                 # display name
    DISTRIBUTION = "dbos"           # its requirements.txt name (None for tether and the floors)
    def version() -> str: ...       # e.g. package_version(DISTRIBUTION)
    def scenario_cancel(cfg: CancelConfig) -> CancelResult: ...
    def scenario_sibling(cfg: SiblingConfig) -> SiblingResult: ...
    def scenario_steps(cfg: StepsConfig) -> StepsResult: ...
    def scenario_parallel(cfg: ParallelConfig) -> ParallelResult: ...
    def scenario_resume(cfg: ResumeConfig) -> ResumeResult: ...
    def scenario_memory(cfg: MemoryConfig) -> MemoryResult: ...
    if __name__ == "__main__":
        main(sys.modules[__name__])

``run.py`` calls ``python -m engines.<name> SCENARIO CONFIG_JSON`` (cwd
``benchmarks/peers``) in a fresh process per call; :func:`main` builds the
config, calls the scenario and prints one JSON object on the last line of
stdout (:func:`envelope`), then leaves with ``os._exit`` so that no atexit
handler or leftover thread of an engine can add output or keep the process
alive. Each scenario function is synchronous: it calls ``asyncio.run`` or
``trio.run`` itself (``engines/_common.py``'s ``asyncio_scenario`` and
``trio_scenario`` make one of an async function). A scenario the engine cannot express raises
:class:`Unsupported` with one sentence saying why.

Measurement rules every driver follows (the report relies on them):

* Only the engine's public API, written the way its docs write a workflow.
* Times in seconds from the event loop's clock (``loop.time()`` or
  ``trio.current_time()``) for deadlines, as ``benchmarks/cancel_latency.py``
  measures, and ``time.perf_counter()`` for wall times.
* **cancel**: per trial (:meth:`CancelRecorder.trials`) a fresh
  database/state and a :class:`Hang` that every checkpoint save of a completed
  step enters (the driver's module docstring says exactly what was made to hang
  and why that is the engine's checkpoint save); the call goes to
  :meth:`CancelRecorder.asyncio_trial` or :meth:`CancelRecorder.trio_trial`:
  under :func:`asyncio_deadline_trial` or :func:`trio_deadline_trial`, then,
  *before* ``hang.release()``, the leftovers: :func:`asyncio_leftover_tasks`
  (or the :func:`trio_task_count` difference) and :func:`ThreadCount.leftover`.
  Then the driver lets its engine wind down (:func:`asyncio_settle`, ...).
* **steps**: ``steps_ran`` counted in the step bodies; ``us_per_step`` is the
  best of ``repeats`` runs' wall time divided by ``n``.
* **memory**: :class:`MemoryMeter` around starting the runs and waiting until
  each is parked at its second step (:class:`Parking`); stop the meter before
  releasing them.

Scenario 7 (*queue*) has drivers of its own, ``engines/queue_*.py``, whose
contract is ``engines/_queue_common.py``'s (run by ``_drain.py``, not by
:func:`main`).

``engines/_common.py`` has the scaffolding the engine drivers share (the
counters their steps keep, the sibling case, best-of runs in one store, the
timed resume, the time until every save hangs), ``engines/_floor.py`` the
floors' scenarios, over either loop.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import sys
import time
import traceback
from types import ModuleType
from typing import Any

# The names a driver uses, re-exported: drivers import everything from here.
from _measure import (
    CancelRecorder,
    Hang,
    HangExpired,
    ReturnedEarly,
    ThreadCount,
    Trial,
    asyncio_deadline_trial,
    asyncio_leftover_tasks,
    asyncio_settle,
    best_of,
    trio_deadline_trial,
    trio_task_count,
)
from _memory import LoopEvent, MemoryMeter, Parking
from _scenarios import (
    BY_NAME,
    CANCEL_BUDGET,
    CANCEL_TRIALS,
    CANCEL_WARMUP,
    CANCEL_WIDTHS,
    CAPPED_TRIALS,
    DEADLINE,
    HANG_LIMIT,
    JITTER,
    MEMORY_RUNS,
    PARALLEL_N,
    QUEUE_CONCURRENCY,
    QUEUE_JOBS,
    QUEUE_ROUNDS,
    QUEUE_STEPS,
    QUEUE_TIMEOUT,
    QUEUE_WORKERS,
    QUICK_CANCEL_TRIALS,
    QUICK_CANCEL_WIDTHS,
    QUICK_N,
    QUICK_QUEUE_JOBS,
    QUICK_RUNS,
    RESUME_N,
    SCENARIOS,
    SLOW_SAVE,
    STEPS_N,
    STEPS_REPEATS,
    CancelConfig,
    CancelResult,
    MemoryConfig,
    MemoryResult,
    ParallelConfig,
    ParallelResult,
    QueueConfig,
    QueueResult,
    ResumeConfig,
    ResumeResult,
    Scenario,
    SiblingConfig,
    SiblingResult,
    StepsConfig,
    StepsResult,
    Unsupported,
)

__all__ = (
    "BY_NAME",
    "CANCEL_BUDGET",
    "CANCEL_TRIALS",
    "CANCEL_WARMUP",
    "CANCEL_WIDTHS",
    "CAPPED_TRIALS",
    "CancelConfig",
    "CancelRecorder",
    "CancelResult",
    "DEADLINE",
    "HANG_LIMIT",
    "Hang",
    "HangExpired",
    "JITTER",
    "LoopEvent",
    "MEMORY_RUNS",
    "MemoryConfig",
    "MemoryMeter",
    "MemoryResult",
    "PARALLEL_N",
    "Parking",
    "ParallelConfig",
    "ParallelResult",
    "QueueConfig",
    "QueueResult",
    "QUEUE_CONCURRENCY",
    "QUEUE_JOBS",
    "QUEUE_ROUNDS",
    "QUEUE_STEPS",
    "QUEUE_TIMEOUT",
    "QUEUE_WORKERS",
    "QUICK_CANCEL_TRIALS",
    "QUICK_CANCEL_WIDTHS",
    "QUICK_N",
    "QUICK_QUEUE_JOBS",
    "QUICK_RUNS",
    "RESUME_N",
    "ResumeConfig",
    "ResumeResult",
    "ReturnedEarly",
    "SCENARIOS",
    "SLOW_SAVE",
    "STEPS_N",
    "STEPS_REPEATS",
    "Scenario",
    "SiblingConfig",
    "SiblingResult",
    "StepsConfig",
    "StepsResult",
    "ThreadCount",
    "Trial",
    "Unsupported",
    "asyncio_deadline_trial",
    "asyncio_leftover_tasks",
    "asyncio_settle",
    "best_of",
    "config_from",
    "envelope",
    "main",
    "package_version",
    "trio_deadline_trial",
    "trio_task_count",
)


def package_version(distribution: str) -> str:
    """The installed version of *distribution*."""
    return importlib.metadata.version(distribution)


# -- the process entry point ---------------------------------------------------------------


def config_from(scenario: str, text: str) -> Any:
    """The scenario's config from its JSON object (unknown keys are an error)."""
    return BY_NAME[scenario].config(**json.loads(text))


def envelope(module: ModuleType, scenario: str, config: Any) -> dict[str, Any]:
    """Run one scenario of *module* and describe the outcome as one JSON-ready object.

    ``status`` is ``"ok"`` (with ``result``), ``"unsupported"`` (with
    ``reason``) or ``"error"`` (with ``reason``, the exception's last line, and
    ``traceback``).
    """
    out: dict[str, Any] = {"engine": getattr(module, "ENGINE", module.__name__)}
    out["scenario"] = scenario
    out["config"] = dataclasses.asdict(config)
    try:
        out["version"] = module.version()
    except Exception as exc:  # the report says so; the scenario may still run
        out["version"] = f"unknown ({type(exc).__name__})"
    t0 = time.perf_counter()
    try:
        result = getattr(module, f"scenario_{scenario}")(config)
    except Unsupported as exc:
        out.update(status="unsupported", reason=str(exc))
    except BaseException as exc:
        out.update(
            status="error",
            reason=f"{type(exc).__name__}: {exc}".splitlines()[0][:300],
            traceback=traceback.format_exc()[-4000:],
        )
    else:
        out.update(status="ok", result=dataclasses.asdict(result))
    out["wall_seconds"] = time.perf_counter() - t0
    return out


def main(module: ModuleType) -> None:
    """``python -m engines.<name> SCENARIO CONFIG_JSON``: one JSON object on the last line."""
    if len(sys.argv) != 3 or sys.argv[1] not in BY_NAME:
        print(f"usage: python -m {module.__name__} {{{','.join(BY_NAME)}}} CONFIG_JSON")
        sys.stdout.flush()
        os._exit(2)
    out = envelope(module, sys.argv[1], config_from(sys.argv[1], sys.argv[2]))
    if out["status"] == "error":
        print(out["traceback"], file=sys.stderr)
    print()
    print(json.dumps(out))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
