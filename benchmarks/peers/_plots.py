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
        # An engine cut short after a few trials (one that waited for the hung save) would
        # draw an invisible step: mark its points.
        marker = "o" if len(v) < 5 else None
        ax.step(v, y, style, where="post", label=results.name(key), linewidth=1.6, marker=marker)
        drawn += 1
    if not drawn:
        plt.close(fig)
        return False
    ax.set_xscale("log")
    ticker = plt.matplotlib.ticker
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())  # decades only: minor labels collide
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
        ax.bar_label(bars, labels=[_micros(h) for h in hs], fontsize=7, padding=2)
    ax.set_yscale("log")
    ax.set_xticks(x, [_wrapped(results.name(k)) for k in keys], fontsize=8)
    ax.set_ylabel("µs per step (log scale)")
    quick = " (--quick smoke run)" if results.quick else ""
    ax.set_title(f"Sequential no-op steps: time per step{quick}")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, metadata=_META)
    plt.close(fig)
    return True


def _micros(value: float) -> str:
    """A bar's label: three significant digits, never in exponent form."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _wrapped(name: str) -> str:
    """An engine's name on at most two lines, so that neighbouring labels do not collide."""
    if " (floor)" in name:
        return name.replace(" (floor)", "\n(floor)")
    words = name.split()
    if len(name) <= 12 or len(words) < 2:
        return name
    half = (len(words) + 1) // 2
    return " ".join(words[:half]) + "\n" + " ".join(words[half:])


def queue_bars(results: Results, path: Path) -> bool:
    """Jobs per second (log scale), per queue system: a panel per job size, a bar per
    number of worker processes (the median of the rounds)."""
    keys, sizes = results.queue_engines(), results.queue_steps()
    if not keys or not sizes:
        return False
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(sizes), figsize=(7.5, 4.4), dpi=110, squeeze=False)
    x = list(range(len(keys)))
    for ax, steps in zip(axes[0], sizes, strict=True):
        for offset, workers in ((-0.2, 1), (0.2, 2)):
            figures = [results.queue_figure(k, steps, workers) for k in keys]
            xs = [i + offset for i, f in zip(x, figures, strict=True) if f is not None]
            hs = [f.jobs_per_s for f in figures if f is not None]
            label = f"{workers} worker{'s' if workers > 1 else ''}"
            bars = ax.bar(xs, hs, width=0.4, label=label)
            ax.bar_label(bars, labels=[f"{h:,.0f}" for h in hs], fontsize=6, padding=2)
        ax.set_yscale("log")
        ticker = plt.matplotlib.ticker
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda y, _: f"{y:g}"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        names = [_wrapped(_short(results.name(k))) for k in keys]
        ax.set_xticks(x, names, fontsize=7, rotation=30, ha="right")
        ax.set_title(f"{steps}-step jobs", fontsize=9)
        ax.grid(True, axis="y", which="both", alpha=0.3)
    axes[0][0].set_ylabel("jobs per second (log scale)")
    axes[0][0].legend(fontsize=7)
    quick = " (--quick smoke run)" if results.quick else ""
    fig.suptitle(f"A queue drained by worker processes on PostgreSQL{quick}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, metadata=_META)
    plt.close(fig)
    return True


def _short(name: str) -> str:
    """A queue system's name without its bracketed detail (the table has it)."""
    return name.split(" (")[0]
