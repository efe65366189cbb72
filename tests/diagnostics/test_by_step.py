"""``diagnostics.by_step``: the feedback AUROC and residual - Full per window of global steps, against scikit-learn
on the same windows of synthetic runs (test input only), and its refusals."""

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).parent))

from synth import make_checkpoint, make_run  # noqa: E402

from diagnostics import by_step  # noqa: E402
from diagnostics.load import SIGNALS, load  # noqa: E402
from diagnostics.stats import DegenerateInputWarning  # noqa: E402


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two runs with checkpoints every 2 steps, one of them shorter, as the paper-scale series are."""
    root = tmp_path_factory.mktemp("runs")
    return (make_run(root / "a", [2, 4, 6, 8, 10, 12], n_traj=6, n_steps=10, seed=1),
            make_run(root / "b", [2, 4, 6], n_traj=5, n_steps=10, seed=2))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("width", [1, 3, 4, 7])
def test_windows_count_from_the_first_step(seed, width):
    steps = np.random.default_rng(seed).integers(5, 60, size=40)
    expected = [(g - steps.min()) // width for g in steps]
    assert by_step.step_windows(steps, width).tolist() == expected


@pytest.mark.parametrize("width", [1, 4])
def test_each_window_matches_sklearn_on_its_steps(two_runs, width):
    data = load(list(two_runs))
    result = by_step.by_step(data, width=width, n_boot=50, seed=3)
    lab = data.labelled()
    g = lab["global_step"].to_numpy()
    bounds = [(w["first"], w["last"]) for w in result["windows"]]
    starts = sorted({2 + (step - 2) // width * width for step in g})  # windows without a checkpoint are left out
    assert bounds == [(first, first + width - 1) for first in starts]
    assert sum(w["n_steps"] for w in result["windows"]) == len(lab)
    for w in result["windows"]:
        part = lab[(g >= w["first"]) & (g <= w["last"])]
        y = part["y"].to_numpy(bool)
        assert w["global_steps"] == sorted(set(part["global_step"]))
        assert (w["n_steps"], w["n_valid"], w["n_invalid"]) == (len(part), y.sum(), (~y).sum())
        assert w["n_checkpoints"] == part["ckpt"].nunique() and w["n_trajectories"] == part["cluster"].nunique()
        for name in SIGNALS:
            got = w["signals"][name]
            assert got["auroc"] == pytest.approx(roc_auc_score(y, part[f"S_{name}"]))
            assert got["ci_low"] <= got["ci_high"]
        reference = roc_auc_score(y, part["S_residual"]) - roc_auc_score(y, part["S_full"])
        assert w["delta"]["delta"] == pytest.approx(reference)
        assert w["delta"]["ci_low"] <= w["delta"]["ci_high"]


def test_a_window_without_invalid_steps_is_nan_with_a_warning(tmp_path):
    make_checkpoint(tmp_path / "run", 2, seed=0)
    make_checkpoint(tmp_path / "run", 10, seed=0, labels=("valid",), label_p=(1.0,))
    with pytest.warns(DegenerateInputWarning, match="global steps 10-13: needs valid and invalid steps"):
        result = by_step.by_step(load([tmp_path / "run"]), width=4, n_boot=20)
    first, last = result["windows"]
    assert np.isfinite(first["delta"]["delta"]) and np.isnan(last["delta"]["delta"])
    assert all(np.isnan(v["auroc"]) for v in last["signals"].values())
    assert [w["first"] for w in result["windows"]] == [2, 10]  # the empty windows between are left out


def test_the_command_prints_json_and_the_table(two_runs, capsys):
    args = ["--run", str(two_runs[0]), "--run", str(two_runs[1]), "--width", "4", "--n-boot", "30"]
    assert by_step.main([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [w["first"] for w in result["windows"]] == [2, 6, 10] and result["width"] == 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # both classes in every window: nothing to warn about
        assert by_step.main(args) == 0
    table = capsys.readouterr().out
    assert "windows of 4 global step(s)" in table and "residual - Full" in table
    assert "10-13" in table


def test_a_width_below_one_is_refused_naming_the_flag(two_runs, capsys):
    with pytest.raises(SystemExit) as exit_:
        by_step.main(["--run", str(two_runs[0]), "--width", "0"])
    assert exit_.value.code == 2 and "--width" in capsys.readouterr().err
    with pytest.raises(ValueError, match="width must be >= 1"):
        by_step.step_windows([2, 4], 0)
