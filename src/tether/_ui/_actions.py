"""What the dashboard does to runs: respond to a pending request (and resume), cancel.

Layer: the dashboard (``_ui``).

A response is decoded strictly first (:func:`~._forms.decode`); a bad one is
refused with its errors and nothing is journaled. A good one resumes the run
with ``engine.resume(run_id, responses={key: answer})`` in a task of the
dashboard's nursery, so the resume ends with the dashboard (as a caller
cancellation: the run stays resumable). The request handler waits a moment
(``answer_wait``) for the resume's outcome, so a quick run is shown completed
(or paused again) at once; a longer one is shown running, refreshing itself.

Responding needs the workflow's code (``tether ui --import MODULE``): without
it the page says so and the form is not offered; cancelling needs no code.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import attrs
import trio

from .._api._workflow import lookup_workflow
from .._engine._engine import Engine
from .._engine._info import RunInfo
from .._errors import (
    InvalidResponseError,
    Paused,
    RunConflictError,
    UnknownRequestError,
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
    nursery: trio.Nursery  #: where resumes run
    modules: tuple[ModuleType, ...]  #: the ``--import`` modules
    answer_wait: float = 2.0  #: seconds an answer waits for its resume's outcome
    #: the last outcome of an action taken here, by run id, shown on its page
    notes: dict[str, str] = attrs.field(factory=dict)
    _resuming: dict[str, trio.Event] = attrs.field(factory=dict)

    def busy(self, run_id: str) -> bool:
        """Whether a resume this dashboard started for *run_id* is still going."""
        return run_id in self._resuming

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
        """Decode the response *data* to request *key* of *run_id*; resume the run if it is good.

        A checkpoint; waits up to ``answer_wait`` for the resume. Store
        errors propagate (``TetherError``).
        """
        info = await self.engine.get_run(run_id)
        if info is None:
            return Outcome(404, {"": f"there is no run {run_id!r}"})
        request = next((r for r in info.requests if r.key == key), None)
        if info.status is not RunStatus.PAUSED or request is None:
            self.notes[run_id] = (
                f"no response taken: the run ({info.status.value}) has no pending request {key!r} "
                "(responded to already?); nothing was journaled"
            )
            return Outcome(409)
        if self.busy(run_id):
            self.notes[run_id] = "no response taken: an earlier response is still being processed"
            return Outcome(409)
        missing = self.no_code(info)
        if missing is not None:
            return Outcome(409, {"": missing})
        form = self.asked(info, None)[info.requests.index(request)].form
        answer, errors = decode(form, data)
        if errors:
            return Outcome(422, errors)
        done = trio.Event()
        refused: list[str] = []  # why the engine refused the response, if it did
        self._resuming[run_id] = done
        self.notes[run_id] = f"responded to {key}; resuming…"
        self.nursery.start_soon(self._resume, run_id, key, answer, done, refused)
        with trio.move_on_after(self.answer_wait):
            await done.wait()
        if refused:  # (if it comes later, the run's note tells it)
            return Outcome(422, {"": refused[0]})
        return Outcome(303)

    async def _resume(
        self, run_id: str, key: str, answer: Any, done: trio.Event, refused: list[str]
    ) -> None:
        note = (
            f"responded to {key}; the resume was interrupted as tether ui stopped: resume the run"
        )
        try:
            await self.engine.resume(run_id, {key: answer})
            note = f"responded to {key}; the run resumed and completed"
        except Paused as paused:
            keys = ", ".join(r.key for r in paused.requests)
            note = f"responded to {key}; the run resumed and paused again, waiting for {keys}"
        except (InvalidResponseError, UnknownRequestError, RunConflictError) as exc:
            # Refused before anything was journaled: the form shows why.
            refused.append(str(exc))
            note = f"the response to {key} was refused: {exc}"
        except Exception as exc:
            note = (
                f"responded to {key}; the run resumed and then failed: {type(exc).__name__}: {exc}"
            )
        finally:
            self.notes[run_id] = note
            self._resuming.pop(run_id, None)
            done.set()

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
