"""The policy update's guards: checked loss settings, the PPO clip range used, and no non-finite weights kept."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

pytest.importorskip("verl", reason="verl (verl extra) is not installed")

from ocsd.algorithm.methods import get_method  # noqa: E402
from ocsd.replay.models import tiny_model  # noqa: E402
from ocsd.replay.scoring import response_logprobs  # noqa: E402
from training.update import (  # noqa: E402
    LossSettings,
    UpdateBatch,
    inert_rows,
    loss_actor_config,
    mini_batch_parts,
    non_finite_parameter,
    policy_loss,
    ppo_update,
    ratio_statistics,
    reduce_metrics,
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
    config = loss_actor_config(LossSettings(clip_ratio=0.3))
    assert config.clip_ratio_low == config.clip_ratio_high == 0.3
    # a probability ratio of 1.25 lies inside the 0.3 range: nothing is clipped
    logp = torch.full((1, 2), math.log(1.25))
    rows = UpdateBatch([[1]], [[2, 3]], torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2, dtype=torch.bool))
    for ratio, clipped in ((0.2, 1.0), (0.3, 0.0)):
        settings = LossSettings(clip_ratio=ratio, kl_coef=0.0)
        _, metrics = policy_loss(get_method("grpo"), logp, rows, [0], settings, loss_actor_config(settings))
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


def _rows(model, n: int = 8) -> UpdateBatch:
    gen = torch.Generator().manual_seed(5)
    pairs = [(torch.randint(1, 100, (3,), generator=gen).tolist(),
              torch.randint(1, 100, (4,), generator=gen).tolist()) for _ in range(n)]
    old, mask = response_logprobs(model, pairs, padded=True)
    adv = torch.where(mask, torch.tensor([1.0, -1.0] * (n // 2))[:, None], torch.zeros(()))
    return UpdateBatch([p for p, _ in pairs], [r for _, r in pairs], old, adv, mask)


@pytest.mark.parametrize("n, size, sizes", [(12, 5, [4, 4, 4]), (12, 4, [4, 4, 4]), (10, 256, [10]),
                                            (7, 2, [2, 2, 2, 1])])
def test_mini_batch_parts_by_rows(n, size, sizes):
    parts = mini_batch_parts(n, mini_batch_size=size, rng=np.random.default_rng(1))
    assert [len(p) for p in parts] == sizes
    assert sorted(np.concatenate(parts).tolist()) == list(range(n))  # every row once
    again = mini_batch_parts(n, mini_batch_size=size, rng=np.random.default_rng(1))
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))  # seeded
    if len(parts) > 1:
        assert np.concatenate(parts).tolist() != list(range(n))  # shuffled


def test_mini_batch_parts_by_count_are_the_former_split():
    assert [p.tolist() for p in mini_batch_parts(5)] == [[0, 1, 2, 3, 4]]
    expected = np.array_split(np.random.default_rng(3).permutation(5), 2)
    got = mini_batch_parts(5, mini_batches=2, rng=np.random.default_rng(3))
    assert [p.tolist() for p in got] == [p.tolist() for p in expected]
    assert len(mini_batch_parts(2, mini_batches=3)) == 2  # empty parts are dropped


def test_ratio_statistics_and_their_reduction():
    logp = torch.log(torch.tensor([[0.5, 1.0], [2.0, 9.0]]))
    stats = ratio_statistics(logp, torch.zeros(2, 2), torch.tensor([[True, True], [True, False]]))
    assert stats == pytest.approx({"actor/ratio_mean": 3.5 / 3, "actor/ratio_min": 0.5, "actor/ratio_max": 2.0})
    assert ratio_statistics(logp, torch.zeros(2, 2), torch.zeros(2, 2, dtype=torch.bool)) == {}
    reduced = reduce_metrics({"actor/ratio_min": [0.9, 0.7], "actor/ratio_max": [1.1, 1.3],
                              "actor/pg_loss": [1.0, 2.0]})
    assert reduced == {"actor/ratio_min": 0.7, "actor/ratio_max": 1.3, "actor/pg_loss": 1.5}


@pytest.mark.parametrize("size, epochs, steps", [(0, 1, 1), (3, 1, 3), (2, 1, 4), (4, 2, 4)])
def test_one_optimizer_step_per_mini_batch(size, epochs, steps):
    model = tiny_model(vocab_size=100, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    calls = []
    step = optimizer.step
    optimizer.step = lambda *a, **k: (calls.append(1), step(*a, **k))[1]
    metrics = ppo_update(model, optimizer, get_method("grpo"), _rows(model), LossSettings(kl_coef=0.0),
                         epochs=epochs, mini_batch_size=size, rng=np.random.default_rng(0))
    assert len(calls) == steps and metrics["actor/optimizer_steps"] == steps


def test_later_mini_batches_move_the_ratio_and_get_clipped():
    model = tiny_model(vocab_size=100, seed=0)
    rows = _rows(model)
    settings = LossSettings(kl_coef=0.0)
    single = copy.deepcopy(model)
    one = ppo_update(single, torch.optim.AdamW(single.parameters(), lr=0.5), get_method("grpo"), rows, settings)
    # a single step per batch: the ratio is 1 on every token, nothing is clipped
    assert one["actor/pg_clipfrac"] == 0.0 and one["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-6)
    assert one["actor/ratio_min"] == pytest.approx(1.0, abs=1e-5)
    assert one["actor/ratio_max"] == pytest.approx(1.0, abs=1e-5)
    # the second mini-batch comes after a large step: its ratio moves beyond 1 +- 0.2 and is clipped
    two = ppo_update(model, torch.optim.AdamW(model.parameters(), lr=0.5), get_method("grpo"), rows, settings,
                     mini_batch_size=4, rng=np.random.default_rng(0))
    assert two["actor/optimizer_steps"] == 2
    assert two["actor/pg_clipfrac"] > 0.0 and two["actor/ppo_kl"] != 0.0
    assert two["actor/ratio_max"] > 1.2 or two["actor/ratio_min"] < 0.8


def test_trainer_stops_before_a_checkpoint_of_non_finite_weights(tmp_path, alfworld_games, monkeypatch):
    pytest.importorskip("alfworld", reason="the ALFWorld engine (envs extra) is not installed")
    from ocsd.records import validate_path
    from training.config import make_config
    from training.envs.alfworld.tasks import GameSource
    from training.trainer import Trainer, TrainingError

    monkeypatch.setattr(Trainer, "_lr", lambda self, step: self.cfg.lr if step < 2 else math.inf)
    run = tmp_path / "run"
    cfg = make_config(dict(model="tiny", run_dir=str(run), data="generated", games_dir=str(alfworld_games),
                           n_train_games=2, n_val_games=2, batch_size=1, group_size=2, max_steps=2, max_response_length=8,
                           max_prompt_length=1024, total_steps=2, save_freq=1, test_freq=0, progress=False,
                           rho=0.5, kl_coef=0.0, seed=3))
    with pytest.raises(TrainingError, match=r"step 2: parameter .+ is non-finite after optimizer step 1"):
        Trainer(cfg, games=GameSource.from_config(cfg)).fit()
    assert validate_path(run / "global_step_1") == []
    assert not (run / "global_step_2").exists()


def _half_inert(model, n: int = 8) -> UpdateBatch:
    """Rows whose advantages are random on odd rows and 0 on even rows (random mask lengths)."""
    rows = _rows(model, n)
    gen = torch.Generator().manual_seed(11)
    adv = torch.randn(rows.advantages.shape, generator=gen) * rows.mask
    adv[::2] = 0.0
    return UpdateBatch(rows.prompt_ids, rows.response_ids, rows.old_logp, adv, rows.mask)


def test_inert_rows_are_those_no_loss_term_reaches():
    model = tiny_model(vocab_size=100, seed=0)
    rows = _half_inert(model)
    no_kl = LossSettings(kl_coef=0.0)
    expected = np.array([i % 2 == 0 for i in range(8)])
    for method in ("grpo", "ocsd", "rlsd"):
        assert np.array_equal(inert_rows(get_method(method), rows, no_kl), expected), method
    # the auxiliary distillation loss reaches every row, with or without a policy-gradient term
    for method in ("sdar", "opsd", "grpo_opsd"):
        assert not inert_rows(get_method(method), rows, no_kl).any(), method
    # a KL term reaches every row once there are reference log-probs; without them it does not apply
    with_ref = UpdateBatch(rows.prompt_ids, rows.response_ids, rows.old_logp, rows.advantages, rows.mask,
                           ref_logp=rows.old_logp.clone())
    assert not inert_rows(get_method("grpo"), with_ref, LossSettings(kl_coef=0.01)).any()
    assert np.array_equal(inert_rows(get_method("grpo"), rows, LossSettings(kl_coef=0.01)), expected)
    # an advantage outside the response mask does not count
    masked_out = rows.advantages.clone()
    masked_out[0, ~rows.mask[0]] = 3.0
    moved = UpdateBatch(rows.prompt_ids, rows.response_ids, rows.old_logp, masked_out, rows.mask)
    assert inert_rows(get_method("grpo"), moved, no_kl)[0]


@pytest.mark.parametrize("method, size, epochs", [("grpo", 0, 1), ("grpo", 2, 2), ("ocsd", 4, 1)])
def test_skipping_inert_rows_updates_the_weights_as_the_full_computation(method, size, epochs):
    """Fresh random advantages on half of the rows: the weights after the update with inert rows skipped are those
    of computing every row, also when a mini-batch holds inert rows only (its AdamW step on zero gradients still
    moves the weights by momentum and weight decay). In float64, so that AdamW's division by the root of tiny second
    moments does not blow up the rounding differences of other micro-batch paddings."""
    base = tiny_model(vocab_size=100, seed=0).double()
    rows = _half_inert(base)
    settings = LossSettings(kl_coef=0.0, micro_batch_tokens=16)
    results = {}
    for skip in (False, True):
        model = copy.deepcopy(base)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
        parts = mini_batch_parts(8, mini_batch_size=size, rng=np.random.default_rng(1)) if size else [range(8)]
        metrics = ppo_update(model, optimizer, get_method(method), rows, settings, epochs=epochs,
                             mini_batch_size=size, rng=np.random.default_rng(1), skip_inert=skip)
        results[skip] = ([p.detach().clone() for p in model.parameters()], metrics)
    if size == 2:
        assert all(i % 2 == 0 for i in parts[2])  # a mini-batch of inert rows only, after two that move the weights
    (full, full_metrics), (skipped, skipped_metrics) = results[False], results[True]
    for a, b in zip(full, skipped):
        torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-10)
    assert any(not torch.equal(a, b) for a, b in zip(full, base.parameters()))
    assert full_metrics["actor/inert_rows"] == 0.0 and skipped_metrics["actor/inert_rows"] == 0.5
    assert skipped_metrics["actor/optimizer_steps"] == full_metrics["actor/optimizer_steps"]
    assert skipped_metrics["actor/grad_norm"] == pytest.approx(full_metrics["actor/grad_norm"], rel=1e-9)


def test_an_update_of_inert_rows_only_runs_no_forward_pass(monkeypatch):
    model = tiny_model(vocab_size=100, seed=0)
    rows = _rows(model)
    flat = UpdateBatch(rows.prompt_ids, rows.response_ids, rows.old_logp, torch.zeros_like(rows.advantages),
                       rows.mask)
    import training.update as update

    def refuse(*args, **kwargs):
        raise AssertionError("a forward pass over inert rows")

    monkeypatch.setattr(update, "response_logprobs", refuse)
    metrics = ppo_update(model, torch.optim.AdamW(model.parameters(), lr=1e-3), get_method("grpo"), flat,
                         LossSettings(kl_coef=0.0))
    assert metrics["actor/inert_rows"] == 1.0 and metrics["actor/optimizer_steps"] == 1.0
    assert "actor/pg_loss" not in metrics
