"""``benchmarks/rollout_pipeline.py`` without a GPU: the means it reports and its refusals."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "rollout_pipeline.py"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(PATH.parent))
    spec = importlib.util.spec_from_file_location("rollout_pipeline", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(mode, seconds, tokens, rng):
    parts = rng.dirichlet(np.ones(3)) * seconds
    return {"mode": mode, "rollout_s": seconds, "new_tokens": tokens, "tokens_per_s": tokens / seconds,
            "env_steps": 1920, "time/rollout_generate": parts[0], "time/rollout_env": parts[1],
            "time/rollout_render": parts[2]}


def test_summary_means_each_mode_and_the_ratio(bench):
    rng = np.random.default_rng(0)
    rows = [_row("turns", 30.0, 480000, rng), _row("pipelined", 20.0, 500000, rng),
            _row("pipelined", 25.0, 490000, rng), _row("turns", 40.0, 470000, rng)]
    got = bench.summarise(rows)
    assert got["turns"]["rollout_s"] == pytest.approx(35.0)
    assert got["pipelined"]["tokens_per_s"] == pytest.approx((25000 + 19600) / 2)
    assert got["turns"]["time/rollout_sync"] == 0.0  # a part no row timed
    assert got["ratio"] == pytest.approx(22300 / ((16000 + 11750) / 2))
    text = bench.table(got, [dict(rows[0], round=0)])
    assert f"| **rollout new tokens/s** | 13,875 | 22,300 | {22300 / 13875:.2f} |" in text
    assert "| first round, warm-up (s) | 30.00 | 0.00 | |" in text


@pytest.mark.parametrize("argv, message", [(["--rounds", "1"], "--rounds must be >= 2"),
                                           (["--workers", "0"], "--workers must be >= 1")])
def test_bad_flags_are_named(bench, capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--games", "/nonexistent", *argv])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_warm_start_reaches_the_policy_config(bench, tmp_path):
    """--model smollm2 --warm-start DIR: the trainer's config checks and keeps both (a policy that acts)."""
    from training.config import make_config

    warm = Path(__file__).resolve().parents[2] / "training" / "warm_starts" / "smollm2-alfworld"
    args = bench.parse_args(["--games", str(tmp_path / "games"), "--model", "smollm2", "--warm-start", str(warm),
                             "--device", "cpu", "--engine", "hf", "--out", str(tmp_path / "out")])
    cfg = make_config(bench.policy_settings(args, "smollm2"))
    assert cfg.model == "smollm2" and Path(cfg.warm_start) == warm and cfg.rollout_engine == "hf"
    assert make_config(bench.policy_settings(bench.parse_args(["--games", "g", "--device", "cpu", "--engine", "hf"]),
                                             "smollm2")).warm_start is None
