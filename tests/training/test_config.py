"""The training config: every numeric setting has a range, the device and the model are checked before any work."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from training.config import (
    COUNT,
    ConfigError,
    Range,
    TrainConfig,
    device_problem,
    load_config,
    make_config,
    model_problem,
)

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted(p for p in (ROOT / "training" / "configs").glob("*.yaml") if not p.name.startswith("sft_"))
SFT_CONFIGS = sorted((ROOT / "training" / "configs").glob("sft_*.yaml"))
NUMERIC = [f.name for f in fields(TrainConfig) if f.type in ("int", "float", "int | None", "float | None")]


def test_every_numeric_setting_has_a_range_holding_its_default():
    assert len(NUMERIC) > 30
    for item in fields(TrainConfig):
        allowed = item.metadata["range"]
        if item.name in NUMERIC:
            assert isinstance(allowed, Range), item.name
            # an optional setting's default None is resolved before the check (max_steps: the environment's cap)
            assert item.default in allowed or (item.default is None and item.type.endswith("| None")), item.name
            assert allowed.integer == item.type.startswith("int"), item.name
        else:
            assert allowed is None, item.name


@pytest.mark.parametrize("name", NUMERIC)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_no_numeric_setting_accepts_nan_or_infinity(name, value):
    with pytest.raises(ConfigError, match=rf"^{name}=.*: must be "):
        TrainConfig(**{name: value})


@pytest.mark.parametrize("override, message", [
    ("grad_clip=.nan", "grad_clip=nan: must be a finite number > 0"),
    ("grad_clip=-1", "grad_clip=-1.0: must be a finite number > 0"),
    ("grad_clip=0", "grad_clip=0.0: must be a finite number > 0"),
    ("clip_ratio=-0.2", "clip_ratio=-0.2: must be a finite number > 0"),
    ("clip_ratio=.nan", "clip_ratio=nan: must be a finite number > 0"),
    ("kl_coef=-0.01", "kl_coef=-0.01: must be a finite number >= 0"),
    ("kl_coef=.nan", "kl_coef=nan: must be a finite number >= 0"),
    ("weight_decay=-0.01", "weight_decay=-0.01: must be a finite number >= 0"),
    ("weight_decay=.nan", "weight_decay=nan: must be a finite number >= 0"),
    ("invalid_action_penalty=-0.1", "invalid_action_penalty=-0.1: must be a finite number >= 0"),
    ("invalid_action_penalty=.nan", "invalid_action_penalty=nan: must be a finite number >= 0"),
    ("lr=.inf", "lr=inf: must be a finite number > 0"),
    ("temperature=.inf", "temperature=inf: must be a finite number > 0"),
    ("temperature=0", "temperature=0.0: must be a finite number > 0"),
    ("top_p=0", r"top_p=0.0: must be in \(0, 1\]"),
    ("top_p=1.5", r"top_p=1.5: must be in \(0, 1\]"),
    ("warmup_ratio=1", r"warmup_ratio=1.0: must be in \[0, 1\)"),
    ("rlsd_lambda=-0.5", r"rlsd_lambda=-0.5: must be in \[0, 1\]"),
    ("rlsd_clip_eps=-0.2", "rlsd_clip_eps=-0.2: must be a finite number >= 0"),
    ("sdar_coef=-1", "sdar_coef=-1.0: must be a finite number >= 0"),
    ("gate_beta=.inf", "gate_beta=inf: must be a finite number >= 0"),
    ("seed=-1", r"seed=-1: must be an integer in \[0, "),
    ("lora_alpha=0", "lora_alpha=0: must be an integer >= 1"),
    ("lora_rank=-8", "lora_rank=-8: must be an integer >= 0"),
    ("batch_size=0", "batch_size=0: must be an integer >= 1"),
    ("test_freq=-1", "test_freq=-1: must be an integer >= 0"),
])
def test_out_of_range_settings_name_the_key_and_range(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(ROOT / "training" / "configs" / "demo.yaml", [override])


def test_integer_settings_refuse_fractions_and_bools():
    with pytest.raises(ConfigError, match="batch_size=2.5: must be an integer >= 1"):
        TrainConfig(batch_size=2.5)
    with pytest.raises(ConfigError, match="save_freq=True: must be an integer >= 1"):
        TrainConfig(save_freq=True)


def test_range_membership_and_wording():
    assert 1 in COUNT and 0 not in COUNT and 1.0 not in COUNT and True not in COUNT
    share = Range(0, 1, low_open=True)
    assert 1 in share and 0 not in share and math.nan not in share and "0.5" not in share
    assert str(share) == "in (0, 1]" and str(COUNT) == "an integer >= 1"
    assert str(Range(high=0, high_open=True)) == "a finite number < 0" and str(Range()) == "a finite number"


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_configs_are_valid(path):
    cfg = load_config(path, ["device=cpu", "data=generated"])
    assert cfg.device == "cpu"


@pytest.mark.parametrize("path", SFT_CONFIGS, ids=[p.name for p in SFT_CONFIGS])
def test_shipped_sft_configs_are_valid(path):
    """Every setting checked; the model must be one of the offline catalogue, and where it is not installed on this
    machine (the Qwen models are fetched once, on purpose) the rest is checked with the bundled SmolLM2 in its place."""
    import yaml

    from ocsd.replay.catalog import find_model, installed_folder
    from training.warm_start.sft import SFTConfig

    entry = find_model(yaml.safe_load(path.read_text())["model"])
    assert entry is not None  # a model of the offline catalogue
    here = entry.bundled or installed_folder(entry) is not None
    cfg = load_config(path, ["device=cpu"] + ([] if here else ["model=smollm2"]), cls=SFTConfig)
    assert cfg.data == "generated" and (cfg.model == entry.name or not here)


def test_task_types_are_checked_against_the_environment():
    assert load_config(None, ["data=generated", "task_types=pick, look"]).task_types == "pick, look"
    with pytest.raises(ConfigError, match="task_types='pick,fly': unknown task type.s. fly; alfworld has pick"):
        load_config(None, ["data=generated", "task_types=pick,fly"])
    with pytest.raises(ConfigError, match="names no task type"):
        load_config(None, ["data=generated", "task_types=' , '"])


def test_a_file_setting_may_be_overridden_before_it_is_checked():
    # the paper config says device: cuda; a CPU machine overrides it on the command line
    cfg = load_config(ROOT / "training" / "configs" / "alfworld_paper.yaml", ["device=cpu", "data=generated"])
    assert (cfg.batch_size, cfg.group_size, cfg.total_steps, cfg.grad_clip, cfg.clip_ratio) == (16, 8, 150, 1.0, 0.2)


# ------------------------------------------------------------------------------------------------
# device
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["banana", "gpu", "cuda:x", "cuda:-1", ""])
def test_unknown_device_is_refused(device):
    with pytest.raises(ConfigError, match=r"^device=.*: must be 'cpu', 'cuda' or 'cuda:N'$"):
        TrainConfig(device=device)


def test_cuda_on_a_build_without_cuda_is_refused(monkeypatch):
    import torch

    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(ConfigError, match=r"^device='cuda': this torch build .* has no CUDA support; use device=cpu$"):
        TrainConfig(device="cuda")


def test_missing_cuda_device_is_refused(monkeypatch):
    import torch

    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device_problem("cuda") == "no CUDA device is visible; use device=cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert device_problem("cuda") is None and device_problem("cuda:1") is None
    assert device_problem("cuda:2") == "only 2 CUDA device(s) are visible (cuda:0 to cuda:1)"
    assert device_problem("cpu") is None


# ------------------------------------------------------------------------------------------------
# model
# ------------------------------------------------------------------------------------------------


@pytest.fixture()
def model_folder(tmp_path):
    from ocsd.replay.models import tiny_model

    folder = tmp_path / "model"
    tiny_model(vocab_size=100, seed=0).save_pretrained(folder, safe_serialization=True)
    return folder


def test_a_complete_model_folder_is_accepted(model_folder):
    assert model_problem(str(model_folder)) is None and model_problem("tiny") is None
    assert make_config({"model": str(model_folder)}).model == str(model_folder)


def test_broken_model_folders_are_refused_naming_the_file(tmp_path, model_folder):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match=f"^model: model folder {empty} has no config.json"):
        make_config({"model": str(empty)})
    weights = model_folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ConfigError, match=f"^model: {weights}: truncated or corrupt safetensors file"):
        make_config({"model": str(model_folder)})
    (model_folder / "config.json").write_text("{oops")
    with pytest.raises(ConfigError, match=f"^model: {model_folder / 'config.json'}: not a readable JSON file"):
        make_config({"model": str(model_folder)})


def test_cli_refuses_a_broken_model_before_any_work(tmp_path):
    empty, run, games = tmp_path / "empty", tmp_path / "run", tmp_path / "games"
    empty.mkdir()
    out = subprocess.run([sys.executable, "-m", "training.train", "--config", "training/configs/demo.yaml",
                          f"model={empty}", f"run_dir={run}", f"games_dir={games}"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "has no config.json" in out.stderr and str(empty) in out.stderr
    assert not run.exists() and not games.exists()


@pytest.mark.parametrize("item", ["lr=[", "rho: 0.2"])
def test_bad_override_is_one_line(item):
    from training.config import ConfigError, parse_overrides

    with pytest.raises(ConfigError, match="override") as err:
        parse_overrides([item])
    assert "\n" not in str(err.value) and item in str(err.value)


@pytest.mark.parametrize("env,cap", [("alfworld", 50), ("webshop", 15), ("searchqa", 4)])
def test_max_steps_defaults_to_the_environments_step_cap(env, cap):
    from ocsd.environments import get_environment

    assert get_environment(env).max_steps == cap
    assert make_config(dict(env=env, data="generated")).max_steps == cap
    assert make_config(dict(env=env, data="generated", max_steps=3)).max_steps == 3
    with pytest.raises(ConfigError, match=r"^max_steps=0: must be"):
        make_config(dict(env=env, data="generated", max_steps=0))


def test_catalogue_names_are_models(tmp_path, monkeypatch):
    from training.config import model_problem

    monkeypatch.setenv("OCSD_CACHE", str(tmp_path))  # nothing installed there
    assert model_problem("smollm2") is None and model_problem("tiny") is None  # SmolLM2 converts on first use
    problem = model_problem("qwen2.5-coder-1.5b")
    assert "not installed" in problem and "python -m ocsd.replay.catalog fetch qwen2.5-coder-1.5b" in problem
    assert "offline catalogue" in model_problem("qwen9")


@pytest.mark.parametrize("override", ["lr=true", "beta=false", "temperature=true"])
def test_booleans_are_refused_for_numbers(override):
    from training.config import ConfigError, make_config, parse_overrides

    with pytest.raises(ConfigError, match=rf"{override.split('=')[0]}=(True|False): expected float"):
        make_config(parse_overrides([override]))


def test_a_home_folder_is_expanded():
    from training.config import make_config, parse_overrides

    cfg = make_config(parse_overrides(["run_dir=~/runs/x", "games_dir=~/games"]))
    assert cfg.run_dir == str(Path.home() / "runs" / "x") and cfg.games_dir == str(Path.home() / "games")


def test_dtype_auto_is_chosen_once_for_the_device(monkeypatch):
    import ocsd.replay.models as models

    for flags, chosen in (({"avx2"}, "float32"), ({"avx2", "amx_bf16"}, "bfloat16")):
        monkeypatch.setattr(models, "cpu_flags", lambda flags=flags: frozenset(flags))
        cfg = make_config({"model": "tiny", "dtype": "auto"})
        assert cfg.dtype == chosen and cfg.to_dict()["dtype"] == chosen  # run.json records the choice
    with pytest.raises(ConfigError, match="dtype='int8': must be float32, bfloat16, float16 or auto"):
        make_config({"model": "tiny", "dtype": "int8"})


def test_a_warm_starts_dtype_auto_is_chosen_the_same_way(monkeypatch):
    import ocsd.replay.models as models
    from training.warm_start.sft import SFTConfig

    monkeypatch.setattr(models, "cpu_flags", lambda: frozenset({"avx2"}))
    assert make_config({"model": "tiny", "dtype": "auto"}, cls=SFTConfig).dtype == "float32"
