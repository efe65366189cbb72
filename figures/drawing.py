"""Drawing shared by the figures: pyplot on Agg, saving, the bar chart with intervals, the word cloud.

:func:`bar_chart` and :func:`word_cloud` are the only bar-chart and word-cloud code of the suite;
the diagnostics commands that write PNGs (``diagnostics.report``, ``diagnostics.tails``) draw
through them as well.
"""

from __future__ import annotations

import textwrap

import math
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ocsd.cli import write_json

__all__ = ["pyplot", "save_figure", "save_and_close", "number", "bar_chart", "word_cloud"]


def _use_agg() -> None:
    import matplotlib

    matplotlib.use("Agg")


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend."""
    _use_agg()
    import matplotlib.pyplot as plt

    return plt


CAPTION_POINTS = 7
"""Font size of a figure's caption."""


def wrap_caption(text: str, width: int) -> str:
    """Break a caption into lines of at most ``width`` characters between its ``"; "``-separated parts (a part
    longer than a line is wrapped at its spaces)."""
    lines: list[str] = []
    room = max(width - 1, 1)  # a line that ends between parts ends with ";"
    for part in text.split("; "):
        if lines and len(lines[-1]) + 2 + len(part) <= room:
            lines[-1] += "; " + part
        else:
            if lines:
                lines[-1] += ";"
            lines.extend(textwrap.wrap(part, room) or [""])
    return "\n".join(lines)


def add_caption(fig, text: str) -> None:
    """Write what a figure is drawn from in small grey type below everything drawn so far (tick labels
    included; the tight bounding box of :func:`save_figure` keeps it), wrapped to the figure's width so that a
    long list of runs does not widen the image."""
    bottom = fig.get_tightbbox(fig.canvas.get_renderer()).y0 / fig.get_figheight()
    width = int(fig.get_figwidth() * 72 / (0.55 * CAPTION_POINTS))  # characters of about 0.55 em each
    fig.text(0.01, min(0.0, bottom) - 0.01, wrap_caption(text, width), ha="left", va="top",
             fontsize=CAPTION_POINTS, color="#555555", gid="caption")


def runs_caption(runs) -> str:
    """``label (folder, steps A-B)`` for each run (:class:`figures._common.RunInfo`), joined."""
    parts = []
    for r in runs:
        steps = [row["step"] for row in r.metrics if "step" in row]
        span = f"steps {min(steps)}-{max(steps)}" if steps else "no steps"
        parts.append(f"{r.label} ({r.path.name}, {span})")
    return "runs: " + "; ".join(parts)


def save_figure(fig, out_dir, name: str, *, pdf: bool = False, dpi: int = 150) -> list[Path]:
    """Write ``<out_dir>/<name>.png`` (and ``.pdf``); closes nothing (the caller owns ``fig``)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.png"]
    fig.savefig(paths[0], dpi=dpi, bbox_inches="tight")
    if pdf:
        paths.append(out_dir / f"{name}.pdf")
        fig.savefig(paths[1], bbox_inches="tight")
    return paths


def save_and_close(fig, out_dir, name: str, *, pdf: bool = False, dpi: int = 150) -> list[Path]:
    """:func:`save_figure`, then close ``fig`` whether or not the files could be written; the paths written."""
    try:
        return save_figure(fig, out_dir, name, pdf=pdf, dpi=dpi)
    finally:
        pyplot().close(fig)


def save_with_values(fig, out_dir, name: str, values, *, values_name: str | None = None, pdf: bool = False,
                     dpi: int = 150) -> list[Path]:
    """:func:`save_and_close`, then the values drawn as JSON beside the picture (``values_name``, default
    ``<name>_fig.json``); all the paths written."""
    paths = save_and_close(fig, out_dir, name, pdf=pdf, dpi=dpi)
    return [*paths, write_json(Path(out_dir) / (values_name or f"{name}_fig.json"), values)]


def number(value) -> float:
    """A float for drawing: None and non-numbers become nan."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return math.nan
    return value


def bar_chart(ax, labels: Sequence[str], values, lows, highs, *, color="#4C72B0", ylabel: str = "",
              baseline: float | None = None, gid: str | None = None, note: str | None = None) -> None:
    """Bars with interval whiskers on ``ax``; a missing value (None, nan) is drawn as ``n/a`` inside the
    panel, and a panel without any value says why (``note``) in its middle.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    labels : sequence of str, length n
    values, lows, highs : sequence of float or None, length n
        Bar heights and the interval of each (whiskers from ``low`` to ``high``, also where the
        interval does not contain the bar's value).
    color : colour or sequence of n colours
    ylabel : str
    baseline : float, optional
        A dashed reference line (0.5 for AUROC, 0 for a difference).
    gid : str, optional
        Set on the axes and the bar container, so tests can find the drawn values.
    note : str, optional
        Why the values are missing, written inside the panel when none is finite.
    """
    values = np.array([number(v) for v in values])
    lows = np.array([number(v) for v in lows])
    highs = np.array([number(v) for v in highs])
    x = np.arange(len(labels))
    ax.bar(x, np.nan_to_num(values), color=color, edgecolor="black", linewidth=0.5, gid=gid)
    # whiskers centred on the interval, not the bar: a percentile interval need not contain the estimate
    ax.errorbar(x, np.nan_to_num((lows + highs) / 2), yerr=np.nan_to_num(np.abs(highs - lows) / 2), fmt="none",
                ecolor="black", elinewidth=0.8, capsize=3)
    at_bottom = ax.get_xaxis_transform()  # x in data, y in axes units: the label stays inside the panel
    for xi, v in zip(x, values):
        if not np.isfinite(v):
            ax.text(xi, 0.02, "n/a", transform=at_bottom, ha="center", va="bottom", fontsize=7, color="grey")
    if note and not np.isfinite(values).any():
        ax.text(0.5, 0.75, textwrap.fill(note, 28), transform=ax.transAxes, ha="center", va="center", fontsize=7,
                color="dimgrey", bbox={"facecolor": "white", "edgecolor": "none"}, gid=f"{gid}-note" if gid else None)
    ax.set_xticks(x, labels, rotation=30 if len(labels) > 3 else 0, ha="right" if len(labels) > 3 else "center",
                  fontsize=8)
    if baseline is not None:
        ax.axhline(baseline, color="grey", lw=0.8, ls="--")
    ax.set_ylabel(ylabel, fontsize=9)
    ax.tick_params(axis="y", labelsize=8)
    ax.set_gid(gid)


def word_cloud(frequencies: Mapping[str, float], *, width: int = 400, height: int = 260, seed: int = 0):
    """A word-cloud layout of the words with a finite, positive size.

    Parameters
    ----------
    frequencies : mapping of str to float
        Word -> display size.
    width, height : int
        Canvas in pixels.
    seed : int
        Layout seed.

    Returns
    -------
    wordcloud.WordCloud or None
        The generated cloud (``.to_array()`` to draw it on axes, ``.to_file(path)`` to write a PNG);
        None when no word has a finite, positive size.
    """
    _use_agg()  # wordcloud imports matplotlib
    from wordcloud import WordCloud

    sizes = {w: number(s) for w, s in frequencies.items()}
    sizes = {w: s for w, s in sizes.items() if np.isfinite(s) and s > 0}
    if not sizes:
        return None
    cloud = WordCloud(width=width, height=height, background_color="white", prefer_horizontal=1.0,
                      random_state=seed, collocations=False, regexp=None)
    return cloud.generate_from_frequencies(sizes)
