"""``training.train env=webshop`` and ``training.evaluate --env webshop`` with the tiny random model on the
generated WebShop (real trainer, real rollout, real update)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from training.evaluate import main as evaluate_main  # noqa: E402
from training.train import main as train_main  # noqa: E402

TINY = ["env=webshop", "data=generated", "model=tiny", "batch_size=1", "group_size=2", "max_steps=2",
        "max_response_length=8", "max_prompt_length=1024", "save_freq=1", "n_train_games=4", "n_val_games=2",
        "progress=false", "micro_batch_tokens=4096"]


def test_train_then_evaluate(tmp_path, capsys):
    run = tmp_path / "run"
    assert train_main([*TINY, f"games_dir={tmp_path / 'games'}", f"run_dir={run}", "total_steps=2", "test_freq=1",
                       "val_tasks=2"]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all("val/score" in r and "val/success_rate" in r for r in rows)
    info = json.loads((run / "run.json").read_text())
    assert info["config"]["env"] == "webshop" and info["games"]["origin"].startswith("generated:")
    capsys.readouterr()
    rc = evaluate_main(["--ckpt", str(run / "global_step_2"), "--env", "webshop", "--data", "generated", "--tasks",
                        "2", "--json", f"games_dir={tmp_path / 'games'}", "max_response_length=8", "progress=false"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and out["env"] == "webshop" and out["max_steps"] == 15 and out["n"] == 2
    assert 0.0 <= out["score"] <= 1.0 and set(out["per_type"]) <= {"beauty", "electronics", "fashion", "food",
                                                                       "furniture"}


def test_paper_config_is_valid():
    from pathlib import Path

    from training.config import load_config

    cfg = load_config(Path(__file__).resolve().parents[2] / "training" / "configs" / "webshop_paper.yaml",
                      ["device=cpu", "data=generated"])
    assert (cfg.env, cfg.batch_size, cfg.group_size, cfg.max_steps, cfg.max_prompt_length, cfg.kl_coef) == \
           ("webshop", 16, 8, 15, 4096, 0.01)
