"""``merged_inference``: a LoRA policy in float32 samples and scores through a copy with its adapters merged, kept at
the trained weights after every update, and plays the same episodes as through the adapters."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("peft")

from ocsd.replay.scoring import response_logprobs  # noqa: E402
from training.config import make_config  # noqa: E402
from training.rollout.engines import merged_weights  # noqa: E402


def _policy(tmp_path, **overrides):
    pytest.importorskip("alfworld", reason="the ALFWorld engine (envs extra) is not installed")
    from training.envs.alfworld.tasks import GameSource
    from training.policy import Policy

    settings = dict(model="tiny", data="generated", games_dir=str(tmp_path / "games"), n_train_games=2,
                    n_val_games=1, batch_size=1, group_size=2, max_steps=2, max_response_length=8,
                    max_prompt_length=1024, temperature=1.0, lora_rank=4, progress=False, seed=3)
    cfg = make_config({**settings, **overrides})
    return Policy(cfg, GameSource.from_config(cfg))


def _same_weights(plain, model) -> bool:
    params = dict(plain.named_parameters(remove_duplicate=False))
    return all(torch.equal(params[k], w) for k, w in merged_weights(model).items())


def test_a_float32_lora_policy_samples_and_scores_its_merged_copy_kept_at_the_trained_weights(tmp_path):
    policy = _policy(tmp_path)
    try:
        copy = policy.inference_model
        assert copy is not policy.model and not hasattr(copy, "peft_config")
        assert policy.scorer.model is copy and policy.engine.model is copy
        assert _same_weights(copy, policy.model)
        with torch.no_grad():  # an update
            for name, p in policy.model.named_parameters():
                if "lora_B" in name:
                    p.add_(0.05)
        policy.weights_updated()
        assert policy.inference_model is copy and _same_weights(copy, policy.model)
        pairs = [([5, 6, 7, 8], [9, 10, 11]), ([12, 13], [14, 15])]
        torch.testing.assert_close(policy.logprobs(pairs)[0],
                                   response_logprobs(policy.model, pairs, padded=True)[0].float().cpu(),
                                   rtol=0, atol=1e-5)
    finally:
        policy.close()


@pytest.mark.parametrize("overrides", [dict(merged_inference=False), dict(lora_rank=0), dict(dtype="bfloat16")])
def test_the_policy_computes_through_its_own_model_otherwise(tmp_path, overrides):
    policy = _policy(tmp_path, **overrides)
    try:
        assert policy.inference_model is policy.model and policy.scorer.model is policy.model
    finally:
        policy.close()


def test_the_merged_copy_plays_the_episodes_the_adapters_play(tmp_path):
    """Same seed, same episodes, token for token, and the kept old log-probs agree to float32 rounding."""
    from training.pipeline import step_tasks

    runs = []
    for merged in (True, False):
        policy = _policy(tmp_path, merged_inference=merged, old_logprobs="rollout")
        try:
            trajs = policy.collect(1, step_tasks(policy, 1))
            pairs = [(s.prompt_ids, s.response_ids) for t in trajs for s in t.steps]
            runs.append((pairs, policy.logprobs(pairs)[0]))
        finally:
            policy.close()
    (merged_pairs, merged_lp), (plain_pairs, plain_lp) = runs
    assert merged_pairs == plain_pairs and len(merged_pairs) >= 2
    torch.testing.assert_close(merged_lp, plain_lp, rtol=0, atol=1e-5)
