"""Paper Fig. 2: fine-grained diagnosis of the replay signals of one run.

Panels: (a) word clouds of the Full+, Ablated+, Residual+ and Residual- tails; (b) relative
residual contribution D per functional role; (c) AUROC of the step-averaged Ablated, Full and
residual signals for valid vs invalid steps; (d) Delta AUROC (residual - full) under the raw,
standard, matched, early, middle and late settings. Error bars are the diagnostics' trajectory-
cluster bootstrap intervals. Every number comes from :mod:`diagnostics` (``auroc.feedback_auroc``,
``dratio.dratio``, ``robustness.robustness``, ``tails.tails``), computed on the run's checkpoints or
read from a ``diagnostics.report`` JSON (``--report``); the values drawn are also written to
``fig2_diagnosis.json``.

Command::

    python -m figures.fig2_diagnosis --run DIR [--out DIR] [--report report.json] [--n-boot 1000]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from figures._common import (FigureError, SkipFigure, base_parser, check_run_dir, number, pyplot, read_json_file,
                             run_main, save_figure)

__all__ = ["compute", "read_report", "draw", "build", "main"]

NAME = "fig2_diagnosis"
PANELS = ("clouds", "dratio", "auroc", "delta")
"""``gid`` of the four panel groups (the cloud axes carry ``clouds:<tail>``)."""
CLOUD_TITLES = {"full+": "Full+", "ablated+": "Ablated+", "residual+": "Residual+", "residual-": "Residual-"}
AUROC_LABELS = {"ablated": "Ablated", "full": "Full", "residual": "Residual"}
DELTA_LABELS = {"raw": "Raw", "standard": "Standard", "matched": "Matched", "early": "Early", "middle": "Middle",
                "late": "Late"}
_KEYS = ("auroc", "robustness", "dratio", "tails")


def compute(run_dir, *, n_boot: int = 1000, ci: float = 0.95, seed: int = 0, steps: str = "selected",
            total_steps: int | None = None, cloud_words: int = 60, progress: bool = True) -> dict:
    """Run the diagnostics behind Fig. 2 on a run's checkpoints.

    Parameters
    ----------
    run_dir : path
        Run folder with complete ``global_step_N/replay`` checkpoints.
    n_boot, ci, seed : bootstrap settings passed to the diagnostics.
    steps : {"selected", "all"}
        Which steps the diagnostics analyse (the paper: selected top-NLL steps).
    total_steps : int, optional
        Run length for the early/middle/late thirds.
    cloud_words : int
        Words per tail kept for the clouds.

    Returns
    -------
    dict
        ``{"auroc", "robustness", "dratio", "tails", "ci", "n_boot", "source"}``, each diagnostic as
        its function returns it.

    Raises
    ------
    SkipFigure
        The run has no complete checkpoint, or its replay data cannot support the diagnosis.
    """
    from diagnostics import auroc, dratio, robustness, tails
    from diagnostics.load import DiagnosticsError, load
    from diagnostics.wordtable import word_table
    from ocsd.records import checkpoint_folders

    run_dir = check_run_dir(run_dir)
    if not checkpoint_folders(run_dir, warn=False):
        raise SkipFigure(f"{run_dir} has no complete checkpoint with replay scores (global_step_N/replay/meta.json)")
    try:
        data = load([run_dir], steps=steps, total_steps=total_steps)
        result = {
            "auroc": auroc.feedback_auroc(data, n_boot=n_boot, ci=ci, seed=seed),
            "robustness": robustness.robustness(data, n_boot=n_boot, ci=ci, seed=seed, progress=progress),
            "dratio": dratio.dratio(data, n_boot=n_boot, ci=ci, seed=seed),
            "tails": tails.tails(data, top=cloud_words, words=word_table(data, centre=True))[0],
        }
    except DiagnosticsError as exc:
        raise SkipFigure(f"{run_dir}: the replay data cannot support the diagnosis: {exc}") from exc
    result.update(ci=ci, n_boot=n_boot, source=str(run_dir))
    return result


def read_report(path) -> dict:
    """The Fig. 2 inputs from a ``python -m diagnostics.report`` ``report.json`` (or its folder)."""
    path, report = read_json_file(path, "report.json", "diagnostics report")
    missing = [k for k in _KEYS if not isinstance(report, dict) or k not in report]
    if missing:
        raise FigureError(f"{path}: missing key(s) {missing}; expected the JSON written by diagnostics.report")
    out = {k: report[k] for k in _KEYS}
    out.update(ci=report.get("ci", 0.95), n_boot=report["auroc"].get("n_boot"), source=str(path))
    return out


def _bars(ax, labels, values, lows, highs, *, color, gid, ylabel, baseline=None):
    values = np.array([number(v) for v in values])
    lows = np.array([number(v) for v in lows])
    highs = np.array([number(v) for v in highs])
    err = np.nan_to_num(np.vstack([values - lows, highs - values]), nan=0.0)
    x = np.arange(len(labels))
    ax.bar(x, np.nan_to_num(values), yerr=err, capsize=3, color=color, edgecolor="black", linewidth=0.5,
           error_kw={"elinewidth": 0.8}, gid=gid)
    for xi, v in zip(x, values):
        if not np.isfinite(v):
            ax.text(xi, 0, "n/a", ha="center", va="bottom", fontsize=7, color="grey")
    ax.set_xticks(x, labels, rotation=30 if len(labels) > 3 else 0, ha="right" if len(labels) > 3 else "center",
                  fontsize=8)
    if baseline is not None:
        ax.axhline(baseline, color="grey", lw=0.8, ls="--")
    ax.set_ylabel(ylabel, fontsize=9)
    ax.tick_params(axis="y", labelsize=8)
    ax.set_gid(gid)


def _cloud(ax, words: list[dict], *, seed: int):
    from wordcloud import WordCloud

    freqs = {w["word"]: number(w["size"]) for w in words if np.isfinite(number(w["size"])) and number(w["size"]) > 0}
    if freqs:
        cloud = WordCloud(width=400, height=260, background_color="white", prefer_horizontal=1.0, random_state=seed,
                          collocations=False, regexp=None).generate_from_frequencies(freqs)
        ax.imshow(cloud.to_array(), interpolation="bilinear")
    else:
        ax.text(0.5, 0.5, "no words", ha="center", va="center", transform=ax.transAxes, color="grey")
    ax.set_xticks([])
    ax.set_yticks([])


def draw(result: dict, *, seed: int = 0, title: str | None = None):
    """Draw the four panels from the diagnostics' outputs.

    Parameters
    ----------
    result : dict
        As returned by :func:`compute` or :func:`read_report`.
    seed : int
        Word-cloud layout seed.
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
        Bar axes carry ``gid`` ``"dratio"``, ``"auroc"``, ``"delta"``; cloud axes ``"clouds:<tail>"``.
    """
    plt = pyplot()
    fig = plt.figure(figsize=(15, 3.6))
    outer = fig.add_gridspec(1, 4, width_ratios=[1.6, 1.1, 0.8, 1.3], wspace=0.35)
    grid = outer[0].subgridspec(2, 2, wspace=0.05, hspace=0.12)
    top = result["tails"]["top"]
    for i, (tail, name) in enumerate(CLOUD_TITLES.items()):
        ax = fig.add_subplot(grid[i // 2, i % 2])
        _cloud(ax, top.get(tail, []), seed=seed)
        ax.set_title(name, fontsize=9, pad=2)
        ax.set_gid(f"clouds:{tail}")
    pct = f"{number(result.get('ci', 0.95)):.0%}"

    cats = result["dratio"]["categories"]
    ax = fig.add_subplot(outer[1])
    _bars(ax, [k.replace("_", " ").capitalize() for k in cats], [v["mean"] for v in cats.values()],
          [v["ci_low"] for v in cats.values()], [v["ci_high"] for v in cats.values()], color="#DD8452",
          gid="dratio", ylabel="D ratio")

    sig = result["auroc"]["signals"]
    ax = fig.add_subplot(outer[2])
    _bars(ax, [AUROC_LABELS.get(k, k) for k in sig], [v["auroc"] for v in sig.values()],
          [v["ci_low"] for v in sig.values()], [v["ci_high"] for v in sig.values()],
          color=["#8C8C8C", "#4C72B0", "#C44E52"][: len(sig)], gid="auroc", ylabel="AUROC", baseline=0.5)
    finite = [number(v["ci_low"]) for v in sig.values() if np.isfinite(number(v["ci_low"]))]
    ax.set_ylim(min([0.4, *finite]) - 0.02, None)

    rob = result["robustness"]
    ax = fig.add_subplot(outer[3])
    _bars(ax, [DELTA_LABELS.get(k, k) for k in rob], [v["delta"] for v in rob.values()],
          [v["ci_low"] for v in rob.values()], [v["ci_high"] for v in rob.values()],
          color=["#55A868"] * 3 + ["#8172B3"] * (len(rob) - 3), gid="delta", ylabel=r"$\Delta$AUROC", baseline=0.0)

    firsts = [a for a in fig.axes if a.get_gid() in ("clouds:full+", "dratio", "auroc", "delta")]
    for letter, a in zip("abcd", firsts):
        fig.text(a.get_position().x0 - 0.02, 0.97, f"({letter})", fontsize=11, fontweight="bold", va="top")
    fig.suptitle(title or f"Replay-signal diagnosis (error bars: {pct} trajectory-cluster bootstrap)",
                 fontsize=10, y=1.05)
    return fig


def build(run_dir, out_dir, *, report=None, n_boot: int = 1000, ci: float = 0.95, seed: int = 0,
          steps: str = "selected", total_steps: int | None = None, name: str = NAME, pdf: bool = False,
          dpi: int = 150, progress: bool = True) -> list[Path]:
    """Compute (or read) the diagnostics of a run, draw Fig. 2 and write it with its values.

    Returns
    -------
    list of Path
        The PNG (and PDF) and ``<name>.json`` written.
    """
    from diagnostics._cli import jsonable

    result = read_report(report) if report else compute(run_dir, n_boot=n_boot, ci=ci, seed=seed, steps=steps,
                                                        total_steps=total_steps, progress=progress)
    fig = draw(result, seed=seed)
    try:
        paths = save_figure(fig, out_dir, name, pdf=pdf, dpi=dpi)
    finally:
        pyplot().close(fig)
    values = Path(out_dir) / f"{name}.json"
    values.write_text(json.dumps(jsonable(result), indent=2, allow_nan=False) + "\n")
    return [*paths, values]


def _main(argv: Sequence[str] | None) -> int:
    parser = base_parser(f"figures.{NAME}", __doc__.split("\n")[0], runs="1")
    parser.add_argument("--report", metavar="JSON", help="draw from a diagnostics.report report.json instead of "
                        "computing the diagnostics")
    parser.add_argument("--n-boot", type=int, default=1000, help="trajectory-cluster resamples (default 1000)")
    parser.add_argument("--ci", type=float, default=0.95, help="interval coverage (default 0.95)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap and cloud-layout seed (default 0)")
    parser.add_argument("--steps", choices=("selected", "all"), default="selected",
                        help="analyse the selected (top-NLL) steps (default) or all scored steps")
    parser.add_argument("--total-steps", type=int, default=None, metavar="L",
                        help="run length for the early/middle/late thirds (default: largest checkpoint step)")
    args = parser.parse_args(argv)
    if not args.report and len(args.run) != 1:
        raise FigureError(f"give exactly one --run DIR (or --report JSON), got {len(args.run)} --run")
    if args.n_boot < 1 or not 0 < args.ci < 1:
        raise FigureError(f"--n-boot must be >= 1 and --ci in (0, 1); got {args.n_boot}, {args.ci}")
    paths = build(args.run[0] if args.run else None, args.out, report=args.report, n_boot=args.n_boot, ci=args.ci,
                  seed=args.seed, steps=args.steps, total_steps=args.total_steps, pdf=args.pdf, dpi=args.dpi)
    print("wrote " + ", ".join(map(str, paths)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m figures.fig2_diagnosis``."""
    return run_main(f"figures.{NAME}", _main, argv)


if __name__ == "__main__":
    sys.exit(main())
