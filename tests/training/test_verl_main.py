"""``python -m training.verl.main``: the composed config, the task rows it writes, and its refusals (``--dry-run``:
everything up to verl's launcher, which needs GPUs); every method of the suite runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("verl")

from tests.training.conftest import verl_dry_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "training" / "verl" / "config" / "ocsd_trainer.yaml"


def dry_run(*overrides, cwd=ROOT):
    return verl_dry_run(*overrides, cwd=cwd, timeout=90)


def _leaves(node, prefix=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, (*prefix, key))
    else:
        yield prefix


def test_every_verl_key_the_config_sets_exists_in_verls_config():
    """A misspelt key would be added silently by Hydra; each one the suite sets must be verl's own."""
    from hydra import compose, initialize_config_module

    ours = yaml.safe_load(CONFIG.read_text())
    from omegaconf import OmegaConf

    with initialize_config_module(config_module="verl.trainer.config", version_base="1.3"):
        base = OmegaConf.to_container(compose(config_name="ppo_trainer"), resolve=False)
    # free-form mappings of verl's config, empty by default, whose keys verl reads by name:
    # model.override_config.attn_implementation (verl/workers/config/model.py, HFModelConfig)
    free_form = {("actor_rollout_ref", "model", "override_config")}
    missing = []
    for path in _leaves({k: v for k, v in ours.items() if k not in ("hydra", "defaults")}):
        node = base
        for i, part in enumerate(path):
            if tuple(path[:i]) in free_form and isinstance(node, dict):
                break
            if part not in node:
                missing.append(".".join(path))
                break
            node = node[part]
    assert missing == []


def test_dry_run_composes_the_paper_setting_and_writes_the_task_rows(alfworld_games, tmp_path, policy_dir):
    import pandas as pd

    from training.verl.tasks import AGENT_NAME

    run = tmp_path / "run"
    out = dry_run("ocsd.data=generated", f"ocsd.games_dir={alfworld_games}", f"ocsd.run_dir={run}",
                  "ocsd.n_train_games=2", "ocsd.n_val_games=2", "ocsd.method=grpo", "ocsd.lr=3e-6",
                  f"actor_rollout_ref.model.path={policy_dir}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    config = yaml.safe_load(out.stdout)
    ocsd, actor, rollout = config["ocsd"], config["actor_rollout_ref"]["actor"], config["actor_rollout_ref"]["rollout"]
    # the paper's ALFWorld setting (training/configs/alfworld_paper.yaml), followed by verl's keys
    assert (ocsd["method"], ocsd["batch_size"], ocsd["group_size"], ocsd["max_steps"]) == ("grpo", 16, 8, 50)
    assert config["data"]["train_batch_size"] == 16 and rollout["n"] == 8
    assert actor["optim"]["lr"] == pytest.approx(3e-6) and actor["kl_loss_coef"] == pytest.approx(0.01)
    assert actor["use_kl_loss"] and actor["kl_loss_type"] == "low_var_kl" and actor["clip_ratio_low"] == 0.2
    assert rollout["response_length"] == 512 and not rollout["calculate_log_probs"]
    # micro-batches of the update follow the section's micro_batch_tokens, the log-prob passes its scoring budget
    ref = config["actor_rollout_ref"]["ref"]
    assert actor["ppo_max_token_len_per_gpu"] == ocsd["micro_batch_tokens"] == 32768
    assert rollout["log_prob_max_token_len_per_gpu"] == ref["log_prob_max_token_len_per_gpu"] == 65536
    assert rollout["agent"]["default_agent_loop"] == AGENT_NAME
    trainer = config["trainer"]
    assert trainer["v1"]["trainer_mode"] == "ocsd_sync" and trainer["total_training_steps"] == 150
    assert trainer["checkpoint_callback_class"] == "training.verl.checkpoint.ReplayCheckpointCallback"
    assert trainer["default_local_dir"] == str(run) and ocsd["device"] == "cpu"
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "main.log").exists()  # Hydra leaves nothing
    train = pd.read_parquet(run / "data" / "train.parquet")
    valid = pd.read_parquet(run / "data" / "valid.parquet")
    assert len(train) == 2 and len(valid) == 2 and set(train["agent_name"]) == {AGENT_NAME}
    assert list(train["ocsd_index"]) == [0, 1] and set(valid["ocsd_split"]) == {"valid"}


def test_other_presets_and_refusals(alfworld_games, tmp_path, policy_dir):
    out = dry_run("ocsd=webshop", f"ocsd.run_dir={tmp_path / 'shop'}", f"actor_rollout_ref.model.path={policy_dir}")
    assert out.returncode == 2 and "data: no WebShop tasks named" in out.stderr  # the preset names no data
    out = dry_run("ocsd=webshop", "ocsd.data=generated", f"ocsd.games_dir={tmp_path / 'shop_data'}",
                  "ocsd.n_train_games=8", "ocsd.n_val_games=4",
                  f"ocsd.run_dir={tmp_path / 'shop'}", f"actor_rollout_ref.model.path={policy_dir}")
    assert out.returncode == 0, out.stderr[-3000:]
    config = yaml.safe_load(out.stdout)
    assert (config["ocsd"]["env"], config["ocsd"]["max_steps"], config["data"]["max_prompt_length"]) == (
        "webshop", 15, 4096)

    out = dry_run("ocsd.rho=2", f"actor_rollout_ref.model.path={policy_dir}")
    assert out.returncode == 2 and "rho" in out.stderr


def test_the_distilling_methods_dry_run_with_their_settings(alfworld_games, tmp_path, policy_dir):
    """SDAR, OPSD and GRPO+OPSD run on verl: the dry run shows their settings, OPSD with the policy loss of no
    policy-gradient term; OPSD with another policy loss is refused before anything is written."""
    section = ["ocsd.data=generated", f"ocsd.games_dir={alfworld_games}", "ocsd.n_train_games=2",
               "ocsd.n_val_games=2", "ocsd.sdar_coef=0.02", "ocsd.gate_beta=3.0",
               f"actor_rollout_ref.model.path={policy_dir}"]
    for method, mode in (("sdar", "vanilla"), ("opsd", "ocsd_no_policy_gradient"), ("grpo_opsd", "vanilla")):
        out = dry_run(*section, f"ocsd.method={method}", f"ocsd.run_dir={tmp_path / method}")
        assert out.returncode == 0, out.stderr[-3000:]
        config = yaml.safe_load(out.stdout)
        ocsd, actor = config["ocsd"], config["actor_rollout_ref"]["actor"]
        assert (ocsd["method"], ocsd["sdar_coef"], ocsd["gate_beta"]) == (method, 0.02, 3.0)
        assert actor["policy_loss"]["loss_mode"] == mode and actor["use_kl_loss"] is True
        assert (tmp_path / method / "data" / "train.parquet").is_file()
    out = dry_run(*section, "ocsd.method=opsd", f"ocsd.run_dir={tmp_path / 'gspo'}",
                  "actor_rollout_ref.actor.policy_loss.loss_mode=gspo")
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode == 2 and out.stdout == "" and not (tmp_path / "gspo").exists(), out.stderr[-3000:]
    assert last.startswith("training.verl.main: actor_rollout_ref.actor.policy_loss.loss_mode='gspo'") and (
        "'opsd' has no policy-gradient term" in last)


def test_paper_launch_script_passes_the_setting_on(alfworld_games, tmp_path, policy_dir):
    import shutil

    model = shutil.copytree(policy_dir, tmp_path / "Qwen3-8B")  # the script reads the size from the name
    env = dict(os.environ, VERL_USE_EXTERNAL_PLUGINS="none", GPUS="4", SEED="3", RUN_ROOT=str(tmp_path / "runs"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    out = subprocess.run(["bash", str(ROOT / "scripts" / "verl" / "paper.sh"), "alfworld", str(model), "grpo",
                          "--dry-run", "ocsd.data=generated", f"ocsd.games_dir={alfworld_games}",
                          "ocsd.n_train_games=2", "ocsd.n_val_games=2"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    config = yaml.safe_load(out.stdout)
    assert config["ocsd"]["run_dir"] == str(tmp_path / "runs" / "grpo_alfworld_Qwen3-8B_s3")
    assert (config["ocsd"]["method"], config["ocsd"]["seed"], config["trainer"]["n_gpus_per_node"]) == ("grpo", 3, 4)
    assert config["actor_rollout_ref"]["rollout"]["tensor_model_parallel_size"] == 2  # an 8B model
    bad = subprocess.run(["bash", str(ROOT / "scripts" / "verl" / "paper.sh"), "alfworld", str(tmp_path / "none")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "does not exist" in bad.stderr


def test_without_a_model_path_the_sections_model_and_warm_start_are_merged(alfworld_games, tmp_path, monkeypatch):
    """The warm-started SmolLM2 as verl's policy: one Hugging Face folder, the warm start merged, cached; its
    logits equal the single-device trainer's policy with the same warm start."""
    import torch

    from ocsd.replay.models import load_model
    from training.config import make_config
    from training.policy import initial_weights, load_policy

    warm = ROOT / "training" / "warm_starts" / "smollm2-alfworld"
    env = dict(os.environ, OCSD_CACHE=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-m", "training.verl.main", "--dry-run", "ocsd.data=generated",
                          f"ocsd.games_dir={alfworld_games}", "ocsd.n_train_games=2", "ocsd.n_val_games=2",
                          f"ocsd.run_dir={tmp_path / 'run'}", f"ocsd.warm_start={warm}"], cwd=ROOT,
                         env={**env, "VERL_USE_EXTERNAL_PLUGINS": "none"}, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    folder = Path(yaml.safe_load(out.stdout)["actor_rollout_ref"]["model"]["path"])
    assert folder.parent == tmp_path / "cache" / "merged" and (folder / "config.json").is_file()
    assert (folder / "tokenizer.json").is_file() or (folder / "tokenizer_config.json").is_file()
    merged = load_model(folder, device="cpu", dtype=torch.float32)
    cfg = make_config(dict(model="smollm2", warm_start=str(warm), lora_rank=0, device="cpu", dtype="float32"))
    _, reference = load_policy(cfg)
    ids = torch.tensor([[1, 523, 4093, 28, 314, 2]])
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, reference(ids).logits)
    monkeypatch.setenv("OCSD_CACHE", str(tmp_path / "cache"))
    assert initial_weights("smollm2", str(warm)) == folder  # cached: the same folder again


def test_the_verl_benchmarks_command_composes(alfworld_games, tmp_path):
    """``benchmarks/verl_backend.py``'s verl command, dry-run: every key it sets is accepted, with the float32
    actor and reference of ``--fp32-actor`` and an extra override."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("verl_backend", ROOT / "benchmarks" / "verl_backend.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    args = bench.build_parser().parse_args(["--games", str(alfworld_games), "--train-games", "2", "--fp32-actor",
                                            "--workers", "4", "--verl-arg", "trainer.save_freq=2"])
    cmd = bench.command("verl", args, tmp_path / "run")
    assert cmd[1:3] == ["-m", "training.verl.main"]
    out = dry_run(*cmd[3:], cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    config = yaml.safe_load(out.stdout)
    ocsd, aro = config["ocsd"], config["actor_rollout_ref"]
    assert (ocsd["batch_size"], ocsd["group_size"], ocsd["max_steps"], ocsd["max_response_length"]) == (16, 8, 12, 64)
    assert ocsd["lora_rank"] == 0 and ocsd["keep_batch"] and ocsd["lr"] == pytest.approx(1e-6)
    assert aro["actor"]["fsdp_config"]["mixed_precision"] == {"param_dtype": "fp32"}
    assert aro["ref"]["fsdp_config"]["mixed_precision"] == {"param_dtype": "fp32"}
    assert aro["rollout"]["agent"]["num_workers"] == 4 and config["trainer"]["save_freq"] == 2


def test_without_a_gpu_it_stops_at_once(alfworld_games, tmp_path):
    """Without --dry-run on a machine without GPUs, Ray used to wait for a GPU forever."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "training.verl.main", "ocsd.data=generated",
                          f"ocsd.games_dir={alfworld_games}", f"ocsd.run_dir={tmp_path / 'run'}", "ocsd.n_train_games=2",
                          "ocsd.n_val_games=2", "actor_rollout_ref.model.path=/models/none"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "verl needs GPUs: trainer.n_gpus_per_node=" in out.stderr and "this machine has 0" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "run").exists()  # stopped before any work
