"""``training.train env=searchqa``, ``training.collect`` and ``training.evaluate --env searchqa`` with the tiny
random model on the generated questions (real trainer, rollout, retrieval server over loopback and update),
and an evaluation of the real HotpotQA sample searched over its own paragraphs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("bm25s")

from ocsd.environments.searchqa import GENERATED_FAMILIES  # noqa: E402
from training.evaluate import main as evaluate_main  # noqa: E402
from training.train import main as train_main  # noqa: E402

TINY = ["env=searchqa", "data=generated", "model=tiny", "batch_size=1", "group_size=2", "max_steps=2",
        "max_response_length=8", "max_prompt_length=1024", "save_freq=1", "n_train_games=4", "n_val_games=2",
        "progress=false", "micro_batch_tokens=4096"]
SHARED = Path(__file__).resolve().parents[3] / "shared" / "searchqa"


def test_train_then_evaluate(tmp_path, capsys):
    run, games = tmp_path / "run", tmp_path / "games"
    assert train_main([*TINY, f"games_dir={games}", f"run_dir={run}", "total_steps=1", "test_freq=1",
                       "val_tasks=2"]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1]
    assert all(k in rows[0] for k in ("val/em_id", "val/em_ood", "val/em_avg", "val/success_rate"))
    info = json.loads((run / "run.json").read_text())
    assert info["config"]["env"] == "searchqa" and info["games"]["origin"].startswith("generated:")
    assert info["games"]["retrieval"] == "builtin:wiki"
    capsys.readouterr()
    rc = evaluate_main(["--ckpt", str(run / "global_step_1"), "--env", "searchqa", "--data", "generated", "--tasks",
                        "2", "--json", f"games_dir={games}", "max_response_length=8", "progress=false"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and out["env"] == "searchqa" and out["max_steps"] == 4 and out["n"] == 2
    assert {"em_id", "em_ood", "em_avg"} <= set(out) and 0.0 <= out["em_avg"] <= 1.0
    assert len(out["per_type"]) == 2 and set(out["per_type"]) <= set(GENERATED_FAMILIES)


@pytest.mark.skipif(not (SHARED / "hotpotqa_distractor_sample100.jsonl").is_file(),
                    reason="../shared/searchqa (real HotpotQA sample) is not available")
def test_evaluate_real_hotpotqa_sample(tmp_path, capsys):
    rc = evaluate_main(["--ckpt", "tiny", "--env", "searchqa", "--data", str(SHARED), "--split", "hotpotqa",
                        "--tasks", "2", "--json", "max_response_length=8", "progress=false", "retrieval_corpus=hotpotqa"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and out["tasks_from"] == f"real:{SHARED}:hotpotqa" and set(out["per_type"]) == {"hotpotqa"}
    assert out["n"] == 2 and out["em_id"] == out["em_avg"]


def test_evaluate_bad_data_exits_2(tmp_path, capsys):
    (tmp_path / "nq_test.jsonl").write_text('{"question": "q"}\n')
    rc = evaluate_main(["--ckpt", "tiny", "--env", "searchqa", "--data", str(tmp_path), "progress=false",
                        "retrieval_corpus=wiki"])
    assert rc == 2 and "nq_test.jsonl: row 0: no gold answers" in capsys.readouterr().err


def test_paper_config_is_valid():
    from training.config import load_config

    cfg = load_config(Path(__file__).resolve().parents[2] / "training" / "configs" / "searchqa_paper.yaml",
                      ["device=cpu", "data=generated"])
    assert (cfg.env, cfg.batch_size, cfg.group_size, cfg.max_steps, cfg.max_prompt_length, cfg.kl_coef) == \
           ("searchqa", 128, 8, 4, 4096, 0.001)
