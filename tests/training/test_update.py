"""The policy update's guards: checked loss settings, the PPO clip range used, and no non-finite weights kept."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("verl", reason="verl (verl extra) is not installed")

from ocsd.algorithm.methods import get_method  # noqa: E402
from ocsd.replay.models import tiny_model  # noqa: E402
from ocsd.replay.scoring import response_logprobs  # noqa: E402
from training.update import (  # noqa: E402
    LossSettings,
    UpdateBatch,
    _actor_config,
    non_finite_parameter,
    policy_loss,
    ppo_update,
)


def _batch(model) -> UpdateBatch:
    old, mask = response_logprobs(model, [([1, 2, 3], [4, 5]), ([6, 7], [8, 9, 10])], padded=True)
    adv = torch.where(mask, torch.tensor([[1.0], [-1.0]]), torch.zeros(()))
    return UpdateBatch([[1, 2, 3], [6, 7]], [[4, 5], [8, 9, 10]], old, adv, mask)


@pytest.mark.parametrize("name, value, message", [
    ("grad_clip", math.nan, "grad_clip=nan: must be a finite number > 0"),
    ("grad_clip", -1.0, "grad_clip=-1.0: must be a finite number > 0"),
    ("clip_ratio", -0.2, "clip_ratio=-0.2: must be a finite number > 0"),
    ("kl_coef", math.nan, "kl_coef=nan: must be a finite number >= 0"),
    ("aux_coef", -1.0, "aux_coef=-1.0: must be a finite number >= 0"),
    ("gate_beta", math.inf, "gate_beta=inf: must be a finite number >= 0"),
    ("micro_batch_tokens", 0, "micro_batch_tokens=0: must be an integer >= 1"),
])
def test_loss_settings_are_checked(name, value, message):
    with pytest.raises(ValueError, match=message):
        LossSettings(**{name: value})


def test_clip_ratio_sets_both_clip_bounds():
    config = _actor_config(LossSettings(clip_ratio=0.3))
    assert config.clip_ratio_low == config.clip_ratio_high == 0.3
    # a probability ratio of 1.25 lies inside the 0.3 range: nothing is clipped
    logp = torch.full((1, 2), math.log(1.25))
    rows = UpdateBatch([[1]], [[2, 3]], torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2, dtype=torch.bool))
    for ratio, clipped in ((0.2, 1.0), (0.3, 0.0)):
        settings = LossSettings(clip_ratio=ratio, kl_coef=0.0)
        _, metrics = policy_loss(get_method("grpo"), logp, rows, [0], settings, _actor_config(settings))
        assert metrics["actor/pg_clipfrac"] == clipped, ratio


def test_non_finite_parameter_names_the_first_bad_one():
    model = tiny_model(vocab_size=100, seed=0)
    assert non_finite_parameter(model) is None
    with torch.no_grad():
        model.model.norm.weight[3] = float("inf")
    assert non_finite_parameter(model) == "model.norm.weight"
    model.model.norm.weight.requires_grad_(False)  # frozen parameters never change in an update
    assert non_finite_parameter(model) is None


def test_update_that_makes_weights_non_finite_raises():
    model = tiny_model(vocab_size=100, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for group in optimizer.param_groups:
        group["lr"] = math.inf  # as a scheduler could; the gradient itself is finite
    with pytest.raises(FloatingPointError, match=r"parameter .+ is non-finite after optimizer step 1 of the policy"):
        ppo_update(model, optimizer, get_method("grpo"), _batch(model), LossSettings(kl_coef=0.0))


def test_a_normal_update_passes_the_checks():
    model = tiny_model(vocab_size=100, seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    metrics = ppo_update(model, optimizer, get_method("grpo"), _batch(model), LossSettings(kl_coef=0.0),
                         mini_batches=2)
    assert math.isfinite(metrics["actor/grad_norm"]) and non_finite_parameter(model) is None
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_trainer_stops_before_a_checkpoint_of_non_finite_weights(tmp_path, alfworld_games, monkeypatch):
    pytest.importorskip("alfworld", reason="the ALFWorld engine (envs extra) is not installed")
    from ocsd.records import validate_path
    from training.config import make_config
    from training.envs.games import GameSource
    from training.trainer import Trainer, TrainingError

    monkeypatch.setattr(Trainer, "_lr", lambda self, step: self.cfg.lr if step < 2 else math.inf)
    run = tmp_path / "run"
    cfg = make_config(dict(model="tiny", run_dir=str(run), games_dir=str(alfworld_games), n_train_games=2,
                           n_val_games=2, batch_size=1, group_size=2, max_steps=2, max_response_length=8,
                           max_prompt_length=1024, total_steps=2, save_freq=1, test_freq=0, progress=False,
                           rho=0.5, kl_coef=0.0, seed=3))
    with pytest.raises(TrainingError, match=r"step 2: parameter .+ is non-finite after optimizer step 1"):
        Trainer(cfg, games=GameSource.from_config(cfg)).fit()
    assert validate_path(run / "global_step_1") == []
    assert not (run / "global_step_2").exists()
