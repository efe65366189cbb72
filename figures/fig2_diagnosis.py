"""Paper Fig. 2: fine-grained diagnosis of the replay signals of one run.

Panels: (a) word clouds of the Full+, Ablated+, Residual+ and Residual- tails; (b) relative
residual contribution D per functional role; (c) AUROC of the step-averaged Ablated, Full and
residual signals for valid vs invalid steps; (d) Delta AUROC (residual - full) under the raw,
standard, matched, early, middle and late settings. Error bars are the diagnostics' trajectory-
cluster bootstrap intervals. The figure draws the diagnosis report: the ``report.json`` of
``python -m diagnostics.report`` (``--report``), or, given ``--run``, the same report built first
by :func:`diagnostics.report.diagnose` on the run's checkpoints; the values drawn are also written
to ``fig2_diagnosis.json``.

The report's own PNGs are these panels one per file: :func:`write_panels` (``auroc.png``,
``delta_auroc.png``, ``dratio.png``) and :func:`write_clouds` (``cloud_<tail>.png``).

Command::

    python -m figures.fig2_diagnosis --run DIR [--out DIR] [--report report.json] [--n-boot 1000]
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from figures._common import FigureError, SkipFigure, check_run_dir, figure_parser, read_json_file, wrote
from figures.drawing import add_caption, bar_chart, number, pyplot, save_with_values, word_cloud
from ocsd.cli import entry_point

__all__ = ["diagnose_run", "read_report", "BarPanel", "bar_panels", "draw", "write_panels", "write_clouds", "build",
           "main"]

NAME = "fig2_diagnosis"
PANELS = ("clouds", "dratio", "auroc", "delta")
"""``gid`` of the four panel groups (the cloud axes carry ``clouds:<tail>``)."""
CLOUD_TITLES = {"full+": "Full+", "ablated+": "Ablated+", "residual+": "Residual+", "residual-": "Residual-"}
AUROC_LABELS = {"ablated": "Ablated", "full": "Full", "residual": "Residual"}
DELTA_LABELS = {"raw": "Raw", "standard": "Standard", "matched": "Matched", "early": "Early", "middle": "Middle",
                "late": "Late"}
PANEL_FILES = {"auroc": ("auroc.png", "Valid vs invalid steps"),
               "delta": ("delta_auroc.png", "AUROC(residual) - AUROC(full)"),
               "dratio": ("dratio.png", "Relative residual contribution per role")}
"""Bar panel -> (file name, title) when written on its own (:func:`write_panels`)."""
_KEYS = ("auroc", "robustness", "dratio", "tails")


def diagnose_run(run_dir, *, n_boot: int = 1000, ci: float = 0.95, seed: int = 0, steps: str = "selected",
                 total_steps: int | None = None, cloud_words: int = 60, progress: bool = True) -> dict:
    """Build the diagnosis report of a run's checkpoints (:func:`diagnostics.report.diagnose`).

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
        ``{"auroc", "robustness", "dratio", "tails", "ci", "n_boot", "source"}``, each diagnosis as
        its command's JSON.

    Raises
    ------
    SkipFigure
        The run has no complete checkpoint, or its replay data cannot support the diagnosis.
    """
    from diagnostics.load import DiagnosticsError, load
    from diagnostics.report import diagnose
    from ocsd.records import checkpoint_folders

    run_dir = check_run_dir(run_dir)
    if not checkpoint_folders(run_dir, warn=False):
        raise SkipFigure(f"{run_dir} has no complete checkpoint with replay scores (global_step_N/replay/meta.json)")
    try:
        data = load([run_dir], steps=steps, total_steps=total_steps)
        report, _ = diagnose(data, n_boot=n_boot, ci=ci, seed=seed, top=cloud_words, progress=progress)
    except DiagnosticsError as exc:
        raise SkipFigure(f"{run_dir}: the replay data cannot support the diagnosis: {exc}") from exc
    result = {k: report[k] for k in _KEYS}
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


@dataclass(frozen=True)
class BarPanel:
    """What one bar panel draws: a bar per label with its interval, and how it is labelled."""

    labels: tuple
    values: tuple
    lows: tuple
    highs: tuple
    color: object
    ylabel: str
    baseline: float | None = None
    note: str | None = None


def _panel(entries: Mapping[str, dict], labels, key: str, color, ylabel: str, baseline=None,
           note: str | None = None) -> BarPanel:
    return BarPanel(tuple(labels), tuple(v[key] for v in entries.values()),
                    tuple(v["ci_low"] for v in entries.values()), tuple(v["ci_high"] for v in entries.values()),
                    color, ylabel, baseline, note)


def _auroc_note(auroc: dict) -> str:
    return (f"undefined: {auroc.get('n_valid', 0)} valid and {auroc.get('n_invalid', 0)} invalid labelled steps "
            f"(AUROC needs both)")


def bar_panels(report: dict) -> dict[str, BarPanel]:
    """The bar panels (b), (c), (d) of a report: ``{"dratio", "auroc", "delta"}`` -> :class:`BarPanel`."""
    cats, sig, rob = report["dratio"]["categories"], report["auroc"]["signals"], report["robustness"]
    return {
        "dratio": _panel(cats, [k.replace("_", " ").capitalize() for k in cats], "mean", "#DD8452", "D ratio",
                         note="undefined: no words with a residual"),
        "auroc": _panel(sig, [AUROC_LABELS.get(k, k) for k in sig], "auroc",
                        ["#8C8C8C", "#4C72B0", "#C44E52"][: len(sig)], "AUROC", 0.5, _auroc_note(report["auroc"])),
        "delta": _panel(rob, [DELTA_LABELS.get(k, k) for k in rob], "delta",
                        ["#55A868"] * 3 + ["#8172B3"] * (len(rob) - 3), r"$\Delta$AUROC", 0.0,
                        "undefined: every setting needs valid and invalid steps"),
    }


def _draw_panel(ax, gid: str, panel: BarPanel) -> None:
    bar_chart(ax, panel.labels, panel.values, panel.lows, panel.highs, color=panel.color, ylabel=panel.ylabel,
              baseline=panel.baseline, gid=gid, note=panel.note)
    if gid == "auroc":
        finite = [number(v) for v in panel.lows if np.isfinite(number(v))]
        ax.set_ylim(min([0.4, *finite]) - 0.02, None)


def _cloud(ax, words: list[dict], *, seed: int) -> None:
    cloud = word_cloud({w["word"]: w["size"] for w in words}, seed=seed)
    if cloud is not None:
        ax.imshow(cloud.to_array(), interpolation="bilinear")
    else:
        ax.text(0.5, 0.5, "no words", ha="center", va="center", transform=ax.transAxes, color="grey")
    ax.set_xticks([])
    ax.set_yticks([])


def draw(result: dict, *, seed: int = 0, title: str | None = None, paper: bool = False):
    """Draw the four panels from a diagnosis report.

    Parameters
    ----------
    result : dict
        As returned by :func:`diagnose_run` or :func:`read_report`.
    seed : int
        Word-cloud layout seed.
    title : str, optional
    paper : bool
        Mark the paper's feedback AUROCs (:data:`figures.paper.FEEDBACK_AUROC`) beside ours in panel (c).

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
    for i, (gid, panel) in enumerate(bar_panels(result).items()):
        _draw_panel(fig.add_subplot(outer[1 + i]), gid, panel)
    if paper:
        _paper_auroc(next(a for a in fig.axes if a.get_gid() == "auroc"), list(result["auroc"]["signals"]))
    firsts = [a for a in fig.axes if a.get_gid() in ("clouds:full+", "dratio", "auroc", "delta")]
    for letter, a in zip("abcd", firsts):
        fig.text(a.get_position().x0 - 0.02, 0.97, f"({letter})", fontsize=11, fontweight="bold", va="top")
    fig.suptitle(title or f"Replay-signal diagnosis (error bars: {pct} trajectory-cluster bootstrap)",
                 fontsize=10, y=1.05)
    return fig


def _paper_auroc(ax, signals: list[str]) -> None:
    """The paper's AUROC of each signal drawn in (black diamonds, ``gid`` ``"paper"``) at its bar."""
    from figures.paper import FEEDBACK_AUROC

    xs = [i for i, s in enumerate(signals) if s in FEEDBACK_AUROC]
    values = [FEEDBACK_AUROC[signals[i]].mean for i in xs]
    ax.plot(xs, values, linestyle="none", marker="D", color="black", markersize=6, label="paper", gid="paper",
            zorder=5)
    if values:  # the axis holds the paper's values too
        low, high = ax.get_ylim()
        ax.set_ylim(min(low, min(values) - 0.02), max(high, max(values) + 0.02))
    ax.legend(fontsize=7, loc="best", frameon=False)


def write_panels(report: dict, out_dir, *, dpi: int = 120) -> dict[str, str]:
    """Write each bar panel of a report as its own PNG (:data:`PANEL_FILES`).

    Returns
    -------
    dict
        ``{"auroc", "delta", "dratio"}`` -> path written (str).
    """
    plt = pyplot()
    panels = bar_panels(report)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for gid, (file, title) in PANEL_FILES.items():
        fig, ax = plt.subplots(figsize=(1.2 * len(panels[gid].labels) + 2, 3.2))
        try:
            _draw_panel(ax, gid, panels[gid])
            ax.set_title(title, fontsize=10)
            fig.tight_layout()
            fig.savefig(out_dir / file, dpi=dpi)
        finally:
            plt.close(fig)
        paths[gid] = str(out_dir / file)
    return paths


def write_clouds(frequencies: Mapping[str, Mapping[str, float]], out_dir, *, seed: int = 0) -> dict[str, str]:
    """Write one 800 x 400 word-cloud PNG per tail, named by :func:`diagnostics.tails.cloud_file`.

    Parameters
    ----------
    frequencies : mapping
        Tail -> {word: size} (:func:`diagnostics.tails.cloud_frequencies`).
    out_dir : path
    seed : int
        Layout seed.

    Returns
    -------
    dict
        Tail -> path written (str); tails without a word of positive size are skipped.
    """
    from diagnostics.tails import cloud_file  # the statistics name the files that reports link to

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for tail, words in frequencies.items():
        cloud = word_cloud(words, width=800, height=400, seed=seed)
        if cloud is None:
            continue
        path = out_dir / cloud_file(tail)
        cloud.to_file(str(path))
        paths[tail] = str(path)
    return paths


def build(run_dir, out_dir, *, report=None, n_boot: int = 1000, ci: float = 0.95, seed: int = 0,
          steps: str = "selected", total_steps: int | None = None, name: str = NAME, pdf: bool = False,
          dpi: int = 150, progress: bool = True, paper_reference: bool = False) -> list[Path]:
    """Read (or build) the diagnosis report of a run, draw Fig. 2 and write it with its values.

    Returns
    -------
    list of Path
        The PNG (and PDF) and ``<name>.json`` written.
    """
    result = read_report(report) if report else diagnose_run(run_dir, n_boot=n_boot, ci=ci, seed=seed, steps=steps,
                                                             total_steps=total_steps, progress=progress)
    fig = draw(result, seed=seed, paper=paper_reference)
    auroc, dratio = result.get("auroc", {}), result.get("dratio", {})
    source = f"report {Path(report)}" if report else f"run {Path(run_dir).name}"
    add_caption(fig, f"{source}: AUROC from {auroc.get('n_steps', '?')} labelled selected steps "
                     f"({auroc.get('n_valid', '?')} valid, {auroc.get('n_invalid', '?')} invalid) in "
                     f"{auroc.get('n_trajectories', '?')} trajectories, {auroc.get('n_boot', '?')} cluster resamples; "
                     f"D ratios over {dratio.get('n_checkpoints', '?')} checkpoint(s)")
    return save_with_values(fig, out_dir, name, result, values_name=f"{name}.json", pdf=pdf, dpi=dpi)


def _main(argv: Sequence[str] | None) -> int:
    from diagnostics.options import add_bootstrap_options, add_selection_options

    parser = figure_parser(f"figures.{NAME}", __doc__.split("\n")[0], runs="1")
    parser.add_argument("--report", metavar="JSON", help="draw from a diagnostics.report report.json instead of "
                        "building the report from the run's checkpoints")
    add_selection_options(parser)
    add_bootstrap_options(parser, seed_help="bootstrap and cloud-layout seed (default 0)")
    parser.add_argument("--paper-reference", action="store_true",
                        help="mark the paper's feedback AUROCs (0.464 / 0.654 / 0.707) in panel (c)")
    args = parser.parse_args(argv)
    if not args.report and len(args.run) != 1:
        raise FigureError(f"give exactly one --run DIR (or --report JSON), got {len(args.run)} --run")
    if args.n_boot < 1 or not 0 < args.ci < 1:
        raise FigureError(f"--n-boot must be >= 1 and --ci in (0, 1); got {args.n_boot}, {args.ci}")
    paths = build(args.run[0] if args.run else None, args.out, report=args.report, n_boot=args.n_boot, ci=args.ci,
                  seed=args.seed, steps=args.steps, total_steps=args.total_steps, pdf=args.pdf, dpi=args.dpi,
                  paper_reference=args.paper_reference)
    return wrote(paths)


main = entry_point(_main, f"figures.{NAME}")


if __name__ == "__main__":
    sys.exit(main())
