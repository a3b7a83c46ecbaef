"""Tools for testing workflows and stores deterministically."""

from ._faulty import Delay as Delay
from ._faulty import Fault as Fault
from ._faulty import FaultyStore as FaultyStore
from ._faulty import Hang as Hang
from ._faulty import Raise as Raise

__all__ = ("Delay", "Fault", "FaultyStore", "Hang", "Raise")
