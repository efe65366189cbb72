"""Training configuration: one frozen, typed dataclass, loaded from YAML plus ``key=value`` overrides.

Every field has a one-line description (shown by ``python -m training.train --help-config``).
Values are checked in ``__post_init__``, so a bad config stops the run before any work starts.
Defaults are the paper's (appendix tables "Shared hyperparameters" and "Benchmark-specific
training configurations"); ``training/configs/*.yaml`` hold the named settings.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Sequence

import yaml

from ocsd.algorithm.methods import METHODS
from ocsd.environments import RuntimeNotImplemented, environment_names, get_environment


class ConfigError(ValueError):
    """A config file, key or value is wrong; the message names it."""


def _doc(text: str, default: Any) -> Any:
    return field(default=default, metadata={"doc": text})


@dataclass(frozen=True)
class TrainConfig:
    """All settings of a training run (paper defaults unless noted)."""

    # run
    run_name: str = _doc("run name written to run.json and meta.json", "ocsd")
    run_dir: str = _doc("folder the run is written to (shared/CONTRACT.md layout)", "checkpoints/ocsd")
    method: str = _doc("training method, one of ocsd.algorithm.methods.METHODS", "ocsd")
    seed: int = _doc("seed of every random choice (tasks, sampling, selection)", 0)
    resume: bool = _doc("continue from the last complete checkpoint in run_dir", True)
    # model
    model: str = _doc("'smollm2' (shipped GGUF), 'tiny' (random, tests), or a local Hugging Face folder", "smollm2")
    device: str = _doc("'cpu', 'cuda' or 'cuda:N'", "cpu")
    dtype: str = _doc("parameter dtype: float32, bfloat16 or float16", "float32")
    lora_rank: int = _doc("LoRA rank via peft (0: full fine-tuning)", 0)
    lora_alpha: int = _doc("LoRA alpha", 32)
    # environment
    env: str = _doc("environment name", "alfworld")
    data: str | None = _doc("real ALFWorld data folder (else $ALFWORLD_DATA, else generated games)", None)
    games_dir: str = _doc("where generated games are kept (created on first use)", "checkpoints/games")
    n_train_games: int = _doc("generated training games", 200)
    n_val_games: int = _doc("generated validation games", 36)
    train_split: str = _doc("split of real data used for training", "train")
    val_split: str = _doc("split of real data used for validation", "valid_seen")
    max_steps: int = _doc("interaction step cap per episode (ALFWorld 50, WebShop 15, Search-QA 4)", 50)
    history_length: int = _doc("observation/action pairs of history in the interaction prompt", 2)
    env_workers: int = _doc("worker processes stepping environments (0: in this process, fastest on 2 cores)", 0)
    invalid_action_penalty: float = _doc("reward penalty per step whose output has no well-formed action", 0.1)
    # rollout
    batch_size: int = _doc("tasks per training step (B)", 16)
    group_size: int = _doc("rollouts per task (G)", 8)
    max_prompt_length: int = _doc("longest prompt in tokens; history is shortened to fit", 2048)
    max_response_length: int = _doc("longest generated response in tokens", 512)
    temperature: float = _doc("rollout sampling temperature", 1.0)
    top_p: float = _doc("rollout nucleus sampling", 1.0)
    generation_batch: int = _doc("prompts per generate call", 64)
    # optimisation
    total_steps: int = _doc("training steps", 150)
    lr: float = _doc("AdamW learning rate", 1e-6)
    weight_decay: float = _doc("AdamW weight decay", 0.01)
    warmup_ratio: float = _doc("linear learning-rate warm-up as a fraction of total_steps", 0.0)
    grad_clip: float = _doc("gradient-norm clipping", 1.0)
    clip_ratio: float = _doc("PPO clipping epsilon", 0.2)
    kl_coef: float = _doc("KL loss coefficient beta_KL (0 disables the reference model)", 0.01)
    kl_type: str = _doc("verl KL estimator", "low_var_kl")
    loss_agg_mode: str = _doc("verl loss aggregation", "token-mean")
    ppo_epochs: int = _doc("passes over each batch", 1)
    mini_batches: int = _doc("optimizer steps per pass (the batch is split into this many)", 1)
    micro_batch_tokens: int = _doc("padded tokens per forward/backward micro-batch", 16384)
    # OCSD
    rho: float = _doc("step selection ratio rho in (0, 1]", 0.2)
    beta: float = _doc("advantage modulation beta in [0, 1]", 0.5)
    write_replay: bool = _doc("write replay scores of selected steps at checkpoints (all methods)", True)
    scoring_token_budget: int = _doc("tokens per replay-scoring batch", 16384)
    # baselines (ZJU-REAL/SDAR defaults)
    rlsd_lambda: float = _doc("RLSD initial lambda", 0.5)
    rlsd_warmdown_steps: int = _doc("RLSD steps over which lambda decays to 0", 50)
    rlsd_clip_eps: float = _doc("RLSD weight clip range", 0.2)
    sdar_coef: float = _doc("weight of the gated distillation loss (SDAR, GRPO+OPSD)", 0.01)
    gate_beta: float = _doc("SDAR gate sharpness beta_g", 5.0)
    # checkpoints and validation
    save_freq: int = _doc("write a checkpoint every N steps (and at the last step)", 10)
    save_weights: bool = _doc("save actor weights in checkpoints (needed to resume and re-score)", True)
    test_freq: int = _doc("validate every N steps (0: never)", 5)
    val_tasks: int = _doc("validation episodes per validation", 36)
    progress: bool = _doc("show progress bars", True)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"method: unknown {self.method!r}; known: {', '.join(METHODS)}")
        if self.env not in environment_names():
            raise ConfigError(f"env: unknown {self.env!r}; known: {', '.join(environment_names())}")
        try:
            get_environment(self.env).check_runtime()
        except RuntimeNotImplemented as exc:
            raise ConfigError(f"env: {exc}") from None
        checks = [
            ("rho", 0.0 < self.rho <= 1.0, "must be in (0, 1]"),
            ("beta", 0.0 <= self.beta <= 1.0, "must be in [0, 1]"),
            ("dtype", self.dtype in ("float32", "bfloat16", "float16"), "must be float32, bfloat16 or float16"),
            ("kl_type", self.kl_type in ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full"),
             "must be a verl KL estimator"),
            ("loss_agg_mode", self.loss_agg_mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                                                      "seq-mean-token-sum-norm"), "must be a verl aggregation"),
            ("temperature", self.temperature > 0, "must be > 0"),
            ("top_p", 0 < self.top_p <= 1, "must be in (0, 1]"),
            ("rlsd_lambda", 0 <= self.rlsd_lambda <= 1, "must be in [0, 1]"),
            ("warmup_ratio", 0 <= self.warmup_ratio < 1, "must be in [0, 1)"),
            ("lr", self.lr > 0, "must be > 0"),
            ("gate_beta", self.gate_beta >= 0, "must be >= 0"),
        ]
        for name in ("batch_size", "group_size", "max_steps", "max_prompt_length", "max_response_length",
                     "total_steps", "ppo_epochs", "mini_batches", "micro_batch_tokens", "generation_batch",
                     "scoring_token_budget", "save_freq", "val_tasks", "n_train_games", "n_val_games"):
            checks.append((name, isinstance(getattr(self, name), int) and getattr(self, name) >= 1, "must be >= 1"))
        for name in ("history_length", "env_workers", "lora_rank", "test_freq", "rlsd_warmdown_steps"):
            checks.append((name, isinstance(getattr(self, name), int) and getattr(self, name) >= 0, "must be >= 0"))
        for name, ok, why in checks:
            if not ok:
                raise ConfigError(f"{name}={getattr(self, name)!r}: {why}")
        if self.model not in ("smollm2", "tiny") and not Path(self.model).expanduser().is_dir():
            raise ConfigError(f"model: {self.model!r} is not 'smollm2', 'tiny' or an existing local folder "
                              f"(models are never downloaded)")
        if self.data is not None and not Path(self.data).expanduser().is_dir():
            raise ConfigError(f"data: folder {self.data!r} does not exist")

    def to_dict(self) -> dict:
        """Plain dict of every field."""
        return dataclasses.asdict(self)

    @property
    def data_root(self) -> str | None:
        """Real ALFWorld data: ``data``, else the user's ``$ALFWORLD_DATA``; None means generated games."""
        from training.envs.alfworld_game import user_data_folder

        return self.data or user_data_folder()


def _field_types() -> dict[str, Any]:
    return {f.name: f.type for f in fields(TrainConfig)}


def _coerce(name: str, value: Any) -> Any:
    kind = _field_types()[name]
    kind = kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
    if value is None:
        if "None" in kind:
            return None
        raise ConfigError(f"{name}: null is not allowed")
    try:
        if kind.startswith("bool"):
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "1", "yes"):
                return True
            if str(value).lower() in ("false", "0", "no"):
                return False
            raise ValueError(value)
        if kind.startswith("int"):
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            return int(value)
        if kind.startswith("float"):
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}={value!r}: expected {kind}") from None


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``["rho=0.3", "method=grpo"]`` -> ``{"rho": 0.3, "method": "grpo"}`` (values parsed as YAML)."""
    out = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected key=value")
        key, raw = item.split("=", 1)
        out[key.strip()] = yaml.safe_load(raw) if raw != "" else ""
    return out


def make_config(values: dict[str, Any], *, source: str = "config") -> TrainConfig:
    """Build a checked config; unknown keys are an error naming the key and ``source``."""
    known = _field_types()
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {unknown}; see --help-config for the known keys")
    return TrainConfig(**{k: _coerce(k, v) for k, v in values.items()})


def load_config(path: str | os.PathLike | None, overrides: Sequence[str] = ()) -> TrainConfig:
    """Read a YAML config (or defaults when ``path`` is None) and apply ``key=value`` overrides."""
    values: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"--config: no such file {path}")
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML ({exc})") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping of key: value")
        values.update(loaded)
        make_config(values, source=str(path))  # name the file when its own keys are wrong
    values.update(parse_overrides(overrides))
    return make_config(values, source="command line")


def describe() -> str:
    """A table of every key, its default and its description."""
    rows = [(f.name, repr(f.default), f.metadata.get("doc", "")) for f in fields(TrainConfig)]
    width = max(len(r[0]) for r in rows)
    dwidth = max(len(r[1]) for r in rows)
    return "\n".join(f"{n:<{width}}  {d:<{dwidth}}  {doc}" for n, d, doc in rows)
