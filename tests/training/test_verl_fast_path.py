"""The fast-path settings of ``training/verl/config/ocsd_trainer.yaml`` arrive in the composed config, pass verl's
own checks, and LoRA folds the reference into the actor by verl's own rule (``--dry-run``; no GPU needed)."""

from __future__ import annotations

import pytest
import yaml

pytest.importorskip("verl")

from tests.training.conftest import verl_dry_run  # noqa: E402

PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def composed(alfworld_games, policy_dir, tmp_path_factory):
    """The dry run's resolved config with LoRA rank 8 and budgets unlike the preset's."""
    run = tmp_path_factory.mktemp("fast_path") / "run"
    out = verl_dry_run("ocsd.data=generated", f"ocsd.games_dir={alfworld_games}", f"ocsd.run_dir={run}",
                       "ocsd.n_train_games=2", "ocsd.n_val_games=2", "ocsd.micro_batch_tokens=12288",
                       "ocsd.scoring_token_budget=40960", "ocsd.lora_rank=8", "ocsd.lora_alpha=16",
                       f"actor_rollout_ref.model.path={policy_dir}", cwd=run.parent, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    return yaml.safe_load(out.stdout)


def test_token_budgets_and_micro_batches(composed):
    aro = composed["actor_rollout_ref"]
    actor, rollout, ref = aro["actor"], aro["rollout"], aro["ref"]
    # the update by the section's micro_batch_tokens, every forward-only pass by its scoring_token_budget
    assert actor["use_dynamic_bsz"] and actor["ppo_max_token_len_per_gpu"] == 12288
    assert rollout["log_prob_use_dynamic_bsz"] and ref["log_prob_use_dynamic_bsz"]
    assert rollout["log_prob_max_token_len_per_gpu"] == ref["log_prob_max_token_len_per_gpu"] == 40960
    # row counts are not read with dynamic batches
    assert actor["ppo_micro_batch_size_per_gpu"] is None and rollout["log_prob_micro_batch_size_per_gpu"] is None


def test_attention_and_rollout_engine(composed):
    aro = composed["actor_rollout_ref"]
    # padded rows under sdpa: verl's packed rows would make sdpa attend over a dense mask of the whole micro-batch
    assert aro["model"]["use_remove_padding"] is False and aro["actor"]["use_remove_padding"] is False
    assert aro["model"]["override_config"]["attn_implementation"] == "sdpa"
    rollout = aro["rollout"]
    assert (rollout["tensor_model_parallel_size"], rollout["data_parallel_size"]) == (1, 1)  # a replica per GPU
    assert rollout["gpu_memory_utilization"] == 0.5 and rollout["free_cache_engine"]
    assert rollout["enable_prefix_caching"] and not rollout["enforce_eager"]


def test_verl_accepts_the_settings(composed):
    """verl's own config check and its config classes take them (LoRA's check imports vLLM: left out here)."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    config = OmegaConf.create(composed)
    config.actor_rollout_ref.model.lora_rank = 0
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    rollout = omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    assert (rollout.tensor_model_parallel_size, rollout.log_prob_max_token_len_per_gpu) == (1, 40960)
    assert (actor.use_dynamic_bsz, actor.ppo_max_token_len_per_gpu) == (True, 12288)


def test_lora_folds_the_reference_into_the_actor(composed):
    """The section's LoRA reaches verl, whose trainer then starts no reference model: one worker role
    (``actor_rollout``) instead of ``actor_rollout_ref``, decided by verl's own ``_init_resource_pool_mgr``."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    model = composed["actor_rollout_ref"]["model"]
    assert (model["lora_rank"], model["lora_alpha"], model["target_modules"]) == (8, 16, PROJECTIONS)

    def roles(config) -> list[str]:
        trainer = SimpleNamespace(config=config)
        PPOTrainer._init_resource_pool_mgr(trainer)
        return [str(role) for role in trainer.role_worker_mapping]

    config = OmegaConf.create(composed)
    assert roles(config) == ["actor_rollout"]
    config.actor_rollout_ref.model.lora_rank = 0  # full fine-tuning: a reference model beside the actor
    assert roles(config) == ["actor_rollout_ref"]
