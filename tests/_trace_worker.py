"""Trace the fan-out in a fresh process: ``python tests/_trace_worker.py SEED``.

Runs tests/_trace_workflow.py's fan-out under ``run_deterministic(seed=SEED)``
and prints one line of JSON: ``{"result": ..., "digest": ..., "events": [...]}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(seed: int) -> None:
    from tests._trace_workflow import traced

    result, trace = traced(seed)
    print(json.dumps({"result": result, "digest": trace.digest(), "events": trace.events}))


if __name__ == "__main__":
    # Import the workflow as ``tests._trace_workflow``, as the tests do, not as
    # a top-level module from this script's folder: its task names hold the
    # module's name.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)
    main(int(sys.argv[1]))
