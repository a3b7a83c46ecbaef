"""What workflow code calls: steps, ``parallel``, ``ask``, timers, messages, child runs, streams.

Layer: the API of workflow code, on the kernel's public face. It imports the
kernel and the layers below it, never the engine or anything above (checked
by import-linter in ``just lint``): ``tether.child`` and ``tether.receive``
reach the engine through the kernel's :class:`~tether._core._host.Host`.
A step's executor (``_steps``, ``_step_attempts``) reads its definition
through :class:`~._step_def.StepDef`, so the definition (``_workflow``)
imports its executor and not the other way round.
"""
