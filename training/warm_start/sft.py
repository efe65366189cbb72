"""A supervised warm start from expert demonstrations: the settings, the loss and the run (``python -m training.sft``).

The demonstrations are an expert's winning plays (ALFWorld: by default the ``search`` expert, which looks through
receptacles until it finds what the task needs, :mod:`training.envs.alfworld.search`; the ``expert`` setting
chooses) played through the same rollout as the policy's (:mod:`training.warm_start.demonstrations`). The target
is the response ``<reason>...</reason><action>...</action>`` and the end-of-turn token; the loss is the mean negative
log-likelihood of the response tokens (prompt tokens carry none). :class:`SFTRun` owns the run folder (layout:
:mod:`training.sft`) and fits the model.
"""

from __future__ import annotations

import json
import math
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from training.config import (COUNT, NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE, ConfigError, Range, check_common,
                             check_ranges, data_root_of, setting)
from training.warm_start.demonstrations import DEMO_DIR, build_demonstrations, check_expert

__all__ = ["RESUMABLE", "SFT_ENVIRONMENTS", "SFT_FILE", "SFTConfig", "SFTRun", "hardware", "lr_at", "sft_step",
           "source_version"]

SFT_FILE = "sft.json"
SFT_ENVIRONMENTS = ("alfworld",)
"""Environments a warm start can be made in: their runtime has an expert, and :class:`SFTConfig` has every setting
their tasks need (WebShop's and Search-QA's task sources read settings it does not have: ``webshop_url``,
``retrieval_urls``, ``task_types``)."""


@dataclass(frozen=True)
class SFTConfig:
    """All settings of a supervised warm start (``python -m training.sft --help-config`` lists them)."""

    run_name: str = setting("run name written to sft.json", "sft")
    run_dir: str = setting("folder the run is written to (one writer at a time)", "checkpoints/sft")
    seed: int = setting("seed of the generated games, the data order and the model's LoRA initialisation", 0,
                        Range(0, 2**63 - 1, integer=True))
    resume: bool = setting("continue from the last checkpoint in run_dir (false: refused when run_dir holds one)", True)
    overwrite: bool = setting("delete run_dir's checkpoints, metrics and demonstrations and start again", False)
    model: str = setting("'smollm2' (shipped GGUF), 'tiny' (random, tests), or a local Hugging Face folder", "smollm2")
    device: str = setting("'cpu', 'cuda' or 'cuda:N'", "cpu")
    dtype: str = setting("parameter dtype: float32, bfloat16, float16 or auto (bfloat16 on a GPU and on a CPU with AMX "
                         "or AVX512-BF16, else float32)", "float32")
    lora_rank: int = setting("LoRA rank via peft (0: full fine-tuning)", 8, NON_NEGATIVE_INT)
    lora_alpha: int = setting("LoRA alpha", 16, COUNT)
    env: str = setting("environment name (its runtime must have an expert)", "alfworld")
    expert: str = setting("the expert whose plays are the demonstrations, where the environment has several (ALFWorld: "
                          "'search' looks through receptacles in a plausible order until it finds what the task needs; "
                          "'walkthrough' is the planner's plan, which knows where everything is)", "search")
    data: str | None = setting("where games come from: a real ALFWorld data folder or 'generated' (into games_dir); "
                               "unset: $ALFWORLD_DATA", None)
    games_dir: str = setting("where generated games are kept", "checkpoints/sft_games")
    n_train_games: int = setting("demonstration games (generated, or the first of train_split)", 480, COUNT)
    n_val_games: int = setting("held-out games whose demonstrations give the validation loss", 24, COUNT)
    train_split: str = setting("split of real data the demonstrations come from", "train")
    val_split: str = setting("split of real data for the validation loss", "valid_seen")
    max_steps: int = setting("step cap of a demonstration episode", 50, COUNT)
    env_workers: int = setting("worker processes stepping environments while demonstrations are played (0: in this "
                               "process)", 0, NON_NEGATIVE_INT)
    history_length: int = setting("observation/action pairs of history in the prompt (as the policy will act)", 2,
                                  NON_NEGATIVE_INT)
    max_prompt_length: int = setting("longest prompt in tokens; history is shortened to fit (as in rollouts)", 2048,
                                     COUNT)
    epochs: int = setting("passes over the demonstrations", 3, COUNT)
    batch_size: int = setting("demonstration steps per optimizer step", 32, COUNT)
    lr: float = setting("AdamW peak learning rate (linear warm-up, then linear decay to 0)", 2e-4, POSITIVE)
    warmup_ratio: float = setting("warm-up share of the optimizer steps", 0.05, Range(0, 1, high_open=True))
    weight_decay: float = setting("AdamW weight decay", 0.0, NON_NEGATIVE)
    grad_clip: float = setting("gradient-norm clipping", 1.0, POSITIVE)
    micro_batch_tokens: int = setting("padded tokens per forward/backward micro-batch", 16384, COUNT)
    max_updates: int = setting("stop after this many optimizer steps (0: all epochs)", 0, NON_NEGATIVE_INT)
    save_freq: int = setting("write a checkpoint every N optimizer steps (and at the end)", 100, COUNT)
    keep_checkpoints: int = setting("checkpoints kept (older ones are deleted)", 2, COUNT)
    progress: bool = setting("show progress bars", True)

    def __post_init__(self) -> None:
        from ocsd.environments import environment_names

        if self.env not in environment_names():
            raise ConfigError(f"env: unknown {self.env!r}; known: {', '.join(environment_names())}")
        if self.env not in SFT_ENVIRONMENTS:
            raise ConfigError(f"env={self.env!r}: a warm start can be made only in {', '.join(SFT_ENVIRONMENTS)} "
                              f"(an expert, and tasks its settings describe); {self.env}'s tasks need settings it "
                              f"has no key for")
        check_ranges(self)
        check_expert(self.env, self.expert)
        check_common(self)

    @property
    def data_root(self) -> str | None:
        """Real data folder, or None for generated games (see :func:`training.config.data_root_of`)."""
        return data_root_of(self.data)

    def to_dict(self) -> dict:
        """Plain dict of every field."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


# settings that may differ when a run resumes; any other difference is another run
RESUMABLE = frozenset({"run_dir", "games_dir", "progress", "resume", "overwrite", "save_freq", "keep_checkpoints",
                       "device", "micro_batch_tokens", "max_updates", "env_workers"})


# ----------------------------------------------------------------------------------------------
# optimisation
# ----------------------------------------------------------------------------------------------


def lr_at(step: int, total: int, peak: float, warmup_ratio: float) -> float:
    """Learning rate of optimizer step ``step`` (1-based) of ``total``: linear warm-up over
    ``w = ceil(warmup_ratio * total)`` steps to ``peak``, then linear decay from ``peak`` at step ``w + 1``
    to ``peak / (total - w)`` at step ``total`` (0 one step later)."""
    warm = math.ceil(warmup_ratio * total)
    if step <= warm:
        return peak * step / warm
    return peak * (total + 1 - step) / (total - warm)


def sft_step(model, pairs: list[tuple[list[int], list[int]]], *, micro_batch_tokens: int,
             grad: bool = True) -> tuple[float, int]:
    """Mean negative log-likelihood of the response tokens of ``pairs`` (one optimizer step's batch).

    With ``grad`` the gradient of that mean is accumulated into the parameters (micro-batches of at most
    ``micro_batch_tokens`` padded tokens, each scaled by the batch's token count, so the gradient equals
    that of the whole batch). Returns the loss and the number of response tokens.
    """
    from ocsd.replay.scoring import response_logprobs
    from training.update import micro_batches

    import torch

    lengths = [len(p) + len(r) for p, r in pairs]
    n_tokens = sum(len(r) for _, r in pairs)
    total = 0.0
    for group in micro_batches(lengths, micro_batch_tokens):
        part = [pairs[i] for i in group]
        logp, mask = response_logprobs(model, part, grad=grad, padded=True,
                                       token_budget=max(micro_batch_tokens, max(lengths)))
        loss = -(logp * mask).sum() / n_tokens
        if grad:
            if not torch.isfinite(loss):
                raise FloatingPointError(f"the SFT loss is {loss.item()} (non-finite)")
            loss.backward()
        total += float(loss.detach())
    return total, n_tokens


def source_version() -> dict:
    """The git commit of this code and whether the working tree had uncommitted changes (None outside git)."""
    here = Path(__file__).resolve().parent

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, cwd=here)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit or None, "uncommitted_changes": None if status is None else bool(status)}


def hardware(device: str) -> str:
    """The device in words (GPU name, or the CPU and its core count)."""
    import os

    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"{platform.processor() or platform.machine()} CPU, {os.cpu_count()} cores"


class SFTRun:
    """A supervised warm start: the run folder, the model, the demonstrations and the optimizer.

    Raises
    ------
    training.trainer.RunFolderError
        When ``run_dir`` holds a run with other settings, checkpoints with ``resume=false``, or other files.
    """

    def __init__(self, cfg: SFTConfig):
        from ocsd.records import RunLock

        self.cfg = cfg
        self.lock = RunLock(cfg.run_dir).acquire()
        try:
            self._start()
        except BaseException:
            self.lock.release()
            raise

    def _checkpoints(self) -> list[tuple[int, Path]]:
        from ocsd.records import checkpoint_dirs

        return [(step, ckpt) for step, ckpt in checkpoint_dirs(self.cfg.run_dir)
                if (ckpt / "actor" / "trainer_state.pt").is_file()]

    def _check_folder(self) -> Path | None:
        from ocsd.records import LOCK_FILE, METRICS_FILE
        from training.trainer import RunFolderError, changed_settings

        cfg, run = self.cfg, Path(self.cfg.run_dir)
        if cfg.overwrite:
            for name in (SFT_FILE, METRICS_FILE, DEMO_DIR, *[p.name for _, p in self._checkpoints()]):
                target = run / name
                shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
            return None
        others = sorted(p.name for p in run.iterdir() if p.name not in (LOCK_FILE, SFT_FILE, METRICS_FILE, DEMO_DIR)
                        and not p.name.startswith("global_step_"))
        if others:
            raise RunFolderError(f"run_dir: {run} holds files that are not a warm-start run ({', '.join(others[:4])});"
                                 f" use another run_dir")
        checkpoints = self._checkpoints()
        if not checkpoints:
            return None
        if not cfg.resume:
            raise RunFolderError(f"run_dir: {run} holds checkpoints and resume=false; overwrite=true replaces them")
        previous = json.loads((run / SFT_FILE).read_text()).get("config", {}) if (run / SFT_FILE).is_file() else {}
        changed = changed_settings(previous, cfg.to_dict(), RESUMABLE)
        if changed:
            raise RunFolderError(f"run_dir: {run} holds a run with other settings ({'; '.join(changed)}); use "
                                 f"another run_dir or overwrite=true")
        return checkpoints[-1][1]

    def _start(self) -> None:
        import torch

        from ocsd.replay.prompts import PromptRenderer
        from training.policy import load_policy
        from training.precision import make_optimizer

        from ocsd.records import RunWriter

        cfg = self.cfg
        resume = self._check_folder()
        self.writer = RunWriter(cfg.run_dir)
        torch.manual_seed(cfg.seed)  # the LoRA initialisation
        self.tokenizer, self.model = load_policy(cfg, init_from=resume / "actor" if resume else None)
        self.renderer = PromptRenderer(self.tokenizer)
        self.demos = build_demonstrations(cfg, self.tokenizer, self.renderer)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.start = 0
        if resume is not None:
            state = torch.load(resume / "actor" / "trainer_state.pt", map_location="cpu", weights_only=False)
            self.optimizer.load_state_dict(state["optimizer"])
            self.start = int(state["global_step"])
            self.writer.truncate_metrics(self.start)  # steps after the checkpoint are run again
        run = Path(cfg.run_dir)
        info = json.loads((run / DEMO_DIR / "info.json").read_text())
        (run / SFT_FILE).write_text(json.dumps({"run": cfg.run_name, "config": cfg.to_dict(), "games": info["games"],
                                                "demonstrations": info["counts"]}, indent=2) + "\n")

    @property
    def steps_per_epoch(self) -> int:
        """Optimizer steps of one pass over the training demonstrations."""
        return -(-len(self.demos["train"]) // self.cfg.batch_size)

    @property
    def total_steps(self) -> int:
        """Optimizer steps of the run (all epochs, or ``max_updates``)."""
        total = self.steps_per_epoch * self.cfg.epochs
        return min(total, self.cfg.max_updates) if self.cfg.max_updates else total

    def batches(self) -> list[np.ndarray]:
        """Row indices of every optimizer step: a seeded permutation per epoch, cut into ``batch_size`` rows."""
        n, out = len(self.demos["train"]), []
        for epoch in range(self.cfg.epochs):
            order = np.random.default_rng([self.cfg.seed, epoch]).permutation(n)
            out += [order[i:i + self.cfg.batch_size] for i in range(0, n, self.cfg.batch_size)]
        return out[: self.total_steps]

    def _pairs(self, split: str, rows) -> list[tuple[list[int], list[int]]]:
        table = self.demos[split]
        return [(list(table.prompt_ids.iloc[i]), list(table.response_ids.iloc[i])) for i in rows]

    def non_finite_rows(self, rows) -> str:
        """Which demonstration steps of a batch give a non-finite loss or gradient on their own (each alone,
        forward and backward, gradients cleared afterwards): their row, game, step and token counts, or that none
        does alone (the batch's micro-batching or the weights are the cause)."""
        import torch

        from training.precision import optimized_parameters

        table, bad = self.demos["train"], []
        for i in rows:
            self.optimizer.zero_grad(set_to_none=True)
            try:
                sft_step(self.model, self._pairs("train", [i]), micro_batch_tokens=self.cfg.micro_batch_tokens)
                finite = all(torch.isfinite(p.grad).all() for p in optimized_parameters(self.optimizer)
                             if p.grad is not None)
            except FloatingPointError:
                finite = False
            if not finite:
                bad.append(f"row {int(i)} ({table.game.iloc[i]} step {table.step.iloc[i]}: "
                           f"{len(table.prompt_ids.iloc[i])} prompt + {len(table.response_ids.iloc[i])} response "
                           f"tokens)")
        self.optimizer.zero_grad(set_to_none=True)
        if not bad:
            return (f"no demonstration step of the batch ({len(rows)} rows) is non-finite alone: the batch's "
                    f"micro-batches (micro_batch_tokens={self.cfg.micro_batch_tokens}) or the weights are")
        return f"non-finite alone: {len(bad)} of {len(rows)} rows: " + "; ".join(bad[:5])

    def validation_loss(self) -> float:
        """Mean response-token NLL of the held-out demonstrations."""
        import torch

        pairs = self._pairs("valid", range(len(self.demos["valid"])))
        with torch.inference_mode():
            loss, _ = sft_step(self.model, pairs, micro_batch_tokens=self.cfg.micro_batch_tokens, grad=False)
        return loss

    def save(self, step: int) -> Path:
        """Write ``global_step_<step>/actor/`` and delete checkpoints beyond ``keep_checkpoints``."""
        from training.policy import write_actor

        folder = Path(self.cfg.run_dir) / f"global_step_{step}"
        folder.mkdir(parents=True, exist_ok=True)
        write_actor(folder / "actor", self.model, self.tokenizer,
                    {"optimizer": self.optimizer.state_dict(), "global_step": step, "kind": "sft"})
        for _, old in self._checkpoints()[: -self.cfg.keep_checkpoints]:
            shutil.rmtree(old)
        return folder

    def fit(self) -> Path:
        """Run the remaining optimizer steps; return the last checkpoint."""
        try:
            return self._fit()
        finally:
            self.lock.release()

    def _fit(self) -> Path:
        import torch
        from tqdm.auto import tqdm

        from training.precision import optimized_parameters

        cfg, run = self.cfg, Path(self.cfg.run_dir)
        batches, total = self.batches(), self.total_steps
        params = optimized_parameters(self.optimizer)
        began = time.perf_counter()
        last = None
        bar = tqdm(total=total, initial=self.start, desc="sft", unit="step", disable=not cfg.progress)
        self.model.train()
        for step in range(self.start + 1, total + 1):
            lr = lr_at(step, total, cfg.lr, cfg.warmup_ratio)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.optimizer.zero_grad(set_to_none=True)
            try:
                loss, tokens = sft_step(self.model, self._pairs("train", batches[step - 1]),
                                        micro_batch_tokens=cfg.micro_batch_tokens)
                norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip))
                if not math.isfinite(norm):
                    raise FloatingPointError(f"gradient norm is {norm} (non-finite)")
            except FloatingPointError as exc:
                raise FloatingPointError(f"{exc} at SFT step {step}; {self.non_finite_rows(batches[step - 1])}; "
                                         f"the last checkpoint in {run} is kept") from None
            self.optimizer.step()
            row = {"step": step, "epoch": (step - 1) // self.steps_per_epoch, "loss": loss,
                   "lr": lr, "grad_norm": norm, "tokens": tokens}
            if step % cfg.save_freq == 0 or step == total:
                self.model.eval()
                row["val_loss"] = self.validation_loss()
                last = self.save(step)
                self.model.train()
            self.writer.append_metrics(row)
            bar.set_postfix(loss=f"{loss:.3f}")
            bar.update(1)
        bar.close()
        self.model.eval()
        info = json.loads((run / SFT_FILE).read_text())
        info["made"] = {**source_version(), "hardware": hardware(cfg.device), "steps": total,
                        "minutes_this_invocation": round((time.perf_counter() - began) / 60, 2),
                        "command": " ".join(["python -m training.sft", *sys.argv[1:]])}
        (run / SFT_FILE).write_text(json.dumps(info, indent=2) + "\n")
        return last if last is not None else self._checkpoints()[-1][1]
