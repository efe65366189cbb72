"""The AUROC contrast and the paired comparison of two scorer models, against independent references."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score
from synth import make_checkpoint

from diagnostics import scorers
from diagnostics.bootstrap import auroc_contrast, paired_delta_auroc
from diagnostics.load import DiagnosticsError, load


def brute_contrast(y, scores, weights, clusters, n_boot, seed, ci=0.95):
    """Point value and percentile interval by a loop over resamples: whole clusters drawn with replacement by
    ``default_rng(seed).integers`` (one block of ``n_boot`` rows), each observation weighted by its cluster's count,
    every column's AUROC from scikit-learn."""
    _, codes = np.unique(clusters, return_inverse=True)
    n_clusters = codes.max() + 1
    point = sum(w * roc_auc_score(y, scores[:, j]) for j, w in enumerate(weights))
    draws = np.random.default_rng(seed).integers(0, n_clusters, size=(n_boot, n_clusters))
    reps = []
    for row in draws:
        weight = np.bincount(row, minlength=n_clusters)[codes]
        keep = weight > 0
        if y[keep].all() or not y[keep].any():
            continue
        reps.append(sum(w * roc_auc_score(y[keep], scores[keep, j], sample_weight=weight[keep])
                        for j, w in enumerate(weights)))
    low, high = np.percentile(reps, [(1 - ci) / 2 * 100, (1 + ci) / 2 * 100])
    return point, low, high


@pytest.mark.parametrize("seed", range(4))
def test_auroc_contrast_equals_a_loop_over_resamples(seed):
    rng = np.random.default_rng(100 + seed)
    n, k = int(rng.integers(150, 300)), int(rng.integers(2, 5))
    clusters = rng.integers(0, int(rng.integers(20, 50)), n)
    y = rng.random(n) < rng.uniform(0.3, 0.7)
    scores = np.round(rng.normal(size=(n, k)) + y[:, None] * rng.uniform(0, 1, k), 1)  # ties
    weights = rng.normal(size=k)
    got = auroc_contrast(y, scores, weights, clusters, n_boot=80, seed=seed)
    point, low, high = brute_contrast(y, scores, weights, clusters, 80, seed)
    assert got.estimate == pytest.approx(point, abs=1e-12)
    assert got.ci_low == pytest.approx(low, abs=1e-12) and got.ci_high == pytest.approx(high, abs=1e-12)


def test_paired_delta_is_the_contrast_one_minus_one():
    rng = np.random.default_rng(3)
    n = 300
    clusters, y = rng.integers(0, 60, n), rng.random(n) < 0.5
    a, b = rng.normal(size=n) + y, rng.normal(size=n) + 0.3 * y
    d = paired_delta_auroc(y, a, b, clusters, n_boot=300, seed=5)
    c = auroc_contrast(y, np.column_stack([a, b]), [1, -1], clusters, n_boot=300, seed=5)
    assert (d.estimate, d.ci_low, d.ci_high) == (c.estimate, c.ci_low, c.ci_high)
    with pytest.raises(ValueError, match="weights"):
        auroc_contrast(y, np.column_stack([a, b]), [1, -1, 0], clusters)


def two_scorers(tmp_path, effect_b=0.0, **kwargs):
    """One checkpoint's steps scored twice: the same draws (steps, labels, tokens), only the planted dependence of
    the residual on the label differs (``effect`` takes no randomness)."""
    a = make_checkpoint(tmp_path / "a" / "run", 10, n_traj=40, effect=1.0, seed=2, **kwargs).parent
    b = make_checkpoint(tmp_path / "b" / "run", 10, n_traj=40, effect=effect_b, seed=2, **kwargs).parent
    return a, b


def step_scores(ckpt):
    """Step means of e, delta_F and delta_A of the selected labelled steps, straight from the parquet files."""
    steps = pd.read_parquet(ckpt / "replay" / "steps.parquet")
    tokens = pd.read_parquet(ckpt / "replay" / "tokens.parquet")
    tokens = tokens.assign(residual=tokens.logp_full - tokens.logp_ablated, full=tokens.logp_full - tokens.logp_student,
                           ablated=tokens.logp_ablated - tokens.logp_student)
    means = tokens.groupby(["traj_uid", "step_idx"])[["residual", "full", "ablated"]].mean().reset_index()
    lab = steps[steps.selected & steps.feedback_label.isin(["valid", "invalid"])]
    return lab.merge(means, on=["traj_uid", "step_idx"])


def test_scorer_contrasts_point_values_match_sklearn(tmp_path):
    a, b = two_scorers(tmp_path)
    result = scorers.scorer_contrasts(load(a), load(b), n_boot=200, seed=0)
    sa, sb = step_scores(a), step_scores(b)
    both = sa.merge(sb, on=["traj_uid", "step_idx"], suffixes=("_a", "_b"))
    assert (both.feedback_label_a == both.feedback_label_b).all()
    y = (both.feedback_label_a == "valid").to_numpy()
    assert result["n_steps"] == len(both) and result["n_invalid"] == int((~y).sum())
    assert result["only_a"] == result["only_b"] == 0
    ref = {(side, s): roc_auc_score(y, both[f"{s}_{side}"]) for side in "ab" for s in ("residual", "full", "ablated")}
    for side in "ab":
        for s in ("residual", "full", "ablated"):
            assert result[f"auroc_{side}"][s] == pytest.approx(ref[side, s], abs=1e-12)
    c = result["contrasts"]
    for s in ("residual", "full", "ablated"):
        assert c[s]["delta"] == pytest.approx(ref["a", s] - ref["b", s], abs=1e-12)
    gap = lambda side: ref[side, "residual"] - ref[side, "full"]  # noqa: E731
    assert c["delta"]["delta"] == pytest.approx(gap("a") - gap("b"), abs=1e-12)
    # the Ablated view does not depend on the planted effect: the two scorers agree exactly on it
    assert c["ablated"] == {"delta": 0.0, "ci_low": 0.0, "ci_high": 0.0}
    # the residual carries the label only under A: resolved above B, and so is its gain over Full
    assert c["residual"]["ci_low"] > 0 and c["delta"]["ci_low"] > 0
    assert c["delta"]["ci_low"] <= c["delta"]["delta"] <= c["delta"]["ci_high"]


def test_scorer_contrasts_intervals_are_the_contrast_on_the_joined_steps(tmp_path):
    a, b = two_scorers(tmp_path, effect_b=0.4)
    result = scorers.scorer_contrasts(load(a), load(b), n_boot=90, seed=11)
    steps, _ = scorers.join(load(a), load(b))
    cols = [f"S_{s}_{side}" for side in "ab" for s in ("ablated", "full", "residual")]
    seeds = np.random.default_rng(11).integers(0, 2**63 - 1, size=len(scorers.CONTRASTS))
    weights = {"delta": [0, -1, 1, 0, 1, -1], "residual": [0, 0, 1, 0, 0, -1]}
    for name, w in weights.items():
        point, low, high = brute_contrast(steps["y"].to_numpy(bool), steps[cols].to_numpy(), w,
                                          steps["cluster"].to_numpy(), 90, int(seeds[scorers.CONTRASTS.index(name)]))
        got = result["contrasts"][name]
        assert got["delta"] == pytest.approx(point, abs=1e-12)
        assert (got["ci_low"], got["ci_high"]) == pytest.approx((low, high), abs=1e-12)


def test_a_scorer_against_itself_is_zero_everywhere(tmp_path):
    a, _ = two_scorers(tmp_path)
    result = scorers.scorer_contrasts(load(a), load(a), n_boot=50, seed=0)
    for c in result["contrasts"].values():
        assert c == {"delta": 0.0, "ci_low": 0.0, "ci_high": 0.0}


def test_steps_held_by_one_scorer_are_counted_and_left_out(tmp_path):
    a, b = two_scorers(tmp_path)
    make_checkpoint(tmp_path / "a" / "run", 20, n_traj=5, seed=2)  # a checkpoint only A scored
    result = scorers.scorer_contrasts(load(a.parent), load(b), n_boot=20, seed=0)
    assert result["only_a"] > 0 and result["only_b"] == 0
    assert result["n_steps"] == scorers.scorer_contrasts(load(a), load(b), n_boot=20)["n_steps"]


def test_different_steps_are_refused(tmp_path):
    a, b = two_scorers(tmp_path)
    table = pd.read_parquet(b / "replay" / "steps.parquet")
    flip = table.index[table.selected & (table.feedback_label == "valid")][0]
    table.loc[flip, "feedback_label"] = "invalid"  # one step that is not the same step
    table.to_parquet(b / "replay" / "steps.parquet")
    with pytest.raises(DiagnosticsError, match="1 shared steps carry different feedback labels .*first: "
                                               f"run/global_step_10, trajectory {table.traj_uid[flip]}"):
        scorers.scorer_contrasts(load(a), load(b), n_boot=10)
    elsewhere = make_checkpoint(tmp_path / "c" / "other_run", 10, n_traj=40, seed=2).parent
    with pytest.raises(DiagnosticsError, match="share no labelled step"):
        scorers.scorer_contrasts(load(a), load(elsewhere), n_boot=10)


def test_command_prints_the_table_and_json(tmp_path, capsys):
    a, b = two_scorers(tmp_path)
    assert scorers.main(["--a", str(a), "--b", str(b), "--name-a", "policy", "--name-b", "base", "--n-boot",
                         "50"]) == 0
    out = capsys.readouterr().out
    assert "policy - base on the same" in out and "AUROC(e) - AUROC(F)" in out
    assert scorers.main(["--a", str(a), "--b", str(b), "--n-boot", "50", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["contrasts"]) == set(scorers.CONTRASTS)
    assert scorers.main(["--a", str(a), "--b", str(b), "--n-boot", "0"]) == 2
    assert "--n-boot must be >= 1" in capsys.readouterr().err
    shutil.rmtree(b / "replay")
    assert scorers.main(["--a", str(a), "--b", str(b)]) == 2
    assert str(b) in capsys.readouterr().err
