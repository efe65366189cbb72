"""Audits of one view design pooled (beyond the paper): what ``python -m rescoring.audit_pool`` measured, as a forest
plot.

Two panels, the design minus the baseline of the residual's feedback AUROC and of the support's (Full's), paired on
the same steps: one row per audit (its run and checkpoints, with its invalid steps in brackets) and the pooled rows
of the two settings (diamonds: ``raw`` scores, and scores z-scored within each checkpoint). Whiskers are the
results' percentile intervals of trajectory-cluster resamples. The values drawn are written to
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

__all__ = ["NAME", "PANELS", "rows", "draw", "build", "main"]

NAME = "audit_pool"

PANELS = (("residual_gain", "residual"), ("support_gain", "support (Full)"))
"""The two comparisons drawn: the key of the result and the panel's name."""

KEYS = ("view", "twin", "baseline_view", "baseline_twin", "audits", "raw", "standard", "n_steps", "n_invalid", "ci",
        "n_boot")


def rows(result: Mapping, key: str) -> list[dict]:
    """The rows of one panel, top to bottom: ``{"row", "value", "low", "high", "pooled"}`` for each audit and the
    two pooled settings."""
    out = [{"row": f"{a['run']} @ {', '.join(map(str, a['checkpoints']))} ({a['n_invalid']} invalid)",
            "value": a[key]["delta"], "low": a[key]["ci_low"], "high": a[key]["ci_high"], "pooled": False}
           for a in result["audits"]]
    for setting, what in (("raw", "raw scores"), ("standard", "z-scored within checkpoint")):
        entry = result[setting][key]
        out.append({"row": f"pooled, {what} ({result['n_invalid']} invalid)", "value": entry["delta"],
                    "low": entry["ci_low"], "high": entry["ci_high"], "pooled": True})
    return out


def draw(result: Mapping):
    """The figure of ``result`` (module docstring); returns ``(figure, the values drawn)``."""
    plt = pyplot()
    data = {name: rows(result, key) for key, name in PANELS}
    labels = [row["row"] for row in data[PANELS[0][1]]]  # the same rows in every panel
    n = len(labels)
    fig, axes = plt.subplots(1, len(PANELS), figsize=(11.0, 1.2 + 0.36 * n), sharey=True)
    for ax, (name, drawn) in zip(axes, data.items()):
        ax.set_gid(name)
        for y, row in enumerate(drawn):
            color = "#C44E52" if row["pooled"] else "#4C72B0"
            ax.errorbar([row["value"]], [-y], xerr=[[row["value"] - row["low"]], [row["high"] - row["value"]]],
                        fmt="D" if row["pooled"] else "o", ms=6 if row["pooled"] else 4, color=color, lw=1.3,
                        capsize=2.5)
        ax.axvline(0.0, color="#333333", lw=0.8, ls="--")
        ax.axhline(-(len(result["audits"]) - 0.5), color="#999999", lw=0.6)
        ax.set_title(f"{name}: AUROC, design - baseline", fontsize=10)
        ax.set_xlabel("paired difference of feedback AUROC (valid vs invalid)", fontsize=8.5)
        ax.grid(axis="x", alpha=0.3, lw=0.5)
        ax.tick_params(axis="x", labelsize=8)
    axes[0].set_yticks([-y for y in range(n)])
    axes[0].set_yticklabels(labels, fontsize=7.5)
    axes[0].tick_params(axis="y", length=0)
    axes[0].set_ylim(-n + 0.4, 0.6)
    fig.suptitle(f"{result['view']} (twin {result['twin']}) against {result['baseline_view']} "
                 f"(twin {result['baseline_twin']})", fontsize=11)
    fig.tight_layout()
    return fig, data


def build(path, out_dir=None, *, pdf: bool = False, dpi: int = 150) -> list[Path]:
    """Draw the ``audit_pool.json`` at ``path`` (a file or its folder) into ``out_dir`` (default: its folder)."""
    file, result = read_json_file(path, "audit_pool.json", "the pooled audits")
    lacking = [k for k in KEYS if not isinstance(result, Mapping) or k not in result]
    if lacking:
        raise FigureError(f"{file}: not the JSON of python -m rescoring.audit_pool (missing {lacking})")
    fig, data = draw(result)
    add_caption(fig, f"Each row: the design's feedback AUROC minus the baseline's on the same labelled steps "
                     f"(blue: one audit; red diamonds: all {result['n_steps']} labelled steps of the audits pooled). "
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
