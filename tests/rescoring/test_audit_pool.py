"""``rescoring.audit_pool``: audits of one design pooled, checked against scikit-learn on the concatenated steps."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import zscore
from sklearn.metrics import roc_auc_score

from diagnostics.load import DiagnosticsError
from figures import audit_pool as audit_pool_figure
from rescoring import audit as audit_mod
from rescoring import audit_pool
from ocsd.replay.catalog import cache_root
from training import campaign

ROOT = Path(__file__).resolve().parents[2]

SIGNALS = ("ablated", "full", "residual")


def _steps(rng: np.random.Generator, run: str, global_step: int, *, shift: float, n_traj: int = 12) -> pd.DataFrame:
    """Audited steps of one checkpoint: invalid steps score lower, every score shifted by ``shift``."""
    n = n_traj * 5
    label = rng.choice(["valid", "invalid", "ambiguous"], size=n, p=[0.6, 0.3, 0.1])
    frame = pd.DataFrame({"run": run, "global_step": global_step, "traj_uid": [f"t{i // 5}" for i in range(n)],
                          "step_idx": [i % 5 for i in range(n)], "feedback_label": label})
    for side, lift in (("baseline", 0.4), ("design", 0.8)):
        ablated, full = rng.normal(size=n) + shift, rng.normal(size=n) + shift + lift * (label == "valid")
        frame[f"{side}_ablated"], frame[f"{side}_full"], frame[f"{side}_residual"] = ablated, full, full - ablated
    return frame[list(audit_mod.STEP_COLUMNS)]


@pytest.fixture
def steps():
    rng = np.random.default_rng(np.random.SeedSequence().entropy)  # fresh inputs every run
    return pd.concat([_steps(rng, "a", 2, shift=0.0), _steps(rng, "a", 4, shift=3.0), _steps(rng, "b", 2, shift=-2.0)],
                     ignore_index=True)


def test_pooled_aurocs_are_those_of_the_concatenated_steps(steps):
    result = audit_pool.pooled_statistics(steps, n_boot=40, seed=1)
    lab = steps[steps["feedback_label"] != "ambiguous"]
    y = lab["feedback_label"].eq("valid").to_numpy()
    # the same traj_uid at three checkpoints is three trajectories
    assert result["n_trajectories"] == lab.groupby(["run", "global_step", "traj_uid"]).ngroups == 36
    assert (result["n_steps"], result["n_invalid"], result["n_checkpoints"]) == (len(lab), int((~y).sum()), 3)
    key = lab["run"] + lab["global_step"].astype(str)
    z = {f"{side}_{s}": lab.groupby(key)[f"{side}_{s}"].transform(lambda x: zscore(x, ddof=0))
         for side in ("baseline", "design") for s in SIGNALS}
    for setting, table in (("raw", lab), ("standard", z)):
        entry = result[setting]
        auroc = {f"{side}_{s}": roc_auc_score(y, table[f"{side}_{s}"]) for side in ("baseline", "design")
                 for s in SIGNALS}
        for side in ("baseline", "design"):
            for s in SIGNALS:
                assert entry[side][s]["auroc"] == pytest.approx(auroc[f"{side}_{s}"], abs=1e-12)
                assert entry[side][s]["ci_low"] <= entry[side][s]["ci_high"]
            assert entry["gain_over_support"][side]["delta"] == pytest.approx(
                auroc[f"{side}_residual"] - auroc[f"{side}_full"], abs=1e-12)
        assert entry["residual_gain"]["delta"] == pytest.approx(
            auroc["design_residual"] - auroc["baseline_residual"], abs=1e-12)
        assert entry["support_gain"]["delta"] == pytest.approx(auroc["design_full"] - auroc["baseline_full"], abs=1e-12)


def test_standardizing_within_checkpoints_removes_their_shifts():
    """Each checkpoint ranks its own steps perfectly; pooled raw, the checkpoints' shifts interleave them."""
    rows = []
    for step, shift in ((2, 0.0), (4, 10.0)):
        for i, label in enumerate(["valid", "invalid"] * 6):
            score = shift + (1.0 if label == "valid" else 0.0) + 0.01 * i
            rows.append({"run": "a", "global_step": step, "traj_uid": f"t{i}", "step_idx": 0, "feedback_label": label,
                         **{f"{side}_{s}": score for side in ("baseline", "design") for s in SIGNALS}})
    result = audit_pool.pooled_statistics(pd.DataFrame(rows), n_boot=20)
    assert result["standard"]["design"]["residual"]["auroc"] == 1.0
    assert result["raw"]["design"]["residual"]["auroc"] == pytest.approx(108 / 144)  # 36 of 144 pairs misordered


def test_one_class_only_is_refused(steps):
    with pytest.raises(DiagnosticsError, match="0 invalid"):
        audit_pool.pooled_statistics(steps[steps["feedback_label"] == "valid"], n_boot=10)


# ----------------------------------------------------------------------------------------------
# the command, on two audits of the tiny model's run
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def audits(frozen_run, tmp_path_factory):
    root = tmp_path_factory.mktemp("audits")
    for step in (1, 2):
        audit_mod.build_audit(frozen_run, "one_obs", root / f"step{step}", ckpt_steps=[step], swap=False, n_boot=30,
                              progress=False)
    return [root / "step1", root / "step2"]


def test_the_command_pools_two_audits_and_the_figure_draws_them(audits, tmp_path, capsys):
    out = tmp_path / "pool"
    assert audit_pool.main([*map(str, audits), "--out", str(out), "--n-boot", "40"]) == 0
    assert "2 audits" in capsys.readouterr().out
    result = json.loads((out / "audit_pool.json").read_text())
    steps = pd.read_csv(out / "audit_steps.csv")
    assert len(steps) == sum(len(pd.read_csv(a / "audit_steps.csv")) for a in audits)
    lab = steps[steps["feedback_label"] != "ambiguous"]
    y = lab["feedback_label"].eq("valid").to_numpy()
    assert result["raw"]["residual_gain"]["delta"] == pytest.approx(
        roc_auc_score(y, lab["design_residual"]) - roc_auc_score(y, lab["baseline_residual"]), abs=1e-12)
    for row, folder in zip(result["audits"], audits):
        own = json.loads((folder / "audit.json").read_text())
        assert row["residual_gain"] == own["residual_gain"] and row["checkpoints"] == own["checkpoints"]
    assert (result["view"], result["twin"], result["n_checkpoints"]) == ("one_obs", "one_obs_ablated", 2)
    assert "![pooled audits](audit_pool.png)" in (out / "audit_pool.md").read_text()
    drawn = audit_pool_figure.build(out / "audit_pool.json")
    assert [p.name for p in drawn] == ["audit_pool.png", "audit_pool_fig.json"] and drawn[0].parent == out
    values = json.loads((out / "audit_pool_fig.json").read_text())
    assert list(values) == ["residual", "support (Full)", "residual - support"]
    assert [r["value"] for r in values["residual"]["design - baseline"]][-2:] == [
        result["raw"]["residual_gain"]["delta"], result["standard"]["residual_gain"]["delta"]]
    for side in ("baseline", "design"):
        drawn = [r["value"] for r in values["residual - support"][side]]
        assert drawn == [a["gain_over_support"][side]["delta"] for a in result["audits"]] + [
            result[s]["gain_over_support"][side]["delta"] for s in ("raw", "standard")]


def test_each_audits_gain_over_support_is_sklearns_on_its_own_steps(steps):
    """Per audit, AUROC(residual) - AUROC(full) of each side on that audit's labelled steps, with an interval."""
    one = steps[steps["run"] == "a"]
    gains = audit_pool.audit_gains_over_support(one, n_boot=50, seed=3)
    lab = one[one["feedback_label"] != "ambiguous"]
    y = lab["feedback_label"].eq("valid").to_numpy()
    for side in ("baseline", "design"):
        expected = roc_auc_score(y, lab[f"{side}_residual"]) - roc_auc_score(y, lab[f"{side}_full"])
        assert gains[side]["delta"] == pytest.approx(expected, abs=1e-12)
        assert gains[side]["ci_low"] <= gains[side]["ci_high"]
    assert gains == audit_pool.audit_gains_over_support(one, n_boot=50, seed=3)  # seeded


def test_the_figure_leaves_out_the_support_panel_when_the_design_keeps_the_view(audits, tmp_path):
    """A design that changes only the twin (``full`` with ``masked``) has the baseline's support by construction."""
    result, _ = audit_pool.pool_audits(audits, n_boot=20)
    same = {**result, "view": result["baseline_view"]}
    assert list(audit_pool_figure.panels(same)) == ["residual", "residual - support"]
    assert list(audit_pool_figure.panels(result)) == ["residual", "support (Full)", "residual - support"]
    path = tmp_path / "audit_pool.json"
    path.write_text(json.dumps(same))
    assert [p.name for p in audit_pool_figure.build(path)] == ["audit_pool.png", "audit_pool_fig.json"]
    older = {**result, "audits": [{k: v for k, v in a.items() if k != "gain_over_support"} for a in result["audits"]]}
    path.write_text(json.dumps(older))
    with pytest.raises(audit_pool_figure.FigureError, match="pool the audits again"):
        audit_pool_figure.build(path)


def test_one_audit_or_a_checkpoint_twice_is_refused(audits):
    with pytest.raises(DiagnosticsError, match="at least two"):
        audit_pool.pool_audits(audits[:1])
    with pytest.raises(DiagnosticsError, match="count twice"):
        audit_pool.pool_audits([audits[0], audits[0]])


def test_audits_of_other_views_are_refused_by_name(audits, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(audits[1], other)
    result = json.loads((other / "audit.json").read_text())
    (other / "audit.json").write_text(json.dumps({**result, "twin": "ablated"}))
    with pytest.raises(DiagnosticsError, match="audits twin 'ablated'"):
        audit_pool.pool_audits([audits[0], other])


def test_an_audit_without_its_steps_exits_2_naming_the_file(audits, tmp_path, capsys):
    old = tmp_path / "old"
    shutil.copytree(audits[1], old)
    (old / "audit_steps.csv").unlink()
    assert audit_pool.main([str(audits[0]), str(old), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "audit_steps.csv" in err and "run the audit again" in err
    assert not (tmp_path / "o" / "audit_pool.json").exists()


def test_the_figure_refuses_another_json_naming_it(tmp_path, capsys):
    (tmp_path / "swap.json").write_text(json.dumps({"realized": {}, "swapped": {}}))
    assert audit_pool_figure.main([str(tmp_path / "swap.json")]) == 2
    err = capsys.readouterr().err
    assert "swap.json" in err and "rescoring.audit_pool" in err
    assert not list(tmp_path.glob("*.png"))


def test_the_gpu_scripts_audit_job_is_collected_into_a_series(frozen_run, audits, tmp_path):
    """``results/paper_scale_on_gpu.sh audit`` (on this CPU: AUDIT_DEVICE=cpu) audits each checkpoint named in turn,
    names the one that has no weights and keeps the others; poll brings the bundle, and ``training.campaign collect``
    unpacks it into the series, where the audits pool. The steps scored are those of ``rescoring.audit`` run here."""
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "tiny").symlink_to(frozen_run)
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"),
           "GPUS": "1", "JOBS": str(tmp_path / "jobs"), "OUT": str(tmp_path / "out"), "RUNS_DIR": str(runs),
           "AUDIT_DIR": str(tmp_path / "made"), "AUDIT_DEVICE": "cpu", "CACHE": str(cache_root())}
    (tmp_path / "out").mkdir()

    def script(*args):
        done = subprocess.run(["bash", str(ROOT / "results" / "paper_scale_on_gpu.sh"), *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "started audit_one_obs_tiny on GPU 0" in script("audit", "one_obs_tiny", "tiny", "one_obs",
                                                              "one_obs_ablated", "1", "2", "9")
    polled = script("poll", "840")
    assert "== audit_one_obs_tiny: 1" in polled, polled  # checkpoint 9 has no weights: named, the others kept
    assert "no audit at checkpoint(s) 9" in (tmp_path / "jobs" / "audit_one_obs_tiny.log").read_text()
    series = tmp_path / "series"
    series.mkdir()
    done, invalid = campaign.collect(series, [tmp_path / "out"], tmp_path / "r")
    said = "\n".join(done)
    for step, own in zip((1, 2), audits):
        folder = series / f"audit_one_obs_tiny_step{step}"
        assert f"{folder.name}: copied into {series}" in said
        pd.testing.assert_frame_equal(pd.read_csv(folder / "audit_steps.csv"), pd.read_csv(own / "audit_steps.csv"))
        assert json.loads((folder / "audit.json").read_text())["checkpoints"] == [step]
    assert invalid == [] and len(done) == 2 and not (series / "audit_one_obs_tiny_step9").exists()
    assert not (tmp_path / "r").exists()  # no run came back: nothing is unpacked there
    assert audit_pool.main([str(series / "audit_one_obs_tiny_step1"), str(series / "audit_one_obs_tiny_step2"),
                            "--out", str(tmp_path / "pool"), "--n-boot", "20"]) == 0


def test_an_audit_stopped_after_scoring_scores_nothing_again(frozen_run, audits, tmp_path, monkeypatch):
    """The battery fails after both checkpoints were scored: the scores stay in OUT/.scores, and the same command
    again scores nothing and writes what an audit that never stopped writes; then .scores is gone. Another view
    on the same steps is scored anew."""
    from ocsd.replay.scoring import ReplayScorer

    calls = []
    score = ReplayScorer.score
    monkeypatch.setattr(ReplayScorer, "score", lambda self, *a, **k: calls.append(1) or score(self, *a, **k))
    real = audit_mod._batteries
    monkeypatch.setattr(audit_mod, "_batteries", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    out = tmp_path / "audit"
    with pytest.raises(KeyboardInterrupt):
        audit_mod.build_audit(frozen_run, "one_obs", out, ckpt_steps=[1], swap=False, n_boot=30, progress=False)
    assert len(calls) == 1 and len(list((out / audit_mod.SCORES_FOLDER).glob("*.npz"))) == 1
    monkeypatch.setattr(audit_mod, "_batteries", real)
    again = audit_mod.build_audit(frozen_run, "one_obs", out, ckpt_steps=[1], swap=False, n_boot=30, progress=False)
    assert len(calls) == 1  # read back, not scored
    pd.testing.assert_frame_equal(pd.read_csv(out / "audit_steps.csv"), pd.read_csv(audits[0] / "audit_steps.csv"))
    assert again["residual_gain"] == json.loads((audits[0] / "audit.json").read_text())["residual_gain"]
    assert not (out / audit_mod.SCORES_FOLDER).exists()
    audit_mod.build_audit(frozen_run, "full", tmp_path / "other", twin="masked", ckpt_steps=[1], swap=False,
                          n_boot=30, progress=False)
    assert len(calls) == 2
