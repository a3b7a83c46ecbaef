"""The report's two plots: the overshoot CDF of scenario 1 and the per-step overhead bars."""

from __future__ import annotations

from pathlib import Path

from _figures import FLOORS, Results


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


#: PNG metadata without the matplotlib version, so an unchanged figure is an unchanged file
_META = {"Software": None}


def cancel_cdf(results: Results, path: Path) -> bool:
    """Per engine, the share of trials whose overshoot was at most x ms, at the headline width."""
    width = results.headline_width()
    if width is None:
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    drawn = 0
    for key in results.engines():
        values = results.overshoots_ms(key, width)
        if not values:
            continue
        v = sorted(values)
        y = [(i + 1) / len(v) for i in range(len(v))]
        style = "--" if key in FLOORS else "-"
        ax.step(v, y, style, where="post", label=results.name(key), linewidth=1.6)
        drawn += 1
    if not drawn:
        plt.close(fig)
        return False
    ax.set_xscale("log")
    plain = plt.matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}")
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(plain)
    ax.tick_params(axis="x", which="minor", labelsize=7)
    ax.set_xlabel("overshoot past the caller's deadline, ms (log scale)")
    ax.set_ylabel("share of trials")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    quick = " (--quick smoke run)" if results.quick else ""
    ax.set_title(f"Caller deadline 0.2 s, {width} parallel steps, every save hung{quick}")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, metadata=_META)
    plt.close(fig)
    return True


def overhead_bars(results: Results, path: Path) -> bool:
    """Microseconds per sequential no-op step, in memory and durable, per engine (log scale)."""
    keys = [
        k
        for k in results.engines()
        if results.step_figure(k, False) is not None or results.step_figure(k, True) is not None
    ]
    if not keys:
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    x = list(range(len(keys)))
    for offset, durable, label in ((-0.2, False, "in memory"), (0.2, True, "durable store")):
        heights = [results.step_figure(k, durable) for k in keys]
        xs = [i + offset for i, h in zip(x, heights, strict=True) if h is not None]
        hs = [h for h in heights if h is not None]
        bars = ax.bar(xs, hs, width=0.4, label=label)
        ax.bar_label(bars, labels=[f"{h:.3g}" for h in hs], fontsize=7, padding=2)
    ax.set_yscale("log")
    ax.set_xticks(x, [results.name(k).replace(" (floor)", "\n(floor)") for k in keys], fontsize=8)
    ax.set_ylabel("µs per step (log scale)")
    quick = " (--quick smoke run)" if results.quick else ""
    ax.set_title(f"Sequential no-op steps: time per step{quick}")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, metadata=_META)
    plt.close(fig)
    return True
