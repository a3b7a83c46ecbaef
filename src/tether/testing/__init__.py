"""Tools for testing workflows and stores deterministically.

Layer: testing (``tether.testing``), its public face.

- :func:`run_deterministic`, :func:`seeded_schedule`, :class:`ScheduleTrace`:
  virtual time and a seeded, reproducible trio schedule.
- :class:`FaultyStore` with :class:`Delay`, :class:`Hang`, :class:`Raise`,
  :class:`Crash` and :class:`Do`: faults at chosen store calls.
- :func:`explore` (and :class:`Explorer`): a fault at every interleaving
  point of a workflow, then resume and check tether's invariants.
- :func:`explore_workers` (and :class:`WorkerExplorer`): simulated workers
  sharing one store, a crash, pause, store restart or lost notification at
  every point, then check that every run completes once, fenced.
- :func:`check_store`: the conformance checks for a store implementation.
- The pytest plugin (:mod:`tether.testing.pytest_plugin`), loaded by pytest
  automatically: store and engine fixtures, seeded tests, the explorer.
"""

from .._core._clock import TrioWallClock as TrioWallClock
from .._errors import set_public_module as _set_public_module
from ._clock import ClockHoldingStore as ClockHoldingStore
from ._conformance import CHECKS as CHECKS
from ._conformance import ConformanceResult as ConformanceResult
from ._conformance import Corrupter as Corrupter
from ._conformance import Reopener as Reopener
from ._conformance import StoreConformanceError as StoreConformanceError
from ._conformance import StoreFactory as StoreFactory
from ._conformance import Tamperer as Tamperer
from ._conformance import check_store as check_store
from ._deterministic import SUPPORTED_TRIO as SUPPORTED_TRIO
from ._deterministic import ScheduleTrace as ScheduleTrace
from ._deterministic import run_deterministic as run_deterministic
from ._deterministic import seeded_schedule as seeded_schedule
from ._explore import Explorer as Explorer
from ._explore import explore as explore
from ._explore_plan import FAULT_KINDS as FAULT_KINDS
from ._explore_plan import Exploration as Exploration
from ._explore_plan import FaultPlan as FaultPlan
from ._explore_plan import InjectedFailure as InjectedFailure
from ._explore_plan import Injection as Injection
from ._explore_workers import WORKER_FAULT_KINDS as WORKER_FAULT_KINDS
from ._explore_workers import WorkerExplorer as WorkerExplorer
from ._explore_workers import WorkerFault as WorkerFault
from ._explore_workers import WorkerPlan as WorkerPlan
from ._explore_workers import WorkerTrial as WorkerTrial
from ._explore_workers import explore_workers as explore_workers
from ._faults import Call as Call
from ._faults import Crash as Crash
from ._faults import Delay as Delay
from ._faults import Do as Do
from ._faults import Fault as Fault
from ._faults import Hang as Hang
from ._faults import Raise as Raise
from ._faults import SimulatedCrash as SimulatedCrash
from ._faulty import FaultyStore as FaultyStore

__all__ = (
    "CHECKS",
    "FAULT_KINDS",
    "SUPPORTED_TRIO",
    "WORKER_FAULT_KINDS",
    "Call",
    "ClockHoldingStore",
    "ConformanceResult",
    "Corrupter",
    "Crash",
    "Delay",
    "Do",
    "Exploration",
    "Explorer",
    "Fault",
    "FaultPlan",
    "FaultyStore",
    "Hang",
    "InjectedFailure",
    "Injection",
    "Raise",
    "Reopener",
    "ScheduleTrace",
    "SimulatedCrash",
    "TrioWallClock",
    "StoreConformanceError",
    "StoreFactory",
    "Tamperer",
    "WorkerExplorer",
    "WorkerFault",
    "WorkerPlan",
    "WorkerTrial",
    "check_store",
    "explore",
    "explore_workers",
    "run_deterministic",
    "seeded_schedule",
)

# Tracebacks and reprs name the public home of these, not the private module.
_set_public_module(__name__, globals(), __all__)
