"""The embedded default end to end: the README's main command (training, report, swap, figures) on a fresh run
folder (slow: minutes)."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from ocsd.records import read_metrics, read_replay, validate_path

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_demo_trains_and_the_report_and_figures_run(tmp_path):
    pytest.importorskip("alfworld", reason="the ALFWorld engine (envs extra) is not installed")
    run = tmp_path / "demo"
    train = subprocess.run([sys.executable, "-m", "training.train", "--config", "training/configs/demo.yaml",
                            f"run_dir={run}", f"games_dir={tmp_path / 'games'}", "progress=false"],
                           capture_output=True, text=True, cwd=ROOT, timeout=1800)
    assert train.returncode == 0, train.stderr[-3000:]
    assert validate_path(run) == []
    data = read_replay(run)
    assert data.global_steps == [1, 2] and len(data.tokens) > 0
    rows = read_metrics(run)
    assert [r["step"] for r in rows] == [1, 2] and "val/success_rate" in rows[-1]
    # a learning signal: the warm start writes the format, so groups differ and steps differ in feedback (on an
    # AVX2 CPU in float32 it wins 2 of 8 episodes at step 1, one in each group, and none at step 2)
    steps = data.steps
    nonzero = steps.groupby(["global_step", "group_uid"]).advantage.apply(lambda a: bool((a.abs() > 0).any()))
    assert nonzero.mean() >= 0.5, nonzero
    selected = steps[steps.selected]
    assert {"valid", "invalid"} <= set(selected.feedback_label), selected.feedback_label.value_counts()
    assert all(r["well_formed_rate"] >= 0.9 for r in rows)
    report = subprocess.run([sys.executable, "-m", "diagnostics.report", "--run", str(run), "--out",
                             str(run / "report")], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert report.returncode == 0, report.stderr[-3000:]
    assert (run / "report" / "report.md").exists()
    signals = json.loads((run / "report" / "report.json").read_text())["auroc"]["signals"]
    assert all(math.isfinite(v["auroc"]) and math.isfinite(v["ci_low"]) for v in signals.values()), signals
    swap = subprocess.run([sys.executable, "-m", "rescoring.swap", "--run", str(run), "--no-progress"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert swap.returncode == 0, swap.stderr[-3000:]
    result = json.loads((run / "swap" / "swap.json").read_text())
    assert result["checkpoints"] == [1, 2] and result["n_steps"] > 0
    figures = subprocess.run([sys.executable, "-m", "figures", "--run", str(run), "--out", str(run / "figures")],
                             capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert figures.returncode == 0, figures.stderr[-3000:]
    assert (run / "figures" / "fig5_swap.png").exists()
