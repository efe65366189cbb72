"""The diagnosis along training (beyond the paper): what ``python -m diagnostics.by_step`` measured, window by window.

Two panels over the global steps (each window drawn at its middle): (a) the paired Delta AUROC, residual - Full,
with its trajectory-cluster interval, one colour per input; (b) the feedback AUROC of the Full and residual step
scores (Ablated's too with ``--ablated``), one colour per signal and one line style per input. Several inputs (runs of
two series, two methods, two models) are drawn side by side, each nudged a little along the x axis so that their
whiskers stay apart. The values drawn are written to ``by_step_fig.json``.

Command::

    python -m diagnostics.by_step --run RUN... --width 4 --json > A.json
    python -m figures.by_step A.json [B.json ...] [--label A --label B] [--ablated] [--out DIR] [--dpi 150] [--pdf]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from figures._common import add_labelled_inputs, add_output_options, read_labelled_results, wrote
from figures.drawing import add_caption, pyplot, save_with_values
from ocsd.cli import entry_point

__all__ = ["NAME", "read_inputs", "series", "draw", "build", "main"]

NAME = "by_step"
SIGNALS = {"ablated": ("Ablated", "#999999"), "full": ("Full", "#4C72B0"), "residual": ("Residual", "#C44E52")}
STYLES = ("-", "--", ":", "-.")
"""Line style of each input in panel (b), in input order."""


def read_inputs(paths: Sequence, labels: Sequence[str] | None = None) -> list[tuple[str, dict]]:
    """``[(label, result)]`` of the ``diagnostics.by_step --json`` files; the label defaults to the file's stem.

    Raises
    ------
    FigureError
        No file, a label count that does not match, or a file that is not a by_step result (named).
    """
    return read_labelled_results(paths, labels, default_name="by_step.json", keys=("windows", "width"),
                                 lacks="windows", command="python -m diagnostics.by_step --json")


def _value(entry: dict, key: str) -> tuple:
    return entry.get(key), entry.get("ci_low"), entry.get("ci_high")


def series(result: dict) -> dict:
    """What one input draws: ``{"x": window middles, "delta": [(v, lo, hi)], "auroc": {signal: [(v, lo, hi)]},
    "steps": labelled steps per window}``."""
    windows = result["windows"]
    return {"x": [(w["first"] + w["last"]) / 2 for w in windows],
            "delta": [_value(w["delta"], "delta") for w in windows],
            "auroc": {s: [_value(w["signals"][s], "auroc") for w in windows] for s in SIGNALS},
            "steps": [w["n_steps"] for w in windows]}


def _whiskers(ax, xs, values, *, color, label, style="-", marker="o"):
    ys = [v if v is not None else float("nan") for v, _, _ in values]
    low = [y - lo if lo is not None else 0.0 for y, (_, lo, _) in zip(ys, values)]
    high = [hi - y if hi is not None else 0.0 for y, (_, _, hi) in zip(ys, values)]
    return ax.errorbar(xs, ys, yerr=[low, high], color=color, ls=style, marker=marker, ms=3.5, lw=1.3,
                       elinewidth=0.8, capsize=2, label=label)


def draw(inputs: list[tuple[str, dict]], *, ablated: bool = False):
    """The figure of the inputs (module docstring); returns ``(figure, the values drawn)``."""
    plt = pyplot()
    data = {label: series(result) for label, result in inputs}
    widths = {result["width"] for _, result in inputs}
    nudge = 0.12 * min(widths)  # inputs side by side within a window
    offsets = [(i - (len(data) - 1) / 2) * nudge for i in range(len(data))]
    fig, axes = plt.subplots(1, 2, figsize=(13.0, 4.0))
    ax = axes[0]
    ax.set_gid("delta")
    for i, (label, s) in enumerate(data.items()):
        _whiskers(ax, [x + offsets[i] for x in s["x"]], s["delta"], color=f"C{i % 10}", label=label)
    ax.axhline(0.0, color="#333333", lw=0.8, ls="--")
    ax.set_ylabel("Delta AUROC (residual - Full)")
    ax.set_title("(a) residual - Full, paired, per window", fontsize=10)
    ax = axes[1]
    ax.set_gid("auroc")
    shown = [s for s in SIGNALS if ablated or s != "ablated"]
    for i, (label, s) in enumerate(data.items()):
        for signal in shown:
            name, color = SIGNALS[signal]
            _whiskers(ax, [x + offsets[i] for x in s["x"]], s["auroc"][signal], color=color,
                      style=STYLES[i % len(STYLES)], label=f"{name}, {label}" if len(data) > 1 else name)
    ax.axhline(0.5, color="#333333", lw=0.8, ls="--")
    ax.set_ylabel("feedback AUROC (valid vs invalid)")
    ax.set_title("(b) feedback AUROC per window", fontsize=10)
    for ax in axes:
        ax.set_xlabel("training step (window middle)")
        ax.grid(alpha=0.3, lw=0.5)
        ax.tick_params(labelsize=8)
    axes[0].legend(fontsize=7, loc="best")
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # beside the whiskers
    fig.tight_layout()
    return fig, data


def build(paths: Sequence, out_dir, *, labels: Sequence[str] | None = None, ablated: bool = False,
          pdf: bool = False, dpi: int = 150) -> list[Path]:
    """Draw the by_step results of ``paths`` into ``out_dir``; returns the files written."""
    inputs = read_inputs(paths, labels)
    fig, data = draw(inputs, ablated=ablated)
    parts = []
    for label, result in inputs:
        windows = result["windows"]
        steps = sorted({g for w in windows for g in w["global_steps"]})  # not the last window's far edge
        span = f"checkpoints of steps {steps[0]}-{steps[-1]}" if steps else "no steps"
        parts.append(f"{label}: {span}, windows of {result['width']}, "
                     f"{sum(w['n_steps'] for w in windows)} labelled steps")
    ci = {f"{result['ci']:.0%}" for _, result in inputs}
    boots = {str(result["n_boot"]) for _, result in inputs}
    add_caption(fig, "; ".join(parts) + f". Whiskers: {'/'.join(sorted(ci))} intervals of "
                     f"{'/'.join(sorted(boots))} trajectory-cluster resamples within each window.")
    return save_with_values(fig, out_dir, NAME, data, pdf=pdf, dpi=dpi)


def _main(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m figures.{NAME}", description=__doc__.split("\n")[0])
    add_labelled_inputs(parser, "python -m diagnostics.by_step", "by_step.json")
    parser.add_argument("--ablated", action="store_true", help="also draw the Ablated signal's AUROC in panel (b)")
    add_output_options(parser)
    args = parser.parse_args(argv)
    return wrote(build(args.inputs, args.out, labels=args.label, ablated=args.ablated, pdf=args.pdf, dpi=args.dpi))


main = entry_point(_main, f"figures.{NAME}")

if __name__ == "__main__":
    sys.exit(main())
