"""A policy that acts and is scored: what training, collection and evaluation share.

:class:`Policy` holds the tokenizer, model, prompt renderer, replay scorer and sampling settings of a
config (no optimizer, no run folder). :mod:`training.pipeline` turns its rollouts into the per-step
quantities of paper Algorithm 1 and the replay records.
"""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path

import numpy as np
import torch

from ocsd.replay.prompts import PromptRenderer
from ocsd.replay.scoring import ReplayScorer, padded_rows, response_logprobs
from training.config import TrainConfig
from training.rollout.engines import load_merged, merged_copy, merges_lora
from training.rollout.gpu_share import GpuShare, device_share
from training.rollout.loop import GenerationSettings, Trajectory, rollout, timed


def policy_tokenizer(model: str):
    """The tokenizer of a ``model`` setting: the model's own, SmolLM2's for the random ``tiny`` model."""
    from ocsd.replay.models import load_tokenizer

    return load_tokenizer("smollm2" if model == "tiny" else model)


def load_policy(cfg, init_from: Path | None = None):
    """Tokenizer and policy model (LoRA-wrapped when ``lora_rank > 0``), in eval mode on ``cfg.device``.

    The initial weights are the base model's (``cfg.model``), or the warm start's when ``cfg.warm_start``
    names one (:mod:`training.warm_start`). ``init_from`` is a checkpoint's ``actor/`` folder: its weights
    (or, with LoRA, its adapter on top of the initial weights) replace the initial ones.
    ``cfg`` is a :class:`TrainConfig` or any config with its model fields (``model``, ``seed``,
    ``lora_rank``, ``lora_alpha``, ``device``, ``dtype``, ``warm_start``).
    """
    from ocsd.replay.models import load_model, resolve_dtype, tiny_model
    from training.warm_start import merge_adapter, resolve_warm_start

    tokenizer = policy_tokenizer(cfg.model)
    lora = cfg.lora_rank > 0
    warm = resolve_warm_start(cfg.warm_start) if getattr(cfg, "warm_start", None) else None
    if init_from is not None and not lora:
        model = load_model(init_from, device="cpu", dtype=torch.float32)
        warm = None  # the checkpoint's weights already hold it
    elif warm is not None and warm.weights is not None:
        model = load_model(warm.weights, device="cpu", dtype=torch.float32)
    elif cfg.model == "tiny":
        model = tiny_model(vocab_size=len(tokenizer), seed=cfg.seed)
    else:
        model = load_model(cfg.model, device="cpu", dtype=torch.float32)
    if warm is not None and warm.adapter is not None:
        model = merge_adapter(model, warm.adapter)
    if lora:
        from peft import LoraConfig, PeftModel, get_peft_model

        if init_from is not None:
            model = PeftModel.from_pretrained(model, init_from / "adapter", is_trainable=True)
        else:
            torch.manual_seed(cfg.seed)  # the adapter's initialisation: one seed, one run
            model = get_peft_model(model, LoraConfig(
                r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=0.0, bias="none",
                target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    model = model.to(device=cfg.device, dtype=resolve_dtype(cfg.dtype)).eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, model


def write_actor(folder: Path, model, tokenizer, state: dict, *, merged: bool = True) -> Path:
    """Write a checkpoint's ``actor/`` atomically: a Hugging Face folder (LoRA merged), the LoRA adapter in
    ``adapter/``, the tokenizer, and ``state`` (optimizer state, ``global_step``, ...) in ``trainer_state.pt``.
    With LoRA and ``merged=False`` the merged weights are left out (:func:`merged_actor` rebuilds them).

    The folder is written beside ``folder`` and renamed into place, so an interrupted write leaves the
    previous ``actor/`` (or none), never a partial one.
    """
    tmp = folder.parent / f".{folder.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if hasattr(model, "peft_config"):
        model.save_pretrained(tmp / "adapter")
        if merged:
            copy.deepcopy(model).merge_and_unload().save_pretrained(tmp, safe_serialization=True)
    else:
        model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    torch.save(state, tmp / "trainer_state.pt")
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return folder


def has_weights(actor: Path) -> bool:
    """Whether a checkpoint's ``actor/`` holds weights: a Hugging Face folder, or a LoRA adapter alone."""
    return (actor / "config.json").is_file() or (actor / "adapter" / "adapter_config.json").is_file()


def _cached_weights(key: bytes, cfg, init_from: Path | None = None) -> Path:
    """The policy of ``cfg`` (and ``init_from``) as a Hugging Face folder, LoRA merged, written once into
    ``$OCSD_CACHE/merged/<digest of key>`` (atomically) and returned."""
    import hashlib

    from ocsd.replay.models import cache_root

    out = cache_root() / "merged" / hashlib.sha256(key).hexdigest()[:20]
    if (out / "config.json").is_file():
        return out
    tokenizer, model = load_policy(cfg, init_from=init_from)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    tmp = out.parent / f".{out.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out


def _folder_bytes(folder: Path) -> bytes:
    return b"".join(part.name.encode() + part.read_bytes() for part in sorted(folder.iterdir()) if part.is_file())


def merged_actor(actor: Path, run_config: dict) -> Path:
    """A Hugging Face folder with the weights of a checkpoint's ``actor/``.

    An ``actor/`` with merged weights is returned as it is. One that holds only its LoRA adapter
    (``save_merged=false``) is merged on top of the run's initial weights (its ``model`` and ``warm_start``,
    from ``run.json``'s config) once, into the cache (``$OCSD_CACHE/merged/<digest>``), and that folder is
    returned.

    Raises
    ------
    FileNotFoundError
        Naming the folder when it holds neither, or when the run's config does not say its model.
    """
    from types import SimpleNamespace

    actor = Path(actor)
    if (actor / "config.json").is_file():
        return actor
    adapter = actor / "adapter"
    if not (adapter / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{actor}: no weights (neither config.json nor adapter/adapter_config.json)")
    if not run_config.get("model"):
        raise FileNotFoundError(f"{actor}: an adapter-only checkpoint, but run.json's config names no model to "
                                f"merge it into")
    key = _folder_bytes(adapter) + repr((run_config.get("model"), run_config.get("warm_start"),
                                         run_config.get("seed"))).encode()
    cfg = SimpleNamespace(model=run_config["model"], warm_start=run_config.get("warm_start"),
                          seed=int(run_config.get("seed", 0)), lora_rank=int(run_config.get("lora_rank") or 8),
                          lora_alpha=int(run_config.get("lora_alpha") or 16), device="cpu", dtype="float32")
    return _cached_weights(key, cfg, init_from=actor)


def initial_weights(model: str, warm_start: str | None = None, *, seed: int = 0) -> Path:
    """A Hugging Face folder with a run's initial weights: ``model`` (``smollm2``, ``tiny`` or a folder) with the
    warm start merged when one is named, written once into the cache (``$OCSD_CACHE/merged/<digest>``); a model
    folder without a warm start is returned as it is. For backends that load weights from a folder (verl).

    Raises
    ------
    training.warm_start.WarmStartError
        The warm start is missing or of no accepted layout.
    """
    from types import SimpleNamespace

    from training.warm_start import resolve_warm_start

    if warm_start is None and Path(model).is_dir():
        return Path(model)
    key = repr((model, seed, str(warm_start))).encode()
    if warm_start is not None:
        warm = resolve_warm_start(warm_start)
        key += _folder_bytes(warm.adapter or warm.weights)
    cfg = SimpleNamespace(model=model, warm_start=warm_start, seed=seed, lora_rank=0, lora_alpha=16, device="cpu",
                          dtype="float32")
    return _cached_weights(key, cfg)


class Policy:
    """The policy of a config and the tools to act and score with it.

    Parameters
    ----------
    cfg : TrainConfig
    games : task source (:class:`training.envs.runtime.EnvironmentRuntime` ``task_source``)
        Where tasks come from.
    init_from : path, optional
        A checkpoint's ``actor/`` folder to start from.
    """

    def __init__(self, cfg: TrainConfig, games, init_from: Path | None = None):
        self.cfg, self.games = cfg, games
        self.tokenizer, self.model = load_policy(cfg, init_from=init_from)
        self.renderer = PromptRenderer(self.tokenizer)
        # merged_inference: a LoRA model in float32 samples and scores through a copy with its adapters merged
        self._merged = merged_copy(self.model) if cfg.merged_inference and merges_lora(self.model) else None
        self._merged_stale = False
        self._scorer = ReplayScorer(self.inference_model, token_budget=cfg.scoring_token_budget, progress=False)
        self.settings = GenerationSettings(max_new_tokens=cfg.max_response_length, temperature=cfg.temperature,
                                           top_p=cfg.top_p, batch=cfg.generation_batch)
        self._engine = None
        self._engine_stale = False
        self._env = None  # the batched environment kept between rollouts (env_workers > 0)
        # old_logprobs=rollout: (prompt, response) -> the log-probs that sampled it, under the weights as they are
        self._rollout_logprobs: dict[tuple[tuple[int, ...], tuple[int, ...]], torch.Tensor] = {}

    @property
    def gpu_share(self) -> GpuShare:
        """The lock of this policy's GPU among the processes sharing it (:mod:`training.rollout.gpu_share`):
        steps hold it shared, an engine's start-up alone; a no-op on a CPU."""
        return device_share(next(self.model.parameters()).device)

    @property
    def inference_model(self):
        """The model that forward-only passes of the current weights run on (sampling with ``rollout_engine=hf``,
        replay scoring, old and teacher log-probs): :attr:`model` itself, or with ``merged_inference`` and a LoRA
        model in float32 (:func:`~training.rollout.engines.merges_lora`) a plain copy with the adapters merged,
        brought up to the current weights here when they changed since (:meth:`weights_updated`). The copy
        computes the same function as :attr:`model` to float32 rounding, without the adapters' extra products."""
        if self._merged is None:
            return self.model
        if self._merged_stale:
            load_merged(self._merged, self.model)
            self._merged_stale = False
        return self._merged

    @property
    def scorer(self) -> ReplayScorer:
        """The replay scorer of the current weights (on :attr:`inference_model`)."""
        self.inference_model  # noqa: B018 -- brings a merged copy up to date
        return self._scorer

    @property
    def engine(self):
        """The rollout engine of ``cfg.rollout_engine`` (:mod:`training.rollout.engines`), built on first use."""
        if self._engine is None:
            from training.rollout.engines import make_engine

            cfg = self.cfg
            self._engine = make_engine(cfg.rollout_engine, self.inference_model,
                                       max_model_len=cfg.max_prompt_length + cfg.max_response_length,
                                       gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
                                       enforce_eager=cfg.vllm_enforce_eager, seed=cfg.seed)
            self._engine_stale = False
        return self._engine

    def prefetch(self, specs, *, env_seed: int) -> None:
        """Start loading the games of a later rollout (``specs``, ``env_seed``, as :meth:`collect` will play
        them) in the environment workers and return at once; the rollout that plays them only waits for
        what is not done by then. Nothing happens without worker processes (``env_workers=0``) or before
        the first rollout has started them."""
        if self._env is not None and not self._env.closed and hasattr(self._env, "reload"):
            self._env.reload(list(specs), max_steps=self.cfg.max_steps, seed=env_seed, wait=False)

    def weights_updated(self) -> None:
        """Say that the model's weights changed: the engine receives them before the next rollout, and the
        rollout's log-probs are no longer the policy's."""
        self._engine_stale = True
        self._merged_stale = True  # read only where a merged copy exists
        self._rollout_logprobs.clear()

    def close(self) -> None:
        """Free the rollout engine (a vLLM engine holds GPU memory) and stop the environment workers."""
        if self._env is not None:
            self._env.close()
            self._env = None
        if self._engine is not None:
            self._engine.close()
            self._engine = None

    def rng(self, step: int, purpose: int) -> np.random.Generator:
        """The generator of one purpose at one step (0 tasks, 1/2 sampling, 3 selection, 4 update order)."""
        return np.random.default_rng([self.cfg.seed, step, purpose])

    def collect(self, step: int, specs, *, desc: str = "rollout",
                timings: dict[str, float] | None = None) -> list[Trajectory]:
        """Roll out ``specs`` (one environment each, ``group_size`` consecutive specs a group), sampled with
        the rollout settings."""
        cfg = self.cfg
        tasks = [{"uid": f"s{step}_t{i // cfg.group_size}_r{i % cfg.group_size}",
                  "group_uid": f"s{step}_t{i // cfg.group_size}"} for i in range(len(specs))]
        return self.play(specs, tasks, self.settings, env_seed=step, sample_seed=int(self.rng(step, 1).integers(2**31)),
                         desc=desc, timings=timings, keep_logprobs=cfg.old_logprobs == "rollout")

    def play(self, specs, tasks: list[dict], settings: GenerationSettings, *, env_seed: int, sample_seed: int,
             desc: str = "rollout", timings: dict[str, float] | None = None,
             keep_logprobs: bool = False) -> list[Trajectory]:
        """One episode per task of ``specs`` in batched environments, decoded with ``settings`` by the
        rollout engine.

        Parameters
        ----------
        specs : sequence of tasks
        tasks : list of dict
            ``uid`` and ``group_uid`` of each episode, in the order of ``specs``.
        settings : GenerationSettings
        env_seed : int
            Seed of the environments.
        sample_seed : int
            Seed of the sampling (torch's generator with ``rollout_engine=hf``).
        desc : str
            Progress-bar label.
        timings : dict, optional
            Seconds added to ``time/rollout_generate``, ``time/rollout_env``, ``time/rollout_render`` and
            ``time/rollout_sync`` (pushing weights into the engine, waking it and putting it to sleep).
        keep_logprobs : bool
            Keep the log-probs of the sampled tokens (the Hugging Face engine's
            :meth:`~training.rollout.engines.HFEngine.scored_responder`), which :meth:`logprobs` then returns
            for these episodes' steps until the weights change; the rollouts of :meth:`collect` do with
            ``old_logprobs=rollout``.
        """
        cfg = self.cfg
        timings = {} if timings is None else timings
        engine = self.engine
        with timed(timings, "time/rollout_sync"):
            if self._engine_stale:
                engine.sync(self.inference_model)
                self._engine_stale = False
            self._rollout_logprobs.clear()
            if keep_logprobs:
                respond = engine.scored_responder(self.tokenizer, settings, sample_seed, self._rollout_logprobs)
            else:
                respond = engine.responder(self.tokenizer, settings, sample_seed)
            stream = (engine.stream(self.tokenizer, settings, sample_seed)
                      if cfg.rollout_pipeline and cfg.env_workers > 0 else None)
        env = None
        try:
            with timed(timings, "time/rollout_env"):
                env = self.games.make_env(list(specs), max_steps=cfg.max_steps, workers=cfg.env_workers,
                                          seed=env_seed, reuse=self._env)
            self._env = env if cfg.env_workers > 0 else None  # worker processes live on for the next rollout
            return rollout(self.inference_model, self.tokenizer, self.renderer, env, tasks, env_name=cfg.env,
                           history_length=cfg.history_length, max_prompt_length=cfg.max_prompt_length,
                           settings=settings, progress=cfg.progress, desc=desc, respond=respond, stream=stream,
                           timings=timings)
        except BaseException:
            self._env = None  # a worker may be mid-command: never reuse it
            raise
        finally:
            with timed(timings, "time/rollout_env"):
                if env is not None and env is not self._env:
                    env.close()
            with timed(timings, "time/rollout_sync"):
                engine.sleep()

    def logprobs(self, pairs, model=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Padded float32 log-probs (S, T) and mask of each (prompt ids, response ids) pair, on the CPU.

        Under the policy's own weights (``model`` None) and with ``old_logprobs=rollout``, pairs that the last
        rollout sampled since the weights last changed take the log-probs that sampled them; when all do, no
        forward pass runs."""
        if model is None and pairs and self._rollout_logprobs:
            kept = [self._rollout_logprobs.get((tuple(p), tuple(r))) for p, r in pairs]
            if all(lp is not None for lp in kept):
                return padded_rows(kept, device="cpu")
        lp, mask = response_logprobs(model if model is not None else self.inference_model, pairs, padded=True,
                                     token_budget=self.cfg.scoring_token_budget)
        return lp.float().cpu(), mask.cpu()
