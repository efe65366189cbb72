"""Trajectory-cluster bootstrap.

A resample draws whole clusters (trajectories, keyed by ``(checkpoint, traj_uid)``) with
replacement; it is represented by the integer count of each cluster, so estimators written in a
weighted form (:mod:`diagnostics.stats`) evaluate all resamples without a loop over observations.
With ``strata`` (e.g. the checkpoint of each trajectory) clusters are drawn within each stratum, as
many as the stratum holds, so every stratum keeps its size in every resample.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from diagnostics.stats import AurocEngine, DegenerateInputWarning

__all__ = [
    "as_generator",
    "cluster_counts",
    "cluster_indices",
    "iter_cluster_counts",
    "counts_from_indices",
    "percentile_ci",
    "bootstrap_result",
    "BootstrapResult",
    "bootstrap_auroc",
    "paired_delta_auroc",
    "auroc_contrast",
]


def as_generator(seed) -> np.random.Generator:
    """A :class:`numpy.random.Generator` from a seed, a Generator (returned as is) or None."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None or isinstance(seed, (int, np.integer)):
        return np.random.default_rng(seed)
    raise TypeError(f"seed must be an int, None or numpy.random.Generator, got {type(seed).__name__}")


def cluster_indices(n_clusters: int, *, n_boot: int = 1000, strata=None, seed=None) -> np.ndarray:
    """Indices of the clusters drawn in each resample.

    Parameters
    ----------
    n_clusters : int
        Number of clusters C.
    n_boot : int, default 1000
        Number of resamples B.
    strata : array-like of int, shape (C,), optional
        Stratum of each cluster; draws stay within strata, each stratum keeping its size.
    seed : int, Generator or None
        Randomness.

    Returns
    -------
    numpy.ndarray of shape (B, C), int64
        Row b lists the C clusters drawn for resample b (slot j draws from the stratum of cluster j).
    """
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if n_clusters < 1:
        raise ValueError("the bootstrap needs at least one cluster")
    rng = as_generator(seed)
    if strata is None:
        return rng.integers(0, n_clusters, size=(n_boot, n_clusters))
    strata = np.asarray(strata)
    if strata.shape != (n_clusters,):
        raise ValueError(f"strata must have shape ({n_clusters},), got {strata.shape}")
    order = np.argsort(strata, kind="stable")
    _, start, size = np.unique(strata[order], return_index=True, return_counts=True)
    slot_stratum = np.repeat(np.arange(start.size), size)  # stratum of each sorted slot
    u = rng.random((n_boot, n_clusters))
    pick = start[slot_stratum] + np.floor(u * size[slot_stratum]).astype(np.int64)
    return order[np.minimum(pick, start[slot_stratum] + size[slot_stratum] - 1)]


def cluster_counts(n_clusters: int, *, n_boot: int = 1000, strata=None, seed=None) -> np.ndarray:
    """How often each cluster is drawn in each resample.

    Same parameters as :func:`cluster_indices`.

    Returns
    -------
    numpy.ndarray of shape (B, C), float64
        Integer-valued counts; each row sums to C (and to each stratum's size within it).
    """
    idx = cluster_indices(n_clusters, n_boot=n_boot, strata=strata, seed=seed)
    return counts_from_indices(idx, n_clusters)


def iter_cluster_counts(n_clusters: int, *, n_boot: int = 1000, strata=None, seed=None, chunk: int = 100):
    """Yield :func:`cluster_counts` in blocks of at most ``chunk`` resamples (bounded memory).

    The blocks come from one Generator in sequence, so results depend only on the seed and
    ``chunk``.
    """
    rng = as_generator(seed)
    for start in range(0, n_boot, chunk):
        yield cluster_counts(n_clusters, n_boot=min(chunk, n_boot - start), strata=strata, seed=rng)


def counts_from_indices(idx: np.ndarray, n_clusters: int) -> np.ndarray:
    """Counts (B, C) from drawn indices (B, m), one ``bincount`` over offset indices."""
    n_boot = idx.shape[0]
    flat = (idx + np.arange(n_boot)[:, None] * n_clusters).ravel()
    return np.bincount(flat, minlength=n_boot * n_clusters).reshape(n_boot, n_clusters).astype(np.float64)


def percentile_ci(samples, *, ci: float = 0.95, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of bootstrap samples, ignoring nan resamples.

    Parameters
    ----------
    samples : array-like
        Bootstrap replicates along ``axis``.
    ci : float, default 0.95
        Coverage.

    Returns
    -------
    (low, high) : arrays (or floats) with ``axis`` removed; nan where every replicate is nan.
    """
    if not 0 < ci < 1:
        raise ValueError(f"ci must be in (0, 1), got {ci}")
    samples = np.asarray(samples, dtype=np.float64)
    alpha = (1 - ci) / 2 * 100
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-nan slices give nan
        low, high = np.nanpercentile(samples, [alpha, 100 - alpha], axis=axis)
    return low, high


@dataclass(frozen=True)
class BootstrapResult:
    """A point estimate with its percentile bootstrap interval.

    Attributes
    ----------
    estimate, ci_low, ci_high : float
    n_boot : int
        Resamples drawn.
    n_valid_boot : int
        Resamples where the statistic was defined.
    """

    estimate: float
    ci_low: float
    ci_high: float
    n_boot: int
    n_valid_boot: int

    def as_dict(self, key: str = "estimate") -> dict:
        """``{key: estimate, "ci_low", "ci_high"}`` (``key`` names the estimate: ``"auroc"``, ``"delta"``...)."""
        return {key: self.estimate, "ci_low": self.ci_low, "ci_high": self.ci_high}


def bootstrap_result(point: float, reps: np.ndarray, ci: float, *, stacklevel: int = 3) -> BootstrapResult:
    """The estimate ``point`` with the percentile interval of ``reps`` (nan replicates ignored, with a warning at
    ``stacklevel``)."""
    reps = np.asarray(reps, dtype=np.float64)
    n_ok = int(np.isfinite(reps).sum())
    if n_ok < reps.size:
        warnings.warn(f"{reps.size - n_ok} of {reps.size} bootstrap resamples were degenerate and are ignored",
                      DegenerateInputWarning, stacklevel=stacklevel)
    low, high = percentile_ci(reps, ci=ci)
    return BootstrapResult(float(point), float(low), float(high), int(reps.size), n_ok)


def _check_inputs(y_true, clusters):
    y_true = np.asarray(y_true)
    clusters = np.asarray(clusters)
    if clusters.shape != y_true.shape:
        raise ValueError(f"clusters has shape {clusters.shape}, expected {y_true.shape}")
    _, codes = np.unique(clusters, return_inverse=True)
    return codes.reshape(-1).astype(np.int64)


def _cluster_strata(codes: np.ndarray, strata) -> np.ndarray | None:
    if strata is None:
        return None
    strata = np.asarray(strata)
    if strata.shape != codes.shape:
        raise ValueError(f"strata has shape {strata.shape}, expected {codes.shape}")
    _, strata_codes = np.unique(strata, return_inverse=True)
    strata_codes = strata_codes.reshape(-1)
    per_cluster = np.zeros(int(codes.max()) + 1, dtype=np.int64)
    per_cluster[codes] = strata_codes
    if np.any(per_cluster[codes] != strata_codes):
        raise ValueError("each cluster must lie in a single stratum")
    codes_s = per_cluster
    return codes_s.reshape(-1)


def bootstrap_auroc(y_true, y_score, clusters, *, n_boot: int = 1000, ci: float = 0.95, strata=None,
                    seed=None) -> BootstrapResult | list[BootstrapResult]:
    """AUROC with a cluster-bootstrap percentile interval.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        Binary labels (1 = positive).
    y_score : array-like of shape (n,) or (n, k)
        Scores; k signals share the same resamples.
    clusters : array-like of shape (n,)
        Cluster label of each observation (any hashable dtype numpy can sort).
    n_boot : int, default 1000
    ci : float, default 0.95
    strata : array-like of shape (n,), optional
        Stratum of each observation (constant within a cluster); resampling stays within strata.
    seed : int, Generator or None

    Returns
    -------
    BootstrapResult, or a list of k of them for 2-D ``y_score``.
    """
    codes = _check_inputs(y_true, clusters)
    if codes.size == 0:
        warnings.warn("empty sample: AUROC is undefined, returning nan", DegenerateInputWarning, stacklevel=2)
        nan = BootstrapResult(np.nan, np.nan, np.nan, n_boot, 0)
        return nan if np.ndim(y_score) == 1 else [nan] * np.shape(y_score)[1]
    engine = AurocEngine(y_true, y_score, codes)
    point = np.atleast_1d(engine.evaluate(np.ones((1, engine.n_clusters)), warn=False)[0])
    if np.isnan(point).any():
        warnings.warn("only one class present; AUROC is undefined, returning nan", DegenerateInputWarning,
                      stacklevel=2)
        nan = BootstrapResult(np.nan, np.nan, np.nan, n_boot, 0)
        return nan if engine.single else [nan] * point.size
    reps = np.vstack([engine.evaluate(c, warn=False).reshape(len(c), -1) for c in iter_cluster_counts(
        engine.n_clusters, n_boot=n_boot, strata=_cluster_strata(codes, strata), seed=seed)])
    results = [bootstrap_result(point[j], reps[:, j], ci) for j in range(point.size)]
    return results[0] if engine.single else results


def paired_delta_auroc(y_true, score_a, score_b, clusters, *, n_boot: int = 1000, ci: float = 0.95,
                       strata=None, seed=None) -> BootstrapResult:
    """AUROC(score_a) - AUROC(score_b) with a paired cluster-bootstrap interval.

    Both AUROCs are computed on the same resampled clusters; the interval is the percentile
    interval of the per-resample differences. Parameters as in :func:`bootstrap_auroc`.
    """
    return _contrast(y_true, np.column_stack([score_a, score_b]), np.array([1.0, -1.0]), clusters, n_boot=n_boot,
                     ci=ci, strata=strata, seed=seed, what="delta AUROC")


def auroc_contrast(y_true, scores, weights, clusters, *, n_boot: int = 1000, ci: float = 0.95, strata=None,
                   seed=None) -> BootstrapResult:
    """A linear combination ``sum_j weights[j] * AUROC(scores[:, j])`` with a paired cluster-bootstrap interval.

    Every AUROC is computed on the same resampled clusters, so a difference of differences, e.g.
    ``[AUROC(e_A) - AUROC(F_A)] - [AUROC(e_B) - AUROC(F_B)]`` for two scorer models A and B of the same steps
    (weights ``(1, -1, -1, 1)``), carries the pairing of all four.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        Binary labels (1 = positive).
    scores : array-like of shape (n, k)
        The k signals.
    weights : array-like of shape (k,)
        Weight of each signal's AUROC.
    clusters, n_boot, ci, strata, seed
        As in :func:`bootstrap_auroc`.

    Returns
    -------
    BootstrapResult
        nan (with a :class:`~diagnostics.stats.DegenerateInputWarning`) when the sample is empty or one class is
        missing.

    Raises
    ------
    ValueError
        ``scores`` is not 2-D or ``weights`` does not have one entry per column.
    """
    scores = np.asarray(scores, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    if scores.ndim != 2 or weights.shape != (scores.shape[1],):
        raise ValueError(f"scores must have shape (n, k) and weights (k,); got {scores.shape} and {weights.shape}")
    return _contrast(y_true, scores, weights, clusters, n_boot=n_boot, ci=ci, strata=strata, seed=seed,
                     what="the AUROC contrast")


def _contrast(y_true, scores, weights, clusters, *, n_boot, ci, strata, seed, what) -> BootstrapResult:
    codes = _check_inputs(y_true, clusters)
    if codes.size == 0:
        warnings.warn(f"empty sample: {what} is undefined, returning nan", DegenerateInputWarning, stacklevel=3)
        return BootstrapResult(np.nan, np.nan, np.nan, n_boot, 0)
    engine = AurocEngine(y_true, scores, codes)
    point = engine.evaluate(np.ones((1, engine.n_clusters)), warn=False)[0]
    if np.isnan(point).any():
        warnings.warn(f"only one class present; {what} is undefined, returning nan", DegenerateInputWarning,
                      stacklevel=3)
        return BootstrapResult(np.nan, np.nan, np.nan, n_boot, 0)
    reps = np.vstack([engine.evaluate(c, warn=False).reshape(len(c), -1) for c in iter_cluster_counts(
        engine.n_clusters, n_boot=n_boot, strata=_cluster_strata(codes, strata), seed=seed)])
    return bootstrap_result(point @ weights, reps @ weights, ci, stacklevel=4)
