"""Storage: the :class:`Store` protocol, its records, and the built-in stores."""

from ._file import FileStore as FileStore
from ._memory import MemoryStore as MemoryStore
from ._protocol import FORMAT_VERSION as FORMAT_VERSION
from ._protocol import Entry as Entry
from ._protocol import EntryKind as EntryKind
from ._protocol import EntryStatus as EntryStatus
from ._protocol import ErrorInfo as ErrorInfo
from ._protocol import RecordDecodeError as RecordDecodeError
from ._protocol import RunRecord as RunRecord
from ._protocol import RunStatus as RunStatus
from ._protocol import Store as Store
from ._protocol import dumps_record as dumps_record
from ._protocol import loads_record as loads_record
from ._protocol import utcnow as utcnow
from ._sqlite import SCHEMA_VERSION as SCHEMA_VERSION
from ._sqlite import SQLiteStore as SQLiteStore

__all__ = (
    "FORMAT_VERSION",
    "SCHEMA_VERSION",
    "Entry",
    "EntryKind",
    "EntryStatus",
    "ErrorInfo",
    "FileStore",
    "MemoryStore",
    "RecordDecodeError",
    "RunRecord",
    "RunStatus",
    "SQLiteStore",
    "Store",
    "dumps_record",
    "loads_record",
    "utcnow",
)
