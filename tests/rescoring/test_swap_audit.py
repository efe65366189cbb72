"""``rescoring.swap`` and ``rescoring.audit`` on checkpoints the trainer wrote with the tiny model.

The run's rollouts pick admissible actions from the prompt (``acting.AdmissibleEngine``), so its steps have
progress, no-progress and invalid labels and many operators; the tiny model scores, selects and updates.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).parent))

from acting import acting_run  # noqa: E402

from rescoring import audit as audit_mod  # noqa: E402
from rescoring import swap as swap_mod  # noqa: E402
from diagnostics.load import DiagnosticsError  # noqa: E402
from diagnostics.tails import cloud_file  # noqa: E402
from figures.panels import draw_file  # noqa: E402
from rescoring.rescore import Rescorer, run_checkpoints, swapped_record  # noqa: E402
from ocsd.records import CONTEXT_COLUMNS, RecordError, read_checkpoint, write_replay  # noqa: E402
from ocsd.replay.stored import stored_records  # noqa: E402
from ocsd.replay.views import FullView, SwapView  # noqa: E402


@pytest.fixture(scope="module")
def learning_run(tmp_path_factory, games_dir):
    return acting_run(tmp_path_factory.mktemp("swap") / "learning", games_dir, total_steps=1, lr=1e-2, seed=1)


class FullCopy(FullView):
    """Full under another name: its audit must reproduce Full's numbers."""

    name = "full_copy"


# ----------------------------------------------------------------------------------------------
# stored context
# ----------------------------------------------------------------------------------------------


def test_trainer_writes_the_context_and_the_run_acts(frozen_run):
    ckpt = read_checkpoint(frozen_run / "global_step_1")
    steps = ckpt.steps
    assert set(CONTEXT_COLUMNS) <= set(steps.columns)
    assert set(steps["progress_label"]) == {"progress", "no_progress", "invalid"}
    assert steps["operator"].nunique() >= 3
    # o_0 is each trajectory's first obs; o_{k+1} is the next row's obs
    for _, traj in steps.groupby("traj_uid"):
        traj = traj.sort_values("step_idx")
        assert traj["obs"].iloc[1:].tolist() == traj["obs_next"].iloc[:-1].tolist()


def _assert_rescored_as_stored(ckpt):
    records = stored_records(ckpt.steps, ckpt.tokens, "alfworld")
    assert records
    rescorer = Rescorer(ckpt.weights, env="alfworld", max_prompt_length=1024)
    rendered, skipped = rescorer.render(list(records.values()), ["full", "ablated"])
    assert not skipped and len(rendered) == len(records)
    scored = rescorer.score([r.contexts for r in rendered], [r.response_ids for r in rendered], progress=False)
    tokens = ckpt.tokens.set_index(["traj_uid", "step_idx"]).sort_index()
    for r, logp in zip(rendered, scored):
        uid, k = r.step.key.rsplit(":", 1)
        stored = tokens.loc[(uid, int(k))].sort_values("token_idx")
        np.testing.assert_allclose(logp["full"], stored["logp_full"], atol=2e-4)
        np.testing.assert_allclose(logp["ablated"], stored["logp_ablated"], atol=2e-4)


def test_stored_records_render_what_the_trainer_scored(frozen_run):
    """With the weights unchanged, re-scoring Full and Ablated of the stored steps gives the stored log-probs."""
    _assert_rescored_as_stored(run_checkpoints(frozen_run, [1])[0])


def test_a_collection_is_re_scored_with_the_weights_it_names(frozen_run, tmp_path):
    from training.collect import main as collect

    out = tmp_path / "collected"
    assert collect(["--model", str(frozen_run / "global_step_2"), "--tasks", "1", "--group", "2", "--out", str(out),
                    "--seed", "4", "progress=false"]) == 0
    ckpt = run_checkpoints(out, [2])[0]
    assert ckpt.weights == str(frozen_run / "global_step_2" / "actor") and not (ckpt.folder / "actor").exists()
    _assert_rescored_as_stored(ckpt)


def test_checkpoints_without_context_are_refused_by_name(frozen_run, tmp_path):
    ckpt = read_checkpoint(frozen_run / "global_step_1")
    old = tmp_path / "old" / "global_step_1"
    write_replay(old / "replay", ckpt.steps.drop(columns=list(CONTEXT_COLUMNS)), ckpt.tokens, ckpt.metas[0])
    with pytest.raises(RecordError, match="context column.*task"):
        stored_records(read_checkpoint(old).steps, ckpt.tokens, "alfworld")


# ----------------------------------------------------------------------------------------------
# swap
# ----------------------------------------------------------------------------------------------


def test_targets_stratified_without_reusing_trajectories(frozen_run):
    steps = read_checkpoint(frozen_run / "global_step_1").steps
    for seed in range(5):
        targets = swap_mod.select_targets(steps, 2, np.random.default_rng(seed))
        assert targets["traj_uid"].is_unique
        assert (targets["selected"] & targets["scored"]).all()
        assert targets["category"].value_counts().max() <= 2
    a = swap_mod.select_targets(steps, 2, np.random.default_rng(7))
    b = swap_mod.select_targets(steps, 2, np.random.default_rng(7))
    pd.testing.assert_frame_equal(a, b)


@pytest.mark.parametrize("same_text", [True, False])
def test_donor_rules(frozen_run, same_text):
    steps = read_checkpoint(frozen_run / "global_step_1").steps
    targets = swap_mod.select_targets(steps, 40, np.random.default_rng(0))
    donors, short = swap_mod.assign_donors(steps, targets, 2, np.random.default_rng(0), same_text=same_text)
    assert donors and set(donors).isdisjoint(short)
    assert len(donors) + len(short) == len(targets)
    same = 0
    for row in targets.itertuples():
        key = (row.traj_uid, row.step_idx)
        if key not in donors:
            continue
        others = steps[(steps["traj_uid"] != row.traj_uid) & (steps["operator"] == row.operator)]
        for obs in donors[key]:
            assert obs in set(others["obs_next"])  # from another trajectory, same operator, never the step's own
            same += obs == row.obs_next
    # the appendix's sampling lets a donor read like the step's own o_{k+1} ("Nothing happens."); differ never does
    assert (same > 0) if same_text else (same == 0)
    # a target whose operator nobody else used has no donor and is reported with its count
    lonely = targets.iloc[:1].assign(operator="nobody")
    got, missing = swap_mod.assign_donors(steps, lonely, 1, np.random.default_rng(0))
    assert not got and list(missing.values()) == [0]


def test_swapped_view_differs_from_full_only_in_the_first_observation(frozen_run):
    from ocsd.replay.models import load_tokenizer
    from ocsd.replay.prompts import PromptRenderer

    ckpt = run_checkpoints(frozen_run, [1])[0]
    renderer = PromptRenderer(load_tokenizer("smollm2"))
    record = next(r for r in stored_records(ckpt.steps, ckpt.tokens, "alfworld").values() if len(r.future_obs) >= 2)
    donor = "You arrive at a place nobody has seen."
    full = FullView().render_view(record, renderer)
    swapped = FullView().render_view(swapped_record(record, donor), renderer)
    assert [s.kind for s in full.segments] == [s.kind for s in swapped.segments]
    differ = [i for i, (a, b) in enumerate(zip(full.segments, swapped.segments)) if a.ids != b.ids]
    first_obs = [i for i, s in enumerate(full.segments) if s.kind == "observation"][0]
    assert differ == [first_obs] and donor in swapped.segments[first_obs].text
    # the registered swap view is the same prompt
    assert SwapView().render(replace(record, donor_obs=donor), renderer) == swapped.ids


def test_swap_command_writes_the_result_and_is_deterministic(frozen_run, tmp_path, capsys):
    args = ["--run", str(frozen_run), "--donors", "2", "--per-category", "3", "--n-boot", "50", "--no-progress"]
    assert swap_mod.main([*args, "--out", str(tmp_path / "a")]) == 0
    printed = capsys.readouterr()
    assert "Observation swap" in printed.out and "none of the paper's checkpoints" in printed.err
    result = json.loads((tmp_path / "a" / "swap.json").read_text())
    for key in ("realized", "swapped"):
        assert set(result[key]) == {"auroc", "ci_low", "ci_high"}
    assert result["n_steps"] == result["n_progress"] + result["n_no_progress"] + result["n_invalid"]
    assert [p["global_step"] for p in result["per_checkpoint"]] == [1, 2]
    # named by the checkpoints' own actor/ folders, not where a merge may have put them
    assert result["model"] == swap_mod.OWN_WEIGHTS
    assert [p["weights"] for p in result["per_checkpoint"]] == [
        str(Path(frozen_run).resolve() / f"global_step_{n}" / "actor") for n in (1, 2)]
    # weights unchanged by the update: the re-scored residuals are the stored ones
    assert all(p["rescored_max_abs_diff"] < 2e-4 for p in result["per_checkpoint"])
    steps = pd.read_csv(tmp_path / "a" / "swap_steps.csv")
    assert len(steps) == result["n_steps"] and not steps.duplicated(["global_step", "traj_uid"]).any()
    assert (steps.groupby(["global_step", "category"]).size() <= 3).all()
    # every target is scored or reported
    assert result["n_steps"] + result["n_insufficient_donors"] + len(result["unrendered"]) >= len(steps)
    assert swap_mod.main([*args, "--out", str(tmp_path / "b")]) == 0
    again = json.loads((tmp_path / "b" / "swap.json").read_text())
    assert again == result
    assert swap_mod.main([*args, "--out", str(tmp_path / "c"), "--seed", "5"]) == 0
    other = pd.read_csv(tmp_path / "c" / "swap_steps.csv")
    assert not other[["traj_uid", "step_idx"]].equals(steps[["traj_uid", "step_idx"]])
    assert not any((tmp_path / d / ".scores").exists() for d in "abc")  # kept only until the results are written


def test_a_swap_stopped_before_its_results_scores_nothing_again(frozen_run, tmp_path, monkeypatch, capsys):
    """Writing the results fails after both checkpoints were scored: the same command again reads their scores from
    OUT/.scores and writes what a run that never stopped writes."""
    from ocsd.replay.scoring import ReplayScorer

    args = ["--run", str(frozen_run), "--donors", "2", "--per-category", "3", "--n-boot", "50", "--no-progress"]
    assert swap_mod.main([*args, "--out", str(tmp_path / "whole")]) == 0
    calls = []
    score = ReplayScorer.score
    monkeypatch.setattr(ReplayScorer, "score", lambda self, *a, **k: calls.append(1) or score(self, *a, **k))
    write = swap_mod.write_outputs
    monkeypatch.setattr(swap_mod, "write_outputs", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        swap_mod.main([*args, "--out", str(tmp_path / "stopped")])
    assert len(calls) == 2 and len(list((tmp_path / "stopped" / ".scores").glob("*.npz"))) == 2
    monkeypatch.setattr(swap_mod, "write_outputs", write)
    assert swap_mod.main([*args, "--out", str(tmp_path / "stopped")]) == 0
    assert len(calls) == 2 and not (tmp_path / "stopped" / ".scores").exists()
    assert (json.loads((tmp_path / "stopped" / "swap.json").read_text())
            == json.loads((tmp_path / "whole" / "swap.json").read_text()))


def test_swap_realized_score_is_the_stored_residual(frozen_run):
    ckpt = run_checkpoints(frozen_run, [2])[0]
    rescorer = Rescorer(ckpt.weights, env="alfworld", max_prompt_length=1024)
    frame, short, skipped, gap = swap_mod.checkpoint_swap(ckpt, rescorer, donors=2, per_category=5, seed=0,
                                                          progress=False)
    e = ckpt.tokens.assign(e=(ckpt.tokens["logp_full"] - ckpt.tokens["logp_ablated"]).abs())
    stored = e.groupby(["traj_uid", "step_idx"])["e"].mean()
    for row in frame.itertuples():
        assert row.S_realized == pytest.approx(stored.loc[(row.traj_uid, row.step_idx)], abs=2e-4)
    assert gap < 2e-4 and not skipped


def test_learning_run_reports_how_far_the_weights_moved(learning_run, frozen_run):
    kwargs = dict(ckpt_steps=[1], donors=1, per_category=3, n_boot=20, progress=False)
    moved = swap_mod.swap_analysis(learning_run, **kwargs)[0]["per_checkpoint"][0]["rescored_max_abs_diff"]
    still = swap_mod.swap_analysis(frozen_run, **kwargs)[0]["per_checkpoint"][0]["rescored_max_abs_diff"]
    assert moved > 20 * still


@pytest.mark.parametrize("argv, message", [
    (["--ckpt-steps", "9"], "no complete checkpoint at step"),
    (["--ckpt-steps", "x"], "not a global step"),
    (["--model", "/nonexistent"], "nonexistent"),
])
def test_swap_bad_input_exits_2(frozen_run, argv, message, capsys):
    assert swap_mod.main(["--run", str(frozen_run), "--no-progress", *argv]) == 2
    assert message in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# audit
# ----------------------------------------------------------------------------------------------


def test_audit_of_a_copy_of_full_reproduces_full(frozen_run, tmp_path):
    result = audit_mod.build_audit(frozen_run, f"{__file__}:FullCopy", tmp_path, donors=2, per_category=3, n_boot=50,
                                   progress=False)
    assert result["view"] == "full_copy" and result["twin"] == "ablated"
    assert result["weights"] == [str(Path(frozen_run).resolve() / f"global_step_{n}" / "actor") for n in (1, 2)]
    for part in ("auroc", "robustness", "dratio"):
        assert json.dumps(result["design"][part]) == json.dumps(result["baseline"][part])
    assert json.dumps(result["swap"]["design"]) == json.dumps(result["swap"]["baseline"])
    assert np.isfinite(result["baseline"]["auroc"]["signals"]["residual"]["auroc"])
    assert np.isfinite(result["swap"]["baseline"]["realized"]["auroc"])
    assert result["residual_gain"]["delta"] == 0.0
    st = result["structure"]
    assert st["matched"] == st["checked"] == result["n_steps"] > 0
    assert result["points"][0]["verdict"] == "matched"
    assert all(p["verdict"].startswith(("no clear difference", "undetermined")) for p in result["points"][1:])
    text = (tmp_path / "audit.md").read_text()
    assert "Verdict, point by point" in text and "![audit](audit.png)" in text
    assert not list(tmp_path.glob("*.png"))
    drawn = draw_file(tmp_path / "audit.json")
    assert drawn[0] == str(tmp_path / "audit.png") and all(Path(p).stat().st_size > 0 for p in drawn)
    assert [Path(p).name for p in drawn[1:]] == [cloud_file(t) for t in result["design"]["tails"]["clouds"]]
    assert json.loads((tmp_path / "audit.json").read_text())["view"] == "full_copy"
    steps = pd.read_csv(tmp_path / "audit_steps.csv")
    for signal in ("ablated", "full", "residual"):
        assert steps[f"design_{signal}"].equals(steps[f"baseline_{signal}"])


def test_audit_of_the_scaffold_view_reports_what_differs(frozen_run, tmp_path, capsys):
    assert audit_mod.main(["--run", str(frozen_run), "--view", "scaffold_only", "--ckpt-steps", "1", "--donors", "2",
                           "--per-category", "3", "--n-boot", "30", "--no-progress", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "audit.json").read_text())
    st = result["structure"]
    # the scaffold drops the schema segment that its twin (ablated) keeps (steps at a trajectory's end have none
    # in either): not matched, and it shows no observation
    assert st["matched"] < st["checked"] and "schema" in st["first_mismatch"]
    assert result["swap"]["design"]["shows_observation"] is False
    assert result["swap"]["baseline"]["shows_observation"] is True
    verdicts = {p["point"].split(" (")[0]: p["verdict"] for p in result["points"]}
    assert verdicts["structural match"] == "not matched"
    assert verdicts["observation-swap sensitivity"] == "not applicable"
    assert "Audit of scaffold_only" in capsys.readouterr().out


def test_audit_one_observation_view_pairs_with_its_twin(frozen_run, tmp_path):
    result = audit_mod.build_audit(frozen_run, "one_obs", tmp_path, ckpt_steps=[2], swap=False, n_boot=30,
                                   progress=False)
    assert result["twin"] == "one_obs_ablated"
    assert result["structure"]["matched"] == result["structure"]["checked"] > 0
    assert "swap" not in result
    # every audited step's signals on both sides, and the AUROCs the report gives, recomputed from them
    steps = pd.read_csv(tmp_path / "audit_steps.csv")
    assert list(steps.columns) == list(audit_mod.STEP_COLUMNS) and result["files"]["steps"].endswith("audit_steps.csv")
    assert len(steps) == result["n_steps"] and set(steps["global_step"]) == {2}
    lab = steps[steps["feedback_label"].isin(["valid", "invalid"])]
    y = lab["feedback_label"].eq("valid").to_numpy()
    assert len(lab) == result["design"]["auroc"]["n_steps"] and 0 < y.sum() < len(y)
    for side in audit_mod.SIDES:
        for signal in ("ablated", "full", "residual"):
            assert roc_auc_score(y, lab[f"{side}_{signal}"]) == pytest.approx(
                result[side]["auroc"]["signals"][signal]["auroc"], abs=1e-12)
    assert roc_auc_score(y, lab["design_residual"]) - roc_auc_score(y, lab["baseline_residual"]) == pytest.approx(
        result["residual_gain"]["delta"], abs=1e-12)
    # the residual is the view's minus the twin's score: support minus ablated, side by side
    for side in audit_mod.SIDES:
        np.testing.assert_allclose(steps[f"{side}_residual"], steps[f"{side}_full"] - steps[f"{side}_ablated"],
                                   atol=1e-6)


def test_audit_model_flag_replaces_the_checkpoints_weights(frozen_run, tmp_path):
    other = str(frozen_run / "global_step_1" / "actor")
    result = audit_mod.build_audit(frozen_run, "one_obs", tmp_path, ckpt_steps=[2], swap=False, n_boot=20,
                                   model=other, progress=False)
    assert result["weights"] == [other]


def test_audit_bad_view_exits_2(frozen_run, capsys):
    assert audit_mod.main(["--run", str(frozen_run), "--view", "no.such:View"]) == 2
    assert "--view" in capsys.readouterr().err
    with pytest.raises(DiagnosticsError, match="both named"):
        audit_mod.Design.of("ablated", "ablated")
