"""What the queue drivers share: the job's description, the record of executions, the entry point.

A queue driver is a module ``engines/queue_<name>.py`` with, at module level::

    ENGINE = "procrastinate"        # display name
    DISTRIBUTION = "procrastinate"  # its requirements.txt name (None: nothing to install)
    QUEUE = True                    # a system of scenario 7 (run.py runs it there only)
    UNFINISHED_SQL = "SELECT count(*) FROM ..."  # jobs queued or running, 0 when drained
    def version() -> str: ...
    def setup(job: Job) -> None: ...   # the system's tables, in the fresh database
    def submit(job: Job) -> None: ...  # queue jobs 0 .. job.jobs - 1, each of job.steps steps
    def serve(job: Job) -> None: ...   # a worker process: print READY once it takes jobs,
                                       # run until SIGTERM
    def worker_argv(python: str, job: Job) -> list[str]: ...  # optional: another command
    if __name__ == "__main__":
        queue_main(sys.modules[__name__])

``_drain.py`` (the measuring process) calls ``python -m engines.queue_<name>
{setup|submit|worker} JOB_JSON`` with ``cwd=benchmarks/peers``. Every step
body calls :func:`record` with its job and step number: one line appended
to a file of the worker process (no database write, so the record costs no
statement), which ``_drain.py`` reads after the drain to check that every
step of every job ran exactly once.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import sys
from pathlib import Path
from types import ModuleType

READY = "serving"  #: what a worker prints (tether's `tether worker` prints it too) when ready
RECORD_ENV = "PEERS_QUEUE_RECORD"  #: the directory the workers record their executions in


@dataclasses.dataclass(frozen=True)
class Job:
    url: str  #: postgresql:// URL of the system's fresh database
    steps: int  #: no-op steps per job
    jobs: int  #: jobs to queue (submit)
    concurrency: int  #: jobs a worker process runs at once (serve)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))


_fd: int | None = None


def record(job: int, step: int) -> None:
    """Note that step *step* of job *job* ran, in this process's file of $PEERS_QUEUE_RECORD.

    One ``os.write`` of one line to a file opened with ``O_APPEND``: no
    buffering to lose if the process is killed, and no database write.
    """
    global _fd
    if _fd is None:
        folder = Path(os.environ[RECORD_ENV])
        _fd = os.open(folder / f"exec-{os.getpid()}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.write(_fd, f"{job} {step}\n".encode())


def executions(folder: Path, jobs: int, steps: int) -> tuple[int, int, int]:
    """What the workers recorded in *folder*: step executions in all, (job, step) pairs
    recorded twice or more (or not of any job queued), and pairs never recorded."""
    seen: collections.Counter[tuple[int, int]] = collections.Counter()
    for path in folder.glob("exec-*.log"):
        for line in path.read_text().splitlines():
            job, step = line.split()
            seen[int(job), int(step)] += 1
    want = {(j, s) for j in range(jobs) for s in range(steps)}
    duplicates = sum(1 for key, n in seen.items() if n > 1 or key not in want)
    return sum(seen.values()), duplicates, len(want - seen.keys())


def ready() -> None:
    """Tell the measuring process that this worker takes jobs now."""
    print(f"{READY} (pid {os.getpid()})", flush=True)


def queue_main(module: ModuleType) -> None:
    """``python -m engines.queue_<name> {setup|submit|worker} JOB_JSON``.

    ``setup`` prints, on its last line, the JSON object ``_drain.py`` reads:
    the version, ``UNFINISHED_SQL`` and the worker's command line.
    """
    if len(sys.argv) != 3 or sys.argv[1] not in ("setup", "submit", "worker"):
        raise SystemExit(f"usage: python -m {module.__name__} {{setup|submit|worker}} JOB_JSON")
    job = Job(**json.loads(sys.argv[2]))
    if sys.argv[1] == "setup":
        module.setup(job)
        python = sys.executable
        make_argv = getattr(module, "worker_argv", None)
        name = module.__spec__.name if module.__spec__ else module.__name__  # not __main__
        argv = (
            make_argv(python, job) if make_argv else [python, "-m", name, "worker", job.to_json()]
        )
        out = {"version": module.version(), "unfinished": module.UNFINISHED_SQL, "worker": argv}
        print()
        print(json.dumps(out), flush=True)
    elif sys.argv[1] == "submit":
        module.submit(job)
    else:
        module.serve(job)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no engine's exit handler or stray thread holds the process
