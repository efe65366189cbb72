"""``python -m rescoring.swap_pool``: swaps of several runs pooled, against scikit-learn on the concatenated steps,
and its refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from diagnostics.load import DiagnosticsError
from rescoring import swap_pool
from rescoring.swap import write_outputs


def fake_swap(run: str, rng: np.random.Generator, n: int = 60, **settings) -> tuple[dict, pd.DataFrame]:
    """A ``rescoring.swap`` result and its steps for one checkpoint of ``run`` (random scores, one step a
    trajectory)."""
    category = rng.choice(["progress", "no_progress", "invalid"], size=n, p=[0.6, 0.15, 0.25])
    steps = pd.DataFrame({"global_step": 14, "checkpoint": f"{run}/global_step_14",
                          "traj_uid": [f"t{i}" for i in range(n)], "step_idx": rng.integers(0, 20, n),
                          "category": category, "operator": "go",
                          "S_realized": rng.random(n) + 0.3 * (category == "progress"), "S_swapped": rng.random(n)})
    result = {"run": run, "donors": 5, "per_category": 40, "donor_text": "any",
              "orientation": "higher mean |e| predicts progress", "model": f"/weights/{run}", "checkpoints": [14],
              "per_checkpoint": [{"global_step": 14, "checkpoint": f"{run}/global_step_14",
                                  "n_progress": 1, "n_invalid": 1,
                                  "realized": {"auroc": 0.5, "ci_low": 0.4, "ci_high": 0.6},
                                  "swapped": {"auroc": 0.5, "ci_low": 0.4, "ci_high": 0.6}}],
              "n_insufficient_donors": 1, "insufficient_donors": [{"traj_uid": "x"}], "unrendered": []}
    result.update(settings)
    return result, steps


def test_pooled_aurocs_are_those_of_the_concatenated_steps():
    rng = np.random.default_rng(7)
    analyses = [fake_swap(run, rng) for run in ("ocsd_s1", "grpo_s1", "ocsd_s2")]
    result, steps = swap_pool.pool_swaps(analyses, n_boot=200, seed=3)
    binary = steps[steps["category"].isin(["progress", "invalid"])]
    y = binary["category"] == "progress"
    realized = roc_auc_score(y, binary["S_realized"])
    swapped = roc_auc_score(y, binary["S_swapped"])
    assert result["realized"]["auroc"] == pytest.approx(realized)
    assert result["swapped"]["auroc"] == pytest.approx(swapped)
    assert result["drop"]["delta"] == pytest.approx(realized - swapped)
    assert result["realized"]["ci_low"] <= realized <= result["realized"]["ci_high"]
    assert result["n_steps"] == 180 and result["n_trajectories"] == 180  # the runs' trajectories stay apart
    assert result["n_progress"] + result["n_no_progress"] + result["n_invalid"] == 180
    assert result["n_insufficient_donors"] == 3 and len(result["per_checkpoint"]) == 3
    assert result["runs"] == ["ocsd_s1", "grpo_s1", "ocsd_s2"] and result["model"] == "each run's own weights"


def test_the_command_writes_a_swap_json_that_fig5_reads(tmp_path, capsys):
    from figures.fig5_swap import build

    rng = np.random.default_rng(1)
    folders = []
    for run in ("a", "b"):
        folders.append(tmp_path / run)
        write_outputs(*fake_swap(run, rng), folders[-1])
    out = tmp_path / "pooled"
    assert swap_pool.main([*map(str, folders), "--out", str(out), "--n-boot", "50", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert json.loads((out / "swap.json").read_text()) == printed
    assert len(pd.read_csv(out / "swap_steps.csv")) == 120
    assert any(Path(p).suffix == ".png" for p in build([], tmp_path / "fig", swap_files=[str(out)]))


@pytest.mark.parametrize("key, value", [("donors", 3), ("per_category", 20), ("donor_text", "differ"),
                                        ("orientation", "higher mean |e| predicts invalid")])
def test_different_protocols_are_refused_by_name(key, value):
    rng = np.random.default_rng(2)
    with pytest.raises(DiagnosticsError, match=key):
        swap_pool.pool_swaps([fake_swap("a", rng), fake_swap("b", rng, **{key: value})], n_boot=10)


def test_one_analysis_or_a_checkpoint_twice_is_refused():
    rng = np.random.default_rng(3)
    same = fake_swap("a", rng)
    with pytest.raises(DiagnosticsError, match="at least two"):
        swap_pool.pool_swaps([same], n_boot=10)
    with pytest.raises(DiagnosticsError, match="more than one analysis"):
        swap_pool.pool_swaps([same, same], n_boot=10)


def test_a_folder_without_swap_files_exits_2_naming_it(tmp_path, capsys):
    assert swap_pool.main([str(tmp_path / "nowhere"), str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "nowhere" in capsys.readouterr().err


def test_an_orientation_the_swap_command_does_not_write_is_refused():
    from rescoring.swap import ORIENTATION, orientation_class

    assert [orientation_class(ORIENTATION.format(h)) for h in ("progress", "invalid")] == ["progress", "invalid"]
    rng = np.random.default_rng(4)
    with pytest.raises(DiagnosticsError, match="orientation"):
        swap_pool.pool_swaps([fake_swap(r, rng, orientation="higher |e| is better") for r in "ab"], n_boot=10)
