"""Two runs compared step by step (beyond the paper): what ``python -m diagnostics.paired_steps`` measured, as a forest
plot.

One row per pair of runs (the mean difference A - B over the training steps both have, with its circular
block-bootstrap interval) and, for an input of several pairs, its pooled row (a diamond); one colour per input, the
inputs one below the other (OCSD - GRPO of two series and each run against its rerun, say), so that the gap between
two methods can be read against the gap between two runs of one method. The values drawn are written to
``paired_steps_fig.json``.

Command::

    python -m diagnostics.paired_steps --pair A B [--pair ...] --json > X.json
    python -m figures.paired_steps X.json [Y.json ...] [--label X --label Y] [--percent] [--out DIR] [--dpi 150]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from figures._common import add_labelled_inputs, add_output_options, read_labelled_results, wrote
from figures.drawing import add_caption, pyplot, save_with_values
from ocsd.cli import entry_point

__all__ = ["NAME", "read_inputs", "rows", "draw", "build", "main"]

NAME = "paired_steps"


def read_inputs(paths: Sequence, labels: Sequence[str] | None = None) -> list[tuple[str, dict]]:
    """``[(label, result)]`` of the ``diagnostics.paired_steps --json`` files; the label defaults to the file's stem.

    Raises
    ------
    FigureError
        No file, a label count that does not match, or a file that is not a paired_steps result (named).
    """
    return read_labelled_results(paths, labels, default_name="paired_steps.json",
                                 keys=("pairs", "pooled", "labels", "block", "n_boot", "ci", "metric"),
                                 lacks="pairs, pooled difference and labels",
                                 command="python -m diagnostics.paired_steps --json")


def rows(result: dict, scale: float = 1.0) -> list[dict]:
    """The rows one input draws, top to bottom: ``{"row", "value", "low", "high", "pooled"}`` for each pair
    (``row``: ``A - B (steps FIRST-LAST)``) and, with more than one pair, the pooled difference; values times
    ``scale``."""
    out = []
    for (a, b), pair in zip(result["labels"], result["pairs"]):
        out.append({"row": f"{a} - {b} (steps {pair['first']}-{pair['last']})", "value": scale * pair["difference"],
                    "low": scale * pair["ci_low"], "high": scale * pair["ci_high"], "pooled": False})
    if len(result["pairs"]) > 1:
        pooled = result["pooled"]
        out.append({"row": f"pooled ({pooled['n']} steps)", "value": scale * pooled["difference"],
                    "low": scale * pooled["ci_low"], "high": scale * pooled["ci_high"], "pooled": True})
    return out


def draw(inputs: list[tuple[str, dict]], *, percent: bool = False):
    """The figure of the inputs (module docstring); returns ``(figure, the values drawn)``."""
    plt = pyplot()
    scale = 100.0 if percent else 1.0
    data = {label: rows(result, scale) for label, result in inputs}
    n_lines = sum(len(r) + 1 for r in data.values())
    fig, ax = plt.subplots(figsize=(10.0, 0.8 + 0.28 * n_lines))
    ax.set_gid("forest")
    y, ticks, names = 0.0, [], []
    for i, (label, drawn) in enumerate(data.items()):
        color = f"C{i % 10}"
        ax.text(-0.012, y, label, transform=ax.get_yaxis_transform(), ha="right", va="center", fontsize=8.5,
                fontweight="bold", color=color, gid=f"group{i}")
        ticks.append(y)
        names.append("")
        for row in drawn:
            y -= 1.0
            ax.errorbar([row["value"]], [y], xerr=[[row["value"] - row["low"]], [row["high"] - row["value"]]],
                        fmt="D" if row["pooled"] else "o", ms=6 if row["pooled"] else 4, color=color, lw=1.3,
                        capsize=2.5, label=f"{label}: {row['row']}")
            ticks.append(y)
            names.append(row["row"])
        y -= 1.0
    ax.set_yticks(ticks)
    ax.set_yticklabels(names, fontsize=7.5)
    ax.tick_params(axis="y", length=0)
    ax.set_ylim(y + 0.4, 0.6)
    ax.axvline(0.0, color="#333333", lw=0.8, ls="--")
    metric = sorted({result["metric"] for _, result in inputs})
    ax.set_xlabel(f"A - B, mean over the paired steps ({'percentage points of ' if percent else ''}"
                  f"{'/'.join(metric)})")
    ax.grid(axis="x", alpha=0.3, lw=0.5)
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    return fig, data


def build(paths: Sequence, out_dir, *, labels: Sequence[str] | None = None, percent: bool = False,
          pdf: bool = False, dpi: int = 150) -> list[Path]:
    """Draw the paired_steps results of ``paths`` into ``out_dir``; returns the files written."""
    inputs = read_inputs(paths, labels)
    fig, data = draw(inputs, percent=percent)
    ci = "/".join(sorted({f"{result['ci']:.0%}" for _, result in inputs}))
    boots = "/".join(sorted({str(result["n_boot"]) for _, result in inputs}))
    blocks = "/".join(sorted({str(result["block"]) for _, result in inputs}))
    add_caption(fig, f"Each row: the mean of A - B over the training steps both runs have. Whiskers: {ci} intervals "
                     f"of {boots} circular block resamples (blocks of {blocks} consecutive steps) within each pair of "
                     f"runs; they cover the training noise within the runs compared, not what a rerun changes.")
    return save_with_values(fig, out_dir, NAME, data, pdf=pdf, dpi=dpi)


def _main(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m figures.{NAME}", description=__doc__.split("\n")[0])
    add_labelled_inputs(parser, "python -m diagnostics.paired_steps", "paired_steps.json")
    parser.add_argument("--percent", action="store_true",
                        help="draw the differences times 100, as percentage points (for rates such as success_rate)")
    add_output_options(parser)
    args = parser.parse_args(argv)
    return wrote(build(args.inputs, args.out, labels=args.label, percent=args.percent, pdf=args.pdf, dpi=args.dpi))


main = entry_point(_main, f"figures.{NAME}")

if __name__ == "__main__":
    sys.exit(main())
