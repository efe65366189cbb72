"""Rebuild every figure and table the given runs support.

Builds, into ``--out``: Fig. 2 (``fig2_diagnosis``, one per run with replay checkpoints), Fig. 4
(``fig4_dynamics``, runs overlaid), Fig. 5 (``fig5_swap``, from the runs' ``swap/swap.json`` of
``python -m rescoring.swap``), Fig. 6 (``fig6_cost``) and Table 1 (``table_main``). A figure
whose inputs are missing (no checkpoints, no swap file, no validation rows, no timings) is skipped
with the reason printed; the command still succeeds when at least one figure is built, and exits 1
when every figure is skipped. Bad input (a missing folder, a malformed file, a bad flag) exits 2.

Command::

    python -m figures --run DIR [--run DIR ...] [--index OUT/index.json] [--out DIR] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Sequence

from figures import fig1_example, fig2_diagnosis, fig4_dynamics, fig5_swap, fig6_cost, fig7_sensitivity, tables
from ocsd.cli import non_negative_int
from figures._common import (FigureError, SkipFigure, add_output_options, check_paper_model, check_run_dir,
                             load_runs)
from ocsd.cli import entry_point, positive_int
from ocsd.records import RecordError

__all__ = ["FIGURES", "build_all", "main"]


def _fig2(runs, args) -> list[Path]:
    labelled = load_runs(runs)
    paths, reasons = [], []
    for run in labelled:
        name = fig2_diagnosis.NAME if len(labelled) == 1 else f"{fig2_diagnosis.NAME}_{run.path.name}"
        try:
            paths += fig2_diagnosis.build(run.path, args.out, n_boot=args.n_boot, seed=args.seed, name=name,
                                          pdf=args.pdf, dpi=args.dpi, progress=False,
                                          paper_reference=bool(getattr(args, "paper_reference", None)))
        except SkipFigure as exc:
            reasons.append(str(exc))
    if not paths:
        raise SkipFigure("; ".join(reasons))
    for reason in reasons:
        print(f"fig2_diagnosis: skipped one run: {reason}")
    return paths


def _fig1(runs: list, args: argparse.Namespace) -> list[Path]:
    """Fig. 1 of the first run with scored steps (the others are named in the skip reasons)."""
    from diagnostics.load import DiagnosticsError

    reasons = []
    for run in runs:
        try:
            return fig1_example.build(run, args.out, pdf=args.pdf, dpi=args.dpi)
        except (DiagnosticsError, RecordError) as exc:
            reasons.append(f"{run}: {exc}")
    raise SkipFigure("; ".join(reasons) or "no run")


FIGURES: dict[str, Callable[[list, argparse.Namespace], list[Path]]] = {
    "fig1_example": _fig1,
    "fig2_diagnosis": _fig2,
    "fig4_dynamics": lambda runs, a: fig4_dynamics.build(runs, a.out, pdf=a.pdf, dpi=a.dpi,
                                                         paper_reference=getattr(a, "paper_reference", None)),
    "fig5_swap": lambda runs, a: fig5_swap.build(runs, a.out, pdf=a.pdf, dpi=a.dpi,
                                                 paper_reference=bool(getattr(a, "paper_reference", None))),
    "fig6_cost": lambda runs, a: fig6_cost.build(runs, a.out, pdf=a.pdf, dpi=a.dpi,
                                                 paper_reference=bool(getattr(a, "paper_reference", None))),
    "fig7_sensitivity": lambda runs, a: fig7_sensitivity.build(a.index, a.out, pdf=a.pdf, dpi=a.dpi,
                                                               paper_reference=getattr(a, "paper_reference", None)),
    "tables": lambda runs, a: tables.build(a.out, run_dirs=a.run, index=a.index,
                                           paper_reference=getattr(a, "paper_reference", None)),
}
"""Figure name -> builder(run folders, parsed options) -> written paths."""


def build_all(runs: Sequence, args: argparse.Namespace, names: Sequence[str] | None = None) -> dict:
    """Build the named figures (all by default); returns name -> paths or ``"skipped: <reason>"``."""
    results = {}
    for name in names or FIGURES:
        try:
            results[name] = FIGURES[name](list(runs), args)
        except SkipFigure as exc:
            results[name] = f"skipped: {exc}"
    return results


def _main(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m figures", description=__doc__.split("\n")[0])
    parser.add_argument("--run", action="append", default=[], metavar="DIR", help="run folder (repeatable)")
    parser.add_argument("--index", metavar="JSON", help="training.sweep index.json: its runs are used for every "
                        "figure and the table groups them by method")
    add_output_options(parser)
    parser.add_argument("--only", action="append", choices=list(FIGURES), help="build only these (repeatable)")
    parser.add_argument("--n-boot", type=positive_int("--n-boot"), default=1000,
                        help="Fig. 2 bootstrap resamples (default 1000)")
    parser.add_argument("--seed", type=non_negative_int("--seed"), default=0,
                        help="Fig. 2 bootstrap and layout seed (default 0)")
    parser.add_argument("--paper-reference", metavar="MODEL",
                        help="the paper's numbers of MODEL (Qwen3-1.7B, Qwen3-4B or Qwen3-8B) beside ours "
                             "(Table 1, Fig. 7; Fig. 2 marks the paper's AUROCs; Fig. 5 adds the paper's three "
                             "swap settings)")
    args = parser.parse_args(argv)
    if args.paper_reference is not None:  # every flag is checked before any figure is drawn
        check_paper_model(args.paper_reference)
    runs = [check_run_dir(r) for r in args.run]
    if args.index:
        usable, skipped = tables.read_index(args.index)
        runs += [e["run_dir"] for e in usable]
        for reason in skipped:
            print(f"figures: left out {reason}", file=sys.stderr)
    if not runs:
        raise FigureError("no input: give --run DIR (repeatable) or --index OUT/index.json with completed runs")
    load_runs(runs)  # fail early (exit 2) on a malformed run.json or metrics.jsonl
    results = build_all(runs, args, args.only)
    print("\nfigures:")
    for name, res in results.items():
        print(f"  {name}: " + (res if isinstance(res, str) else ", ".join(map(str, res))))
    if all(isinstance(res, str) for res in results.values()):
        raise SkipFigure("every figure was skipped (reasons above)")
    return 0


main = entry_point(_main, "figures")


if __name__ == "__main__":
    sys.exit(main())
