"""Robustness of the residual's AUROC gain over Full support (paper Fig. 2d).

``Delta AUROC = AUROC(residual) - AUROC(full)`` on step scores, under:

raw
    the step scores as they are, pooled over checkpoints.
standard
    each signal z-scored within its checkpoint (mean 0, population std 1; a constant checkpoint
    becomes 0) before pooling. The standardisation is applied once to the data; resamples reuse it.
matched
    strata = training stage x action operator. Within each stratum the valid and invalid steps
    are downsampled at random (seeded) to the same size ``min(n_valid, n_invalid, 50)``; AUROC is
    then computed per checkpoint on the retained steps and averaged with equal weight over the
    checkpoints where it is defined (both classes retained). The downsampling draws a uniform key
    per step and keeps the ``k`` smallest keys of each stratum and class. The paper draws once; the
    point estimate here is the mean over ``draws`` (100) independent downsamplings, the same
    estimand without one draw's noise: a cap of 50 per class and stratum keeps a few percent of the
    steps, and on a 72-checkpoint diagnosis single draws of the residual - Full difference spread
    with a standard deviation of 0.015 around their mean. ``draws=1`` is the paper's single draw.
early / middle / late
    raw scores restricted to one third of the run (stages of :mod:`diagnostics.load`).

Intervals: 1,000 paired trajectory-cluster resamples; Full and residual are evaluated on the same
resample and the interval is the percentile interval of their difference. For raw, standard and
the stages, trajectories are drawn from the pooled set. For matched (a checkpoint-averaged
estimator) trajectories are drawn within each checkpoint, so every checkpoint keeps its number of
trajectories; each resampled step copy then gets a fresh key and the stratified downsampling is
re-applied to the resampled multiset (one draw per resample), so the interval includes the downsampling
randomness of a single draw and is centred on the averaged point estimate rather than on one draw.

Command::

    python -m diagnostics.robustness --run DIR [--max-per-class 50] [--matched-draws 100] [--n-boot 1000] [--json]
"""

from __future__ import annotations

import sys
import warnings
from typing import Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from diagnostics.bootstrap import (BootstrapResult, bootstrap_result, as_generator, iter_cluster_counts,
                                   paired_delta_auroc)
from diagnostics.load import STAGES, DiagData
from diagnostics.options import command_parser, load_args, show_progress
from diagnostics.stats import DegenerateInputWarning, grouped_auroc, nanmean
from ocsd.cli import emit, entry_point, format_table, positive_int

__all__ = ["MATCHED_DRAWS", "standardize_within", "matched_keep", "matched_auroc", "matched_delta", "robustness",
           "main"]

SETTINGS = ("raw", "standard", "matched", *STAGES)
MATCHED_DRAWS = 100  # downsamplings averaged into the matched point estimate (module docstring)


def standardize_within(scores, groups) -> np.ndarray:
    """Z-score ``scores`` within each group (population std; zero-variance groups map to 0).

    Parameters
    ----------
    scores : array-like of shape (n,) or (n, k)
    groups : array-like of shape (n,)

    Returns
    -------
    numpy.ndarray, same shape as ``scores``
    """
    scores = np.asarray(scores, dtype=np.float64)
    frame = pd.DataFrame(scores.reshape(len(scores), -1))
    g = frame.groupby(np.asarray(groups))
    mean, std = g.transform("mean").to_numpy(), g.transform(lambda x: x.std(ddof=0)).to_numpy()
    z = np.where(std > 0, (frame.to_numpy() - mean) / np.where(std > 0, std, 1.0), 0.0)
    return z.reshape(scores.shape)


def matched_keep(y, strata, keys, *, max_per_class: int = 50) -> np.ndarray:
    """Stratified class balancing: which observations to keep.

    In each stratum, ``k = min(n_valid, n_invalid, max_per_class)`` observations of each class are
    kept: those with the smallest ``keys`` (uniform random keys make this a uniform draw without
    replacement).

    Parameters
    ----------
    y : array-like of bool, shape (n,)
    strata : array-like of int, shape (n,)
    keys : array-like of float, shape (n,)
    max_per_class : int, default 50

    Returns
    -------
    numpy.ndarray of bool, shape (n,)

    Raises
    ------
    ValueError
        ``max_per_class`` < 1 (nothing would be kept).
    """
    if max_per_class < 1:
        raise ValueError(f"max_per_class must be >= 1, got {max_per_class}")
    y = np.asarray(y, dtype=bool)
    _, s = np.unique(np.asarray(strata), return_inverse=True)
    s = s.reshape(-1)
    n_s = int(s.max()) + 1 if s.size else 0
    n_pos = np.bincount(s, weights=y, minlength=n_s)
    n_neg = np.bincount(s, minlength=n_s) - n_pos
    k = np.minimum(np.minimum(n_pos, n_neg), max_per_class).astype(np.int64)
    cell = 2 * s + y
    order = np.lexsort((np.asarray(keys), cell))
    sorted_cell = cell[order]
    rank = np.arange(order.size) - np.searchsorted(sorted_cell, sorted_cell, side="left")
    keep = np.zeros(y.size, dtype=bool)
    keep[order] = rank < k[sorted_cell // 2]
    return keep


def _matched_value(y, scores, ckpt, n_ckpt, keep) -> np.ndarray:
    """Checkpoint-averaged AUROC of each score column on the kept observations, shape (k,)."""
    out = np.empty(scores.shape[1])
    for j in range(scores.shape[1]):
        per = grouped_auroc(y[keep], scores[keep, j], ckpt[keep], n_groups=n_ckpt)
        out[j] = nanmean(per)
    return out


def _averaged_matched_value(y, scores, ckpt, n_ckpt, strata, rng, *, max_per_class: int, draws: int) -> np.ndarray:
    """:func:`_matched_value` averaged over ``draws`` downsamplings (keys drawn in turn from ``rng``), shape (k,).

    A draw whose kept steps define no checkpoint's AUROC is left out; nan where no draw defines one.
    """
    values = np.stack([_matched_value(y, scores, ckpt, n_ckpt,
                                      matched_keep(y, strata, rng.random(y.size), max_per_class=max_per_class))
                       for _ in range(draws)])
    return nanmean(values, axis=0)  # a column no draw defines stays nan


def _check_draws(draws: int) -> None:
    if draws < 1:
        raise ValueError(f"draws must be >= 1, got {draws}")


def matched_auroc(y, scores, ckpt, strata, *, max_per_class: int = 50, draws: int = MATCHED_DRAWS,
                  seed=0) -> np.ndarray:
    """Matched AUROC: stratified class balancing, then per-checkpoint AUROC averaged equally.

    Parameters
    ----------
    y : array-like of bool, shape (n,)
        True for valid steps.
    scores : array-like of shape (n,) or (n, k)
    ckpt : array-like of int, shape (n,)
        Checkpoint of each step.
    strata : array-like of int, shape (n,)
        Stratum (stage x operator) of each step.
    max_per_class : int, default 50
    draws : int, default :data:`MATCHED_DRAWS`
        Independent downsamplings averaged (1: the paper's single draw).
    seed : int, Generator or None
        Draws the downsampling keys, ``draws`` arrays of ``n`` uniforms in turn.

    Returns
    -------
    float or numpy.ndarray of shape (k,)
        nan (with a warning) where no checkpoint keeps both classes.

    Raises
    ------
    ValueError
        ``draws`` < 1.
    """
    _check_draws(draws)
    y = np.asarray(y, dtype=bool)
    scores = np.asarray(scores, dtype=np.float64)
    flat = scores.ndim == 1
    scores = scores[:, None] if flat else scores
    _, ck = np.unique(np.asarray(ckpt), return_inverse=True)
    value = _averaged_matched_value(y, scores, ck.reshape(-1), int(ck.max()) + 1 if ck.size else 0, strata,
                                    as_generator(seed), max_per_class=max_per_class, draws=draws)
    if np.isnan(value).any():
        warnings.warn("matched AUROC is undefined: no checkpoint keeps both classes", DegenerateInputWarning,
                      stacklevel=2)
    return float(value[0]) if flat else value


def matched_delta(y, score_a, score_b, ckpt, strata, clusters, *, max_per_class: int = 50,
                  draws: int = MATCHED_DRAWS, n_boot: int = 1000, ci: float = 0.95, seed=0,
                  progress: bool = False) -> BootstrapResult:
    """Matched AUROC(score_a) - AUROC(score_b) with a paired cluster-bootstrap interval.

    The point estimate averages ``draws`` downsamplings of the data (:func:`matched_auroc`). The
    bootstrap draws trajectories within checkpoints, expands each step to as many copies as its
    trajectory was drawn, gives every copy a fresh uniform key and re-applies :func:`matched_keep`
    once before the checkpoint-averaged AUROCs (module docstring).

    Raises
    ------
    ValueError
        ``draws`` < 1.
    """
    _check_draws(draws)
    rng = as_generator(seed)
    y = np.asarray(y, dtype=bool)
    scores = np.column_stack([score_a, score_b]).astype(np.float64)
    _, ck = np.unique(np.asarray(ckpt), return_inverse=True)
    ck = ck.reshape(-1)
    n_ckpt = int(ck.max()) + 1 if ck.size else 0
    _, st = np.unique(np.asarray(strata), return_inverse=True)
    st = st.reshape(-1)
    _, cl = np.unique(np.asarray(clusters), return_inverse=True)
    cl = cl.reshape(-1)
    if y.size == 0:
        warnings.warn("empty sample: matched delta AUROC is undefined", DegenerateInputWarning, stacklevel=2)
        return BootstrapResult(np.nan, np.nan, np.nan, n_boot, 0)
    n_cl = int(cl.max()) + 1
    point = _averaged_matched_value(y, scores, ck, n_ckpt, st, rng, max_per_class=max_per_class, draws=draws)
    if np.isnan(point).any():
        warnings.warn("matched AUROC is undefined: no checkpoint keeps both classes", DegenerateInputWarning,
                      stacklevel=2)
        return BootstrapResult(np.nan, np.nan, np.nan, n_boot, 0)
    cl_ckpt = np.zeros(n_cl, dtype=np.int64)
    cl_ckpt[cl] = ck
    reps = np.empty(n_boot)
    bar = tqdm(total=n_boot, desc="matched bootstrap", disable=not progress, file=sys.stderr, leave=False)
    b = 0
    for counts in iter_cluster_counts(n_cl, n_boot=n_boot, strata=cl_ckpt, seed=rng):
        for row in counts.astype(np.int64):
            idx = np.repeat(np.arange(y.size), row[cl])  # copies of each step
            keep = matched_keep(y[idx], st[idx], rng.random(idx.size), max_per_class=max_per_class)
            value = _matched_value(y[idx], scores[idx], ck[idx], n_ckpt, keep)
            reps[b] = value[0] - value[1]
            b += 1
            bar.update(1)
    bar.close()
    return bootstrap_result(point[0] - point[1], reps, ci)


def _entry(res: BootstrapResult, n: int) -> dict:
    return {**res.as_dict("delta"), "n_steps": int(n)}


def robustness(data: DiagData, *, n_boot: int = 1000, ci: float = 0.95, seed=0, max_per_class: int = 50,
               matched_draws: int = MATCHED_DRAWS, progress: bool = False) -> dict:
    """Delta AUROC (residual - full) under every robustness setting.

    Returns
    -------
    dict
        ``{"raw"|"standard"|"matched"|"early"|"middle"|"late": {"delta", "ci_low", "ci_high", "n_steps"}}``;
        ``n_steps`` counts the labelled steps used (for matched: before downsampling).

    Raises
    ------
    ValueError
        ``max_per_class`` < 1 or ``matched_draws`` < 1.
    """
    _check_draws(matched_draws)
    if max_per_class < 1:
        raise ValueError(f"max_per_class must be >= 1, got {max_per_class}")
    lab = data.labelled()
    y = lab["y"].to_numpy(bool)
    full, res = lab["S_full"].to_numpy(), lab["S_residual"].to_numpy()
    clusters, ckpt, stage = lab["cluster"].to_numpy(), lab["ckpt"].to_numpy(), lab["stage"].to_numpy()
    rng = as_generator(seed)
    seeds = rng.integers(0, 2**63 - 1, size=len(SETTINGS))
    out: dict = {}
    nan = BootstrapResult(np.nan, np.nan, np.nan, n_boot, 0)

    def paired(setting, mask, a, b_, s):
        if mask.sum() == 0 or y[mask].all() or not y[mask].any():
            warnings.warn(f"{setting}: needs valid and invalid steps ({int(y[mask].sum())} valid, "
                          f"{int((~y[mask]).sum())} invalid in {data.checkpoint_names(ckpt[mask])}); delta is nan",
                          DegenerateInputWarning, stacklevel=3)
            return nan
        return paired_delta_auroc(y[mask], a[mask], b_[mask], clusters[mask], n_boot=n_boot, ci=ci, seed=s)

    everything = np.ones(y.size, dtype=bool)
    out["raw"] = _entry(paired("raw", everything, res, full, seeds[0]), y.size)
    z = standardize_within(np.column_stack([res, full]), ckpt) if y.size else np.zeros((0, 2))
    out["standard"] = _entry(paired("standard", everything, z[:, 0], z[:, 1], seeds[1]), y.size)
    if y.size == 0 or y.all() or not y.any():
        out["matched"] = _entry(nan, y.size)
    else:
        strata = pd.factorize(pd.Series(stage.astype(str)) + "|" + lab["operator"].astype(str).reset_index(drop=True))[0]
        out["matched"] = _entry(matched_delta(y, res, full, ckpt, strata, clusters, max_per_class=max_per_class,
                                              draws=matched_draws, n_boot=n_boot, ci=ci, seed=seeds[2],
                                              progress=progress), y.size)
    for i, name in enumerate(STAGES):
        mask = stage == i
        if mask.sum() == 0:
            warnings.warn(f"{name} stage: no labelled steps; delta is nan", DegenerateInputWarning, stacklevel=2)
            out[name] = _entry(nan, 0)
        else:
            out[name] = _entry(paired(f"{name} stage", mask, res, full, seeds[3 + i]), mask.sum())
    return out


def table(result: dict, ci: float = 0.95) -> str:
    """Plain-text rendering of :func:`robustness`'s result."""
    rows = [[k, v["delta"], v["ci_low"], v["ci_high"], v["n_steps"]] for k, v in result.items()]
    return format_table(["setting", "dAUROC", f"{ci:.0%} low", f"{ci:.0%} high", "steps"], rows,
                        title="Delta AUROC = AUROC(residual) - AUROC(full), paired cluster bootstrap")


def _main(argv: Sequence[str] | None) -> int:
    parser = command_parser("diagnostics.robustness", __doc__.split("\n")[0], progress=True)
    parser.add_argument("--max-per-class", type=positive_int("--max-per-class"), default=50,
                        help="matched: cap per class and stratum, >= 1 (50)")
    parser.add_argument("--matched-draws", type=positive_int("--matched-draws"), default=MATCHED_DRAWS,
                        help=f"matched: downsamplings averaged into the point estimate, >= 1 ({MATCHED_DRAWS}; "
                             "1 is the paper's single draw)")
    args = parser.parse_args(argv)
    data = load_args(args)
    result = robustness(data, n_boot=args.n_boot, ci=args.ci, seed=args.seed, max_per_class=args.max_per_class,
                        matched_draws=args.matched_draws, progress=show_progress(args))
    emit(args.json, result, table(result, args.ci))
    return 0


main = entry_point(_main, "diagnostics.robustness")


if __name__ == "__main__":
    sys.exit(main())
