"""What the dashboard does to runs: respond to a pending request, cancel.

Layer: the dashboard (``_ui``).

A response is decoded strictly first (:func:`~._forms.decode`); a bad one is
refused with its errors and nothing is journaled. A good one is handed to
``engine.respond``, which journals it and queues the run for the workers in
one write: the dashboard never executes a run, so it holds no lease, runs
no workflow code with the web server's permissions, and a run does not die
with it. The run page then shows the run queued (and stranded, when no live
worker serves it) until a worker takes it.

Responding needs the workflow's code (``tether ui --import MODULE``): without
it the page says so and the form is not offered; cancelling needs no code.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import attrs

from .._api._workflow import lookup_workflow
from .._engine._engine import Engine
from .._engine._info import RunInfo
from .._errors import (
    InvalidResponseError,
    RunConflictError,
    UnknownRequestError,
    UsageError,
    WorkflowNotFoundError,
)
from ..stores._records import RunStatus
from ._forms import decode, form_for
from ._pages import Asked

__all__ = ("Actions", "Outcome")


@attrs.frozen
class Outcome:
    """How an answer went: accepted (``status`` 303), or refused with form errors."""

    status: int
    errors: Mapping[str, str] = attrs.field(factory=dict)  #: by field name; ``""``: the whole


@attrs.define(eq=False)
class Actions:
    """The dashboard's writes, and what they left to show (``notes``)."""

    engine: Engine
    modules: tuple[ModuleType, ...]  #: the ``--import`` modules
    #: the last outcome of an action taken here, by run id, shown on its page
    notes: dict[str, str] = attrs.field(factory=dict)

    def _workflow_module(self, info: RunInfo) -> ModuleType | None:
        try:
            wf = lookup_workflow(info.workflow, info.version)
        except WorkflowNotFoundError:
            return None
        return sys.modules.get(wf.fn.__module__)

    def no_code(self, info: RunInfo) -> str | None:
        """Why requests of *info* cannot be responded to here (its code is missing), or ``None``."""
        try:
            lookup_workflow(info.workflow, info.version)
        except WorkflowNotFoundError:
            return (
                f"Responding needs the code of workflow {info.workflow!r}, which is not defined "
                "in this process: restart tether ui with --import MODULE, the module that "
                "defines it. Cancelling works without it."
            )
        return None

    def asked(self, info: RunInfo, problems: Mapping[str, Any] | None) -> list[Asked]:
        """The pending requests of *info*, each with its form (and the last try's errors)."""
        module = self._workflow_module(info)
        modules = ([module] if module is not None else []) + list(self.modules)
        problems = problems or {}
        out = []
        for request in info.requests:
            mine = request.key in problems
            out.append(
                Asked(
                    form=form_for(request, modules),
                    payload=request.payload,
                    errors=problems[request.key] if mine else {},
                    values=problems.get("values", {}) if mine else {},
                )
            )
        return out

    async def answer(self, run_id: str, key: str, data: Mapping[str, str]) -> Outcome:
        """Decode the response *data* to request *key* of *run_id*; if it is good, respond.

        ``engine.respond``: the response is journaled and the run queued for
        the workers in one write; nothing executes here. A checkpoint. Store
        errors propagate (``TetherError``).
        """
        info = await self.engine.get_run(run_id)
        if info is None:
            return Outcome(404, {"": f"there is no run {run_id!r}"})
        request = next((r for r in info.requests if r.key == key), None)
        if request is None:
            self.notes[run_id] = (
                f"no response taken: the run ({info.status.value}) has no pending request {key!r} "
                "(responded to already?); nothing was journaled"
            )
            return Outcome(409)
        missing = self.no_code(info)
        if missing is not None:
            return Outcome(409, {"": missing})
        form = self.asked(info, None)[info.requests.index(request)].form
        answer, errors = decode(form, data)
        if errors:
            return Outcome(422, errors)
        try:
            await self.engine.respond(run_id, {key: answer})
        except (InvalidResponseError, UnknownRequestError, UsageError) as exc:
            return Outcome(422, {"": str(exc)})
        except RunConflictError as exc:
            self.notes[run_id] = f"no response taken: {exc}"
            return Outcome(409)
        self.notes[run_id] = f"responded to {key} and queued the run for the workers"
        return Outcome(303)

    async def cancel(self, run_id: str) -> None:
        """``engine.cancel(run_id)``, and a note of what it did.

        Raises:
            RunNotFoundError, RunConflictError (completed), StoreError: as ``engine.cancel``.
        """
        await self.engine.cancel(run_id)
        info = await self.engine.get_run(run_id)
        if info is not None and info.status is not RunStatus.CANCELLED:
            self.notes[run_id] = (
                f"cancel recorded; its owner {info.owner} stops the run within one lease "
                "renewal interval (unless it completes first)"
            )
        else:
            self.notes[run_id] = "cancelled; the journal is kept"
