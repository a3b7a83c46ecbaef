"""tether: a Trio-native structured-concurrency workflow engine.

A workflow is a plain ``async def``; its steps are journaled, so a run that
crashes, fails or times out resumes without repeating finished steps.
"""

from ._context import Handle as Handle
from ._context import Parallel as Parallel
from ._context import parallel as parallel
from ._engine import Engine as Engine
from ._engine import RunInfo as RunInfo
from ._engine import open_engine as open_engine
from ._errors import CheckpointCorruptError as CheckpointCorruptError
from ._errors import CodecError as CodecError
from ._errors import NonDeterminismError as NonDeterminismError
from ._errors import NotInRunError as NotInRunError
from ._errors import RunConflictError as RunConflictError
from ._errors import RunNotFoundError as RunNotFoundError
from ._errors import SaveTimeoutError as SaveTimeoutError
from ._errors import StoreError as StoreError
from ._errors import TetherError as TetherError
from ._errors import UnknownRequestError as UnknownRequestError
from ._errors import UsageError as UsageError
from ._errors import WorkflowNotFoundError as WorkflowNotFoundError
from ._hooks import HookEvent as HookEvent
from ._version import __version__ as __version__
from ._workflow import Step as Step
from ._workflow import Workflow as Workflow
from ._workflow import step as step
from ._workflow import workflow as workflow
from .stores import FileStore as FileStore
from .stores import MemoryStore as MemoryStore
from .stores import RunStatus as RunStatus
from .stores import SQLiteStore as SQLiteStore

__all__ = (
    "CheckpointCorruptError",
    "CodecError",
    "Engine",
    "FileStore",
    "Handle",
    "HookEvent",
    "MemoryStore",
    "NonDeterminismError",
    "NotInRunError",
    "Parallel",
    "RunConflictError",
    "RunInfo",
    "RunNotFoundError",
    "RunStatus",
    "SQLiteStore",
    "SaveTimeoutError",
    "Step",
    "StoreError",
    "TetherError",
    "UnknownRequestError",
    "UsageError",
    "Workflow",
    "WorkflowNotFoundError",
    "__version__",
    "open_engine",
    "parallel",
    "step",
    "workflow",
)
