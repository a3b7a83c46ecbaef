"""Benchmark your own workflow on your own store (``tether bench`` on the command line).

Layer: the bench (``tether.bench``), its public face.

- :func:`bench_cancel`: does ``wf(*args)`` stop on time when the store
  hangs or is slow, against the floor (a bare trio nursery of the same
  width, measured in the same run), and what does it leave behind (tasks,
  threads, a run that does not resume)? A store or workflow that breaks the
  promise is named in a :class:`Finding`, with the fix. An undisturbed run
  that does not end (it waits for a message, say) raises
  :class:`PhaseStuckError`, naming what it waits for.
- :func:`bench_steps`: what one durable step costs on a store, against a
  plain ``await`` and a trio checkpoint.
- :func:`bench_throughput`: durable parallel steps per second, with group
  commit and with one save per step (:class:`OneCommitPerSave`).

Each takes its store as a factory (a sync or async callable returning a
fresh, unopened store, as :func:`tether.testing.check_store` does) and
returns a frozen result; :func:`write_table` prints it, :func:`to_json`
makes it JSON, :func:`plot_cancel` draws a cancel bench's latency CDF
(matplotlib: ``pip install -e '.[bench]'``).
"""

from ._cancel import FAULT_METHODS as FAULT_METHODS
from ._cancel import bench_cancel as bench_cancel
from ._census import Culprit as Culprit
from ._phases import PhaseStuckError as PhaseStuckError
from ._plot import plot_cancel as plot_cancel
from ._report import to_json as to_json
from ._report import write_table as write_table
from ._results import CancelResult as CancelResult
from ._results import CancelSample as CancelSample
from ._results import Finding as Finding
from ._results import Probe as Probe
from ._results import StepsResult as StepsResult
from ._results import ThroughputResult as ThroughputResult
from ._stats import Percentiles as Percentiles
from ._stats import percentiles as percentiles
from ._steps import bench_steps as bench_steps
from ._throughput import OneCommitPerSave as OneCommitPerSave
from ._throughput import bench_throughput as bench_throughput
from ._throughput import steps_per_second as steps_per_second

__all__ = (
    "FAULT_METHODS",
    "CancelResult",
    "CancelSample",
    "Culprit",
    "Finding",
    "OneCommitPerSave",
    "Percentiles",
    "PhaseStuckError",
    "Probe",
    "StepsResult",
    "ThroughputResult",
    "bench_cancel",
    "bench_steps",
    "bench_throughput",
    "percentiles",
    "plot_cancel",
    "steps_per_second",
    "to_json",
    "write_table",
)
