"""Matched estimator, standardisation and the D ratio against brute-force references."""

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from diagnostics.dratio import checkpoint_mean, d_ratio
from diagnostics.robustness import matched_auroc, matched_delta, matched_keep, standardize_within
from diagnostics.tails import tail_hits


def brute_matched(y, s, ckpt, strata, keys, cap):
    keep = np.zeros(len(y), dtype=bool)
    for st in sorted(set(strata)):
        members = [i for i in range(len(y)) if strata[i] == st]
        pos = sorted((keys[i], i) for i in members if y[i])
        neg = sorted((keys[i], i) for i in members if not y[i])
        k = min(len(pos), len(neg), cap)
        for _, i in pos[:k] + neg[:k]:
            keep[i] = True
    values = []
    for c in sorted(set(ckpt)):
        idx = [i for i in range(len(y)) if keep[i] and ckpt[i] == c]
        if len({bool(y[i]) for i in idx}) == 2:
            values.append(roc_auc_score(y[idx], s[idx]))
    return keep, np.mean(values)


@pytest.mark.parametrize("seed", range(3))
def test_matched_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 240
    y = rng.random(n) < 0.4
    s = np.round(rng.normal(size=n) + y, 1)
    ckpt = rng.integers(0, 4, n)
    strata = rng.integers(0, 5, n)
    cap = 6
    keys = np.random.default_rng(99).random(n)
    keep = matched_keep(y, strata, keys, max_per_class=cap)
    ref_keep, ref = brute_matched(y, s, ckpt, strata, keys, cap)
    assert np.array_equal(keep, ref_keep)
    assert matched_auroc(y, s, ckpt, strata, max_per_class=cap, draws=1,
                         seed=np.random.default_rng(99)) == pytest.approx(ref)


def _matched_sample(seed, n=240):
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.4
    return y, np.round(rng.normal(size=(n, 2)) + y[:, None], 1), rng.integers(0, 4, n), rng.integers(0, 5, n)


@pytest.mark.parametrize("seed", range(3))
def test_matched_point_averages_draws_of_the_brute_force(seed):
    y, s, ckpt, strata = _matched_sample(seed)
    cap, draws = 6, 7
    keys = np.random.default_rng(5).random((draws, len(y)))  # the keys the estimator draws, in turn
    refs = [[brute_matched(y, s[:, j], ckpt, strata, row, cap)[1] for j in range(2)] for row in keys]
    got = matched_auroc(y, s, ckpt, strata, max_per_class=cap, draws=draws, seed=np.random.default_rng(5))
    assert got == pytest.approx(np.mean(refs, axis=0))
    res = matched_delta(y, s[:, 0], s[:, 1], ckpt, strata, np.arange(len(y)), max_per_class=cap, draws=draws,
                        n_boot=20, seed=np.random.default_rng(5))
    assert res.estimate == pytest.approx(np.mean([a - b for a, b in refs]))


def test_averaging_draws_narrows_the_point_estimate():
    y, s, ckpt, strata = _matched_sample(0, n=600)
    one = [matched_auroc(y, s[:, 0], ckpt, strata, max_per_class=8, draws=1, seed=k) for k in range(40)]
    many = [matched_auroc(y, s[:, 0], ckpt, strata, max_per_class=8, draws=25, seed=k) for k in range(40)]
    assert np.std(many) < np.std(one) / 3


def test_draws_below_one_are_refused():
    y, s, ckpt, strata = _matched_sample(0, n=40)
    with pytest.raises(ValueError, match="draws must be >= 1"):
        matched_auroc(y, s[:, 0], ckpt, strata, draws=0)
    with pytest.raises(ValueError, match="draws must be >= 1"):
        matched_delta(y, s[:, 0], s[:, 1], ckpt, strata, np.arange(40), draws=0)


def test_standardize_within():
    rng = np.random.default_rng(0)
    g = rng.integers(0, 3, 60)
    x = rng.normal(size=60) * (g + 1) + g
    z = standardize_within(x, g)
    for k in range(3):
        assert z[g == k].mean() == pytest.approx(0, abs=1e-12)
        assert z[g == k].std() == pytest.approx(1)
    assert np.all(standardize_within(np.ones(4), [0, 0, 1, 1]) == 0)


def test_d_ratio_and_checkpoint_mean():
    assert d_ratio([1.0, 0.0], [1.0, 2.0], eps=1e-6) == pytest.approx([0.5, 0.0], abs=1e-6)
    with pytest.raises(ValueError):
        d_ratio([-1.0], [1.0])
    rng = np.random.default_rng(1)
    n = 500
    ckpt = rng.integers(0, 3, n)
    clusters = ckpt * 100 + rng.integers(0, 10, n)
    groups = rng.integers(0, 2, n)
    v = rng.random(n) + ckpt
    res = checkpoint_mean(v, groups, ckpt, clusters, n_groups=3, n_boot=50, seed=0)
    frame = pd.DataFrame({"v": v, "g": groups, "c": ckpt})
    ref = frame.groupby(["g", "c"])["v"].mean().groupby("g").mean()
    assert res[0].estimate == pytest.approx(ref[0]) and res[1].estimate == pytest.approx(ref[1])
    assert np.isnan(res[2].estimate)
    assert res[0].ci_low < res[0].estimate < res[0].ci_high


def test_tail_hits_per_checkpoint():
    v = np.concatenate([np.arange(100.0), np.arange(100.0) + 1000])
    ck = np.repeat([0, 1], 100)
    hits = tail_hits(v, ck, tail=0.05)
    assert hits.sum() == 10 and hits[95:100].all() and hits[195:].all()
    low = tail_hits(v, ck, tail=0.05, side="lower")
    assert low[:5].all() and low[100:105].all() and low.sum() == 10
