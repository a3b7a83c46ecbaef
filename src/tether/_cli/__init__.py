"""The ``tether`` command line: ``run``, ``resume``, ``runs``, ``worker``, ``ui``, ``bench`` …

Layer: the command line, the top layer: nothing in the package imports it
(``python -m tether`` and the ``tether`` script enter it through
:func:`._main.main`). It may use every layer below, the dashboard included.
"""
