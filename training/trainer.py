"""The single-process trainer (CPU or one GPU): paper Algorithm 1 for every registered method.

One training step:

1. sample B tasks, G rollouts each, in batched environments (``time/rollout``);
2. step rewards with the invalid-action penalty and GRPO advantages per group, under ``reward_mode``
   (:func:`ocsd.algorithm.advantages.protocol_advantages`);
3. old-policy log-probs of every step (``time/old_logprob``), reference log-probs for the KL loss
   (``time/ref_logprob``), step NLL and step selection (top / random / all, rho);
4. replay scoring of the selected steps under the views the method needs (and, at checkpoints,
   Full and Observation-Ablated for the records) (``time/replay_scoring``, split into
   ``time/replay_render`` and ``time/replay_forward``); the privileged teacher of
   the baselines (``time/teacher_logprob``);
5. token advantages through :func:`ocsd.algorithm.methods.token_advantages` (``time/advantage``) and the PPO
   update with verl's losses, one AdamW step per mini-batch of step rows (``time/update``);
6. every ``save_freq`` steps a checkpoint: ``actor/`` (weights, optimizer, RNG state), then
   ``replay/`` with ``meta.json`` last; ``metrics.jsonl`` every step, validation every ``test_freq``.

Steps 2-5 are :func:`training.pipeline.step_advantages`, the step pipeline the veRL backend runs as well;
step 1, the statistics of steps 2-3 and the checkpoint's ``replay/`` tables are :mod:`training.pipeline`, which
``python -m training.collect`` runs as well. A crash or Ctrl-C leaves the last complete checkpoint;
``resume=true`` (the default) continues from it to the same result as an uninterrupted run with the
same seed.

The run folder has one writer: the trainer holds its lock (:class:`ocsd.records.RunLock`) from
construction until :meth:`Trainer.fit` returns. Before anything is written, :func:`check_run_folder`
decides between a fresh start and a resume, and refuses a folder whose contents would be lost (another
command's run, a run with other settings, files that are not a run) unless ``overwrite=true``.
"""

from __future__ import annotations

import copy
import gc
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ocsd.algorithm.methods import MethodSpec, get_method
from ocsd.cli import folder_problem
from ocsd.environments import get_environment
from ocsd.records import (LOCK_FILE, METRICS_FILE, RECORDED_VIEWS, RUN_FILE, RecordError, RunLock,
                          RunWriter, checkpoint_dirs, checkpoint_folders, read_run_info, write_replay)
from training.config import TrainConfig
from training.pipeline import (Scoring, StepAdvantages, UnscoredStepsError, forward_scoring, record_tables,
                               replay_meta, rollout_batch, step_advantages, step_metrics, step_tasks)
from training.policy import Policy, load_policy, timed, write_actor
from training.precision import make_optimizer
from training.replay import ReplayScores
from training.resumable import STATE_FILE, resumable_checkpoints
from training.rollout.loop import Trajectory
from training.teachers import teacher_context
from training.update import LossSettings, UpdateBatch, ppo_update

REQUIRED_TIMINGS = ("time/rollout", "time/old_logprob", "time/ref_logprob", "time/replay_scoring", "time/advantage",
                    "time/update", "time/step")
# settings that may change when a run is resumed (where the run and its games live, how far it goes, how
# it reports and which local resources it uses); any other difference means a different run
RESUMABLE_CHANGES = frozenset({"total_steps", "progress", "resume", "overwrite", "run_dir", "games_dir", "save_freq",
                               "test_freq", "val_tasks", "env_workers", "scoring_token_budget", "micro_batch_tokens",
                               "generation_batch", "device", "save_weights", "rollout_engine",
                               "vllm_gpu_memory_utilization", "vllm_enforce_eager",
                               "rollout_pipeline", "old_logprobs", "merged_inference"})


class TrainingError(RuntimeError):
    """The run cannot continue (e.g. a non-finite loss); the last checkpoint is kept."""


class RunFolderError(TrainingError):
    """``run_dir`` holds something the run must not replace, or a checkpoint it cannot resume from; nothing
    has been written. The message says what and how to go on without losing it."""


# ----------------------------------------------------------------------------------------------
# the run folder: fresh start, resume or refusal
# ----------------------------------------------------------------------------------------------


def changed_settings(previous: dict, current: dict, resumable: frozenset[str] = RESUMABLE_CHANGES) -> list[str]:
    """``key: old -> new`` for every setting of ``current`` that differs from ``previous`` (keys missing
    from either side and the ``resumable`` ones, by default :data:`RESUMABLE_CHANGES`, do not count)."""
    return [f"{key}: {previous[key]!r} -> {value!r}" for key, value in sorted(current.items())
            if key in previous and previous[key] != value and key not in resumable]


def resume_point(run_dir: str | os.PathLike) -> Path | None:
    """The last checkpoint with complete replay scores and trainer state, if any."""
    resumable = resumable_checkpoints(run_dir)
    return resumable[-1][1] if resumable else None


def previous_run(run_dir: Path) -> dict | None:
    """The ``run.json`` of the training run in ``run_dir``; None without one.

    Raises
    ------
    RunFolderError
        When ``run.json`` cannot be read, or names another command as its source (a collection, a re-scoring).
    """
    if not (run_dir / RUN_FILE).exists():
        return None
    try:
        info = read_run_info(run_dir)
    except RecordError as exc:
        raise RunFolderError(f"run_dir: {exc}, so it is not known what the folder holds; use another run_dir, "
                             f"or overwrite=true to replace it") from None
    if info.get("source"):
        raise RunFolderError(f"run_dir: {run_dir} holds a run written by {info['source']}, not a training run; "
                             f"use another run_dir (overwrite=true replaces it)")
    return info


def check_run_folder(cfg: TrainConfig) -> Path | None:
    """Decide how the run starts in ``cfg.run_dir``: the checkpoint to resume from, or None to start at
    step 1 (replacing only incomplete checkpoints, or anything with ``overwrite=true``).

    Raises
    ------
    RunFolderError
        If the folder holds something a fresh start would delete: files that are not a run, another
        command's run, a run with other settings (each named ``key: old -> new``), a run with
        ``resume=false``, or complete checkpoints that cannot be resumed.
    """
    run_dir = Path(cfg.run_dir)
    if cfg.overwrite or not run_dir.is_dir():
        return None
    info = previous_run(run_dir)
    if info is None:
        others = sorted(p.name for p in run_dir.iterdir() if p.name != LOCK_FILE)
        if others:
            shown = ", ".join(others[:4]) + (", ..." if len(others) > 4 else "")
            raise RunFolderError(f"run_dir: {run_dir} is not empty ({shown}) and holds no run (no {RUN_FILE}); "
                                 f"use a new or empty run_dir, or overwrite=true to write into it")
        return None
    ckpts = checkpoint_dirs(run_dir)
    metrics = run_dir / METRICS_FILE
    if not ckpts and not (metrics.is_file() and metrics.stat().st_size > 0):
        return None  # nothing to keep
    if not cfg.resume:
        raise RunFolderError(f"run_dir: {run_dir} holds a run ({len(ckpts)} checkpoint(s)) and resume=false; "
                             f"use another run_dir to keep it, or overwrite=true to replace it")
    previous = info.get("config") if isinstance(info.get("config"), dict) else {}
    changed = changed_settings(previous, cfg.to_dict())
    if changed:
        raise RunFolderError(f"run_dir: {run_dir} holds a run with other settings ({'; '.join(changed)}); use "
                             f"another run_dir to keep it, or its settings to resume it (overwrite=true replaces it)")
    point = resume_point(run_dir)
    if point is None and checkpoint_folders(run_dir, warn=False):
        raise RunFolderError(f"run_dir: {run_dir} holds complete checkpoints without trainer state "
                             f"(actor/{STATE_FILE}: saved with save_weights=false), which cannot be resumed; use "
                             f"another run_dir to keep them, or overwrite=true to replace them")
    return point


def load_trainer_state(path: Path) -> dict:
    """A checkpoint's ``actor/trainer_state.pt`` (optimizer state and global step).

    Raises
    ------
    RunFolderError
        Naming the file when it cannot be read (truncated or damaged).
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
        step = int(state["global_step"])
        if not isinstance(state["optimizer"], dict) or step < 1:
            raise ValueError("no optimizer state or global step")
    except Exception as exc:  # any damage: say which file
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise RunFolderError(f"{path}: cannot be read ({why}); the checkpoint is damaged: resume from a copy "
                             f"of the run, or use another run_dir") from None
    return state


# ----------------------------------------------------------------------------------------------
# model set-up
# ----------------------------------------------------------------------------------------------


def _trainable(model) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


@contextmanager
def reference_policy(model, ref_model):
    """The frozen reference: a separate copy, or the LoRA base model with adapters disabled."""
    if ref_model is not None:
        yield ref_model
    else:
        with model.disable_adapter():
            yield model


# ----------------------------------------------------------------------------------------------
# the trainer
# ----------------------------------------------------------------------------------------------


class Trainer:
    """Runs :class:`TrainConfig` to completion, writing the run folder.

    Parameters
    ----------
    cfg : TrainConfig
    games : task source, optional
        Training and validation tasks (:class:`training.envs.runtime.EnvironmentRuntime` ``task_source``;
        built from the config's environment when omitted).
    """

    def __init__(self, cfg: TrainConfig, games=None):
        self.cfg = cfg
        self.spec: MethodSpec = get_method(cfg.method)
        problem = folder_problem(cfg.run_dir, write=True)
        if problem:
            raise RunFolderError(f"run_dir={cfg.run_dir!r}: {problem}; nothing was written")
        self.lock = RunLock(cfg.run_dir).acquire()
        try:
            self._start(games)
        except BaseException:
            self.lock.release()
            raise

    def _start(self, games) -> None:
        cfg = self.cfg
        resume_from = check_run_folder(cfg)
        state = load_trainer_state(resume_from / "actor" / STATE_FILE) if resume_from is not None else None
        self.writer = RunWriter(cfg.run_dir)
        self.games = games or get_environment(cfg.env).load_runtime().task_source(cfg)
        self.start_step = 1
        self.policy = Policy(cfg, self.games, init_from=resume_from / "actor" if resume_from else None)
        self.tokenizer, self.model, self.renderer = self.policy.tokenizer, self.policy.model, self.policy.renderer
        self.policy.engine  # built now (a vLLM engine's start-up is not a step's rollout time)
        if resume_from is None:
            self._clear_run()
        self.ref_model = None
        if cfg.kl_coef > 0 and cfg.lora_rank == 0:
            self.ref_model = load_policy(cfg)[1] if resume_from else copy.deepcopy(self.model)
            for p in self.ref_model.parameters():
                p.requires_grad_(False)
        self.optimizer = make_optimizer(_trainable(self.model), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.loss_settings = LossSettings(clip_ratio=cfg.clip_ratio, kl_coef=cfg.kl_coef, kl_type=cfg.kl_type,
                                          loss_agg_mode=cfg.loss_agg_mode, aux_coef=cfg.sdar_coef,
                                          gate_beta=cfg.gate_beta, grad_clip=cfg.grad_clip,
                                          micro_batch_tokens=cfg.micro_batch_tokens)
        if state is not None:
            self.optimizer.load_state_dict(state["optimizer"])
            self.start_step = int(state["global_step"]) + 1
            self.writer.truncate_metrics(int(state["global_step"]))
            for stale in self._checkpoints():
                if stale[0] > state["global_step"]:
                    shutil.rmtree(stale[1])
        self.writer.write_run_json({"run": cfg.run_name, "method": cfg.method, "env": cfg.env, "model": cfg.model,
                                    "seed": cfg.seed, "config": cfg.to_dict(), "games": self.games.describe()})

    def close(self) -> None:
        """Free the rollout engine and release the run folder's lock (:meth:`fit` does when it returns)."""
        try:
            self.policy.close()
        finally:
            self.lock.release()

    # -- checkpoints ----------------------------------------------------------------------------

    def _clear_run(self) -> None:
        """A fresh run replaces what :func:`check_run_folder` allows: incomplete checkpoints, or, with
        ``overwrite=true``, every checkpoint and the metrics."""
        for _, path in self._checkpoints():
            shutil.rmtree(path)
        (Path(self.cfg.run_dir) / METRICS_FILE).unlink(missing_ok=True)

    def _checkpoints(self) -> list[tuple[int, Path]]:
        return checkpoint_dirs(self.cfg.run_dir)

    def save_checkpoint(self, step: int, steps_df, tokens_df, meta: dict) -> Path:
        """Write ``actor/`` (a Hugging Face folder, LoRA merged; the adapter; optimizer and step), then
        ``replay/`` with ``meta.json`` (:func:`training.pipeline.replay_meta`) last."""
        ckpt = self.writer.checkpoint_dir(step)
        replay = self.writer.replay_dir(step)
        (replay / "meta.json").unlink(missing_ok=True)
        if self.cfg.save_weights:
            write_actor(ckpt / "actor", self.model, self.tokenizer,
                        {"optimizer": self.optimizer.state_dict(), "global_step": step}, merged=self.cfg.save_merged)
        write_replay(replay, steps_df, tokens_df, meta)
        return ckpt

    # -- one step -------------------------------------------------------------------------------

    def _scoring(self, trajs: list[Trajectory], views: list[str], timings: dict[str, float]) -> Scoring:
        """How a training step scores: the selected steps' ``views`` rendered again and scored by the policy's replay
        scorer, and for the baselines with a privileged teacher every response under the teacher's prompt by the
        policy's forward pass (SDAR's: the skill prefix in front of the student's chat-templated rollout prompt,
        tokenised again and cut to ``max_prompt_length`` from the left, :mod:`training.teachers`)."""
        cfg = self.cfg
        context = (teacher_context(self.tokenizer, cfg.env, cfg.max_prompt_length) if self.spec.privileged_teacher
                   else None)
        return forward_scoring(trajs, views, scorer=self.policy.scorer, renderer=self.renderer,
                               logprobs=self.policy.logprobs, teacher_context=context, env_name=cfg.env,
                               max_prompt_length=cfg.max_prompt_length, timings=timings)

    def train_step(self, step: int) -> dict:
        """Run one training step; returns its metrics row (and writes a checkpoint when due)."""
        cfg, spec, timings = self.cfg, self.spec, {}
        is_ckpt = step % cfg.save_freq == 0 or step == cfg.total_steps
        with timed(timings, "time/step"):
            trajs = rollout_batch(self.policy, step, timings=timings)
            if step < cfg.total_steps and not self._validates(step):
                # the next step's games load in the environment workers during this step's GPU phases
                self.policy.prefetch(step_tasks(self.policy, step + 1), env_seed=step + 1)
            recorded = set(RECORDED_VIEWS) - {"student"} if is_ckpt and cfg.write_replay else set()
            views = sorted(set(spec.replay_views) | recorded)
            try:
                batch = step_advantages(trajs, spec=spec, cfg=cfg, step=step, old_logprobs=self.policy.logprobs,
                                        score=self._scoring(trajs, views, timings), timings=timings)
            except UnscoredStepsError as exc:
                raise TrainingError(f"{exc}; the run stops and keeps its last checkpoint in {cfg.run_dir}") from exc
            update_metrics = self._update(step, batch, timings)
            row = {**step_metrics(spec, step, trajs, batch.stats, batch.inputs, batch.token_adv, batch.scores),
                   **update_metrics}
            if is_ckpt:
                with timed(timings, "time/save_checkpoint"):
                    self._record(step, trajs, batch)
        row.update({name: 0.0 for name in REQUIRED_TIMINGS})
        row.update(timings)
        return row

    def _update(self, step: int, batch: StepAdvantages, timings: dict[str, float]) -> dict:
        """The reference policy's log-probs for the KL loss (``time/ref_logprob``) and the PPO update of the batch
        (``time/update``); returns the update's metrics."""
        cfg, stats = self.cfg, batch.stats
        ref_logp = None
        if cfg.kl_coef > 0:
            with timed(timings, "time/ref_logprob"), reference_policy(self.model, self.ref_model) as ref:
                ref_logp = self.policy.logprobs(stats.pairs, model=ref)[0]
        with timed(timings, "time/update"):
            for group in self.optimizer.param_groups:
                group["lr"] = self._lr(step)
            try:
                metrics = ppo_update(
                    self.model, self.optimizer, self.spec,
                    UpdateBatch([p for p, _ in stats.pairs], [r for _, r in stats.pairs], stats.old_logp,
                                batch.token_adv, stats.mask, ref_logp=ref_logp, teacher_logp=batch.teacher_logp),
                    self.loss_settings, epochs=cfg.ppo_epochs, mini_batches=cfg.mini_batches,
                    mini_batch_size=cfg.ppo_mini_batch_size, rng=self.policy.rng(step, 4))
            except FloatingPointError as exc:
                raise TrainingError(f"step {step}: {exc}; the run stops and keeps its last checkpoint "
                                    f"in {cfg.run_dir}") from exc
            self.policy.weights_updated()
        return metrics

    def _record(self, step: int, trajs: list[Trajectory], batch: StepAdvantages) -> Path:
        """The checkpoint of ``step``: the replay records of the batch and the actor (:meth:`save_checkpoint`)."""
        cfg = self.cfg
        scores = batch.scores if cfg.write_replay else ReplayScores()
        steps_df, tokens_df = record_tables(trajs, batch.stats, scores, RECORDED_VIEWS, global_step=step,
                                            tokenizer=self.tokenizer)
        meta = replay_meta(cfg, global_step=step, model=cfg.model, method=cfg.method, views=RECORDED_VIEWS,
                           selection=self.spec.selection, scores=batch.scores)
        return self.save_checkpoint(step, steps_df, tokens_df, meta)

    def _lr(self, step: int) -> float:
        warm = int(self.cfg.warmup_ratio * self.cfg.total_steps)
        return self.cfg.lr * min(1.0, step / warm) if warm > 0 else self.cfg.lr

    def _validates(self, step: int) -> bool:
        """Whether validation follows training step ``step`` (every ``test_freq`` steps and the last)."""
        cfg = self.cfg
        return bool(cfg.test_freq) and (step % cfg.test_freq == 0 or step == cfg.total_steps)

    def validate(self, step: int) -> dict:
        """Validation episodes, decoded as the config's ``val_*`` keys say (SDAR: sampled at temperature 0.4):
        success rate overall and per task type, and the other numbers of the environment's evaluation protocol
        (``val/score`` of WebShop, ``val/em_id``, ``val/em_ood``, ``val/em_avg`` of Search-QA)."""
        from training.evaluate import EvalSampling, evaluation_episodes

        specs = self.games.validation(self.cfg.val_tasks)
        trajs = evaluation_episodes(self.policy, specs, EvalSampling.from_config(self.cfg), step=step,
                                    desc="validation")
        spec = get_environment(self.cfg.env)
        metrics = spec.load_runtime().metrics(trajs)  # success_metrics and the environment's own numbers
        row = {"val/success_rate": metrics["success_rate"]}
        row.update({f"val/success/{kind}": per["success_rate"] for kind, per in metrics["per_type"].items()})
        row.update({f"val/{name}": float(value) for name, value in metrics.items()
                    if name in spec.evaluation.metrics and f"val/{name}" not in row
                    and isinstance(value, (int, float)) and not isinstance(value, bool)})
        return row

    def fit(self) -> Path:
        """Train from ``start_step`` to ``total_steps``; returns the run folder (and releases its lock)."""
        try:
            return self._fit()
        finally:
            self.close()

    def _fit(self) -> Path:
        cfg = self.cfg
        # Model, tokenizer, environments and imports are set up: move their objects out of the
        # collector's reach, so that full collections during training walk only what the steps create
        # (otherwise each takes about 0.3 s and lands in whichever phase happens to be running).
        gc.collect()
        gc.freeze()
        bar = tqdm(range(self.start_step, cfg.total_steps + 1), desc=f"{cfg.method} training",
                   initial=self.start_step - 1, total=cfg.total_steps, disable=not cfg.progress)
        share = self.policy.gpu_share  # a step moves GPU memory: another run's engine starts between steps
        for step in bar:
            with share.step():
                row = self.train_step(step)
                if self._validates(step):
                    t0 = time.perf_counter()
                    row.update(self.validate(step))
                    row["time/validation"] = time.perf_counter() - t0
            self.writer.append_metrics(row)
            bar.set_postfix(reward=f"{row['reward_mean']:.2f}", success=f"{row['success_rate']:.2f}")
        return Path(cfg.run_dir)
