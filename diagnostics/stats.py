"""Rank statistics for the diagnosis: AUROC in a weighted (multiplicity) form.

A cluster bootstrap resample is a vector of integer cluster weights (how often each trajectory was
drawn), so every estimator here takes observation weights and evaluates many weight vectors at
once. The AUROC is the tie-corrected Mann-Whitney statistic

.. math::

    \\mathrm{AUROC} = \\frac{\\sum_{i\\in P}\\sum_{j\\in N} w_i w_j
        \\left([s_i > s_j] + \\tfrac12 [s_i = s_j]\\right)}{W_P W_N},

with positives ``P`` (label 1, here ``valid``), negatives ``N``, weights ``w`` and class totals
``W_P``, ``W_N``. With unit weights it equals :func:`sklearn.metrics.roc_auc_score`.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

__all__ = [
    "DegenerateInputWarning",
    "auroc",
    "AurocEngine",
    "grouped_auroc",
    "nanmean",
]


class DegenerateInputWarning(UserWarning):
    """An estimator was asked for a value that is undefined on its input (it returns nan)."""


def nanmean(values, axis: int | None = None) -> np.ndarray | float:
    """:func:`numpy.nanmean` without its warning: a slice with no finite value gives nan quietly (a checkpoint or
    a bootstrap replicate where an estimator is undefined is left out of an average, not reported each time)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(values, axis=axis)


def _check_scores_labels(y_true, y_score) -> tuple[np.ndarray, np.ndarray]:
    y_true = np.asarray(y_true)
    y_score = np.asarray(y_score, dtype=np.float64)
    if y_true.ndim != 1 or y_score.ndim != 1:
        raise ValueError(f"y_true and y_score must be 1-D, got shapes {y_true.shape} and {y_score.shape}")
    if y_true.shape != y_score.shape:
        raise ValueError(f"y_true and y_score differ in length: {y_true.shape[0]} != {y_score.shape[0]}")
    if y_true.dtype != bool:
        uniq = np.unique(y_true)
        if not np.all(np.isin(uniq, [0, 1])):
            raise ValueError(f"y_true must be binary (0/1 or bool), got values {uniq[:5].tolist()}")
        y_true = y_true.astype(bool)
    if not np.all(np.isfinite(y_score)):
        raise ValueError("y_score contains non-finite values")
    return y_true, y_score


def auroc(y_true, y_score, *, sample_weight=None) -> float:
    """Area under the ROC curve, tie-corrected, with optional observation weights.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        Binary labels; 1/True is the positive class.
    y_score : array-like of shape (n,)
        Scores; higher predicts the positive class.
    sample_weight : array-like of shape (n,), optional
        Non-negative weights (multiplicities). Default: all ones.

    Returns
    -------
    float
        The AUROC, or nan with a :class:`DegenerateInputWarning` when one class has zero weight.
    """
    y_true, y_score = _check_scores_labels(y_true, y_score)
    if sample_weight is None:
        weights = np.ones((1, y_true.size))
    else:
        weights = np.asarray(sample_weight, dtype=np.float64)
        if weights.shape != y_true.shape:
            raise ValueError(f"sample_weight has shape {weights.shape}, expected {y_true.shape}")
        if np.any(weights < 0) or not np.all(np.isfinite(weights)):
            raise ValueError("sample_weight must be finite and non-negative")
        weights = weights[None, :]
    if y_true.size == 0:
        warnings.warn("AUROC of an empty sample is undefined; returning nan", DegenerateInputWarning, stacklevel=2)
        return float("nan")
    engine = AurocEngine(y_true, y_score, np.arange(y_true.size))
    value = engine.evaluate(weights, warn=False)[0]
    if np.isnan(value):
        warnings.warn("only one class present (or one class has zero weight); AUROC is undefined, returning nan",
                      DegenerateInputWarning, stacklevel=2)
    return float(value)


class AurocEngine:
    """AUROC of fixed scores under many cluster-weight vectors, without a loop over observations.

    The scores are sorted into tie groups once. For cluster weights ``c`` of shape (B, C) the
    weighted class mass per tie group is ``c @ P`` and ``c @ N`` with sparse cluster-by-group count
    matrices ``P`` (positives) and ``N`` (negatives); a cumulative sum over tie groups then gives
    the weighted Mann-Whitney count for all B weight vectors at once.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        Binary labels (1/True = positive).
    y_score : array-like of shape (n,) or (n, k)
        Scores; with k columns, k signals are evaluated on the same weights (paired).
    clusters : array-like of int, shape (n,)
        Cluster index of each observation in ``[0, n_clusters)``.
    n_clusters : int, optional
        Number of clusters (default ``clusters.max() + 1``).
    """

    def __init__(self, y_true, y_score, clusters, *, n_clusters: int | None = None):
        scores = np.asarray(y_score, dtype=np.float64)
        single = scores.ndim == 1
        scores = scores[:, None] if single else scores
        if scores.ndim != 2:
            raise ValueError(f"y_score must be 1-D or 2-D, got shape {scores.shape}")
        y_true, _ = _check_scores_labels(y_true, scores[:, 0] if scores.shape[1] else np.zeros(len(scores)))
        if not np.all(np.isfinite(scores)):
            raise ValueError("y_score contains non-finite values")
        clusters = np.asarray(clusters)
        if clusters.shape != y_true.shape or not np.issubdtype(clusters.dtype, np.integer):
            raise ValueError("clusters must be an integer array with one entry per observation")
        n_clusters = int(clusters.max()) + 1 if n_clusters is None and clusters.size else int(n_clusters or 0)
        if clusters.size and (clusters.min() < 0 or clusters.max() >= n_clusters):
            raise ValueError(f"clusters must lie in [0, {n_clusters})")
        self.single = single
        self.n_clusters = n_clusters
        self._mats = [self._group_matrices(y_true, scores[:, j], clusters, n_clusters)
                      for j in range(scores.shape[1])]

    @staticmethod
    def _group_matrices(y_true, score, clusters, n_clusters):
        order = np.argsort(score, kind="stable")
        sorted_scores = score[order]
        new_group = np.empty(score.size, dtype=bool)
        new_group[:1] = True
        new_group[1:] = sorted_scores[1:] != sorted_scores[:-1]
        group_sorted = np.cumsum(new_group) - 1
        group = np.empty(score.size, dtype=np.int64)
        group[order] = group_sorted
        n_groups = int(group_sorted[-1]) + 1 if score.size else 0
        shape = (n_groups, n_clusters)
        pos = sp.csr_matrix((np.ones(int(y_true.sum())), (group[y_true], clusters[y_true])), shape=shape)
        neg = sp.csr_matrix((np.ones(int((~y_true).sum())), (group[~y_true], clusters[~y_true])), shape=shape)
        return pos, neg

    def evaluate(self, cluster_weights, *, chunk: int = 64, warn: bool = True) -> np.ndarray:
        """AUROC for each weight vector.

        Parameters
        ----------
        cluster_weights : array-like of shape (B, n_clusters)
            Non-negative weights per cluster (bootstrap counts, or ones for the point estimate).
        chunk : int, default 64
            Weight vectors processed together (bounds memory at about ``8 * chunk * n`` bytes).
        warn : bool, default True
            Warn when some weight vectors leave one class empty (their AUROC is nan).

        Returns
        -------
        numpy.ndarray of shape (B,) or (B, k)
            One AUROC per weight vector (and signal).
        """
        weights = np.asarray(cluster_weights, dtype=np.float64)
        if weights.ndim != 2 or weights.shape[1] != self.n_clusters:
            raise ValueError(f"cluster_weights must have shape (B, {self.n_clusters}), got {weights.shape}")
        out = np.empty((weights.shape[0], len(self._mats)))
        for start in range(0, weights.shape[0], chunk):
            w_t = np.ascontiguousarray(weights[start:start + chunk].T)  # (C, b)
            for j, (pos, neg) in enumerate(self._mats):
                gp = pos @ w_t  # (G, b) positive mass per tie group
                gn = neg @ w_t
                below = np.cumsum(gn, axis=0)
                below -= 0.5 * gn  # negatives strictly below plus half the tied ones
                num = np.einsum("gb,gb->b", gp, below)
                den = gp.sum(axis=0) * gn.sum(axis=0)
                with np.errstate(invalid="ignore", divide="ignore"):
                    out[start:start + chunk, j] = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
        n_nan = int(np.isnan(out[:, 0]).sum())
        if warn and n_nan:
            warnings.warn(f"{n_nan} of {out.shape[0]} weightings leave one class empty; their AUROC is nan",
                          DegenerateInputWarning, stacklevel=2)
        return out[:, 0] if self.single else out


def grouped_auroc(y_true, y_score, groups, *, n_groups: int | None = None) -> np.ndarray:
    """AUROC within each group, tie-corrected, vectorised over groups.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        Binary labels.
    y_score : array-like of shape (n,)
        Scores.
    groups : array-like of int, shape (n,)
        Group index of each observation in ``[0, n_groups)``.
    n_groups : int, optional
        Number of groups (default ``groups.max() + 1``).

    Returns
    -------
    numpy.ndarray of shape (n_groups,)
        AUROC per group; nan where a group lacks one class (no warning: callers aggregate).
    """
    y_true, y_score = _check_scores_labels(y_true, y_score)
    groups = np.asarray(groups, dtype=np.int64)
    n_groups = int(groups.max()) + 1 if n_groups is None and groups.size else int(n_groups or 0)
    if groups.size == 0:
        return np.full(n_groups, np.nan)
    order = np.lexsort((y_score, groups))
    g, s = groups[order], y_score[order]
    run_start = np.empty(g.size, dtype=bool)
    run_start[0] = True
    run_start[1:] = (g[1:] != g[:-1]) | (s[1:] != s[:-1])
    run_id = np.cumsum(run_start) - 1
    pos_in_group = np.arange(g.size) - np.searchsorted(g, g, side="left")  # 0-based rank within group
    run_first = np.flatnonzero(run_start)
    run_len = np.diff(np.append(run_first, g.size))
    midrank = pos_in_group[run_first] + (run_len + 1) / 2.0  # 1-based mean rank of each tie run
    ranks = midrank[run_id]
    yt = y_true[order]
    n_pos = np.bincount(g, weights=yt, minlength=n_groups)
    n_all = np.bincount(g, minlength=n_groups).astype(np.float64)
    n_neg = n_all - n_pos
    rank_sum = np.bincount(g, weights=np.where(yt, ranks, 0.0), minlength=n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        u = rank_sum - n_pos * (n_pos + 1) / 2.0
        return np.where((n_pos > 0) & (n_neg > 0), u / (n_pos * n_neg), np.nan)
