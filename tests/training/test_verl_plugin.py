"""The veRL backend's registration in a fresh interpreter, and its checkpoint callback writing replay records."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

ROOT = Path(__file__).resolve().parents[2]
CHECK = ("{first}\n"
         "from verl.utils import torch_functional\n"
         "print(torch_functional.logprobs_from_logits_v2.__module__)\n"
         "from verl.experimental.agent_loop.agent_loop import _agent_loop_registry\n"
         "from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY\n"
         "print(TRAINER_REGISTRY.get('ocsd_sync'))\n"
         "print(_agent_loop_registry.get('ocsd_env'))\n"
         "import torch\n"
         "print('cudnn sdpa', torch.backends.cuda.cudnn_sdp_enabled())\n")


@pytest.mark.parametrize("first", ["import verl", "import training.verl.main"])
@pytest.mark.parametrize("how", ["entry point", "VERL_USE_EXTERNAL_MODULES"])
def test_plugin_registers_the_agent_loop_in_a_fresh_interpreter(how, first):
    """Whichever is imported first, verl or the suite's command (``python -m training.verl.main``), the plugin loads
    whole: no half-imported module, no plugin warning."""
    env = dict(os.environ)
    if how == "entry point":
        env.pop("VERL_USE_EXTERNAL_MODULES", None)
        env["VERL_USE_EXTERNAL_PLUGINS"] = "auto"
    else:  # entry points off: only the environment variable can load it
        env.update(VERL_USE_EXTERNAL_PLUGINS="none", VERL_USE_EXTERNAL_MODULES="training.verl.plugin")
    out = subprocess.run([sys.executable, "-c", CHECK.format(first=first)], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "plugin" not in out.stderr.lower() and "circular import" not in out.stderr, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert lines[-4] == "training.verl.logprobs"  # verl's per-token log-prob fallback replaced (no flash-attn here)
    assert lines[-2] == "{'_target_': 'training.verl.agent_loop.EnvironmentAgentLoop'}"
    assert lines[-3] == "<class 'training.verl.trainer.OCSDTrainer'>"
    assert lines[-1] == "cudnn sdpa False"  # cuDNN's attention kernel left out in every process that imports verl


def test_without_the_plugin_verl_has_no_such_agent_loop():
    env = dict(os.environ, VERL_USE_EXTERNAL_PLUGINS="none")
    env.pop("VERL_USE_EXTERNAL_MODULES", None)
    out = subprocess.run([sys.executable, "-c", CHECK.format(first="import verl")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-4:] == ["verl.utils.torch_functional", "None",
                                                                             "None", "cudnn sdpa True"]


def test_checkpoint_callback_writes_records_the_validator_accepts(tmp_path):
    """verl's own callback loader builds the callback from the Hydra key; on_save writes the held step's records
    into global_step_N/replay (and run.json once), which validate and read back equal; other steps write nothing."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback

    from ocsd.records import read_replay, read_run_info, validate_path
    from tests.diagnostics.synth import make_checkpoint
    from training.verl.checkpoint import PendingReplay, ReplayCheckpointCallback, hold_replay

    source = read_replay(make_checkpoint(tmp_path / "source", 3, n_traj=6, n_steps=5))
    meta = {k: v for k, v in source.metas[0].items() if k != "schema_version"}
    config = OmegaConf.create({"trainer": {"checkpoint_callback_class":
                                           "training.verl.checkpoint.ReplayCheckpointCallback"}})
    callback = build_checkpoint_callback(config)
    assert isinstance(callback, ReplayCheckpointCallback)

    class Trainer:  # verl's trainer as the callback sees it: an object the OCSD trainer keeps records on
        pass

    trainer, run = Trainer(), tmp_path / "verl_run"
    steps = source.steps.drop(columns=[c for c in source.steps.columns if c == "checkpoint"])
    tokens = source.tokens.drop(columns=[c for c in source.tokens.columns if c == "checkpoint"])
    hold_replay(trainer, PendingReplay(3, steps, tokens, meta, {"run": "verl_run", "method": "ocsd",
                                                              "env": "alfworld", "model": "tiny", "seed": 0}))
    callback.on_save(trainer, global_step=2, checkpoint_dir=str(run / "global_step_2"))
    assert not (run / "global_step_2").exists()
    (run / "global_step_3").mkdir(parents=True)
    callback.on_save(trainer, global_step=3, checkpoint_dir=str(run / "global_step_3"))
    assert validate_path(run / "global_step_3") == []
    back = read_replay(run / "global_step_3")
    assert len(back.steps) == len(source.steps) and len(back.tokens) == len(source.tokens)
    assert back.metas[0]["global_step"] == 3 and read_run_info(run)["method"] == "ocsd"
    assert getattr(trainer, "ocsd_pending_replay") is None


def test_the_single_device_trainers_verl_import_is_quiet():
    """The single-device trainer imports verl for its loss functions; the plugin then loaded imports verl's trainer,
    whose optional engines and accelerator detection would print what is absent on a CPU machine."""
    env = dict(os.environ, VERL_USE_EXTERNAL_PLUGINS="auto")
    env.pop("VERL_USE_EXTERNAL_MODULES", None)
    out = subprocess.run([sys.executable, "-c", "import verl.trainer.ppo.core_algos\nimport training.verl.plugin as p\n"
                          "print(p.registered())"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1] == "True", out.stderr[-2000:]
    assert "engine is not available" not in out.stderr and "accelerator" not in out.stderr, out.stderr[-2000:]
