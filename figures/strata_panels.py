"""The figure of ``diagnostics.strata``: feedback AUROC of each signal within the strata of a step property.

One panel per signal (Ablated support, Full support, residual), in Fig. 2c's colours: a bar per stratum, then
the within-strata AUROC and the pooled one in a darker shade; whiskers are the percentile intervals, the dashed
line is chance. A stratum with one class only has no AUROC and shows ``n/a``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from figures.drawing import add_caption, bar_chart, number, pyplot, save_figure

__all__ = ["draw_strata", "SIGNAL_COLORS"]

SIGNAL_COLORS = {"ablated": ("#BBBBBB", "#666666"), "full": ("#8FA9D6", "#2F4F8F"),
                 "residual": ("#E39A9C", "#8F2F33")}
"""(stratum, summary) bar colours of each signal."""
TITLES = {"ablated": "Ablated support delta_A", "full": "Full support delta_F", "residual": "residual e"}
BY_TITLES = {"evidence_words": "the evidence the Full view shows (words of o_{k+1} and o_{k+2})",
             "next_action": "what the trajectory does next"}


def _bars(result: Mapping, signal: str):
    entries = [(s["stratum"], s["signals"][signal]) for s in result["strata"]]
    entries += [("within\nstrata", result["within"][signal]), ("pooled", result["pooled"][signal])]
    light, dark = SIGNAL_COLORS[signal]
    colors = [light] * len(result["strata"]) + [dark, dark]
    return ([label for label, _ in entries], [e.get("auroc") for _, e in entries],
            [e.get("ci_low") for _, e in entries], [e.get("ci_high") for _, e in entries], colors)


def _signed(value) -> str:
    """``+0.012``; ``n/a`` for a missing value (nan, or None as read back from JSON)."""
    value = number(value)
    return f"{value:+.3f}" if np.isfinite(value) else "n/a"


def draw_strata(result: Mapping, out_dir, *, name: str | None = None, source: str = "", dpi: int = 120) -> Path:
    """Draw ``result`` (:func:`diagnostics.strata.strata_auroc`) into ``<out_dir>/<name>.png`` (default
    ``strata_<by>``); returns the path."""
    plt = pyplot()
    by = result["by"]
    fig, axes = plt.subplots(1, 3, figsize=(3 * (1.6 + 0.45 * (len(result["strata"]) + 2)), 3.6), sharey=True)
    try:
        for ax, signal in zip(axes, TITLES):
            labels, values, lows, highs, colors = _bars(result, signal)
            bar_chart(ax, labels, values, lows, highs, color=colors, ylabel="AUROC" if signal == "ablated" else "",
                      baseline=0.5, gid=signal, note="no stratum holds both classes")
            ax.set_title(TITLES[signal], fontsize=10)
            ax.set_ylim(0, 1)
        fig.suptitle(f"Feedback AUROC within strata of {BY_TITLES.get(by, by)}", fontsize=11)
        fig.tight_layout()
        delta = result["delta"]["within"]
        add_caption(fig, f"{source + ': ' if source else ''}{result['n_steps']} labelled steps ({result['n_valid']} "
                         f"valid) in {result['n_trajectories']} trajectories; within strata: pairs of one stratum "
                         f"only ({result['n_steps_within']} steps in strata with both classes); Delta AUROC "
                         f"(residual - full) within strata {_signed(delta['delta'])} [{_signed(delta['ci_low'])}, "
                         f"{_signed(delta['ci_high'])}]; {result['ci']:.0%} trajectory-cluster bootstrap intervals "
                         f"({result['n_boot']} resamples)")
        return save_figure(fig, out_dir, name or f"strata_{by}", dpi=dpi)[0]
    finally:
        plt.close(fig)
