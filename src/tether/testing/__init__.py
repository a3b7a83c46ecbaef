"""Tools for testing workflows and stores deterministically."""

from ._clock import ClockHoldingStore as ClockHoldingStore
from ._conformance import CHECKS as CHECKS
from ._conformance import ConformanceResult as ConformanceResult
from ._conformance import Corrupter as Corrupter
from ._conformance import Reopener as Reopener
from ._conformance import StoreConformanceError as StoreConformanceError
from ._conformance import StoreFactory as StoreFactory
from ._conformance import check_store as check_store
from ._faulty import Delay as Delay
from ._faulty import Fault as Fault
from ._faulty import FaultyStore as FaultyStore
from ._faulty import Hang as Hang
from ._faulty import Raise as Raise

__all__ = (
    "CHECKS",
    "ClockHoldingStore",
    "ConformanceResult",
    "Corrupter",
    "Delay",
    "Fault",
    "FaultyStore",
    "Hang",
    "Raise",
    "Reopener",
    "StoreConformanceError",
    "StoreFactory",
    "check_store",
)
