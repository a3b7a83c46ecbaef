"""``--plot FILE.png``: the overshoot's CDF, the workflow's against the floor's (matplotlib).

Layer: the bench (``tether.bench``).

matplotlib comes with the ``tether[bench]`` extra; without it,
:func:`plot_cancel` raises :class:`~tether.UsageError` naming the install
command. The figure is drawn on its own ``Figure`` with the Agg canvas, so
the plot changes no global matplotlib state (no backend switch, no pyplot).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from typing import Final

from .._errors import UsageError
from ._results import CancelResult

__all__ = ("INSTALL_HINT", "plot_available", "plot_cancel")

INSTALL_HINT: Final = (
    "--plot needs matplotlib, the bench extra: pip install -e '.[bench]' in tether's clone"
)


def plot_available() -> bool:
    """Whether matplotlib can be imported (the ``tether[bench]`` extra)."""
    try:
        return importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):  # a None in sys.modules: blocked
        return False


def _cdf(values: Sequence[float]) -> tuple[list[float], list[float]]:
    """The empirical CDF of *values* (seconds) in milliseconds, from 0 up to 1."""
    xs = sorted(v * 1e3 for v in values)
    return [xs[0], *xs], [0.0, *((i + 1) / len(xs) for i in range(len(xs)))]


def plot_cancel(result: CancelResult, path: str | os.PathLike[str]) -> None:
    """Write the CDF of *result*'s overshoots (the workflow, per fault position, and the
    floor) to *path* as a PNG.

    Raises:
        UsageError: matplotlib is not installed (``pip install -e '.[bench]'``).
        OSError: *path* cannot be written.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise UsageError(INSTALL_HINT) from exc
    figure = Figure(figsize=(8, 5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for position, samples in result.positions().items():
        values = [s.overshoot for s in samples if s.overshoot is not None]
        if values:
            label = result.workflow if position is None else f"{result.at} #{position}"
            axes.step(*_cdf(values), where="post", label=label)
    floor = [s.floor for s in result.samples if s.floor is not None]
    if floor:
        axes.step(
            *_cdf(floor),
            where="post",
            label=f"floor: trio nursery of {result.width}",
            color="black",
            linestyle="--",
        )
    # symlog: zeros (virtual time) and a bad store's seconds fit on one axis
    axes.set_xscale("symlog", linthresh=0.01)
    axes.set_xlabel("overshoot past the caller's deadline (ms)")
    axes.set_ylabel("fraction of samples")
    axes.set_ylim(0, 1.05)
    axes.set_title(
        f"{result.workflow} on {result.store}\n{result.fault} at {result.at}, caller deadline "
        f"{result.deadline:g} s, {result.clock} clock",
        fontsize="medium",
    )
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(os.fspath(path), format="png")
