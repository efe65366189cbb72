"""What OCSD's token weights give valid and invalid steps (beyond the paper): what ``python -m diagnostics.credit``
measured, for several runs or parts side by side.

Three panels share one row per input: (a) the mean calibration signal q = tanh(e / 2) of valid and invalid steps,
(b) its mean size |q| (OCSD moves a token's advantage by beta |q|), (c) the push beta |A| q, OCSD's token advantage
minus GRPO's, in thousandths; each with its trajectory-cluster interval. The values drawn are written to
``credit_fig.json``.

Command::

    python -m diagnostics.credit --run DIR [--run DIR ...] [--part action] --json > X.json
    python -m figures.credit X.json [Y.json ...] [--label X --label Y] [--out DIR] [--dpi 150]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from figures._common import add_labelled_inputs, add_output_options, read_labelled_results, wrote
from figures.drawing import add_caption, number, pyplot, save_with_values
from ocsd.cli import entry_point

__all__ = ["NAME", "PANELS", "read_inputs", "values", "draw", "build", "save", "main"]

NAME = "credit"
PANELS = (("q", "(a) mean q = tanh(e/2)", 1.0), ("abs_q", "(b) mean |q|: the size of OCSD's change", 1.0),
          ("push", "(c) push beta |A| q (x 1e-3)", 1e3))
"""Each panel's statistic, title and scale."""
_COLORS = {"valid": "#4C72B0", "invalid": "#C44E52"}
_PART_WORDS = {"step": "all its tokens", "action": "its action's tokens", "rest": "the tokens outside its action"}
"""How the caption names each ``--part`` of ``diagnostics.credit``."""


def read_inputs(paths: Sequence, labels: Sequence[str] | None = None) -> list[tuple[str, dict]]:
    """``[(label, result)]`` of the ``diagnostics.credit --json`` files; the label defaults to the file's stem.

    Raises
    ------
    FigureError
        No file, a label count that does not match, or a file that is not a credit result (named).
    """
    return read_labelled_results(paths, labels, default_name="credit.json",
                                 keys=("labels", "difference", "beta", "n_boot", "ci"),
                                 lacks="means per feedback label",
                                 command="python -m diagnostics.credit --json")


def values(result: dict) -> dict:
    """``{statistic: {label: {"value", "low", "high"}}}`` that one input draws, the push in thousandths."""
    out = {}
    for stat, _, scale in PANELS:
        out[stat] = {}
        for label, part in result["labels"].items():
            est = part.get(stat, {})
            out[stat][label] = {key: scale * number(est.get(src)) for key, src in
                                (("value", "estimate"), ("low", "ci_low"), ("high", "ci_high"))}
    return out


def draw(inputs: list[tuple[str, dict]]):
    """The figure of the inputs (module docstring); returns ``(figure, the values drawn)``."""
    plt = pyplot()
    data = {label: values(result) for label, result in inputs}
    fig, axes = plt.subplots(1, len(PANELS), figsize=(12.0, 1.4 + 0.45 * len(inputs)), sharey=True)
    offsets = {"valid": 0.15, "invalid": -0.15}
    for ax, (stat, title, _) in zip(axes, PANELS):
        ax.set_gid(stat)
        for row, drawn in enumerate(data.values()):
            for label, v in drawn[stat].items():
                y = -row + offsets.get(label, 0.0)
                ax.errorbar([v["value"]], [y], xerr=[[v["value"] - v["low"]], [v["high"] - v["value"]]], fmt="o",
                            ms=4, color=_COLORS.get(label, "#555555"), lw=1.2, capsize=2.5,
                            label=label if row == 0 else None)
        if stat == "abs_q":
            ax.set_xlim(left=0.0)
        else:
            ax.axvline(0.0, color="#333333", lw=0.8, ls="--")
        ax.set_title(title, fontsize=9)
        ax.grid(axis="x", alpha=0.3, lw=0.5)
        ax.tick_params(axis="x", labelsize=8)
    axes[0].set_yticks([-row for row in range(len(inputs))])
    axes[0].set_yticklabels(list(data), fontsize=8)
    axes[0].set_ylim(-len(inputs) + 0.5, 0.5)
    axes[-1].legend(fontsize=7.5, loc="best", frameon=False)
    fig.tight_layout()
    return fig, data


def build(paths: Sequence, out_dir, *, labels: Sequence[str] | None = None, pdf: bool = False,
          dpi: int = 150) -> list[Path]:
    """Draw the credit results of ``paths`` into ``out_dir``; returns the files written."""
    return save(read_inputs(paths, labels), out_dir, pdf=pdf, dpi=dpi)


def save(inputs: list[tuple[str, dict]], out_dir, *, pdf: bool = False, dpi: int = 150) -> list[Path]:
    """Draw ``[(label, credit result)]`` (e.g. a ``report.json``'s ``credit``) into ``out_dir`` as ``credit.png``
    with the values drawn in ``credit_fig.json``; returns the files written."""
    fig, data = draw(inputs)

    def joined(key, form="{}"):
        return "/".join(sorted({form.format(result.get(key, "step")) for _, result in inputs}))

    used = {result.get("part", "step") for _, result in inputs}
    parts = " or ".join(_PART_WORDS.get(p, p) for p in sorted(used, key=[*_PART_WORDS, *used].index))
    add_caption(fig, f"Per feedback label, the mean over steps of each step's token mean over {parts} (beta "
                     f"{joined('beta', '{:g}')}). Whiskers: {joined('ci', '{:.0%}')} intervals "
                     f"of {joined('n_boot')} trajectory-cluster resamples. The push is what OCSD adds to GRPO's token "
                     f"advantage whatever its sign: positive favours the steps' tokens.")
    return save_with_values(fig, out_dir, NAME, data, pdf=pdf, dpi=dpi)


def _main(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m figures.{NAME}", description=__doc__.split("\n")[0])
    add_labelled_inputs(parser, "python -m diagnostics.credit", "credit.json")
    add_output_options(parser)
    args = parser.parse_args(argv)
    return wrote(build(args.inputs, args.out, labels=args.label, pdf=args.pdf, dpi=args.dpi))


main = entry_point(_main, f"figures.{NAME}")

if __name__ == "__main__":
    sys.exit(main())
