"""tether's version: ``tether.__version__``, ``tether --version`` and the tracer's name.

Layer: values, the bottom layer; it imports nothing.
"""

__version__ = "0.1.0.dev0"
