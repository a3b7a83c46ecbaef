"""Schedules for tests/test_schedule.py's command-line tests, imported by ``tether`` processes.

``tether worker --import tests._schedules`` serves :data:`every_two_seconds`
(a 6-field cron: seconds) in real time; ``tether schedules list --import
tests._schedules`` lists both schedules. The workflow is quick: a step that
returns its arguments.
"""

from __future__ import annotations

import tether


@tether.step
async def stamp(label: str, n: int) -> str:
    return f"{label}:{n}"


@tether.workflow(name="tests.schedules.stamp")
async def stamped(label: str, n: int) -> str:
    return await stamp(label, n)


every_two_seconds = tether.schedule(
    stamped, cron="* * * * * */2", args=("beat", 2), name="tests.beat", catch_up="once"
)
nightly = tether.schedule(stamped, cron="0 3 * * *", args=("night", 1), name="tests.nightly")
