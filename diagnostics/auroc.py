"""Feedback AUROC of the step-averaged replay signals (paper Fig. 2c).

For every labelled step (``valid`` positive, ``invalid`` negative, ``ambiguous`` excluded) the
step score ``S(s)`` is the mean over the step's tokens of ``s`` in {delta_A, delta_F, e}. Steps of
all given checkpoints are pooled; the 95% interval is the percentile interval of 1,000
trajectory-cluster bootstrap resamples (whole trajectories ``(checkpoint, traj_uid)`` drawn with
replacement from the pooled set), the three signals evaluated on the same resamples.

Command::

    python -m diagnostics.auroc --run DIR [--steps selected|all] [--n-boot 1000] [--seed 0] [--json]
"""

from __future__ import annotations

import sys
import warnings
from typing import Sequence

import numpy as np

from diagnostics.bootstrap import bootstrap_auroc
from diagnostics.load import SIGNALS, DiagData
from diagnostics.options import command_parser, load_args
from diagnostics.stats import DegenerateInputWarning
from ocsd.cli import emit, entry_point, format_table

__all__ = ["feedback_auroc", "signal_aurocs", "main"]


def feedback_auroc(data: DiagData, *, n_boot: int = 1000, ci: float = 0.95, seed=0) -> dict:
    """AUROC of each step signal for valid vs invalid steps, with cluster-bootstrap intervals.

    Parameters
    ----------
    data : DiagData
        Loaded steps (:func:`diagnostics.load.load`).
    n_boot : int, default 1000
    ci : float, default 0.95
    seed : int, Generator or None

    Returns
    -------
    dict
        ``{"n_steps", "n_valid", "n_invalid", "n_trajectories", "n_boot",
        "signals": {"ablated"|"full"|"residual": {"auroc", "ci_low", "ci_high"}}}``; AUROCs are nan
        (with a warning) when a class is missing.
    """
    lab = data.labelled()
    y = lab["y"].to_numpy(bool)
    out = {"n_steps": int(len(lab)), "n_valid": int(y.sum()), "n_invalid": int((~y).sum()),
           "n_trajectories": int(lab["cluster"].nunique()), "n_boot": int(n_boot)}
    if out["n_valid"] == 0 or out["n_invalid"] == 0:
        warnings.warn(f"AUROC needs valid and invalid steps; got {out['n_valid']} valid and "
                      f"{out['n_invalid']} invalid: returning nan", DegenerateInputWarning, stacklevel=2)
    out["signals"] = signal_aurocs(lab, n_boot=n_boot, ci=ci, seed=seed)
    return out


def signal_aurocs(lab, *, n_boot: int = 1000, ci: float = 0.95, seed=0) -> dict:
    """``{"ablated"|"full"|"residual": {"auroc", "ci_low", "ci_high"}}`` of labelled steps (the rows of
    :meth:`DiagData.labelled <diagnostics.load.DiagData.labelled>`, or a subset), the three signals on the same
    trajectory-cluster resamples; all nan, without a warning (the caller says where), when a class is missing."""
    y = lab["y"].to_numpy(bool)
    if y.all() or not y.any():
        return {name: {"auroc": float("nan"), "ci_low": float("nan"), "ci_high": float("nan")} for name in SIGNALS}
    scores = np.column_stack([lab[f"S_{name}"].to_numpy() for name in SIGNALS])
    results = bootstrap_auroc(y, scores, lab["cluster"].to_numpy(), n_boot=n_boot, ci=ci, seed=seed)
    return {name: r.as_dict("auroc") for name, r in zip(SIGNALS, results)}


def table(result: dict, ci: float = 0.95) -> str:
    """Plain-text rendering of :func:`feedback_auroc`'s result."""
    label = {"ablated": "Ablated (delta_A)", "full": "Full (delta_F)", "residual": "Residual (e)"}
    rows = [[label[k], v["auroc"], v["ci_low"], v["ci_high"]] for k, v in result["signals"].items()]
    title = (f"Feedback AUROC: {result['n_steps']} steps ({result['n_valid']} valid, {result['n_invalid']} "
             f"invalid) in {result['n_trajectories']} trajectories, {result['n_boot']} cluster resamples")
    return format_table(["signal", "AUROC", f"{ci:.0%} low", f"{ci:.0%} high"], rows, title=title)


def _main(argv: Sequence[str] | None) -> int:
    args = command_parser("diagnostics.auroc", __doc__.split("\n")[0]).parse_args(argv)
    data = load_args(args)
    result = feedback_auroc(data, n_boot=args.n_boot, ci=args.ci, seed=args.seed)
    emit(args.json, result, table(result, args.ci))
    return 0


main = entry_point(_main, "diagnostics.auroc")


if __name__ == "__main__":
    sys.exit(main())
