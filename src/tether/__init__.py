"""tether: a Trio-native structured-concurrency workflow engine.

Layer: the package's face, above every layer whose public names it re-exports.

A workflow is a plain ``async def``; its steps are journaled, so a run that
crashes, fails or times out resumes without repeating finished steps.
"""

from ._api._ask import ask as ask
from ._api._children import child as child
from ._api._fencing import fencing_token as fencing_token
from ._api._parallel import Handle as Handle
from ._api._parallel import Parallel as Parallel
from ._api._parallel import parallel as parallel
from ._api._patches import deprecate_patch as deprecate_patch
from ._api._patches import patched as patched
from ._api._receive import receive as receive
from ._api._retry import Retry as Retry
from ._api._stream import Stream as Stream
from ._api._stream import open_stream as open_stream
from ._api._timers import sleep as sleep
from ._api._timers import sleep_until as sleep_until
from ._api._workflow import Step as Step
from ._api._workflow import StreamStep as StreamStep
from ._api._workflow import Workflow as Workflow
from ._api._workflow import step as step
from ._api._workflow import stream_step as stream_step
from ._api._workflow import workflow as workflow
from ._codec._registry import register_type as register_type
from ._core._cleanup_scope import cleanup_scope as cleanup_scope
from ._core._clock import Clock as Clock
from ._core._clock import SystemClock as SystemClock
from ._core._events import CheckpointStored as CheckpointStored
from ._core._events import MessageReceived as MessageReceived
from ._core._events import RunEvent as RunEvent
from ._core._events import RunFinished as RunFinished
from ._core._events import RunPaused as RunPaused
from ._core._events import RunStarted as RunStarted
from ._core._events import StepFinished as StepFinished
from ._core._events import StepRetrying as StepRetrying
from ._core._events import StepStarted as StepStarted
from ._core._events import StreamItem as StreamItem
from ._core._events import TimerFired as TimerFired
from ._core._events import TimerStarted as TimerStarted
from ._core._hooks import HookEvent as HookEvent
from ._engine._engine import Engine as Engine
from ._engine._engine import open_engine as open_engine
from ._engine._info import RunInfo as RunInfo
from ._engine._live import LiveRun as LiveRun
from ._engine._live import OpenRun as OpenRun
from ._engine._progress import describe_event as describe_event
from ._engine._progress import show_progress as show_progress
from ._errors import CheckpointCorruptError as CheckpointCorruptError
from ._errors import ChildPausedError as ChildPausedError
from ._errors import CodecError as CodecError
from ._errors import InvalidResponseError as InvalidResponseError
from ._errors import InvariantViolation as InvariantViolation
from ._errors import LeaseLostError as LeaseLostError
from ._errors import MessageRejectedError as MessageRejectedError
from ._errors import NonDeterminismError as NonDeterminismError
from ._errors import NotInRunError as NotInRunError
from ._errors import Paused as Paused
from ._errors import QueueFullError as QueueFullError
from ._errors import Request as Request
from ._errors import RunCancelledError as RunCancelledError
from ._errors import RunConflictError as RunConflictError
from ._errors import RunFailedError as RunFailedError
from ._errors import RunNotFoundError as RunNotFoundError
from ._errors import SaveTimeoutError as SaveTimeoutError
from ._errors import StoreError as StoreError
from ._errors import StreamClosed as StreamClosed
from ._errors import TetherError as TetherError
from ._errors import UnjournaledAwaitWarning as UnjournaledAwaitWarning
from ._errors import UnknownRequestError as UnknownRequestError
from ._errors import UnsupportedTrioError as UnsupportedTrioError
from ._errors import UsageError as UsageError
from ._errors import WorkflowNotFoundError as WorkflowNotFoundError
from ._errors import set_public_module as _set_public_module
from ._version import __version__ as __version__
from ._worker._schedule import Schedule as Schedule
from ._worker._schedule import schedule as schedule
from ._worker._worker import Worker as Worker
from ._worker._worker import open_worker as open_worker
from .stores import FileStore as FileStore
from .stores import MemoryStore as MemoryStore
from .stores import PostgresStore as PostgresStore
from .stores import Queue as Queue
from .stores import Rate as Rate
from .stores import RunStatus as RunStatus
from .stores import SQLiteStore as SQLiteStore

__all__ = (
    "CheckpointCorruptError",
    "CheckpointStored",
    "ChildPausedError",
    "Clock",
    "CodecError",
    "Engine",
    "FileStore",
    "Handle",
    "HookEvent",
    "InvalidResponseError",
    "InvariantViolation",
    "LeaseLostError",
    "LiveRun",
    "MemoryStore",
    "MessageReceived",
    "MessageRejectedError",
    "PostgresStore",
    "NonDeterminismError",
    "NotInRunError",
    "OpenRun",
    "Parallel",
    "Paused",
    "Request",
    "Retry",
    "Queue",
    "QueueFullError",
    "Rate",
    "RunCancelledError",
    "RunConflictError",
    "RunEvent",
    "RunFailedError",
    "RunFinished",
    "RunInfo",
    "RunNotFoundError",
    "RunPaused",
    "RunStarted",
    "RunStatus",
    "SQLiteStore",
    "SaveTimeoutError",
    "Schedule",
    "Step",
    "StepFinished",
    "StepRetrying",
    "StepStarted",
    "StoreError",
    "SystemClock",
    "Stream",
    "StreamClosed",
    "StreamItem",
    "StreamStep",
    "TetherError",
    "TimerFired",
    "TimerStarted",
    "UnjournaledAwaitWarning",
    "UnknownRequestError",
    "UnsupportedTrioError",
    "UsageError",
    "Worker",
    "Workflow",
    "WorkflowNotFoundError",
    "__version__",
    "ask",
    "child",
    "cleanup_scope",
    "deprecate_patch",
    "describe_event",
    "fencing_token",
    "open_engine",
    "open_stream",
    "open_worker",
    "parallel",
    "patched",
    "receive",
    "register_type",
    "schedule",
    "show_progress",
    "sleep",
    "sleep_until",
    "step",
    "stream_step",
    "workflow",
)

# Tracebacks and reprs name the public home of these, not the private module.
_set_public_module(__name__, globals(), __all__)
