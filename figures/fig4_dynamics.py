"""Paper Fig. 4: training dynamics (validation and training success over steps).

Panels: validation success overall (``val/success_rate``) and per task type
(``val/success/<type>``) at the validation steps, then training success (``success_rate``) and mean
reward (``reward_mean``) at every step, all read from each run's ``metrics.jsonl``. Several runs
overlay, labelled by ``run.json``'s method (seed or folder name added where labels collide, or
``--label``). Runs without validation rows contribute the training panels only. ``--paper-reference MODEL``
draws, in each validation panel, the paper's final success of each plotted method on that model (Table 1,
:func:`figures.paper.main_results`) as a dashed line in the method's colour; the paper prints its curves
only as a figure, so its final values are what can be compared.

Command::

    python -m figures.fig4_dynamics --run A [--run B ...] [--label NAME ...] [--paper-reference MODEL] [--out DIR]
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from matplotlib.ticker import MaxNLocator

from diagnostics.runs import VAL_OVERALL, VAL_PREFIX
from figures._common import RunInfo, SkipFigure, check_paper_model, figure_parser, load_runs, wrote
from figures.drawing import add_caption, pyplot, runs_caption, save_and_close
from ocsd.cli import entry_point

__all__ = ["FIXED_COLOURS", "Curve", "curves", "draw", "build", "line_styles", "main", "paper_lines"]

NAME = "fig4_dynamics"
TRAIN_KEYS = {"success_rate": "Training success", "reward_mean": "Training reward"}
TASK_ORDER = ("pick", "look", "clean", "heat", "cool", "pick2")
"""ALFWorld task types in the paper's column order; other types follow alphabetically."""


@dataclass(frozen=True)
class Curve:
    """One metric of one run: the steps where it is present and its values there."""

    label: str
    key: str
    steps: np.ndarray
    values: np.ndarray


SEED_STYLES = ("-", (0, (5, 2)), (0, (1, 1.5)), (0, (6, 2, 1, 2)))
"""Line styles of the runs of one method, in label order (the method sets the colour)."""


def _method(label: str) -> str:
    """The method of a run label: the label before `` (`` (``OCSD`` of ``OCSD (seed 2)``)."""
    return label.split(" (")[0]


FIXED_COLOURS = ("GRPO", "OCSD", "OPSD", "RLSD", "SDAR", "GRPO+OPSD")
"""The paper's methods (:data:`figures.paper.PAPER_METHODS`), which keep one colour each in every figure (``C0`` for
the first) whichever runs it draws: GRPO blue and OCSD orange, as in the figures of those two alone."""


def line_styles(labels: Sequence[str]) -> dict[str, tuple[str, object]]:
    """``{label: (colour, line style)}``: one colour per method (:func:`_method`), and one line style per run of
    that method, so that a dozen runs stay apart.

    A method of the paper (:data:`FIXED_COLOURS`) has the same colour whichever other runs are drawn; other labels
    take the colours after those, in sorted order.
    """
    others = sorted({_method(lab) for lab in labels} - set(FIXED_COLOURS))
    order = list(FIXED_COLOURS) + others
    out, count = {}, {}
    for lab in sorted(labels):
        base = _method(lab)
        k = count[base] = count.get(base, -1) + 1
        out[lab] = (f"C{order.index(base) % 10}", SEED_STYLES[k % len(SEED_STYLES)])
    return out


def _series(run: RunInfo, key: str) -> Curve | None:
    rows = [(int(r["step"]), float(r[key])) for r in run.metrics if r.get(key) is not None]
    if not rows:
        return None
    steps, values = map(np.asarray, zip(*rows))
    return Curve(run.label, key, steps, values)


def _task_key(key: str):
    task = key[len(VAL_PREFIX):]
    return (TASK_ORDER.index(task), "") if task in TASK_ORDER else (len(TASK_ORDER), task)


def curves(runs: Sequence[RunInfo]) -> dict[str, list[Curve]]:
    """Metric key -> the runs' curves, in panel order (validation overall, per task, training).

    Raises
    ------
    SkipFigure
        No run has a metrics row with any of the plotted keys.
    """
    task_keys = sorted({k for r in runs for row in r.metrics for k in row if k.startswith(VAL_PREFIX)}, key=_task_key)
    out = {}
    for key in (VAL_OVERALL, *task_keys, *TRAIN_KEYS):
        found = [c for c in (_series(r, key) for r in runs) if c is not None]
        if found:
            out[key] = found
    if not out:
        names = ", ".join(str(r.path) for r in runs)
        raise SkipFigure(f"no metrics rows with {VAL_OVERALL}, {VAL_PREFIX}<type> or training success in {names}")
    return out


def _title(key: str) -> str:
    if key == VAL_OVERALL:
        return "Validation success (overall)"
    if key.startswith(VAL_PREFIX):
        return f"Validation success: {key[len(VAL_PREFIX):]}"
    return TRAIN_KEYS.get(key, key)


def paper_lines(runs: Sequence[RunInfo], model: str) -> dict[str, dict[str, float]]:
    """Validation key -> {run label: the paper's final success (a fraction)} of each run's method on ``model``;
    methods the paper's Table 1 does not have are left out."""
    from figures.paper import PAPER_METHODS, main_results

    names = {registry: paper for paper, registry in PAPER_METHODS.items() if registry}
    out: dict[str, dict[str, float]] = {}
    for run in runs:
        paper_name = names.get(str(run.info.get("method")))
        if paper_name is None:
            continue
        values = main_results(model, paper_name)
        for column in (*TASK_ORDER, "overall"):
            key = VAL_OVERALL if column == "overall" else f"{VAL_PREFIX}{column}"
            out.setdefault(key, {})[run.label] = values[column].mean / 100
    return out


def draw(panels: dict[str, list[Curve]], *, ncols: int = 4, title: str | None = None,
         paper: dict[str, dict[str, float]] | None = None, paper_model: str = ""):
    """One axes per metric key, one line per run (markers at validation steps); ``paper`` adds dashed lines
    (:func:`paper_lines`).

    Returns
    -------
    matplotlib.figure.Figure
        Each axes has ``gid`` equal to its metric key; each line's label is the run label.
    """
    plt = pyplot()
    n = len(panels)
    ncols = min(ncols, n)
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.4 * ncols, 2.7 * nrows), squeeze=False)
    labels = sorted({c.label for cs in panels.values() for c in cs})
    steps = [x for cs in panels.values() for c in cs for x in c.steps]
    span = (min(steps) - 0.5, max(steps) + 0.5) if steps else None  # every panel spans the run's steps
    styles = line_styles(labels)
    method_colors = {_method(lab): color for lab, (color, _) in styles.items()}
    for ax, (key, found) in zip(axes.flat, panels.items()):
        for c in found:
            validation = key.startswith("val/")
            color, style = styles[c.label]
            ax.plot(c.steps, c.values, label=c.label, color=color, ls=style, lw=1.4,
                    marker="o" if validation else None, ms=3)
        for label, value in (paper or {}).get(key, {}).items():
            ax.axhline(value, color=method_colors.get(_method(label), "grey"), ls="--", lw=1.0, alpha=0.8,
                       gid=f"paper|{label}")
        ax.set_title(_title(key), fontsize=9)
        ax.set_xlabel("training step", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        if span is not None:
            ax.set_xlim(*span)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3, lw=0.5)
        if key != "reward_mean":
            ax.set_ylim(-0.03, 1.03)
        ax.set_gid(key)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.tight_layout()
    handles = {lab: h for ax in axes.flat for h, lab in zip(*ax.get_legend_handles_labels())}
    entries = [(handles[lab], lab) for lab in labels]
    if paper:
        from matplotlib.lines import Line2D

        entries.append((Line2D([], [], color="grey", ls="--", lw=1.0), f"paper, {paper_model}, final (Table 1)"))
    fig.legend([h for h, _ in entries], [lab for _, lab in entries], loc="lower center",
               ncol=min(len(entries), 6), fontsize=8, frameon=False, bbox_to_anchor=(0.5, 1.0))
    if title:
        fig.suptitle(title, fontsize=10, y=1.0 + 0.25 / nrows)
    return fig


def build(run_dirs: Sequence, out_dir, *, labels: Sequence[str] | None = None, name: str = NAME, pdf: bool = False,
          dpi: int = 150, paper_reference: str | None = None) -> list[Path]:
    """Draw Fig. 4 for the runs and write it; prints which runs lack validation rows."""
    if paper_reference:
        check_paper_model(paper_reference)
    runs = load_runs(run_dirs, labels)
    panels = curves(runs)
    for r in runs:
        if not any(VAL_OVERALL in row for row in r.metrics):
            print(f"{name}: {r.label} ({r.path}) has no validation rows; training panels only", file=sys.stderr)
    paper = paper_lines(runs, paper_reference) if paper_reference else None
    if paper is not None:  # the paper's lines belong to validation panels only
        paper = {key: lines for key, lines in paper.items() if key in panels}
        if not paper:
            print(f"{name}: no validation panel, so the paper's final success (--paper-reference) is not drawn",
                  file=sys.stderr)
    fig = draw(panels, paper=paper, paper_model=paper_reference or "")
    add_caption(fig, runs_caption(runs) + (f"; dashed: the paper's final validation success on {paper_reference} "
                                           f"(Table 1)" if paper else ""))
    return save_and_close(fig, out_dir, name, pdf=pdf, dpi=dpi)


def _main(argv: Sequence[str] | None) -> int:
    parser = figure_parser(f"figures.{NAME}", __doc__.split("\n")[0])
    parser.add_argument("--label", action="append", default=[], help="legend label per --run, in the same order")
    parser.add_argument("--paper-reference", metavar="MODEL", default=None,
                        help="draw the paper's final success of each method on MODEL (Qwen3-1.7B, Qwen3-4B, ...)")
    args = parser.parse_args(argv)
    paths = build(args.run, args.out, labels=args.label or None, pdf=args.pdf, dpi=args.dpi,
                  paper_reference=args.paper_reference)
    return wrote(paths)


main = entry_point(_main, f"figures.{NAME}")


if __name__ == "__main__":
    sys.exit(main())
