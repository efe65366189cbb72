"""The single-device trainer on generated ALFWorld games with a tiny random model (real engine, real update)."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

pytest.importorskip("alfworld", reason="the ALFWorld engine (envs extra) is not installed")
pytest.importorskip("verl", reason="verl (verl extra) is not installed")

from ocsd.algorithm.methods import METHODS, TokenInputs, get_method, token_advantages  # noqa: E402
from ocsd.replay.models import tiny_model  # noqa: E402
from ocsd.records import read_metrics, read_replay, validate_path  # noqa: E402
from ocsd.replay.scoring import response_logprobs  # noqa: E402
from ocsd.algorithm.signals import num_selected  # noqa: E402
from training.config import ConfigError, load_config, make_config  # noqa: E402
from training.envs.alfworld.tasks import GameSource  # noqa: E402
from training.rollout.loop import ROLLOUT_TIMINGS  # noqa: E402
from training.trainer import Trainer, TrainingError  # noqa: E402
from training.update import LossSettings, UpdateBatch, ppo_update  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def games(tmp_path_factory):
    folder = tmp_path_factory.mktemp("games")
    cfg = make_config(dict(data="generated", games_dir=str(folder), n_train_games=2, n_val_games=1, progress=False))
    return GameSource.from_config(cfg)


def tiny_cfg(run_dir, **kw):
    base = dict(model="tiny", run_dir=str(run_dir), batch_size=1, group_size=2, max_steps=2, max_response_length=8,
                max_prompt_length=1024, total_steps=2, save_freq=1, test_freq=0, progress=False, rho=0.5,
                micro_batch_tokens=4096, seed=3)
    base.update(kw)
    return make_config(base)


def _check_run(run_dir: Path, cfg):
    assert validate_path(run_dir) == []
    data = read_replay(run_dir)
    assert data.global_steps == [1, 2]
    for step, steps in data.steps.groupby("global_step"):
        # replay rows for every trajectory, every step of it
        assert steps["traj_uid"].nunique() == cfg.batch_size * cfg.group_size
        assert (steps.groupby("traj_uid").size() == steps.groupby("traj_uid")["num_steps"].first()).all()
        spec = get_method(cfg.method)
        for _, traj in steps.groupby("traj_uid"):
            k = len(traj)
            expected = k if spec.selection == "all" else num_selected(k, cfg.rho)
            assert traj["selected"].sum() == expected
        if cfg.write_replay:
            assert (steps["scored"] == steps["selected"]).all()
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("reward_mean", "success_rate", "time/rollout", "time/old_logprob", "time/replay_scoring",
                "time/advantage", "time/update", "time/step", "rollout/new_tokens", *ROLLOUT_TIMINGS,
                "time/rollout_sync"):
        assert all(key in r for r in rows), key
    for r in rows:  # the share of groups without advantage, as the step's records show them
        steps = data.steps[data.steps["global_step"] == r["step"]]
        flat = steps.groupby("group_uid", observed=True)["advantage"].apply(lambda a: bool((a.abs() < 1e-6).all()))
        assert r["adv/flat_groups"] == pytest.approx(flat.mean())
    for r in rows:  # the parts of the rollout are inside it, and it is mostly them
        parts = sum(r[k] for k in (*ROLLOUT_TIMINGS, "time/rollout_sync"))
        assert 0 < parts <= r["time/rollout"] and r["rollout/new_tokens"] > 0


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_runs_two_steps(tmp_path, games, method):
    cfg = tiny_cfg(tmp_path / method, method=method, kl_coef=0.01 if method in ("ocsd", "sdar") else 0.0)
    run = Trainer(cfg, games=games).fit()
    _check_run(run, cfg)
    info = json.loads((run / "run.json").read_text())
    assert info["method"] == method and info["config"]["rho"] == cfg.rho


@pytest.mark.parametrize("method, other", [("ocsd", "logp_ablated"), ("ocsd_no_ablated", "logp_student")])
def test_calibration_metrics_are_of_the_signal_the_update_used(tmp_path, games, monkeypatch, method, other):
    """``calib/residual_mean`` and ``calib/q_mean`` average the token signal that shaped the advantages:
    the residual for OCSD, the Full support delta_F for OCSD w/o Ablated view."""
    import training.pipeline as pipeline_module  # the trainer's step pipeline (step_advantages) calls it

    seen = []
    real = pipeline_module.method_advantages

    def spy(spec, inputs, cfg, step):
        seen.append(inputs)
        return real(spec, inputs, cfg, step)

    monkeypatch.setattr(pipeline_module, "method_advantages", spy)
    trainer = Trainer(tiny_cfg(tmp_path / method, method=method, kl_coef=0.0, total_steps=2, save_freq=2), games=games)
    for step in (1, 2):  # step 1 scores only the views of the update, step 2 (a checkpoint) every recorded view
        row = trainer.train_step(step)
        inputs = seen[-1]
        sel = inputs.selected[:, None] & inputs.mask
        assert sel.any()
        e = (inputs.logp_full - getattr(inputs, other))[sel]
        assert row["calib/residual_mean"] == pytest.approx(float(e.mean()), rel=1e-6, abs=1e-9)
        assert row["calib/q_mean"] == pytest.approx(float(torch.tanh(e / 2).mean()), rel=1e-6, abs=1e-9)


def test_grpo_and_ocsd_beta_zero_give_identical_updates():
    """Same batch, same non-zero advantages: GRPO and OCSD(beta=0) move the weights identically."""
    pytest.importorskip("verl")
    rng = np.random.default_rng(0)
    model = tiny_model(vocab_size=300, seed=1)
    prompts = [rng.integers(0, 300, size=int(n)).tolist() for n in rng.integers(5, 12, size=6)]
    responses = [rng.integers(0, 300, size=int(n)).tolist() for n in rng.integers(2, 7, size=6)]
    old, mask = response_logprobs(model, list(zip(prompts, responses)), padded=True)
    inputs = TokenInputs(adv=torch.from_numpy(rng.normal(size=6)).float(), mask=mask,
                         selected=torch.tensor([True, False, True, True, False, True]), logp_student=old,
                         logp_full=old + torch.from_numpy(rng.normal(size=old.shape)).float(),
                         logp_ablated=old + torch.from_numpy(rng.normal(size=old.shape)).float())
    results = {}
    for name, beta in (("grpo", 0.0), ("ocsd", 0.0), ("ocsd_half", 0.5)):
        spec = get_method(name.replace("_half", ""))
        adv = token_advantages(spec, inputs, beta=beta)
        copy_ = copy.deepcopy(model)
        opt = torch.optim.AdamW(copy_.parameters(), lr=1e-2, weight_decay=0.01)
        ppo_update(copy_, opt, spec, UpdateBatch(prompts, responses, old, adv, mask), LossSettings(kl_coef=0.0))
        results[name] = copy_.state_dict()
    for key in results["grpo"]:
        assert torch.equal(results["grpo"][key], results["ocsd"][key]), key
    assert any(not torch.equal(results["grpo"][k], results["ocsd_half"][k]) for k in results["grpo"])
    assert any(not torch.equal(results["grpo"][k], model.state_dict()[k]) for k in results["grpo"])


def test_resume_continues_to_the_same_result(tmp_path, games):
    whole = tiny_cfg(tmp_path / "whole", total_steps=2, kl_coef=0.01, lr=1e-3)
    Trainer(whole, games=games).fit()
    part = tiny_cfg(tmp_path / "part", total_steps=1, kl_coef=0.01, lr=1e-3)
    Trainer(part, games=games).fit()
    resumed = Trainer(tiny_cfg(tmp_path / "part", total_steps=2, kl_coef=0.01, lr=1e-3), games=games)
    assert resumed.start_step == 2
    resumed.fit()
    for name in ("steps.parquet", "tokens.parquet"):
        a = pd.read_parquet(tmp_path / "whole" / "global_step_2" / "replay" / name)
        b = pd.read_parquet(tmp_path / "part" / "global_step_2" / "replay" / name)
        pd.testing.assert_frame_equal(a, b)
    from safetensors.torch import load_file

    wa = load_file(tmp_path / "whole" / "global_step_2" / "actor" / "model.safetensors")
    wb = load_file(tmp_path / "part" / "global_step_2" / "actor" / "model.safetensors")
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], rtol=0, atol=0)
    assert [r["step"] for r in read_metrics(tmp_path / "part")] == [1, 2]


def test_adapter_only_checkpoints_resume_and_merge_to_the_same_weights(tmp_path, games, monkeypatch):
    """save_merged=false: actor/ holds the LoRA adapter and optimizer state only (no model.safetensors). A run
    resumed from such a checkpoint ends as the uninterrupted one, and merging the adapter on first use
    (re-scoring, evaluation) gives the merged weights a save_merged=true run writes."""
    from safetensors.torch import load_file

    from rescoring.rescore import checkpoint_weights
    from training.collect import resolve_model_source
    from training.policy import merged_actor

    monkeypatch.setenv("OCSD_CACHE", str(tmp_path / "cache"))
    kw = dict(kl_coef=0.0, lr=1e-3, lora_rank=4, lora_alpha=8)
    Trainer(tiny_cfg(tmp_path / "merged", total_steps=2, **kw), games=games).fit()
    Trainer(tiny_cfg(tmp_path / "small", total_steps=1, save_merged=False, **kw), games=games).fit()
    actor = tmp_path / "small" / "global_step_1" / "actor"
    assert not (actor / "model.safetensors").exists() and (actor / "adapter" / "adapter_config.json").is_file()
    size = sum(f.stat().st_size for f in actor.rglob("*") if f.is_file())
    full = sum(f.stat().st_size for f in (tmp_path / "merged" / "global_step_1" / "actor").rglob("*") if f.is_file())
    assert size < full / 2
    resumed = Trainer(tiny_cfg(tmp_path / "small", total_steps=2, save_merged=False, **kw), games=games)
    assert resumed.start_step == 2
    resumed.fit()
    for step in (1, 2):
        small = tmp_path / "small" / f"global_step_{step}"
        folder = Path(checkpoint_weights(small, {}))
        assert folder.is_relative_to(tmp_path / "cache") and folder == merged_actor(small / "actor", {
            "model": "tiny", "seed": 3, "lora_rank": 4, "lora_alpha": 8})
        want = load_file(tmp_path / "merged" / f"global_step_{step}" / "actor" / "model.safetensors")
        got = load_file(folder / "model.safetensors")
        for key in want:
            torch.testing.assert_close(got[key], want[key], rtol=0, atol=1e-6)
    source = resolve_model_source(str(tmp_path / "small"))
    assert source.global_step == 2 and Path(source.model) == Path(checkpoint_weights(small, {}))


def test_non_finite_loss_stops_and_keeps_last_checkpoint(tmp_path, games, monkeypatch):
    import training.trainer as trainer_module

    real = trainer_module.ppo_update
    calls = {"n": 0}

    def failing_second_update(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise FloatingPointError("loss is nan (non-finite) in the policy update")
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "ppo_update", failing_second_update)
    cfg = tiny_cfg(tmp_path / "nan", kl_coef=0.0)
    with pytest.raises(TrainingError, match="step 2: loss is nan"):
        Trainer(cfg, games=games).fit()
    assert validate_path(tmp_path / "nan" / "global_step_1") == []
    assert not (tmp_path / "nan" / "global_step_2").exists()


def test_ppo_update_rejects_non_finite_loss():
    model = tiny_model(vocab_size=100, seed=0)
    old, mask = response_logprobs(model, [([1, 2, 3], [4, 5])], padded=True)
    adv = torch.full_like(old, float("nan"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with pytest.raises(FloatingPointError, match="non-finite"):
        ppo_update(model, opt, get_method("grpo"), UpdateBatch([[1, 2, 3]], [[4, 5]], old, adv, mask),
                   LossSettings(kl_coef=0.0))


@pytest.mark.parametrize("overrides, message", [
    (["rho=0"], "rho=0"), (["beta=1.5"], "beta=1.5"), (["method=ppo"], "unknown 'ppo'"),
    (["colour=red"], r"unknown key\(s\) \['colour'\]"), (["model=/no/such/model"], "a model of the offline catalogue"),
    (["batch_size=two"], "expected int"), (["rho"], "expected key=value"),
])
def test_config_errors_before_any_work(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(ROOT / "training" / "configs" / "demo.yaml", overrides)


def test_cli_reports_config_errors(tmp_path):
    out = subprocess.run([sys.executable, "-m", "training.train", "--config", "training/configs/demo.yaml",
                          f"run_dir={tmp_path}", "rho=2"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and "rho=2" in out.stderr and "Traceback" not in out.stderr
    assert not any(tmp_path.iterdir())
    bad = tmp_path / "bad.yaml"
    bad.write_text("rho: 0.2\nunknown_key: 1\n")
    out = subprocess.run([sys.executable, "-m", "training.train", "--config", str(bad)], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 2 and "bad.yaml" in out.stderr and "unknown_key" in out.stderr


def test_paper_config_is_valid():
    cfg = load_config(ROOT / "training" / "configs" / "alfworld_paper.yaml", ["device=cpu", "data=generated"])
    assert (cfg.batch_size, cfg.group_size, cfg.total_steps, cfg.rho, cfg.beta) == (16, 8, 150, 0.2, 0.5)
    assert math.isclose(cfg.lr, 1e-6) and cfg.max_steps == 50 and cfg.kl_coef == 0.01


def test_resume_refuses_a_run_with_other_settings(tmp_path, games):
    Trainer(tiny_cfg(tmp_path / "r", total_steps=1, kl_coef=0.0), games=games).fit()
    with pytest.raises(TrainingError, match=r"other settings \(method: 'ocsd' -> 'grpo'\); use another run_dir"):
        Trainer(tiny_cfg(tmp_path / "r", total_steps=2, kl_coef=0.0, method="grpo"), games=games)
    with pytest.raises(TrainingError, match="resume=false; use another run_dir to keep it, or overwrite=true"):
        Trainer(tiny_cfg(tmp_path / "r", total_steps=1, kl_coef=0.0, method="grpo", resume=False), games=games)
    assert list((tmp_path / "r").glob("global_step_*"))  # resume=false alone deletes nothing
    fresh = Trainer(tiny_cfg(tmp_path / "r", total_steps=1, kl_coef=0.0, method="grpo", overwrite=True), games=games)
    assert fresh.start_step == 1 and not list((tmp_path / "r").glob("global_step_*"))
    fresh.close()


def test_environment_workers_live_across_steps(tmp_path, games, monkeypatch):
    """With env_workers > 0 the worker processes are started once and reloaded for every rollout
    (training steps and validation), and stopped when the run ends."""
    from training.envs.alfworld import batch as alfworld_batch

    built, real_init = [], alfworld_batch.AlfworldBatchEnv.__init__

    def counting_init(self, *args, **kwargs):
        built.append(self)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(alfworld_batch.AlfworldBatchEnv, "__init__", counting_init)
    cfg = tiny_cfg(tmp_path / "run", env_workers=1, test_freq=1, val_tasks=1, save_freq=2)
    Trainer(cfg, games=games).fit()
    assert len(built) == 1 and built[0].closed
    rows = read_metrics(tmp_path / "run")
    assert all("val/success_rate" in r for r in rows)


def test_environment_workers_and_prefetching_change_no_result(tmp_path, games):
    """Games loaded in worker processes, the next step's while this one updates, give the run that
    games played in this process give: the same replay tables."""
    runs = {}
    for workers in (0, 1):
        cfg = tiny_cfg(tmp_path / f"w{workers}", env_workers=workers, total_steps=3, save_freq=1)
        runs[workers] = read_replay(Trainer(cfg, games=games).fit())
    pd.testing.assert_frame_equal(runs[0].steps.drop(columns="checkpoint", errors="ignore"),
                                  runs[1].steps.drop(columns="checkpoint", errors="ignore"))


def test_two_lora_runs_with_one_seed_are_the_same_run(tmp_path, games):
    """The LoRA adapter's initialisation is seeded: same seed, identical step files (CPU, float32)."""
    import torch

    kw = dict(kl_coef=0.0, lr=1e-2, lora_rank=4, lora_alpha=8, total_steps=1, dtype="float32")
    for name in ("a", "b"):
        torch.manual_seed(1000 + ord(name))  # what ran before must not matter
        Trainer(tiny_cfg(tmp_path / name, **kw), games=games).fit()
    a, b = read_replay(tmp_path / "a"), read_replay(tmp_path / "b")
    pd.testing.assert_frame_equal(a.tokens.drop(columns=["checkpoint"], errors="ignore"),
                                  b.tokens.drop(columns=["checkpoint"], errors="ignore"))
    from safetensors.torch import load_file

    wa = load_file(tmp_path / "a" / "global_step_1" / "actor" / "adapter" / "adapter_model.safetensors")
    wb = load_file(tmp_path / "b" / "global_step_1" / "actor" / "adapter" / "adapter_model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    rows = [[{k: v for k, v in row.items() if not k.startswith("time/")} for row in read_metrics(tmp_path / n)]
            for n in ("a", "b")]
    assert rows[0] == rows[1]


def test_no_view_fits_the_prompt_limit_stops_ocsd(tmp_path, games):
    """max_prompt_length that no view fits made replay scoring skip every selected step, so OCSD trained as GRPO
    with nothing said outside metrics.jsonl."""
    from training.trainer import TrainingError

    with pytest.raises(TrainingError, match=r"step 1: none of the \d+ selected steps could be rendered.*would train "
                                            r"as GRPO.*max_prompt_length"):
        Trainer(tiny_cfg(tmp_path / "short", max_prompt_length=10, total_steps=1), games=games).fit()
    assert not (tmp_path / "short" / "global_step_1").exists()
