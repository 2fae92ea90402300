"""Shared figure helpers of the studies: legends outside the data, byte axes in KB / MB / GB."""

from __future__ import annotations


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure(*args, **kwargs):
    """plt.subplots with constrained layout, so a legend placed outside the axes gets its own room."""
    return pyplot().subplots(*args, layout="constrained", **kwargs)


def legend_below(fig, axes, ncols: int | None = None, fontsize: float | None = None) -> None:
    """One legend for the whole figure under the axes (labels gathered from every axis, each once)."""
    seen: dict[str, object] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="outside lower center",
                   ncols=ncols or min(len(seen), 4), fontsize=fontsize, frameon=False)


def bytes_axis(ax, lo: float, hi: float, label: str) -> None:
    """A log2 x axis of byte sizes with ticks named 1 KB, 16 KB, ... 1 GB."""
    import math

    ax.set_xscale("log", base=2)
    a, b = math.floor(math.log2(lo)), math.ceil(math.log2(hi))
    ticks = [2.0**e for e in range(a, b + 1) if (e - a) % 4 == 0 or a == b]
    ax.set_xticks(ticks, [_size(t) for t in ticks])
    ax.set_xlabel(label)


def _size(b: float) -> str:
    for unit, sc in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if b >= sc:
            return f"{b / sc:g} {unit}"
    return f"{b:g} B"
