"""Paper Fig. 7 (appendix "Hyperparameter Sensitivity"): overall success against rho and against beta.

From a sweep (``training.sweep --methods grpo,ocsd --rho ... --beta ...``): panel (a) is OCSD's overall
validation success against the step-selection ratio rho with beta at its default, panel (b) against the
modulation coefficient beta with rho at its default; GRPO is drawn at 0 in both (no residual calibration),
as in the paper. A point is the mean over the cell's seeds of each run's last validation success, with the
sample standard deviation as error bar (:func:`diagnostics.runs.validation_stats`, through
:func:`figures.tables.collect`). A red dotted line marks the default. ``--paper-reference Qwen3-4B`` adds the
points the paper's text states (:data:`figures.paper.SENSITIVITY`). Writes ``fig7_sensitivity.png`` and the
values drawn in ``fig7_sensitivity.json``.

Command::

    python -m figures.fig7_sensitivity --index OUT/index.json [--rho-default 0.2] [--beta-default 0.5]
        [--paper-reference Qwen3-4B] [--out DIR]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Sequence

from diagnostics.runs import VAL_OVERALL, SeedStats, validation_stats
from figures._common import SkipFigure, add_output_options, check_paper_model, check_run_dir, load_runs, wrote
from figures.drawing import pyplot, save_and_close
from ocsd.algorithm.protocol import PAPER_BETA, PAPER_RHO
from ocsd.cli import entry_point

__all__ = ["sensitivity_points", "draw", "build", "main"]

NAME = "fig7_sensitivity"
SWEEPS = ("rho", "beta")


def sensitivity_points(groups: dict, *, rho_default: float, beta_default: float, method: str = "ocsd",
                       baseline: str = "grpo") -> dict[str, list[tuple[float, SeedStats]]]:
    """Points of the two panels from :func:`figures.tables.collect` groups.

    Parameters
    ----------
    groups : dict
        ``(method, rho, beta) -> [(seed, last validation row), ...]``.
    rho_default, beta_default : float
        The value held fixed in the other panel.

    Returns
    -------
    dict
        ``{"rho": [(rho, stats), ...], "beta": [(beta, stats), ...]}`` sorted by value; the baseline's cells
        (any rho, beta) pooled at 0 in both.
    """
    def stats(rows) -> SeedStats:
        return validation_stats([row for _, row in rows])[VAL_OVERALL]

    base = [item for (m, _, _), rows in groups.items() if m == baseline for item in rows]
    out = {}
    for sweep, fixed_name, fixed in (("rho", "beta", beta_default), ("beta", "rho", rho_default)):
        points = [(0.0, stats(base))] if base else []
        for (m, rho, beta), rows in groups.items():
            values = {"rho": rho, "beta": beta}
            if m == method and values[fixed_name] is not None and abs(float(values[fixed_name]) - fixed) < 1e-9:
                points.append((float(values[sweep]), stats(rows)))
        out[sweep] = sorted(points, key=lambda p: p[0])
    return out


def draw(points: dict, *, defaults: dict[str, float], paper: dict | None = None, caption: str = ""):
    """Two panels, success (%) against rho and against beta, error bars over seeds.

    Returns
    -------
    matplotlib.figure.Figure
        Axes ``gid`` ``"rho"`` and ``"beta"``.
    """
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
    symbols = {"rho": "rho (beta = {beta:g})", "beta": "beta (rho = {rho:g})"}
    for ax, sweep, tag in zip(axes, SWEEPS, "ab"):
        ax.set_gid(sweep)
        xs = [x for x, _ in points[sweep]]
        ys = [100 * s.mean for _, s in points[sweep]]
        errs = [100 * s.std if s.n > 1 else 0.0 for _, s in points[sweep]]
        ax.errorbar(xs, ys, yerr=errs, marker="o", color="#1f4e79", capsize=3, label="our runs (0: GRPO)")
        for x, y, (_, s) in zip(xs, ys, points[sweep]):
            ax.annotate(f"n={s.n}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
        if paper:
            px = sorted(paper[sweep])
            ax.plot(px, [paper[sweep][x].mean for x in px], marker="s", linestyle="--", color="#ed7d31",
                    markerfacecolor="none", label="paper (Qwen3-4B)")
        ax.axvline(defaults[sweep], color="red", linestyle=":", linewidth=1.2, label="default")
        ax.set_xlabel(symbols[sweep].format(**defaults))
        ax.set_title(f"({tag}) {sweep}", fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("overall validation success (%)")
    axes[1].legend(fontsize=8, loc="lower right")
    if caption:
        fig.text(0.01, 0.005, caption, fontsize=7, color="#555555", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def build(index, out_dir, *, rho_default: float = PAPER_RHO, beta_default: float = PAPER_BETA,
          paper_reference: str | None = None, pdf: bool = False, dpi: int = 150) -> list[Path]:
    """Read the sweep index, draw both panels and write the PNG (and PDF) and the values drawn.

    Raises
    ------
    FigureError
        No index given or it is unreadable; ``paper_reference`` is not a model of the paper.
    SkipFigure
        Neither panel has a point of the method beside the baseline.
    """
    from figures import paper
    from figures.tables import collect, read_index

    if index is None:
        raise SkipFigure("needs a sweep: python -m training.sweep --methods grpo,ocsd --rho ... --beta ... "
                         "then --index OUT/index.json")
    if paper_reference is not None:
        check_paper_model(paper_reference)
    entries, skipped = read_index(index)
    for reason in skipped:
        print(f"{NAME}: left out {reason}", file=sys.stderr)
    runs = load_runs([check_run_dir(e["run_dir"]) for e in entries])
    groups, left = collect(runs, entries)
    for reason in left:
        print(f"{NAME}: left out {reason}", file=sys.stderr)
    points = sensitivity_points(groups, rho_default=rho_default, beta_default=beta_default)
    if all(len(p) < 2 for p in points.values()):
        raise SkipFigure("the sweep has no OCSD cell at the default beta or rho beside GRPO "
                         "(training.sweep --methods grpo,ocsd --rho ... --beta ...)")
    defaults = {"rho": rho_default, "beta": beta_default}
    reference = None
    if paper_reference == "Qwen3-4B":
        reference = paper.SENSITIVITY
    elif paper_reference is not None:
        print(f"{NAME}: the paper's sensitivity study is on Qwen3-4B only; no paper points for {paper_reference}",
              file=sys.stderr)
    n_runs = sum(len(rows) for rows in groups.values())
    caption = (f"{n_runs} runs of {Path(index)}; each run's last validation; error bars: std over seeds"
               + ("; paper points: the values its text states" if reference else ""))
    fig = draw(points, defaults=defaults, paper=reference, caption=caption)
    out_dir = Path(out_dir)
    written = save_and_close(fig, out_dir, NAME, pdf=pdf, dpi=dpi)
    values = {sweep: [{"x": x, "mean": s.mean, "std": s.std, "n": s.n} for x, s in pts]
              for sweep, pts in points.items()}
    values.update(defaults={"rho": rho_default, "beta": beta_default}, runs=n_runs,
                  paper=({s: {str(x): v.mean for x, v in reference[s].items()} for s in SWEEPS} if reference else None))
    (out_dir / f"{NAME}.json").write_text(json.dumps(values, indent=1) + "\n")
    return [*written, out_dir / f"{NAME}.json"]


def _main(argv: Sequence[str] | None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog=f"python -m figures.{NAME}", description=__doc__.split("\n")[0])
    parser.add_argument("--index", required=True, metavar="JSON", help="training.sweep index.json (or its folder)")
    parser.add_argument("--rho-default", type=float, default=PAPER_RHO,
                        help=f"rho held fixed in panel (b) (default {PAPER_RHO}, the paper's)")
    parser.add_argument("--beta-default", type=float, default=PAPER_BETA,
                        help=f"beta held fixed in panel (a) (default {PAPER_BETA}, the paper's)")
    parser.add_argument("--paper-reference", metavar="MODEL", help="add the paper's points (Qwen3-4B)")
    add_output_options(parser)
    args = parser.parse_args(argv)
    paths = build(args.index, args.out, rho_default=args.rho_default, beta_default=args.beta_default,
                  paper_reference=args.paper_reference, pdf=args.pdf, dpi=args.dpi)
    return wrote(paths)


main = entry_point(_main, f"figures.{NAME}")


if __name__ == "__main__":
    sys.exit(main())
