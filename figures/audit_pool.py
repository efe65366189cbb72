"""Audits of one view design pooled (beyond the paper): what ``python -m rescoring.audit_pool`` measured, as a forest
plot.

One row per audit (its run and checkpoints, with its invalid steps in brackets) and the pooled rows of the two
settings (diamonds: ``raw`` scores, and scores z-scored within each checkpoint), in three panels:

* the residual's feedback AUROC, design minus baseline, paired on the same steps;
* the support's (Full's), design minus baseline; left out when the design keeps the baseline's view (a design that
  changes only the twin), where it is zero by construction;
* each side's residual gain over its own support, AUROC(residual) - AUROC(Full) (grey: baseline, blue: design).

Whiskers are the results' percentile intervals of trajectory-cluster resamples. The values drawn are written to
``audit_pool_fig.json``.

Command::

    python -m rescoring.audit_pool AUDIT1 AUDIT2 ... --out DIR
    python -m figures.audit_pool DIR/audit_pool.json [--out DIR] [--dpi 150] [--pdf]

``--out`` defaults to the JSON's own folder, where ``audit_pool.md`` links the picture.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Mapping, Sequence

from figures._common import FigureError, add_output_options, read_json_file, wrote
from figures.drawing import add_caption, pyplot, save_with_values
from ocsd.cli import entry_point

__all__ = ["NAME", "PANELS", "rows", "panels", "draw", "build", "main"]

NAME = "audit_pool"

PANELS = (("residual_gain", "residual"), ("support_gain", "support (Full)"),
          ("gain_over_support", "residual - support"))
"""The comparisons drawn: the key of the result and the panel's name."""

SIDE_COLORS = {"baseline": "#8C8C8C", "design": "#4C72B0"}
"""The two sides of the ``gain_over_support`` panel."""

KEYS = ("view", "twin", "baseline_view", "baseline_twin", "audits", "raw", "standard", "n_steps", "n_invalid", "ci",
        "n_boot")


def rows(result: Mapping, key: str, side: str | None = None) -> list[dict]:
    """The rows of one panel, top to bottom: ``{"row", "value", "low", "high", "pooled"}`` for each audit and the
    two pooled settings; ``side`` (``baseline`` or ``design``) picks one side of ``gain_over_support``."""
    def pick(entry: Mapping) -> Mapping:
        return entry[key][side] if side else entry[key]

    out = [{"row": f"{a['run']} @ {', '.join(map(str, a['checkpoints']))} ({a['n_invalid']} invalid)",
            **_whisker(pick(a)), "pooled": False} for a in result["audits"]]
    for setting, what in (("raw", "raw scores"), ("standard", "z-scored within checkpoint")):
        out.append({"row": f"pooled, {what} ({result['n_invalid']} invalid)", **_whisker(pick(result[setting])),
                    "pooled": True})
    return out


def _whisker(entry: Mapping) -> dict:
    return {"value": entry["delta"], "low": entry["ci_low"], "high": entry["ci_high"]}


def panels(result: Mapping) -> dict[str, dict[str, list[dict]]]:
    """The values of each panel drawn: ``{panel name: {series: rows}}``; the support panel is left out when the
    design keeps the baseline's view."""
    same_view = result["view"] == result["baseline_view"]
    out = {}
    for key, name in PANELS:
        if key == "support_gain" and same_view:
            continue
        out[name] = ({side: rows(result, key, side) for side in SIDE_COLORS} if key == "gain_over_support"
                     else {"design - baseline": rows(result, key)})
    return out


def _draw_series(ax, drawn: list[dict], *, color: str, pooled_color: str, offset: float, label: str | None) -> None:
    """One series of rows: circles for the audits, diamonds in ``pooled_color`` for the pooled rows."""
    for y, row in enumerate(drawn):
        ax.errorbar([row["value"]], [-y + offset], xerr=[[row["value"] - row["low"]], [row["high"] - row["value"]]],
                    fmt="D" if row["pooled"] else "o", ms=6 if row["pooled"] else 4,
                    color=pooled_color if row["pooled"] else color, lw=1.3, capsize=2.5,
                    label=label if y == 0 else None)


def draw(result: Mapping):
    """The figure of ``result`` (module docstring); returns ``(figure, the values drawn)``."""
    plt = pyplot()
    data = panels(result)
    labels = [row["row"] for row in next(iter(data[PANELS[0][1]].values()))]  # the same rows in every panel
    n = len(labels)
    fig, axes = plt.subplots(1, len(data), figsize=(4.6 + 3.4 * len(data), 1.4 + 0.36 * n), sharey=True)
    for ax, (name, series) in zip(axes, data.items()):
        ax.set_gid(name)
        two = len(series) > 1
        for i, (what, drawn) in enumerate(series.items()):
            if two:  # the sides of gain_over_support, each in its colour, pooled rows too
                _draw_series(ax, drawn, color=SIDE_COLORS[what], pooled_color=SIDE_COLORS[what], offset=0.15 - 0.3 * i,
                             label=what)
            else:
                _draw_series(ax, drawn, color="#4C72B0", pooled_color="#C44E52", offset=0.0, label=None)
        ax.axvline(0.0, color="#333333", lw=0.8, ls="--")
        ax.axhline(-(len(result["audits"]) - 0.5), color="#999999", lw=0.6)
        ax.set_title(f"{name}: AUROC, " + ("each side" if two else "design - baseline"), fontsize=10)
        ax.set_xlabel("paired difference of feedback AUROC (valid vs invalid)", fontsize=8.5)
        ax.grid(axis="x", alpha=0.3, lw=0.5)
        ax.tick_params(axis="x", labelsize=8)
        if two:
            ax.legend(fontsize=7.5, loc="lower left", frameon=False)
    axes[0].set_yticks([-y for y in range(n)])
    axes[0].set_yticklabels(labels, fontsize=7.5)
    axes[0].tick_params(axis="y", length=0)
    axes[0].set_ylim(-n + 0.4, 0.6)
    title = (f"{result['view']} (twin {result['twin']}) against {result['baseline_view']} "
             f"(twin {result['baseline_twin']})")
    if result["view"] == result["baseline_view"]:
        title += f": the same {result['view']} view, so the support does not change"
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig, data


def build(path, out_dir=None, *, pdf: bool = False, dpi: int = 150) -> list[Path]:
    """Draw the ``audit_pool.json`` at ``path`` (a file or its folder) into ``out_dir`` (default: its folder)."""
    file, result = read_json_file(path, "audit_pool.json", "the pooled audits")
    lacking = [k for k in KEYS if not isinstance(result, Mapping) or k not in result]
    if lacking:
        raise FigureError(f"{file}: not the JSON of python -m rescoring.audit_pool (missing {lacking})")
    if any("gain_over_support" not in audit for audit in result["audits"]):
        raise FigureError(f"{file}: its audits lack their residual - support gains (written by an older "
                          "rescoring.audit_pool): pool the audits again")
    fig, data = draw(result)
    add_caption(fig, f"Each row: the design's feedback AUROC minus the baseline's on the same labelled steps "
                     f"(blue: one audit; red diamonds: all {result['n_steps']} labelled steps of the audits pooled); "
                     f"right: each side's AUROC of the residual minus that of its support (diamonds pooled). "
                     f"Whiskers: {result['ci']:.0%} intervals of {result['n_boot']} trajectory-cluster resamples, "
                     f"within each audit's steps or over all of them; they cover the steps scored, not a rerun of "
                     f"training.")
    return save_with_values(fig, out_dir if out_dir is not None else file.parent, NAME, data, pdf=pdf, dpi=dpi)


def _main(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m figures.{NAME}", description=__doc__.split("\n")[0])
    parser.add_argument("result", metavar="JSON", help="audit_pool.json of python -m rescoring.audit_pool (or its "
                                                       "folder)")
    add_output_options(parser, default=(None, "the JSON's folder"))
    args = parser.parse_args(argv)
    return wrote(build(args.result, args.out, pdf=args.pdf, dpi=args.dpi))


main = entry_point(_main, f"figures.{NAME}")

if __name__ == "__main__":
    sys.exit(main())
