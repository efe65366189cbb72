"""The diagnosis of one set of steps under two scorer models, paired: ``python -m diagnostics.scorers``.

A re-scoring (:mod:`rescoring.rescore_run`) scores the steps a policy generated again with another model, so two
scorers of the same run share every step, label and trajectory. Side by side their feedback AUROCs and Delta AUROCs
(residual - Full) each carry their own interval; whether the gap between the residual and Full *changes* from one
scorer to the other is a paired question. For scorers A and B the steps are joined on ``(checkpoint, traj_uid,
step_idx)`` (the checkpoint as ``run/global_step_N``, so a run and its re-scorings meet) and on the same
trajectory-cluster resamples this gives

- ``residual``: AUROC(e_A) - AUROC(e_B);
- ``full``: AUROC(F_A) - AUROC(F_B);
- ``ablated``: AUROC(A_A) - AUROC(A_B);
- ``delta``: [AUROC(e_A) - AUROC(F_A)] - [AUROC(e_B) - AUROC(F_B)], the change of the residual's gain over Full
  (:func:`diagnostics.bootstrap.auroc_contrast`, weights ``(1, -1, -1, 1)``).

Steps whose feedback label differs between the two (they are not the same steps) are refused.

Command::

    python -m diagnostics.scorers --a DIR [--a DIR ...] --b DIR [--b DIR ...] [--name-a A] [--name-b B]
        [--steps selected|all] [--n-boot 1000] [--ci 0.95] [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

import numpy as np
import pandas as pd

from diagnostics.bootstrap import as_generator, auroc_contrast
from diagnostics.load import SIGNALS, DiagData, DiagnosticsError, load
from diagnostics.options import add_bootstrap_options, check_ci
from diagnostics.stats import auroc
from ocsd.cli import emit, entry_point, fmt, format_table

__all__ = ["CONTRASTS", "join", "scorer_contrasts", "table", "main"]

CONTRASTS = ("residual", "full", "ablated", "delta")
"""The paired differences A - B (module docstring)."""

_KEY = ["checkpoint", "traj_uid", "step_idx"]


def _keyed(data: DiagData) -> pd.DataFrame:
    """The labelled steps of ``data`` with their checkpoint's name as a column (the join key's first part)."""
    lab = data.labelled()
    names = np.asarray(data.checkpoints, dtype=object)
    return lab.assign(checkpoint=names[lab["ckpt"].to_numpy(np.int64)]).reset_index(drop=True)


def join(a: DiagData, b: DiagData) -> tuple[pd.DataFrame, dict]:
    """The labelled steps scored by both ``a`` and ``b``, side by side.

    Returns
    -------
    (steps, counts)
        ``steps``: one row per shared step with ``y``, ``cluster`` (0-based trajectory code) and ``S_<signal>_a``,
        ``S_<signal>_b`` for each signal of :data:`diagnostics.load.SIGNALS`; ``counts``: ``{"n_steps", "only_a",
        "only_b"}``.

    Raises
    ------
    DiagnosticsError
        No step is shared, or a shared step's feedback label differs between the two.
    """
    left, right = _keyed(a), _keyed(b)
    for side, frame in (("A", left), ("B", right)):
        if frame.duplicated(_KEY).any():
            raise DiagnosticsError(f"scorer {side}: a step (checkpoint, traj_uid, step_idx) appears twice; load each "
                                   "checkpoint once")
    cols = lambda side: {f"S_{s}": f"S_{s}_{side}" for s in SIGNALS} | {"y": f"y_{side}"}  # noqa: E731
    both = left[_KEY + ["y"] + [f"S_{s}" for s in SIGNALS]].rename(columns=cols("a")).merge(
        right[_KEY + ["y"] + [f"S_{s}" for s in SIGNALS]].rename(columns=cols("b")), on=_KEY, how="inner")
    counts = {"n_steps": int(len(both)), "only_a": int(len(left) - len(both)), "only_b": int(len(right) - len(both))}
    if both.empty:
        raise DiagnosticsError(f"the two scorers share no labelled step (A {len(left)}, B {len(right)}): are they "
                               "scorings of the same run's checkpoints?")
    differ = both["y_a"].to_numpy(bool) != both["y_b"].to_numpy(bool)
    if differ.any():
        row = both[differ].iloc[0]
        raise DiagnosticsError(f"{int(differ.sum())} shared steps carry different feedback labels under the two "
                               f"scorers (first: {row['checkpoint']}, trajectory {row['traj_uid']}, step "
                               f"{row['step_idx']}): not the same steps")
    both = both.drop(columns="y_b").rename(columns={"y_a": "y"})
    both["cluster"] = pd.factorize(both["checkpoint"].astype(str) + "\x00" + both["traj_uid"].astype(str))[0]
    return both, counts


def scorer_contrasts(a: DiagData, b: DiagData, *, n_boot: int = 1000, ci: float = 0.95, seed=0) -> dict:
    """The paired differences A - B of :data:`CONTRASTS` on the steps both scorers hold (module docstring).

    Parameters
    ----------
    a, b : DiagData
        The same steps scored by two models (:func:`diagnostics.load.load` of a run and of its re-scoring).
    n_boot : int, default 1000
    ci : float, default 0.95
    seed : int, Generator or None

    Returns
    -------
    dict
        ``{"n_steps", "n_valid", "n_invalid", "n_trajectories", "only_a", "only_b",
        "auroc_a": {signal: auroc}, "auroc_b": {signal: auroc}, "contrasts": {name: {"delta", "ci_low", "ci_high"}}}``.
    """
    steps, counts = join(a, b)
    y, clusters = steps["y"].to_numpy(bool), steps["cluster"].to_numpy()
    columns = [f"S_{s}_{side}" for side in ("a", "b") for s in SIGNALS]
    scores = steps[columns].to_numpy(np.float64)
    k = len(SIGNALS)
    weights = {"delta": _weights(k, {("a", "residual"): 1, ("a", "full"): -1, ("b", "residual"): -1,
                                      ("b", "full"): 1})}
    weights |= {s: _weights(k, {("a", s): 1, ("b", s): -1}) for s in SIGNALS}
    seeds = as_generator(seed).integers(0, 2**63 - 1, size=len(CONTRASTS))
    contrasts = {name: auroc_contrast(y, scores, weights[name], clusters, n_boot=n_boot, ci=ci, seed=int(s))
                 .as_dict("delta") for name, s in zip(CONTRASTS, seeds)}
    point = [auroc(y, scores[:, j]) if 0 < y.sum() < y.size else float("nan") for j in range(2 * k)]
    return {**counts, "n_valid": int(y.sum()), "n_invalid": int((~y).sum()),
            "n_trajectories": int(clusters.max()) + 1,
            "auroc_a": dict(zip(SIGNALS, point[:k])), "auroc_b": dict(zip(SIGNALS, point[k:])), "contrasts": contrasts}


def _weights(k: int, terms: dict) -> np.ndarray:
    """Weights over the columns ``S_<signal>_a`` then ``S_<signal>_b`` (k signals each)."""
    w = np.zeros(2 * k)
    for (side, signal), value in terms.items():
        w[(0 if side == "a" else k) + SIGNALS.index(signal)] = value
    return w


def table(result: dict, *, name_a: str = "A", name_b: str = "B", ci: float = 0.95) -> str:
    """Plain-text rendering of :func:`scorer_contrasts`'s result."""
    label = {"residual": "AUROC(e)", "full": "AUROC(F)", "ablated": "AUROC(A)",
             "delta": "AUROC(e) - AUROC(F)"}
    rows = []
    for name in CONTRASTS:
        c = result["contrasts"][name]
        if name == "delta":
            a = result["auroc_a"]["residual"] - result["auroc_a"]["full"]
            b = result["auroc_b"]["residual"] - result["auroc_b"]["full"]
        else:
            a, b = result["auroc_a"][name], result["auroc_b"][name]
        rows.append([label[name], fmt(a), fmt(b), fmt(c["delta"]), fmt(c["ci_low"]), fmt(c["ci_high"])])
    title = (f"{name_a} - {name_b} on the same {result['n_steps']} labelled steps ({result['n_invalid']} invalid, "
             f"{result['n_trajectories']} trajectories), paired cluster bootstrap"
             + (f"; {result['only_a']} steps only under {name_a}, {result['only_b']} only under {name_b}"
                if result["only_a"] or result["only_b"] else ""))
    return format_table(["statistic", name_a, name_b, f"{name_a} - {name_b}", f"{ci:.0%} low", f"{ci:.0%} high"],
                        rows, title=title)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m diagnostics.scorers", description=__doc__.split("\n")[0])
    p.add_argument("--a", action="append", required=True, metavar="DIR",
                   help="a run or checkpoint folder scored by the first model (repeatable)")
    p.add_argument("--b", action="append", required=True, metavar="DIR",
                   help="the same steps scored by the second model (repeatable)")
    p.add_argument("--name-a", default="A", help="the first scorer's name in the table (A)")
    p.add_argument("--name-b", default="B", help="the second scorer's name in the table (B)")
    p.add_argument("--steps", choices=("selected", "all"), default="selected",
                   help="analyse the selected (top-NLL) steps, as the paper does, or every scored step")
    add_bootstrap_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object and nothing else on stdout")
    return p


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.n_boot < 1:
        raise DiagnosticsError(f"--n-boot must be >= 1, got {args.n_boot}")
    check_ci(args)
    a, b = load(args.a, steps=args.steps), load(args.b, steps=args.steps)
    result = scorer_contrasts(a, b, n_boot=args.n_boot, ci=args.ci, seed=args.seed)
    emit(args.json, result, table(result, name_a=args.name_a, name_b=args.name_b, ci=args.ci))
    return 0


main = entry_point(_main, "diagnostics.scorers")

if __name__ == "__main__":
    sys.exit(main())
