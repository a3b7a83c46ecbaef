"""Storage: the :class:`Store` protocol, its records, and the built-in stores."""

from ._memory import MemoryStore as MemoryStore
from ._protocol import FORMAT_VERSION as FORMAT_VERSION
from ._protocol import Entry as Entry
from ._protocol import EntryKind as EntryKind
from ._protocol import EntryStatus as EntryStatus
from ._protocol import ErrorInfo as ErrorInfo
from ._protocol import RunRecord as RunRecord
from ._protocol import RunStatus as RunStatus
from ._protocol import Store as Store
from ._protocol import utcnow as utcnow

__all__ = (
    "FORMAT_VERSION",
    "Entry",
    "EntryKind",
    "EntryStatus",
    "ErrorInfo",
    "MemoryStore",
    "RunRecord",
    "RunStatus",
    "Store",
    "utcnow",
)
