"""The diagnostics commands on synthetic replay folders (test input only)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from diagnostics import auroc, dratio, report, robustness, tails

ROOT = Path(__file__).resolve().parents[2]


def run_json(capsys, main, args):
    assert main([*args, "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # exactly one JSON object on stdout
    return json.loads(out)


def pooled_steps(run):
    """Independent reference: step scores straight from the parquet files with pandas."""
    steps = pd.concat([pd.read_parquet(p) for p in sorted(Path(run).glob("global_step_*/replay/steps.parquet"))])
    tokens = pd.concat([pd.read_parquet(p) for p in sorted(Path(run).glob("global_step_*/replay/tokens.parquet"))])
    tokens["full"] = tokens["logp_full"].astype(float) - tokens["logp_student"]
    tokens["residual"] = tokens["logp_full"].astype(float) - tokens["logp_ablated"]
    tokens["ablated"] = tokens["logp_ablated"].astype(float) - tokens["logp_student"]
    s = tokens.groupby(["global_step", "traj_uid", "step_idx"])[["full", "residual", "ablated"]].mean().reset_index()
    steps = steps[steps["selected"] & steps["feedback_label"].isin(["valid", "invalid"])]
    return steps.merge(s, on=["global_step", "traj_uid", "step_idx"])


def test_auroc_command_matches_sklearn(synth_run, capsys):
    res = run_json(capsys, auroc.main, ["--run", str(synth_run), "--n-boot", "200"])
    assert set(res) == {"n_steps", "n_valid", "n_invalid", "n_trajectories", "n_boot", "signals"}
    ref = pooled_steps(synth_run)
    y = ref["feedback_label"] == "valid"
    assert res["n_steps"] == len(ref) and res["n_valid"] == int(y.sum())
    for name in ("ablated", "full", "residual"):
        sig = res["signals"][name]
        assert sig["auroc"] == pytest.approx(roc_auc_score(y, ref[name]), abs=1e-9)
        assert sig["ci_low"] <= sig["auroc"] <= sig["ci_high"]
    assert res["signals"]["residual"]["auroc"] > res["signals"]["full"]["auroc"]  # planted
    assert main_table_ok(auroc.main, synth_run, capsys, "Residual (e)")


def main_table_ok(main, run, capsys, needle, extra=()):
    assert main(["--run", str(run), "--n-boot", "50", *extra]) == 0
    return needle in capsys.readouterr().out


def test_ckpt_flags_pool_like_run(synth_run, capsys):
    ckpts = [str(p) for p in sorted(synth_run.glob("global_step_*"))]
    a = run_json(capsys, auroc.main, ["--run", str(synth_run), "--n-boot", "100"])
    args = [x for c in ckpts for x in ("--ckpt", c)]
    b = run_json(capsys, auroc.main, [*args, "--n-boot", "100"])
    assert a == b


def test_robustness_command(synth_run, capsys):
    res = run_json(capsys, robustness.main, ["--run", str(synth_run), "--n-boot", "100"])
    assert set(res) == {"raw", "standard", "matched", "early", "middle", "late"}
    for v in res.values():
        assert set(v) == {"delta", "ci_low", "ci_high", "n_steps"}
        assert v["ci_low"] <= v["delta"] <= v["ci_high"]
    ref = pooled_steps(synth_run)
    y = ref["feedback_label"] == "valid"
    assert res["raw"]["delta"] == pytest.approx(roc_auc_score(y, ref["residual"]) - roc_auc_score(y, ref["full"]))
    assert res["early"]["n_steps"] + res["middle"]["n_steps"] + res["late"]["n_steps"] == res["raw"]["n_steps"]
    early = ref[ref["global_step"] <= 50]  # 150-step run: 1-50
    ye = early["feedback_label"] == "valid"
    assert res["early"]["delta"] == pytest.approx(roc_auc_score(ye, early["residual"]) - roc_auc_score(ye, early["full"]))
    assert res["raw"]["delta"] > 0 and res["matched"]["delta"] > 0


def test_dratio_command(synth_run, capsys):
    res = run_json(capsys, dratio.main, ["--run", str(synth_run), "--n-boot", "100"])
    cats = res["categories"]
    assert list(cats) == ["Format", "Action", "Entity/State", "Reasoning", "Other"]
    assert all(0 <= c["mean"] < 1 and c["n_words"] > 0 for c in cats.values())
    assert cats["Entity/State"]["mean"] > cats["Format"]["mean"]  # planted


def test_tails_command(synth_run, tmp_path, capsys):
    res = run_json(capsys, tails.main, ["--run", str(synth_run), "--out", str(tmp_path), "--top", "5"])
    assert set(res["top"]) == {"full+", "ablated+", "residual+", "residual-"}
    assert "full+|ablated+" in res["overlap"]
    assert all(len(v) == 5 for v in res["top"].values())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tails.json", "tails_top_words.csv"]
    assert json.loads(Path(res["files"]["json"]).read_text())["clouds"] == res["clouds"]
    for name, words in res["clouds"].items():  # the 100 largest positive sizes of each tail, largest first
        assert 0 < len(words) <= 100 and all(v > 0 for v in words.values())
        assert list(words.values()) == sorted(words.values(), reverse=True)
    csv = pd.read_csv(res["files"]["csv"])
    assert set(csv.columns) == {"tail", "rank", "word", "rate", "count", "size"}
    row = csv.iloc[0]
    assert row["size"] == pytest.approx(row["rate"] * np.log1p(row["count"]), rel=1e-5)


def test_report_command_writes_data_and_links_the_pictures(synth_run, tmp_path, capsys):
    assert report.main(["--run", str(synth_run), "--out", str(tmp_path), "--n-boot", "50"]) == 0
    assert f"pictures: python -m figures.panels {tmp_path / 'report.json'}" in capsys.readouterr().out
    md = (tmp_path / "report.md").read_text()
    for part in ("Feedback AUROC", "Delta AUROC", "functional role", "Tail-enriched", "auroc.png", "dratio.png",
                 "cloud_residual_plus.png", "python -m figures.panels report.json", "OCSD's token weights",
                 "credit.png", "| invalid - valid |"):
        assert part in md
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "report.md", "tails_top_words.csv"]
    assert set(json.loads((tmp_path / "report.json").read_text())["tails"]["clouds"]) <= set(tails.TAILS)


@pytest.mark.parametrize("command", [report, robustness])
def test_the_matched_bootstrap_bar_shows_unless_no_progress(command, synth_run, tmp_path, capsys):
    args = ["--run", str(synth_run), "--n-boot", "30"] + (["--out", str(tmp_path)] if command is report else [])
    assert command.main(args) == 0
    assert "matched bootstrap" in capsys.readouterr().err
    assert command.main([*args, "--no-progress"]) == 0
    quiet = capsys.readouterr()
    assert "matched bootstrap" not in quiet.err and "Delta AUROC" in quiet.out


def test_bad_input_exit_2_without_traceback(tmp_path):
    env_cmd = [sys.executable, "-m", "diagnostics.auroc", "--json", "--n-boot", "10"]
    proc = subprocess.run([*env_cmd, "--run", str(tmp_path / "missing")], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "missing" in proc.stderr
    assert proc.stdout == ""
    (tmp_path / "global_step_5" / "replay").mkdir(parents=True)
    proc = subprocess.run([*env_cmd, "--ckpt", str(tmp_path / "global_step_5")], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "incomplete" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run([*env_cmd], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "--run" in proc.stderr


def test_no_invalid_steps_gives_nan_with_warning(make_ckpt, capsys):
    ckpt = make_ckpt(10, n_traj=4, labels=("valid", "ambiguous"), label_p=(0.7, 0.3))
    with pytest.warns(UserWarning, match="valid and invalid"):
        res = run_json(capsys, auroc.main, ["--ckpt", str(ckpt), "--n-boot", "20"])
    assert res["n_invalid"] == 0 and res["signals"]["full"]["auroc"] is None
    with pytest.warns(UserWarning):
        rob = run_json(capsys, robustness.main, ["--ckpt", str(ckpt), "--n-boot", "20"])
    assert rob["raw"]["delta"] is None


def test_one_checkpoint_and_empty_selection(make_ckpt, capsys):
    ckpt = make_ckpt(10, n_traj=6)
    with pytest.warns(UserWarning, match="stage"):  # one checkpoint: only the late third has steps
        rob = run_json(capsys, robustness.main, ["--ckpt", str(ckpt), "--n-boot", "20"])
    assert rob["early"]["delta"] is None and rob["late"]["n_steps"] == rob["raw"]["n_steps"]
    empty = make_ckpt(20, n_traj=2, rho=0.0)
    assert auroc.main(["--ckpt", str(empty), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "no steps" in captured.err


def test_report_diagnose_equals_each_diagnosis(synth_run):
    """Each part of the report is its command's result on data loaded without the credit's columns, so that loading
    them (every step read, then the selection) changes none of the other numbers."""
    from diagnostics import credit
    from diagnostics.load import load
    from ocsd.cli import jsonable

    plain = load([synth_run])
    data = load([synth_run], properties=credit.training_columns)
    result, rates = report.diagnose(data, n_boot=30, seed=2, top=8, progress=False)
    assert list(result) == ["auroc", "robustness", "dratio", "tails", "credit", "seconds"]
    assert jsonable(result["auroc"]) == jsonable(auroc.feedback_auroc(plain, n_boot=30, seed=2))
    assert jsonable(result["robustness"]) == jsonable(robustness.robustness(plain, n_boot=30, seed=2))
    assert jsonable(result["dratio"]) == jsonable(dratio.dratio(plain, n_boot=30, seed=2))
    ref_tails, ref_rates = tails.tails(plain, top=8)
    assert jsonable(result["tails"]) == jsonable(ref_tails)
    pd.testing.assert_frame_equal(rates, ref_rates)
    assert jsonable(result["credit"]) == jsonable(credit.credit(data, n_boot=30, seed=2))
    without, _ = report.diagnose(plain, n_boot=30, seed=2, top=8, progress=False)
    assert "credit" not in without  # data loaded without the advantage and selection


def test_a_report_without_valid_or_invalid_steps_leaves_the_credit_out(make_ckpt, tmp_path, capsys):
    ckpt = make_ckpt(10, n_traj=4, labels=("ambiguous",), label_p=(1.0,))
    with pytest.warns(UserWarning, match="credit is left out"):
        assert report.main(["--ckpt", str(ckpt), "--out", str(tmp_path), "--n-boot", "20", "--no-progress"]) == 0
    assert "credit" not in json.loads((tmp_path / "report.json").read_text())
    assert "OCSD's token weights" not in (tmp_path / "report.md").read_text()


def test_cloud_frequencies_are_the_largest_positive_sizes():
    rates = pd.DataFrame({"tail": ["full+"] * 3 + ["residual-"] * 2, "word": ["a", "b", "c", "d", "e"],
                          "rate": [0.5, 0.2, 0.0, 0.0, 0.0], "count": [3, 2, 4, 1, 1],
                          "size": [0.6, 0.3, 0.0, 0.0, 0.0]})
    assert tails.cloud_frequencies(rates, top=1) == {"full+": {"a": 0.6}}
    assert tails.cloud_frequencies(rates) == {"full+": {"a": 0.6, "b": 0.3}}


def test_cloud_file_names():
    assert [tails.cloud_file(t) for t in tails.TAILS] == ["cloud_full_plus.png", "cloud_ablated_plus.png",
                                                         "cloud_residual_plus.png", "cloud_residual_minus.png"]
