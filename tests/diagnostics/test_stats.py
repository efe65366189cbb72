"""AUROC and the cluster bootstrap against independent references."""


import warnings

import numpy as np
import pytest
from scipy.stats import rankdata
from sklearn.metrics import roc_auc_score

from diagnostics.bootstrap import (bootstrap_auroc, cluster_counts, cluster_indices, counts_from_indices,
                                   paired_delta_auroc, percentile_ci)
from diagnostics.stats import AurocEngine, DegenerateInputWarning, auroc, grouped_auroc, nanmean


def pairwise_auroc(y, s, w=None):
    """Brute force over all (positive, negative) pairs."""
    w = np.ones(len(y)) if w is None else np.asarray(w, float)
    pos, neg = np.flatnonzero(y), np.flatnonzero(~y)
    num = sum(w[i] * w[j] * ((s[i] > s[j]) + 0.5 * (s[i] == s[j])) for i in pos for j in neg)
    return num / (w[pos].sum() * w[neg].sum())


@pytest.mark.parametrize("seed", range(5))
def test_auroc_matches_sklearn_and_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 120))
    y = rng.random(n) < rng.uniform(0.2, 0.8)
    y[:2] = [True, False]
    s = np.round(rng.normal(size=n) + y * rng.uniform(0, 1.5), 1)  # many ties
    assert auroc(y, s) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert auroc(y, s) == pytest.approx(pairwise_auroc(y, s), abs=1e-12)
    w = rng.integers(0, 4, n).astype(float)
    w[:2] = 1
    assert auroc(y, s, sample_weight=w) == pytest.approx(roc_auc_score(y, s, sample_weight=w), abs=1e-12)
    assert auroc(y, s, sample_weight=w) == pytest.approx(pairwise_auroc(y, s, w), abs=1e-12)


def test_label_flip_gives_one_minus():
    rng = np.random.default_rng(1)
    y = rng.random(200) < 0.4
    s = rng.normal(size=200) + y
    assert auroc(~y, s) == pytest.approx(1 - auroc(y, s), abs=1e-12)
    assert auroc(y, -s) == pytest.approx(1 - auroc(y, s), abs=1e-12)


def test_engine_batch_equals_weighted_sklearn():
    rng = np.random.default_rng(2)
    n, c = 300, 40
    clusters = rng.integers(0, c, n)
    clusters[:c] = np.arange(c)
    y = rng.random(n) < 0.5
    s = np.round(rng.normal(size=(n, 2)), 1)
    counts = cluster_counts(c, n_boot=7, seed=3)
    got = AurocEngine(y, s, clusters).evaluate(counts, chunk=3, warn=False)
    for b in range(7):
        for j in range(2):
            w = counts[b, clusters]
            if w[y].sum() and w[~y].sum():
                assert got[b, j] == pytest.approx(roc_auc_score(y, s[:, j], sample_weight=w), abs=1e-12)


def test_degenerate_inputs_give_nan_with_warning():
    with pytest.warns(DegenerateInputWarning):
        assert np.isnan(auroc([1, 1, 1], [0.1, 0.2, 0.3]))
    with pytest.warns(DegenerateInputWarning):
        assert np.isnan(auroc([], []))
    with pytest.warns(DegenerateInputWarning):
        r = bootstrap_auroc([0, 0, 0], [1.0, 2.0, 3.0], [0, 1, 2], n_boot=10, seed=0)
    assert np.isnan(r.estimate) and np.isnan(r.ci_low)
    with pytest.raises(ValueError, match="binary"):
        auroc([0, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match="non-finite"):
        auroc([0, 1], [np.nan, 0.2])
    with pytest.raises(ValueError, match="length"):
        auroc([0, 1, 1], [0.1, 0.2])


def test_grouped_auroc_matches_sklearn():
    rng = np.random.default_rng(4)
    n = 500
    g = rng.integers(0, 6, n)
    y = rng.random(n) < 0.5
    s = np.round(rng.normal(size=n) + y, 1)
    y[g == 5] = True  # a group with one class -> nan
    got = grouped_auroc(y, s, g)
    for k in range(5):
        assert got[k] == pytest.approx(roc_auc_score(y[g == k], s[g == k]), abs=1e-12)
    assert np.isnan(got[5])


def test_cluster_counts_and_strata():
    counts = cluster_counts(10, n_boot=50, seed=0)
    assert counts.shape == (50, 10) and np.all(counts.sum(1) == 10)
    strata = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 2])
    counts = cluster_counts(10, n_boot=50, strata=strata, seed=0)
    for s in range(3):
        assert np.all(counts[:, strata == s].sum(1) == (strata == s).sum())
    idx = cluster_indices(10, n_boot=5, seed=np.random.default_rng(1))
    assert np.array_equal(counts_from_indices(idx, 10).sum(1), np.full(5, 10))
    a = cluster_counts(10, n_boot=5, seed=7)
    b = cluster_counts(10, n_boot=5, seed=7)
    assert np.array_equal(a, b)


def test_iid_singletons_agree_with_naive_loop():
    rng = np.random.default_rng(5)
    n, n_boot = 300, 2000
    y = rng.random(n) < 0.5
    s = rng.normal(size=n) + 0.8 * y
    fast = bootstrap_auroc(y, s, np.arange(n), n_boot=n_boot, seed=11)
    loop_rng = np.random.default_rng(12)
    reps = []
    for _ in range(n_boot):  # naive resampling of observations, Mann-Whitney via scipy ranks
        i = loop_rng.integers(0, n, n)
        yi, ranks = y[i], rankdata(s[i])
        n_pos = yi.sum()
        reps.append((ranks[yi].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * (n - n_pos)))
    lo, hi = percentile_ci(reps)
    assert fast.estimate == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    width_fast, width_loop = fast.ci_high - fast.ci_low, hi - lo
    assert abs(width_fast - width_loop) < 0.15 * width_loop  # Monte-Carlo error of 2,000 resamples
    assert abs(fast.ci_low - lo) < 0.015 and abs(fast.ci_high - hi) < 0.015


def test_cluster_intervals_wider_when_steps_correlated():
    rng = np.random.default_rng(6)
    n_traj, per = 100, 10
    clusters = np.repeat(np.arange(n_traj), per)
    y = np.repeat(rng.random(n_traj) < 0.5, per)  # labels and scores share a trajectory effect
    s = np.repeat(rng.normal(size=n_traj), per) + 0.5 * y + 0.3 * rng.normal(size=n_traj * per)
    clustered = bootstrap_auroc(y, s, clusters, n_boot=500, seed=0)
    iid = bootstrap_auroc(y, s, np.arange(y.size), n_boot=500, seed=0)
    assert clustered.estimate == iid.estimate
    assert (clustered.ci_high - clustered.ci_low) > 1.8 * (iid.ci_high - iid.ci_low)


def test_paired_delta_uses_same_resamples():
    rng = np.random.default_rng(7)
    n = 400
    clusters = rng.integers(0, 80, n)
    y = rng.random(n) < 0.5
    a = rng.normal(size=n) + y
    same = paired_delta_auroc(y, a, a, clusters, n_boot=200, seed=0)
    assert same.estimate == 0 and same.ci_low == 0 and same.ci_high == 0
    b = rng.normal(size=n) + 0.2 * y
    d = paired_delta_auroc(y, a, b, clusters, n_boot=200, seed=0)
    ra, rb = bootstrap_auroc(y, np.column_stack([a, b]), clusters, n_boot=200, seed=0)
    assert d.estimate == pytest.approx(ra.estimate - rb.estimate, abs=1e-12)
    assert d.ci_low <= d.estimate <= d.ci_high
    assert d.as_dict("delta") == {"delta": d.estimate, "ci_low": d.ci_low, "ci_high": d.ci_high}
    assert list(d.as_dict()) == ["estimate", "ci_low", "ci_high"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nanmean_is_numpys_without_the_warning(seed):
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(6, 5))
    values[rng.random(values.shape) < 0.4] = np.nan
    values[2] = np.nan  # a slice with nothing finite
    values[:, 3] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        for axis in (None, 0, 1):
            got = nanmean(values, axis=axis)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                want = np.nanmean(values, axis=axis)
            np.testing.assert_array_equal(got, want)
    assert np.isnan(nanmean(values, axis=1)[2]) and np.isnan(nanmean(values, axis=0)[3])
    assert np.isnan(nanmean(np.full(3, np.nan)))
