"""Which code an engine runs for a stored run: the workflows it was handed, then the registry.

Layer: the engine (``_engine``).

Kept apart from the engine so that every path that needs a run's workflow
(executing it, decoding its result for ``get_run`` or ``wait``, checking a
message's type for ``send``) finds it by the same rule: by the run's
workflow name *and version*, the engine's own definitions first.
"""

from __future__ import annotations

from typing import Any, final

import attrs

from .._api._workflow import Workflow, lookup_workflow, registered_keys, registered_names
from .._errors import WorkflowNotFoundError
from ..stores._owners import Served
from ..stores._records import RunRecord

__all__ = ("Catalog", "not_defined_here")


@final
@attrs.define(eq=False)
class Catalog:
    """The workflows one engine can execute."""

    # Workflows this engine was handed, by (name, version); they win over the registry.
    _given: dict[Served, Workflow[..., Any]] = attrs.field(factory=dict, init=False)

    def define(self, wf: Workflow[..., Any]) -> None:
        """Execute runs of ``wf.name`` and ``wf.version`` as *wf*."""
        self._given[(wf.name, wf.version)] = wf

    def names(self) -> frozenset[str]:
        """The names of the workflows defined in this process or handed to the engine."""
        return registered_names() | {name for name, _ in self._given}

    def keys(self) -> frozenset[Served]:
        """``(name, version)`` of every workflow the engine can execute."""
        return registered_keys() | self._given.keys()

    def find(self, record: RunRecord) -> Workflow[..., Any]:
        """The code of the run's workflow *and version*: given to this engine, or registered.

        Raises:
            WorkflowNotFoundError: neither here nor registered (naming the
                version and the versions that are registered).
        """
        wf = self._given.get((record.workflow, record.version))
        if wf is None:
            try:
                wf = lookup_workflow(record.workflow, record.version)
            except WorkflowNotFoundError as exc:
                v = record.version
                started = "" if v is None else f" (started under version {v!r})"
                raise WorkflowNotFoundError(f"run {record.run_id!r}{started}: {exc}") from None
        return wf

    def defined(self, record: RunRecord) -> Workflow[..., Any] | None:
        """The run's workflow if it is defined in this process, else ``None``."""
        try:
            return self.find(record)
        except WorkflowNotFoundError:
            return None


def not_defined_here(record: RunRecord, cannot: str, command: str) -> WorkflowNotFoundError:
    """The refusal of a call that needs the run's workflow code, which is not defined here.

    *cannot* says what cannot be done without it (``its responses cannot be
    checked against the types it asks for``); *command* is the CLI command
    that imports it (``tether respond``).
    """
    version = "" if record.version is None else f" version {record.version!r}"
    return WorkflowNotFoundError(
        f"run {record.run_id!r} is a run of workflow {record.workflow!r}{version}, which is "
        f"not defined in this process, so {cannot}; import the module that defines it "
        f"first ({command} --import MODULE). Nothing was stored"
    )
