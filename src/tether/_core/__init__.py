"""The kernel: the state of one run, and what every call inside it stands on.

Layer: the kernel. It imports only the layers below it (``tether._errors``,
``tether._terminal``, ``tether._codec``, ``tether.stores``) and never the
layers above: not the workflow API, the engine, workers, the dashboard or the
command line, also not under ``TYPE_CHECKING`` (``just lint`` checks it with
import-linter). What a run's own code needs of the engine executing it is
the :class:`~._host.Host` protocol, which the engine implements.

Its modules: ``_run`` (the state one execution shares between its tasks),
``_frame`` (where a task is in its run), ``_replay`` (the journal matched call by
call), ``_saver`` and ``_shields`` (the one save path and its shields),
``_store_calls`` (a store's errors and optional calls), ``_events`` and
``_hooks`` (what a run reports), ``_clock``, ``_changes``, ``_owners``,
``_nurseries``, ``_cleanup_scope`` and ``_error_info``.
"""
