"""Observation swaps of several runs pooled: ``python -m rescoring.swap_pool SWAP_DIR... [--out DIR]``.

``python -m rescoring.swap`` scores one run, and its protocol takes one evaluation step per trajectory, so a
checkpoint gives a few dozen targets (9-19 invalid ones for a 0.5B policy at 16 x 8). This command reads the
``swap.json`` and ``swap_steps.csv`` of several such analyses (each ``SWAP_DIR`` is an ``--out`` folder of
``rescoring.swap``), checks that they ran the same protocol (donors, targets per category, donor text,
orientation), and computes the realized and swapped AUROCs and their paired drop on all their steps together, with
trajectory-cluster intervals (a trajectory is a run's checkpoint and ``traj_uid``, so runs never share a
cluster). It re-scores nothing. Writes ``swap.json`` and ``swap_steps.csv`` into ``--out``, in ``rescoring.swap``'s
format (``per_checkpoint`` lists every analysis's checkpoints), so ``python -m figures.fig5_swap --swap OUT`` draws
the pooled bars.

    python -m rescoring.swap_pool RUN1/swap RUN2/swap ... --out DIR [--n-boot 1000] [--ci 0.95] [--seed 0] [--json]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from diagnostics.load import DiagnosticsError
from ocsd.cli import emit, entry_point
from rescoring.rescore import pool_arguments
from rescoring.swap import orientation_class, pooled_statistics, table, write_outputs

__all__ = ["PROTOCOL", "main", "pool_swaps", "read_swap"]

PROTOCOL = ("donors", "per_category", "donor_text", "orientation")
"""The settings of ``swap.json`` that must agree between pooled analyses."""


def read_swap(folder: str | Path) -> tuple[dict, pd.DataFrame]:
    """The ``swap.json`` result and ``swap_steps.csv`` steps of one ``rescoring.swap`` output folder.

    Raises
    ------
    DiagnosticsError
        Naming the folder or file that is missing or unreadable.
    """
    folder = Path(folder)
    files = folder / "swap.json", folder / "swap_steps.csv"
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise DiagnosticsError(f"{folder}: no {' or '.join(missing)} (the --out folder of python -m rescoring.swap)")
    try:
        result = json.loads(files[0].read_text())
        steps = pd.read_csv(files[1])
    except (OSError, ValueError) as err:
        raise DiagnosticsError(f"{folder}: cannot read its swap files ({err})") from None
    lacking = [k for k in (*PROTOCOL, "run", "per_checkpoint") if k not in result]
    columns = {"checkpoint", "traj_uid", "category", "S_realized", "S_swapped"} - set(steps.columns)
    if lacking or columns:
        raise DiagnosticsError(f"{folder}: not a rescoring.swap output (missing {sorted(lacking) + sorted(columns)})")
    return result, steps


def pool_swaps(analyses: Sequence[tuple[dict, pd.DataFrame]], *, n_boot: int = 1000, ci: float = 0.95,
               seed: int = 0) -> tuple[dict, pd.DataFrame]:
    """The pooled result (``rescoring.swap``'s ``swap.json`` keys) and steps of several analyses.

    Parameters
    ----------
    analyses : sequence of (dict, pandas.DataFrame)
        :func:`read_swap` of each analysis, at least two, of different runs or checkpoints.

    Raises
    ------
    DiagnosticsError
        With fewer than two analyses, when their protocols differ (naming the setting) or when two of them share a
        checkpoint (the same steps twice).
    """
    if len(analyses) < 2:
        raise DiagnosticsError(f"pooling needs at least two swap analyses, got {len(analyses)}")
    first = analyses[0][0]
    for result, _ in analyses[1:]:
        for key in PROTOCOL:
            if result[key] != first[key]:
                raise DiagnosticsError(f"the analyses of {first['run']} and {result['run']} differ in {key}: "
                                       f"{first[key]!r} against {result[key]!r}")
    names = [c for _, steps in analyses for c in steps["checkpoint"].astype(str).unique()]
    repeated = sorted({c for c in names if names.count(c) > 1})
    if repeated:
        raise DiagnosticsError(f"checkpoint {repeated[0]} is in more than one analysis: its steps would count twice")
    steps = pd.concat([s for _, s in analyses], ignore_index=True)
    higher = orientation_class(first["orientation"])
    result = {**pooled_statistics(steps, higher=higher, n_boot=n_boot, ci=ci, seed=seed),
              "n_insufficient_donors": sum(r.get("n_insufficient_donors", 0) for r, _ in analyses),
              "n_boot": n_boot, "ci": ci, **{k: first[k] for k in PROTOCOL}, "seed": seed,
              "run": f"pooled ({len(analyses)} analyses)", "runs": [r["run"] for r, _ in analyses],
              "model": "each run's own weights" if len({r.get("model") for r, _ in analyses}) > 1
              else first.get("model"),
              "checkpoints": sorted({c for r, _ in analyses for c in r.get("checkpoints", [])}),
              "per_checkpoint": [p for r, _ in analyses for p in r["per_checkpoint"]],
              "insufficient_donors": [s for r, _ in analyses for s in r.get("insufficient_donors", [])],
              "unrendered": [u for r, _ in analyses for u in r.get("unrendered", [])]}
    return result, steps


def _main(argv: Sequence[str] | None) -> int:
    args, out = pool_arguments(argv, "python -m rescoring.swap_pool", __doc__.split("\n\n")[0], metavar="SWAP_DIR",
                               command="rescoring.swap", result="swap.json")
    result, steps = pool_swaps([read_swap(f) for f in args.inputs], n_boot=args.n_boot, ci=args.ci, seed=args.seed)
    files = write_outputs(result, steps, out)
    emit(args.json, result, table(result) + f"\n\nwrote {files['json']} and {files['steps']}")
    return 0


main = entry_point(_main, "rescoring.swap_pool")


if __name__ == "__main__":
    sys.exit(main())
