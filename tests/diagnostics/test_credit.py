"""diagnostics.credit: OCSD's token weights on valid and invalid steps, against the training rule itself
(ocsd.algorithm's functions), a loop over the same cluster draws, and the command's refusals."""

import json
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from diagnostics import credit as cr
from diagnostics.load import DiagnosticsError, load
from ocsd.algorithm.advantages import ocsd_token_advantage
from ocsd.algorithm.signals import calibration_signal, observation_residual
from ocsd.records import read_replay
from synth import make_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Three checkpoints with non-zero advantages (valid steps carry the planted larger residual)."""
    return make_run(tmp_path_factory.mktemp("credit") / "synthetic", [10, 20, 30], n_traj=16, n_steps=10, seed=3,
                    advantage_sd=1.0)


@pytest.fixture(scope="module")
def data(run):
    return load(run, properties=cr.training_columns)


@pytest.mark.parametrize("beta", [0.5, 0.2, 1.0])
def test_each_steps_push_is_the_training_rules_advantage_minus_grpos(run, data, beta):
    """push_s = mean over the step's tokens of ocsd_token_advantage(A, q, selected, beta) - A, with q from
    ocsd.algorithm's residual and calibration signal; q_s and |q|_s are the means of that q and its size."""
    got = cr.step_credit(data, beta=beta)
    replay = read_replay([run], steps="selected", token_columns=["token_idx", "logp_full", "logp_ablated"])
    steps = replay.steps[replay.steps["feedback_label"].isin(cr.LABELS)]
    expect = []
    for row in steps.itertuples():
        tok = replay.tokens[(replay.tokens["global_step"] == row.global_step)
                            & (replay.tokens["traj_uid"] == row.traj_uid)
                            & (replay.tokens["step_idx"] == row.step_idx)].sort_values("token_idx")
        q = calibration_signal(observation_residual(torch.tensor(tok["logp_full"].to_numpy(np.float64)),
                                                    torch.tensor(tok["logp_ablated"].to_numpy(np.float64))))
        adv = torch.tensor([row.advantage], dtype=torch.float64)
        ocsd = ocsd_token_advantage(adv, q[None], torch.tensor([row.selected]), beta)
        expect.append((row.feedback_label, float(q.mean()), float(q.abs().mean()), float((ocsd - adv).mean())))
    expect = pd.DataFrame(expect, columns=["feedback_label", "q", "abs_q", "push"])
    assert len(got) == len(expect) and (got["advantage"] != 0).any() and (got["advantage"] == 0).any()
    assert list(got["feedback_label"]) == list(expect["feedback_label"])
    for column in ("q", "abs_q", "push"):
        np.testing.assert_allclose(got[column], expect[column], rtol=1e-6, atol=1e-7)


def test_a_step_outside_the_selection_gets_no_push(data):
    """With every step scored, OCSD's rule leaves the unselected ones at GRPO's advantage."""
    unselected = data.steps.assign(selected=False)
    got = cr.step_credit(type(data)(**{**data.__dict__, "steps": unselected}))
    assert (got["push"] == 0).all() and (got["q"] != 0).any()


@pytest.mark.parametrize("seed", [0, 7])
def test_means_and_intervals_are_a_loop_over_the_same_cluster_draws(data, seed):
    """Point estimates: the plain means per label; intervals: the percentiles of the means recomputed resample by
    resample from the trajectories each draw holds (the draws of iter_cluster_counts: chunks of 100 from one
    Generator)."""
    n_boot = 150
    result = cr.credit(data, n_boot=n_boot, seed=seed)
    table = cr.step_credit(data)
    codes, uniques = pd.factorize(table["cluster"])
    rng = np.random.default_rng(seed)
    draws = np.concatenate([rng.integers(0, len(uniques), size=(min(100, n_boot - start), len(uniques)))
                            for start in range(0, n_boot, 100)])
    rows_of = [np.flatnonzero(codes == c) for c in range(len(uniques))]
    for stat in ("q", "abs_q", "push"):
        reps = {label: [] for label in cr.LABELS}
        for draw in draws:
            rows = table.iloc[np.concatenate([rows_of[c] for c in draw])]
            for label in cr.LABELS:
                reps[label].append(rows.loc[rows["feedback_label"] == label, stat].mean())
        for label in cr.LABELS:
            part = result["labels"][label][stat]
            assert part["estimate"] == pytest.approx(table.loc[table["feedback_label"] == label, stat].mean())
            assert [part["ci_low"], part["ci_high"]] == pytest.approx(np.percentile(reps[label], [2.5, 97.5]))
        diff = np.array(reps["invalid"]) - np.array(reps["valid"])
        assert [result["difference"][stat]["ci_low"], result["difference"][stat]["ci_high"]] == pytest.approx(
            np.percentile(diff, [2.5, 97.5]))
    for label in cr.LABELS:
        rows = table[table["feedback_label"] == label]
        assert result["labels"][label]["n"] == len(rows)
        assert result["labels"][label]["share_q_positive"] == pytest.approx((rows["q"] > 0).mean())
        assert result["labels"][label]["share_advantage_nonzero"] == pytest.approx((rows["advantage"] != 0).mean())


def test_a_residual_that_tracks_feedback_gives_valid_steps_the_larger_q(data):
    """The synthetic runs plant a larger residual on valid steps (feedback AUROC above 0.5): the difference
    invalid - valid of q is negative and resolved."""
    diff = cr.credit(data, n_boot=300)["difference"]["q"]
    assert diff["estimate"] < 0 and diff["ci_high"] < 0


def test_beta_zero_is_grpo(data):
    result = cr.credit(data, beta=0.0, n_boot=20)
    for part in (*result["labels"].values(), result["difference"]):
        assert part["push"]["estimate"] == 0 and part["push"]["ci_low"] == 0 and part["push"]["ci_high"] == 0


def test_a_missing_label_gives_nan_with_a_warning(tmp_path):
    run = make_run(tmp_path / "valid_only", [10], n_traj=6, labels=("valid", "ambiguous"), label_p=(0.8, 0.2),
                   advantage_sd=1.0)
    with pytest.warns(UserWarning, match="no invalid steps"):
        result = cr.credit(load(run, properties=cr.training_columns), n_boot=20)
    assert result["labels"]["invalid"]["n"] == 0 and np.isnan(result["labels"]["invalid"]["q"]["estimate"])
    assert np.isnan(result["difference"]["push"]["estimate"])
    assert np.isfinite(result["labels"]["valid"]["q"]["estimate"])


def test_steps_without_advantages_are_refused_by_name(data):
    with pytest.raises(DiagnosticsError, match="advantage"):
        cr.step_credit(type(data)(**{**data.__dict__, "steps": data.steps.drop(columns="advantage")}))
    with pytest.raises(DiagnosticsError, match="advantage"):
        cr.training_columns(pd.DataFrame({"selected": [True]}), "alfworld")


def test_command_prints_the_table_and_the_json(run, capsys):
    assert cr.main(["--run", str(run), "--n-boot", "50"]) == 0
    out = capsys.readouterr().out
    assert "OCSD's token weights on valid and invalid steps (beta 0.5)" in out
    assert [line.split()[0] for line in out.splitlines()[3:]] == ["valid", "invalid", "invalid"]
    assert cr.main(["--run", str(run), "--n-boot", "50", "--beta", "0.25", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["beta"] == 0.25 and result["n_boot"] == 50 and set(result["labels"]) == set(cr.LABELS)


@pytest.mark.parametrize("beta", ["1.5", "-0.1", "nan"])
def test_command_refuses_a_beta_outside_zero_one(run, capsys, beta):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cr.main(["--run", str(run), "--beta", beta]) == 2
    assert "--beta must be in [0, 1]" in capsys.readouterr().err
