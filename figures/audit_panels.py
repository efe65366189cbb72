"""The figure of a replay-view audit (``rescoring.audit``): baseline and design side by side.

Four panels drawn from ``audit.json``: feedback AUROC of the three signals, Delta AUROC (residual - support)
under the robustness settings, D per functional role, and the observation-swap AUROC (realized and swapped).
Baseline bars are grey, design bars blue; whiskers are the report's percentile intervals.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from figures.drawing import add_caption, bar_chart, pyplot, save_figure

__all__ = ["draw_audit"]

BASE_COLOR, DESIGN_COLOR = "#AAAAAA", "#4C72B0"


def _pairs(base: Mapping[str, Mapping], design: Mapping[str, Mapping], keys, value: str, short: Mapping | None = None):
    labels, values, lows, highs, colors = [], [], [], [], []
    for key in keys:
        for side, entries, color in (("base", base, BASE_COLOR), ("view", design, DESIGN_COLOR)):
            entry = entries.get(key, {})
            labels.append(f"{(short or {}).get(key, key)}\n{side}")
            values.append(entry.get(value))
            lows.append(entry.get("ci_low"))
            highs.append(entry.get("ci_high"))
            colors.append(color)
    return labels, values, lows, highs, colors


def draw_audit(result: Mapping, out_dir, *, name: str = "audit", dpi: int = 120) -> Path:
    """Draw ``result`` (:func:`rescoring.audit.audit`) into ``<out_dir>/<name>.png``; returns the path."""
    plt = pyplot()
    base, design = result["baseline"], result["design"]
    swap = result.get("swap")
    panels = [
        ("Feedback AUROC", _pairs(base["auroc"]["signals"], design["auroc"]["signals"], ("ablated", "full", "residual"),
                                  "auroc", {"full": "support", "residual": "resid."}), 0.5, "AUROC"),
        ("Delta AUROC (residual - support)", _pairs(base["robustness"], design["robustness"],
                                                    ("raw", "standard", "matched"), "delta"), 0.0, "dAUROC"),
        ("D per role", _pairs(base["dratio"]["categories"], design["dratio"]["categories"],
                              [k for k in base["dratio"]["categories"] if k != "Other"], "mean",
                              {"Entity/State": "Ent/St", "Reasoning": "Reas."}), None, "mean D"),
    ]
    if swap:
        panels.append(("Observation swap (mean |residual|)",
                       _pairs({k: swap["baseline"][k] for k in ("realized", "swapped")},
                              {k: swap["design"][k] for k in ("realized", "swapped")}, ("realized", "swapped"),
                              "auroc"), 0.5, "AUROC"))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6))
    try:
        for ax, (title, (labels, values, lows, highs, colors), baseline, ylabel) in zip(axes, panels):
            bar_chart(ax, labels, values, lows, highs, color=colors, ylabel=ylabel, baseline=baseline,
                      gid=title, note="no labelled steps of both classes")
            ax.set_title(title, fontsize=10)
            ax.tick_params(axis="x", labelsize=7, rotation=0)
        fig.suptitle(f"Audit: {result['view']} (twin {result['twin']}, blue) vs {result['baseline_view']} "
                     f"(twin {result['baseline_twin']}, grey)", fontsize=11)
        fig.tight_layout()
        add_caption(fig, f"run {result['run']}, checkpoints {result['checkpoints']}, {result['n_steps']} selected "
                         f"steps re-scored with each checkpoint's weights; {result['ci']:.0%} cluster-bootstrap "
                         f"intervals ({result['n_boot']} resamples)")
        return save_figure(fig, out_dir, name, dpi=dpi)[0]
    finally:
        plt.close(fig)
