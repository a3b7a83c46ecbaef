"""The scenarios' workload shape: constants, configurations and result shapes (see _protocol)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# -- constants: the workload shape shared by every engine ---------------------------------

DEADLINE = 0.2  #: cancel: seconds from a trial's start to the caller's deadline...
JITTER = 1e-3  #: ...plus up to this much at random (the deadline's place on the ms grid)
HANG_LIMIT = 2.0  #: a hung save gives up (raises HangExpired) after this long: bounds a trial
CAPPED_TRIALS = 3  #: cancel: stop after this many trials that hit HANG_LIMIT
CANCEL_WIDTHS = (1, 100, 1000)
CANCEL_TRIALS = 30
CANCEL_WARMUP = 2  #: cancel: trials run and discarded first
CANCEL_BUDGET = 20.0  #: cancel: seconds of trials per width before stopping early
SLOW_SAVE = 0.2  #: sibling: seconds A's checkpoint save takes
STEPS_N = 1000
STEPS_REPEATS = 5
PARALLEL_N = 1000
RESUME_N = 10_000
MEMORY_RUNS = 10_000

QUEUE_JOBS = 1500  #: queue: jobs drained per run
QUEUE_STEPS = (1, 10)  #: queue: no-op steps per job (a workflow of that many steps)
QUEUE_WORKERS = (1, 2)  #: queue: worker processes
QUEUE_CONCURRENCY = 16  #: queue: jobs each worker process runs at once
QUEUE_ROUNDS = 3  #: queue: runs of each configuration (the report takes the median)
QUEUE_TIMEOUT = 300.0  #: queue: seconds a drain may take before the run fails

QUICK_CANCEL_WIDTHS = (1, 10)
QUICK_CANCEL_TRIALS = 3
QUICK_N = 20  #: steps, parallel, resume under --quick
QUICK_RUNS = 50  #: memory under --quick
QUICK_QUEUE_JOBS = 40  #: queue under --quick (one round)

# -- configurations ------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CancelConfig:
    width: int
    trials: int
    deadline: float = DEADLINE
    jitter: float = JITTER
    hang_limit: float = HANG_LIMIT
    warmup: int = CANCEL_WARMUP
    seed: int = 13
    budget: float = CANCEL_BUDGET  #: seconds of trials; stop early past it (said in notes)


@dataclass(frozen=True, kw_only=True)
class SiblingConfig:
    slow_save: float = SLOW_SAVE


@dataclass(frozen=True, kw_only=True)
class StepsConfig:
    n: int = STEPS_N
    durable: bool
    repeats: int = STEPS_REPEATS


@dataclass(frozen=True, kw_only=True)
class ParallelConfig:
    n: int = PARALLEL_N
    repeats: int = 1


@dataclass(frozen=True, kw_only=True)
class ResumeConfig:
    n: int = RESUME_N


@dataclass(frozen=True, kw_only=True)
class MemoryConfig:
    runs: int = MEMORY_RUNS


@dataclass(frozen=True, kw_only=True)
class QueueConfig:
    jobs: int = QUEUE_JOBS
    steps: int  #: no-op steps per job
    workers: int  #: worker processes
    concurrency: int = QUEUE_CONCURRENCY
    round: int = 1  #: which of the QUEUE_ROUNDS runs of this configuration
    timeout: float = QUEUE_TIMEOUT


# -- results: every one has `notes`, for what the reader must know about the figure --------


@dataclass(kw_only=True)
class CancelResult:
    samples: list[float]  #: overshoot past the deadline per trial, seconds
    hung_saves_ok: bool  #: in every trial a save was entered and none had returned
    leftover_tasks: list[int]  #: per trial, tasks still alive after the call returned
    leftover_threads: list[int]  #: per trial, threads started and still alive
    saves_entered: list[int] = field(default_factory=list)  #: per trial
    outcomes: list[str] = field(default_factory=list)  #: per trial: "cancelled", "raised X", ...
    capped: int = 0  #: trials whose hung save hit HANG_LIMIT (the engine waited for it)
    notes: str = ""


@dataclass(kw_only=True)
class SiblingResult:
    a_executions: int  #: how many times A's body ran, over the failed run and the resume
    b_failed: bool  #: B really raised in the first run
    completed: bool  #: the resume/re-run completed
    notes: str = ""


@dataclass(kw_only=True)
class StepsResult:
    us_per_step: float
    steps_ran: int  #: step bodies run in one run (must equal n)
    checkpoint_us: float | None = None  #: floors only: one scheduler round trip per step
    notes: str = ""


@dataclass(kw_only=True)
class ParallelResult:
    seconds: float
    steps_ran: int
    notes: str = ""


@dataclass(kw_only=True)
class ResumeResult:
    seconds: float  #: the resume/re-run that replays n stored steps and completes
    steps_reexecuted: int  #: step bodies run during it (must be 0)
    notes: str = ""


@dataclass(kw_only=True)
class MemoryResult:
    peak_bytes: int  #: tracemalloc peak minus the baseline before the runs started
    runs_started: int  #: runs parked at their second step when the meter stopped
    notes: str = ""


@dataclass(kw_only=True)
class QueueResult:
    seconds: float  #: from thawing the workers until no job was unfinished
    submit_seconds: float  #: the producer's time to queue every job (not in `seconds`)
    worker_cpu: float  #: CPU seconds (user + system) of the worker processes over `seconds`
    server_cpu: float  #: ... of the PostgreSQL server's processes
    commits: int  #: pg_stat_database xact_commit delta of the system's database
    write_xacts: int  #: transaction ids assigned meanwhile (transactions that wrote)
    statements: int | None  #: pg_stat_statements calls (top level, no utility), or None
    executions: int  #: step executions the workers recorded (jobs * steps when right)
    duplicates: int  #: (job, step) pairs recorded more than once
    lost: int  #: (job, step) pairs never recorded
    notes: str = ""


@dataclass(frozen=True)
class Scenario:
    number: int
    name: str
    config: type[Any]
    title: str


SCENARIOS = (
    Scenario(1, "cancel", CancelConfig, "caller deadline with every checkpoint save hung"),
    Scenario(2, "sibling", SiblingConfig, "sibling failure during a slow save, then resume"),
    Scenario(3, "steps", StepsConfig, "sequential no-op steps"),
    Scenario(4, "parallel", ParallelConfig, "parallel durable no-op steps"),
    Scenario(5, "resume", ResumeConfig, "resume of a long run"),
    Scenario(6, "memory", MemoryConfig, "concurrent two-step runs"),
    Scenario(7, "queue", QueueConfig, "a queue of jobs drained by worker processes"),
)
BY_NAME = {s.name: s for s in SCENARIOS}


class Unsupported(Exception):
    """The engine cannot express this scenario; the message says why, in one sentence."""
