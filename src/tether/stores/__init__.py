"""Storage: the :class:`Store` protocol, its records, and the built-in stores."""

from ._file import FileStore as FileStore
from ._leases import ClaimDecision as ClaimDecision
from ._leases import check_append as check_append
from ._leases import check_owner as check_owner
from ._leases import check_ttl as check_ttl
from ._leases import decide_cancel as decide_cancel
from ._leases import decide_claim as decide_claim
from ._leases import fenced_update as fenced_update
from ._leases import renewal as renewal
from ._memory import MemoryStore as MemoryStore
from ._protocol import FORMAT_VERSION as FORMAT_VERSION
from ._protocol import STORE_METHODS as STORE_METHODS
from ._protocol import Entry as Entry
from ._protocol import EntryKind as EntryKind
from ._protocol import EntryStatus as EntryStatus
from ._protocol import ErrorInfo as ErrorInfo
from ._protocol import RecordDecodeError as RecordDecodeError
from ._protocol import Renewal as Renewal
from ._protocol import RunRecord as RunRecord
from ._protocol import RunStatus as RunStatus
from ._protocol import Store as Store
from ._protocol import dumps_record as dumps_record
from ._protocol import entry_checksum as entry_checksum
from ._protocol import first_gap as first_gap
from ._protocol import load_entry as load_entry
from ._protocol import load_run_record as load_run_record
from ._protocol import loads_record as loads_record
from ._protocol import utcnow as utcnow
from ._sqlite import SCHEMA_VERSION as SCHEMA_VERSION
from ._sqlite import SQLiteStore as SQLiteStore

__all__ = (
    "FORMAT_VERSION",
    "SCHEMA_VERSION",
    "STORE_METHODS",
    "ClaimDecision",
    "Entry",
    "EntryKind",
    "EntryStatus",
    "ErrorInfo",
    "FileStore",
    "MemoryStore",
    "RecordDecodeError",
    "Renewal",
    "RunRecord",
    "RunStatus",
    "SQLiteStore",
    "Store",
    "check_append",
    "check_owner",
    "check_ttl",
    "decide_cancel",
    "decide_claim",
    "dumps_record",
    "entry_checksum",
    "fenced_update",
    "first_gap",
    "load_entry",
    "load_run_record",
    "loads_record",
    "renewal",
    "utcnow",
)
