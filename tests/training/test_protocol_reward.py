"""SDAR's training protocol: the step-sample reward and its GRPO advantages on a hand-computed batch,
the config keys that choose it, and a training step that records it and takes one AdamW step per
mini-batch of step rows."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from ocsd.algorithm.advantages import protocol_advantages
from training.config import ConfigError, make_config

EPS = 1e-6

# Two groups. Group 0: trajectory 0 won in two steps (the first one invalid), trajectory 1 lost after
# one invalid step. Group 1: trajectory 2 lost after one valid step (a group of one).
WON = torch.tensor([True, False, False])
INVALID = torch.tensor([True, False, True, False])
TRAJ = torch.tensor([0, 0, 1, 2])
GROUP = torch.tensor([0, 0, 1])


def test_sdar_rewards_and_advantages_by_hand():
    got = protocol_advantages(WON, INVALID, TRAJ, GROUP, mode="sdar", invalid_penalty=0.1)
    # step samples: 10 - 0.1, 10, -0.1 in group 0; 0 alone in group 1
    np.testing.assert_allclose(got.rewards.numpy(), [9.9, 10.0, -0.1, 0.0])
    # group 0: mean 6.6, deviations 3.3, 3.4, -6.7; unbiased std sqrt(67.34 / 2)
    std = math.sqrt((3.3 ** 2 + 3.4 ** 2 + 6.7 ** 2) / 2)
    np.testing.assert_allclose(got.advantages.numpy(), [3.3 / (std + EPS), 3.4 / (std + EPS), -6.7 / (std + EPS), 0.0],
                               rtol=1e-12)
    np.testing.assert_allclose(got.returns.numpy(), [9.9, -0.1, 0.0])


def test_trajectory_rewards_and_advantages_by_hand():
    got = protocol_advantages(WON, INVALID, TRAJ, GROUP, mode="trajectory", invalid_penalty=0.1)
    np.testing.assert_allclose(got.returns.numpy(), [0.9, -0.1, 0.0])
    np.testing.assert_allclose(got.rewards.numpy(), [0.9, 0.9, -0.1, 0.0])
    a = 0.5 / (math.sqrt(0.5) + EPS)  # group 0: mean 0.4, deviations +-0.5, std sqrt(0.5)
    np.testing.assert_allclose(got.advantages.numpy(), [a, a, -a, 0.0], rtol=1e-12)


def test_sdar_sign_of_a_group_without_success_is_the_steps_validity():
    # every episode lost: only the penalty differs, and the std normalisation makes it a unit-size advantage
    got = protocol_advantages(torch.tensor([False, False]), torch.tensor([True, False, False, True]),
                              torch.tensor([0, 0, 1, 1]), torch.tensor([0, 0]), mode="sdar")
    assert torch.sign(got.advantages).tolist() == [-1.0, 1.0, 1.0, -1.0]
    assert got.advantages.abs().min() > 0.8
    flat = protocol_advantages(torch.tensor([False, False]), torch.tensor([True, False, False, True]),
                               torch.tensor([0, 0, 1, 1]), torch.tensor([0, 0]), mode="trajectory")
    assert flat.advantages.abs().max() < 1e-9  # one malformed step each: equal trajectory rewards


def test_reward_mode_defaults_to_sdar_and_is_checked():
    assert make_config({}).reward_mode == "sdar"
    assert make_config({}).to_dict()["reward_mode"] == "sdar"  # the config run.json records
    with pytest.raises(ConfigError, match=r"reward_mode='episode': must be one of sdar, trajectory"):
        make_config({"reward_mode": "episode"})


def test_mini_batch_keys_are_checked():
    assert make_config({}).ppo_mini_batch_size == 0  # one AdamW step per pass unless asked
    with pytest.raises(ConfigError, match=r"ppo_mini_batch_size=-1: must be an integer >= 0"):
        make_config({"ppo_mini_batch_size": -1})
    with pytest.raises(ConfigError, match=r"ppo_mini_batch_size=8: cannot be combined with mini_batches=2"):
        make_config({"ppo_mini_batch_size": 8, "mini_batches": 2})


def test_paper_config_uses_sdars_protocol():
    from training.config import read_config_file

    values = read_config_file(Path(__file__).resolve().parents[2] / "training/configs/alfworld_paper.yaml")
    assert (values["reward_mode"], values["ppo_mini_batch_size"], values["ppo_epochs"],
            values["invalid_action_penalty"]) == ("sdar", 256, 1, 0.1)


@pytest.fixture(scope="module")
def games(tmp_path_factory):
    pytest.importorskip("alfworld", reason="the ALFWorld engine (envs extra) is not installed")
    from training.envs.alfworld.tasks import GameSource

    cfg = make_config(dict(data="generated", games_dir=str(tmp_path_factory.mktemp("games")), n_train_games=2,
                           n_val_games=1, progress=False))
    return GameSource.from_config(cfg)


def test_training_step_records_the_protocol(tmp_path, games):
    pytest.importorskip("verl", reason="verl (verl extra) is not installed")
    from ocsd.records import read_metrics, read_replay
    from training.trainer import Trainer

    cfg = make_config(dict(model="tiny", run_dir=str(tmp_path / "run"), data="generated", batch_size=1,
                           group_size=2, max_steps=3, max_response_length=8, max_prompt_length=1024,
                           total_steps=1, save_freq=1, test_freq=0, progress=False, rho=0.5, kl_coef=0.0,
                           micro_batch_tokens=4096, seed=3, ppo_mini_batch_size=2))
    run = Trainer(cfg, games=games).fit()
    info = json.loads((run / "run.json").read_text())
    assert (info["config"]["reward_mode"], info["config"]["ppo_mini_batch_size"]) == ("sdar", 2)
    steps = read_replay(run).steps
    row = read_metrics(run)[0]
    assert row["actor/optimizer_steps"] == math.ceil(len(steps) / 2)
    for key in ("actor/pg_clipfrac", "actor/ppo_kl", "actor/ratio_mean", "actor/ratio_min", "actor/ratio_max"):
        assert math.isfinite(row[key]), key
    assert row["actor/ratio_min"] <= row["actor/ratio_mean"] <= row["actor/ratio_max"]
    # every step row carries its own step-sample reward
    won = steps.groupby("traj_uid")["reward"].transform("max") >= 9.9
    assert set(np.round(steps["reward"] - 10.0 * won, 9)) <= {0.0, -0.1}
