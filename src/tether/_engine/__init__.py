"""The engine: the public API of runs, and what executes them.

Layer: the engine. It imports the workflow API, the kernel and the layers
below, never workers, the dashboard or the command line. :class:`~._engine.Engine`
shows users' methods only; what workers need of it (its leases, its changes,
executing a claimed run) is :func:`~._engine.internals`, which also serves as
each run's :class:`~tether._core._host.Host`. Its modules: ``_engine`` (the
face), ``_launch`` (claim and hand over), ``_execution`` and ``_outcomes`` (one
execution and how it ends), ``_ownership`` (leases), ``_inputs``, ``_info``,
``_control``, ``_catalog``, ``_send``, ``_serving``, ``_live`` and ``_progress``.
"""
