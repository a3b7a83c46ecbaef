"""Where an engine's executions begin: read the run, claim its lease, hand it to an Execution.

Layer: the engine (``_engine``).

``engine.run``, ``engine.resume`` and a worker's claimed run all build the
run's state and one :class:`~._execution.Execution` (which owns the
nurseries, the lease and the outcome), which the launcher returns: they
await it from their own frame, with no frame of the launcher's between
(frames held for as long as the run is held cost memory per run). What
differs is how they get there: ``run`` may create the run (with its first
lease, in one write), ``resume`` checks responses against
the stored requests, and a worker has already claimed. The launcher also
keeps the set of runs executing in its engine, so that a second execution
of the same run there is refused and ``cancel`` can tell whether a lease of
this engine is still in use; an execution leaves it when it ends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, final

import attrs

from .._api._children import take_parent
from .._api._workflow import Workflow
from .._core._clock import Clock
from .._core._error_info import error_info
from .._core._events import take_observer
from .._core._hooks import Hooks
from .._core._host import Host
from .._core._run import RunState
from .._core._store_calls import StoreErrors
from .._errors import (
    CheckpointCorruptError,
    NonDeterminismError,
    RunConflictError,
    RunNotFoundError,
)
from ..stores._leases import version_conflict
from ..stores._records import Entry, RunRecord, RunStatus, utcnow
from ..stores._store import Store
from ._catalog import Catalog
from ._execution import Execution
from ._info import check_not_cancelled, decode_result
from ._inputs import check_responses, decode_args
from ._outcomes import Outcome
from ._ownership import Leases

__all__ = ("Completed", "Launcher")


@final
@attrs.define(eq=False)
class Launcher:
    """Claims runs for one engine and returns their executions (see the module docstring)."""

    store: Store
    hooks: Hooks
    save_timeout: float
    leases: Leases
    clock: Clock
    catalog: Catalog
    host: Host  # the engine as a run's code sees it: tether.child() starts runs with it
    #: runs executing in this engine now
    active: set[str] = attrs.field(factory=set, init=False)

    async def start(
        self, wf: Workflow[..., Any], run_id: str, args_text: str, args: tuple[Any, ...]
    ) -> Execution | Completed:
        """Claim the run *run_id* of ``wf(*args)`` to start (or resume) it, its arguments
        stored as *args_text*: what to await (``execute()``) for its outcome.

        What :meth:`Engine.run <tether.Engine.run>` does once its arguments
        are checked; see there for cancellation and errors.
        """
        with StoreErrors(f"reading run {run_id!r}"):
            record = await self.store.get_run(run_id)
        if record is not None:
            check_not_cancelled(record)
            if record.workflow != wf.name:
                raise RunConflictError(
                    f"run {run_id!r} belongs to workflow {record.workflow!r}, not {wf.name!r}"
                )
            if record.version != wf.version:
                # Never another version's code over this run's journal.
                raise version_conflict(record, wf.version)
            if record.args != args_text:
                raise RunConflictError(
                    f"run {run_id!r} was started with other arguments ({record.args:.200}) "
                    f"than given now ({args_text:.200}); resume it with "
                    f"engine.resume({run_id!r}) or choose a new run_id"
                )
        now = utcnow()
        # Given to the claim, which creates the run with its first lease if
        # it is (still) not stored, or else claims the stored one, if it is
        # the same workflow with the same arguments (a retry whose first
        # attempt's create landed after all resumes it).
        return await self._claim(
            wf,
            record,
            args,
            create=RunRecord(
                run_id=run_id,
                workflow=wf.name,
                version=wf.version,
                args=args_text,
                created_at=now,
                updated_at=now,
            ),
        )

    async def resume(
        self, run_id: str, responses: Mapping[str, Any] | None
    ) -> Execution | Completed:
        """Claim the stored run *run_id* to continue it, given *responses* to its pending
        requests: what to await (``execute()``) for its outcome.

        What :meth:`Engine.resume <tether.Engine.resume>` does once its
        arguments are checked; see there for cancellation and errors.
        """
        with StoreErrors(f"reading run {run_id!r}"):
            record = await self.store.get_run(run_id)
        if record is None:
            raise RunNotFoundError(f"no run {run_id!r} in {self.store!r}")
        check_not_cancelled(record)
        provided = check_responses(record, responses, self.leases.owner) if responses else {}
        wf = self.catalog.find(record)
        return await self._claim(wf, record, decode_args(wf, record), provided=provided)

    async def claimed(
        self,
        record: RunRecord,
        *,
        park_after: float | None,
        journal: Sequence[Entry] | None = None,
    ) -> Execution:
        """The execution of a run a worker claimed, to await: see
        :meth:`Internals.execute_claimed <tether._engine._engine.Internals.execute_claimed>`."""
        wf = self.catalog.find(record)
        self._enter(record.run_id)
        try:
            try:
                args = decode_args(wf, record)
            except (CheckpointCorruptError, NonDeterminismError) as exc:
                # Stored as failed (fenced by the claim's token), not released:
                # a released run would be claimed again, and fail again, forever.
                failed = attrs.evolve(
                    record,
                    status=RunStatus.FAILED,
                    error=error_info(exc),
                    owner=None,
                    updated_at=utcnow(),
                    lease_expires_at=None,
                )
                with StoreErrors(f"storing run {record.run_id!r} as failed"):
                    await self.store.update_run(failed)
                raise
            execution = self._execution(
                wf,
                record,
                args,
                provided={},
                original=record,
                park_after=park_after,
                journal=journal,
            )
        except BaseException:
            self.active.discard(record.run_id)
            raise
        return execution

    async def _claim(
        self,
        wf: Workflow[..., Any],
        current: RunRecord | None,
        args: tuple[Any, ...],
        *,
        create: RunRecord | None = None,
        provided: dict[str, Any] | None = None,
    ) -> Execution | Completed:
        """Claim the run (read as *current*, or created from *create*): its execution, to
        await (it is in :attr:`active` from now until that ends), or its result, if it has
        completed."""
        if current is not None and current.status is RunStatus.COMPLETED:
            return Completed(decode_result(current, wf))
        run_id = current.run_id if current is not None else create.run_id  # type: ignore[union-attr]
        self._enter(run_id)
        try:
            with StoreErrors(f"claiming run {run_id!r}"):
                record = await self.leases.claim(run_id, current=current, create=create)
            if record.status is RunStatus.COMPLETED:  # it completed since it was read
                self.active.discard(run_id)
                return Completed(decode_result(record, wf))
            # Created by this claim (our record, first token): its journal is empty.
            created = (
                current is None
                and create is not None
                and record.token == 1
                and record.created_at == create.created_at
            )
            return self._execution(
                wf,
                record,
                args,
                provided=provided or {},
                original=current or record,
                created=created,
            )
        except BaseException:
            self.active.discard(run_id)
            raise

    def _execution(
        self,
        wf: Workflow[..., Any],
        record: RunRecord,
        args: tuple[Any, ...],
        *,
        provided: dict[str, Any],
        original: RunRecord,
        created: bool = False,
        park_after: float | None = None,
        journal: Sequence[Entry] | None = None,
    ) -> Execution:
        """The execution of the claimed run *record* (it leaves :attr:`active` when it ends)."""
        parent = take_parent()  # (a child run, tether.child: it parks as its parent may)
        state = RunState(
            run_id=record.run_id,
            workflow=wf.name,
            store=self.store,
            hooks=self.hooks,
            save_timeout=self.save_timeout,
            journal={},
            provided=provided,
            observer=take_observer(),
            token=record.token,
            host=self.host,
            parent=parent,
            clock=self.clock,
            park_after=park_after if parent is None else parent.park_after,
            declared_messages=wf.messages,
        )
        outcome = Outcome(
            store=self.store,
            hooks=self.hooks,
            leases=self.leases,
            state=state,
            workflow=wf,
            record=record,
            original=original,
        )
        return Execution(
            outcome=outcome, args=args, active=self.active, created=created, journal=journal
        )

    def _enter(self, run_id: str) -> None:
        """Mark *run_id* as executing in this engine (its execution, or whoever fails to
        make one, takes it out)."""
        if run_id in self.active:
            raise RunConflictError(f"run {run_id!r} is already executing in this engine")
        self.active.add(run_id)


@attrs.frozen
class Completed:
    """A run found completed when it was claimed: its decoded result."""

    value: Any

    async def execute(self) -> Any:
        """The result (like :meth:`Execution.execute`; a run found completed executes
        nothing). Not a checkpoint."""
        return self.value
