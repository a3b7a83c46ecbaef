"""Storage: the :class:`Store` protocol, its records, and the built-in stores.

Layer: stores (``tether.stores``), its public face: what store authors import.
"""

from .._errors import ErrorInfo as ErrorInfo
from .._errors import set_public_module as _set_public_module
from ._capabilities import METHODS as CAPABILITY_METHODS
from ._capabilities import Capability as Capability
from ._capabilities import capabilities_of as capabilities_of
from ._capabilities import has as has
from ._capabilities import mailbox_of as mailbox_of
from ._file import FileStore as FileStore
from ._flow import DEFAULT_QUEUE as DEFAULT_QUEUE
from ._flow import Queue as Queue
from ._flow import Rate as Rate
from ._flow import Submission as Submission
from ._flow import SubmitDecision as SubmitDecision
from ._flow import check_submission as check_submission
from ._flow import decide_submit as decide_submit
from ._flow import live_dedupe as live_dedupe
from ._flow import pending as pending
from ._from_url import from_url as from_url
from ._leases import ClaimDecision as ClaimDecision
from ._leases import check_append as check_append
from ._leases import check_delete as check_delete
from ._leases import check_owner as check_owner
from ._leases import check_ttl as check_ttl
from ._leases import decide_cancel as decide_cancel
from ._leases import decide_claim as decide_claim
from ._leases import fenced_update as fenced_update
from ._leases import renewal as renewal
from ._leases import renewal_of as renewal_of
from ._mailbox import FINISHED as FINISHED
from ._mailbox import MAILBOX_METHODS as MAILBOX_METHODS
from ._mailbox import MESSAGE_FORMAT as MESSAGE_FORMAT
from ._mailbox import MailboxStore as MailboxStore
from ._mailbox import Message as Message
from ._mailbox import check_after as check_after
from ._mailbox import check_message_name as check_message_name
from ._mailbox import check_send as check_send
from ._mailbox import decide_send as decide_send
from ._mailbox import load_message as load_message
from ._mailbox import message_gap as message_gap
from ._memory import MemoryStore as MemoryStore
from ._owners import Renewal as Renewal
from ._owners import Served as Served
from ._owners import WorkerAd as WorkerAd
from ._owners import dumps_served as dumps_served
from ._owners import loads_served as loads_served
from ._postgres import PostgresStore as PostgresStore
from ._queue import DEAD_LETTER_ERROR as DEAD_LETTER_ERROR
from ._queue import MAX_BATCH as MAX_BATCH
from ._queue import Claimed as Claimed
from ._queue import Dispatch as Dispatch
from ._queue import RunFilter as RunFilter
from ._queue import check_limit as check_limit
from ._queue import check_max_dispatches as check_max_dispatches
from ._queue import check_now as check_now
from ._queue import check_run_filter as check_run_filter
from ._queue import check_served as check_served
from ._queue import decide_batch as decide_batch
from ._queue import decide_dispatch as decide_dispatch
from ._queue import dispatchable as dispatchable
from ._queue import due as due
from ._queue import serves as serves
from ._queue import stranded as stranded
from ._queue import waiting as waiting
from ._record_json import FORMAT_VERSION as FORMAT_VERSION
from ._record_json import RecordDecodeError as RecordDecodeError
from ._record_json import dumps_record as dumps_record
from ._record_json import entry_checksum as entry_checksum
from ._record_json import first_gap as first_gap
from ._record_json import loads_record as loads_record
from ._records import Entry as Entry
from ._records import EntryKind as EntryKind
from ._records import EntryStatus as EntryStatus
from ._records import RunRecord as RunRecord
from ._records import RunStatus as RunStatus
from ._records import load_entry as load_entry
from ._records import load_run_record as load_run_record
from ._records import utcnow as utcnow
from ._respond import RESPOND_METHODS as RESPOND_METHODS
from ._respond import RespondingStore as RespondingStore
from ._respond import check_respond as check_respond
from ._respond import decide_respond as decide_respond
from ._run_ids import MAX_RUN_ID_BYTES as MAX_RUN_ID_BYTES
from ._run_ids import check_run_id as check_run_id
from ._sqlite import SCHEMA_VERSION as SCHEMA_VERSION
from ._sqlite import SQLiteStore as SQLiteStore
from ._store import ADVERTISE_METHODS as ADVERTISE_METHODS
from ._store import BATCH_METHODS as BATCH_METHODS
from ._store import DELETE_METHODS as DELETE_METHODS
from ._store import QUEUE_METHODS as QUEUE_METHODS
from ._store import STORE_METHODS as STORE_METHODS
from ._store import WORKER_METHODS as WORKER_METHODS
from ._store import AdvertisingStore as AdvertisingStore
from ._store import BatchClaimingStore as BatchClaimingStore
from ._store import DeletableStore as DeletableStore
from ._store import QueueingStore as QueueingStore
from ._store import Store as Store
from ._store import WatchableStore as WatchableStore
from ._store import WorkerStore as WorkerStore

__all__ = (
    "CAPABILITY_METHODS",
    "Capability",
    "capabilities_of",
    "has",
    "ADVERTISE_METHODS",
    "BATCH_METHODS",
    "DEAD_LETTER_ERROR",
    "DEFAULT_QUEUE",
    "DELETE_METHODS",
    "FINISHED",
    "FORMAT_VERSION",
    "MAILBOX_METHODS",
    "MAX_RUN_ID_BYTES",
    "MESSAGE_FORMAT",
    "QUEUE_METHODS",
    "RESPOND_METHODS",
    "SCHEMA_VERSION",
    "STORE_METHODS",
    "WORKER_METHODS",
    "MAX_BATCH",
    "AdvertisingStore",
    "BatchClaimingStore",
    "ClaimDecision",
    "Claimed",
    "DeletableStore",
    "Dispatch",
    "Entry",
    "EntryKind",
    "EntryStatus",
    "ErrorInfo",
    "FileStore",
    "MailboxStore",
    "Queue",
    "QueueingStore",
    "Rate",
    "RespondingStore",
    "MemoryStore",
    "Message",
    "PostgresStore",
    "RecordDecodeError",
    "Renewal",
    "RunFilter",
    "RunRecord",
    "RunStatus",
    "SubmitDecision",
    "Submission",
    "SQLiteStore",
    "Served",
    "Store",
    "WatchableStore",
    "WorkerAd",
    "WorkerStore",
    "check_after",
    "check_append",
    "check_delete",
    "check_limit",
    "check_max_dispatches",
    "check_message_name",
    "check_now",
    "check_owner",
    "check_run_filter",
    "check_respond",
    "check_submission",
    "check_run_id",
    "check_send",
    "check_served",
    "check_ttl",
    "decide_cancel",
    "decide_claim",
    "decide_batch",
    "decide_dispatch",
    "decide_respond",
    "decide_submit",
    "decide_send",
    "dispatchable",
    "due",
    "live_dedupe",
    "pending",
    "dumps_record",
    "dumps_served",
    "entry_checksum",
    "fenced_update",
    "first_gap",
    "from_url",
    "load_entry",
    "load_message",
    "load_run_record",
    "loads_record",
    "loads_served",
    "mailbox_of",
    "message_gap",
    "renewal",
    "renewal_of",
    "serves",
    "stranded",
    "utcnow",
    "waiting",
)

# Tracebacks and reprs name the public home of these, not the private module.
_set_public_module(__name__, globals(), __all__)
