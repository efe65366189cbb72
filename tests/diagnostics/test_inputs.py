"""Pooling checkpoints of several runs, and the flags every diagnostics command checks before any work."""

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from diagnostics import auroc, dratio, report, robustness, tails
from diagnostics.load import load
from diagnostics.robustness import matched_keep
from synth import make_run
from test_commands import pooled_steps, run_json
from tests.helpers import exit_and_stderr


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two runs whose only checkpoints share the global step and every trajectory id."""
    root = tmp_path_factory.mktemp("pool")
    return [make_run(root / name, [10], n_traj=6, n_steps=10, seed=seed) for name, seed in (("a", 0), ("b", 1))]


def test_two_runs_with_the_same_ids_pool_side_by_side(two_runs, capsys):
    alone = [load([run]) for run in two_runs]
    both = load([run / "global_step_10" for run in two_runs])
    assert len(both.steps) == sum(len(d.steps) for d in alone)
    assert len(both.tokens) == sum(len(d.tokens) for d in alone)
    assert both.steps["cluster"].nunique() == sum(d.steps["cluster"].nunique() for d in alone) == 12
    assert list(both.global_steps) == [10, 10] and both.checkpoints == ("a/global_step_10", "b/global_step_10")
    args = [x for run in two_runs for x in ("--ckpt", str(run / "global_step_10"))]
    res = run_json(capsys, auroc.main, [*args, "--n-boot", "50"])
    ref = pd.concat([pooled_steps(run) for run in two_runs])  # each run on its own, then stacked
    y = ref["feedback_label"] == "valid"
    assert res["n_steps"] == len(ref) and res["n_trajectories"] == 12
    for name in ("ablated", "full", "residual"):
        assert res["signals"][name]["auroc"] == pytest.approx(roc_auc_score(y, ref[name]), abs=1e-9)


def test_a_checkpoint_named_twice_is_read_once(two_runs, capsys):
    ckpt = str(two_runs[0] / "global_step_10")
    once = run_json(capsys, dratio.main, ["--ckpt", ckpt, "--n-boot", "30"])
    with pytest.warns(UserWarning, match="named more than once; it is read once"):
        twice = run_json(capsys, dratio.main, ["--ckpt", ckpt, "--ckpt", ckpt + "/replay", "--n-boot", "30"])
    assert twice == once


def test_robustness_warnings_name_the_setting_and_checkpoints(tmp_path):
    run = make_run(tmp_path / "run", [10], n_traj=4, labels=("valid", "ambiguous"), label_p=(0.7, 0.3))
    with pytest.warns(UserWarning) as record:
        robustness.robustness(load([run]), n_boot=10)
    messages = [str(w.message) for w in record]
    assert any(m.startswith("raw: needs valid and invalid steps") and "run/global_step_10" in m for m in messages)
    assert any(m.startswith("late stage: needs valid and invalid steps") for m in messages)


@pytest.mark.parametrize("main, args, flag", [
    (dratio.main, ["--eps", "nan"], "--eps"),
    (dratio.main, ["--eps", "inf"], "--eps"),
    (dratio.main, ["--eps", "0"], "--eps"),
    (robustness.main, ["--max-per-class", "0"], "--max-per-class"),
    (robustness.main, ["--max-per-class", "-5"], "--max-per-class"),
    (robustness.main, ["--matched-draws", "0"], "--matched-draws"),
    (auroc.main, ["--seed", "-1"], "--seed"),
    (tails.main, ["--top", "0"], "--top"),
])
def test_bad_flags_exit_2_before_reading(tmp_path, capsys, main, args, flag):
    code, err = exit_and_stderr(main, ["--run", str(tmp_path / "missing"), *args], capsys)  # the flag is checked first
    assert code == 2 and flag in err and "missing" not in err and "Traceback" not in err


@pytest.mark.parametrize("main", [tails.main, report.main])
@pytest.mark.parametrize("where", ["file", "under_file"])
def test_out_naming_a_file_exits_2_before_work(two_runs, tmp_path, capsys, main, where):
    afile = tmp_path / "taken.txt"
    afile.write_text("keep me")
    out = afile if where == "file" else afile / "sub"
    code, err = exit_and_stderr(main, ["--run", str(two_runs[0]), "--out", str(out)], capsys)
    assert code == 2 and "--out" in err and f"{afile} is a file" in err and "Traceback" not in err
    assert afile.read_text() == "keep me"


def test_functions_refuse_settings_that_give_empty_results():
    with pytest.raises(ValueError, match="eps must be finite"):
        dratio.d_ratio([0.1], [0.2], eps=float("nan"))
    with pytest.raises(ValueError, match="max_per_class must be >= 1"):
        matched_keep([True, False], [0, 0], [0.1, 0.2], max_per_class=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert matched_keep(np.array([True, False]), [0, 0], [0.1, 0.2], max_per_class=1).all()


def test_checkpoint_names_list_the_first_few(two_runs):
    data = load([run / "global_step_10" for run in two_runs])
    assert data.checkpoint_names([1, 0, 1]) == "a/global_step_10, b/global_step_10"
    assert data.checkpoint_names([0, 1], limit=1) == "a/global_step_10 and 1 more"


def test_from_replay_without_checkpoint_column_keys_by_global_step(two_runs):
    from diagnostics.load import DiagnosticsError, from_replay
    from ocsd.records import CHECKPOINT_COLUMN, read_replay

    raw = read_replay(two_runs[0], steps="selected")
    with_column = from_replay(raw.steps, raw.tokens, raw.metas)
    without = from_replay(raw.steps.drop(columns=CHECKPOINT_COLUMN), raw.tokens.drop(columns=CHECKPOINT_COLUMN),
                          raw.metas)
    pd.testing.assert_frame_equal(with_column.steps, without.steps)
    assert without.checkpoints == ("global_step_10",) and with_column.checkpoints == ("a/global_step_10",)
    with pytest.raises(DiagnosticsError, match="both have or both lack"):
        from_replay(raw.steps, raw.tokens.drop(columns=CHECKPOINT_COLUMN), raw.metas)
