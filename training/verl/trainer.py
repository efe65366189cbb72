"""OCSD and its baselines in verl's v1 synchronous trainer (registered as ``trainer.v1.trainer_mode=ocsd_sync``).

:class:`OCSDTrainer` is verl's :class:`~verl.trainer.ppo.v1.trainer_sync.PPOTrainerSync` with two of its steps
replaced; everything else (rollouts through the agent loops, the old and reference log-prob passes, the actor
update with PPO clipping and the KL loss, checkpoints, weight sync to the rollout servers) is verl's own.

``_compute_advantage`` (verl's ``adv`` phase, after the old log-prob pass)
    reads the batch's rows from verl's store (``prompts``, ``responses``, ``extra_fields`` of
    :class:`training.verl.agent_loop.EnvironmentAgentLoop` and ``old_log_probs``; verl's padding rows left out),
    regroups them into trajectories by their ids (:func:`training.verl.batch.trajectories_of_rows`), and computes
    the method's token advantages with :func:`training.verl.batch.batch_advantages`: rewards, GRPO advantages, step
    NLL and the top-rho selection, then the replay scores of the selected steps, obtained from the actor's own
    ``compute_log_prob`` on rows built from the pre-rendered view prompt ids and the original response ids
    (:class:`ActorReplayScorer`, a separate store partition), then the ``ocsd`` core's token advantages. They are
    written back as ``advantages`` (and ``returns``) by row key, never by position. For methods with a privileged
    teacher every step's response is also scored under the teacher's prompt (a separate pass of the same scorer);
    those log-probs are written by row key as the per-token field ``teacher_log_probs``
    (:data:`training.verl.losses.TEACHER_FIELD`), which the actor update reads. At checkpoint steps both views are
    scored and the records are held for :class:`training.verl.checkpoint.ReplayCheckpointCallback`.
``_compute_metrics``
    adds the suite's ``metrics.jsonl`` row (the single-device trainer's keys, :func:`training.pipeline.step_metrics`,
    and ``time/<phase>`` from verl's timers) in the run folder, ``trainer.default_local_dir``.

The OCSD settings are the verl config's top-level ``ocsd:`` section (:func:`training.verl.agent_loop.ocsd_settings`).
Every method of the suite runs. Those whose update adds a distillation term to the loss (``opsd``, ``grpo_opsd``,
``sdar``) get it in verl's actor: after verl's setup the trainer gives the actor's workers the loss function
:func:`training.verl.losses.actor_loss` (verl's ``ppo_loss`` plus the term on ``teacher_log_probs``, through the
workers' ``set_loss_fn``); ``opsd``, without a policy-gradient term, runs with the policy loss
:data:`training.verl.losses.NO_POLICY_GRADIENT`.
"""

from __future__ import annotations

import time
from typing import Mapping, Sequence

import numpy as np
import torch
import transfer_queue as tq
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.padding_utils import build_padding_position_ids, construct_minimal_padding_template
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.tensordict_utils import list_of_dict_to_tensordict
from verl.workers.utils.padding import response_from_nested

from ocsd.algorithm.methods import MethodSpec, get_method
from ocsd.records import RECORDED_VIEWS, RunWriter
from training.config import ConfigError, TrainConfig
from training.pipeline import record_tables, replay_meta, step_metrics
from training.teachers import teacher_context
from training.verl.agent_loop import ocsd_settings, task_source
from training.verl.batch import BatchAdvantages, StepRow, ViewRequest, batch_advantages
from training.verl.checkpoint import PendingReplay, hold_replay
from training.verl.losses import TEACHER_FIELD, actor_loss_fn, distillation_settings, policy_loss_mode
from training.verl.parity import KeptBatch, batch_path, keep_batch

__all__ = ["ActorReplayScorer", "OCSDTrainer", "REPLAY_PARTITION", "TRAINER_MODE", "metrics_row", "read_rows",
           "supported_method", "write_advantages"]

TRAINER_MODE = "ocsd_sync"
"""``trainer.v1.trainer_mode`` of :class:`OCSDTrainer`."""
REPLAY_PARTITION = "ocsd_replay"
"""Store partition of the replay-scoring rows (cleared after every scoring)."""
ROW_FIELDS = ("prompts", "responses", "response_mask", "extra_fields", "old_log_probs")
PHASES = {"time/rollout": "gen", "time/old_logprob": "old_log_prob", "time/ref_logprob": "ref",
          "time/update": "update_actor", "time/save_checkpoint": "save_checkpoint", "time/sync": "update_weights",
          "time/step": "step", "time/replay_scoring": "ocsd_replay_scoring",
          "time/teacher_logprob": "ocsd_teacher_logprob"}
"""The suite's timing keys and the verl timers they are read from (seconds)."""


def supported_method(name: str, loss_mode: str = "vanilla") -> MethodSpec:
    """The method ``name``, checked against verl's policy-loss mode ``loss_mode``
    (``actor_rollout_ref.actor.policy_loss.loss_mode``).

    Every registered method runs; one without a policy-gradient term (``opsd``) runs with the policy loss
    :data:`training.verl.losses.NO_POLICY_GRADIENT` and takes no other (:func:`training.verl.losses.policy_loss_mode`).

    Raises
    ------
    training.config.ConfigError
        An unknown method, or a policy-loss mode the method cannot take.
    """
    try:
        spec = get_method(name)
    except ValueError as err:
        raise ConfigError(f"ocsd.method={name!r}: {err}") from None
    try:
        policy_loss_mode(spec, loss_mode)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return spec


def _unbind(value) -> list:
    """The rows of a stored field: tensors (nested or stacked) or Python objects."""
    if isinstance(value, torch.Tensor):
        return list(value.unbind(0))
    return list(value.tolist()) if hasattr(value, "tolist") else list(value)


def _real_keys(batch: KVBatchMeta) -> list[str]:
    return [key for key, tag in zip(batch.keys, batch.tags) if not (tag or {}).get("is_padding", False)]


def read_rows(batch: KVBatchMeta) -> tuple[list[StepRow], dict[str, np.ndarray]]:
    """The batch's step rows (verl's padding rows left out) and their old log-probs, by row key."""
    keys = _real_keys(batch)
    data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=list(ROW_FIELDS))
    prompts, responses = _unbind(data["prompts"]), _unbind(data["responses"])
    extras, old = _unbind(data["extra_fields"]), _unbind(data["old_log_probs"])
    rows = [StepRow(key, p.tolist(), r.tolist(), e) for key, p, r, e in zip(keys, prompts, responses, extras)]
    return rows, {key: o.float().numpy() for key, o in zip(keys, old)}


def _per_token(keys: Sequence[str], masks: Sequence[torch.Tensor], values: Mapping[str, torch.Tensor],
               what: str) -> torch.Tensor:
    """``values`` of every key as one nested (jagged) tensor, zeros for keys without values; each row as long as
    its response."""
    rows = []
    for key, mask in zip(keys, masks):
        value = values.get(key)
        if value is None:
            value = torch.zeros(len(mask), dtype=torch.float32)
        elif len(value) != len(mask):
            raise ValueError(f"row {key!r}: {len(value)} {what} for a {len(mask)}-token response")
        rows.append(torch.as_tensor(value).float())
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def write_advantages(batch: KVBatchMeta, advantages: Mapping[str, torch.Tensor],
                     teacher: Mapping[str, torch.Tensor] | None = None) -> KVBatchMeta:
    """Store ``advantages`` (and the same as ``returns``, as verl's GRPO does) for every row of the batch, and with
    ``teacher`` the teacher's log-probs as :data:`training.verl.losses.TEACHER_FIELD`, all by row key; padding rows
    and rows without values get zeros.

    Returns
    -------
    KVBatchMeta
        The batch as the store now describes it, its ``fields`` including the new ones: what verl's later
        phases (the actor update) read, as verl's own ``_compute_advantage`` returns it.

    Raises
    ------
    ValueError
        An advantage or teacher log-prob row whose length differs from its row's response, or a ``teacher`` that
        misses a row with advantages (before anything is stored).
    """
    masks = _unbind(tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                                    select_fields=["response_mask"])["response_mask"])
    nested = _per_token(batch.keys, masks, advantages, "advantages")
    fields = {"advantages": nested, "returns": nested.clone()}
    if teacher is not None:
        missing = [key for key in batch.keys if key in advantages and key not in teacher]
        if missing:
            raise ValueError(f"rows {missing[:3]}: no teacher log-probs")
        fields[TEACHER_FIELD] = _per_token(batch.keys, masks, teacher, "teacher log-probs")
    return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id,
                           fields=TensorDict(fields, batch_size=len(masks)))


class ActorReplayScorer:
    """Log-probs of responses under replay-view prompts, from the actor's ``compute_log_prob``.

    Each :class:`~training.verl.batch.ViewRequest` becomes a row of partition :data:`REPLAY_PARTITION`, made from
    a training row of the batch as verl makes its padding rows (same fields; prompt, response, masks and positions
    replaced): ``prompts`` = the view's prompt ids, ``responses`` = the step's response ids, all of it scored.
    The rows are padded to a multiple of the actor's data-parallel size by repeating the last one, scored at the
    rollout temperature (as verl's old log-probs), read back, and cleared.

    Parameters
    ----------
    worker_group
        verl's actor worker group (``compute_log_prob(KVBatchMeta)``).
    template : KVBatchMeta
        The training batch; its first real row is the template.
    multiple : int
        The actor's data-parallel size.
    temperature : float
    eos_token_id : int
    """

    def __init__(self, worker_group, template: KVBatchMeta, *, multiple: int, temperature: float,
                 eos_token_id: int):
        self.worker_group, self.multiple, self.temperature = worker_group, max(1, int(multiple)), float(temperature)
        key = _real_keys(template)[0]
        source = tq.kv_batch_get(keys=[key], partition_id=template.partition_id)[0]
        tag = template.tags[template.keys.index(key)]
        self.row, self.tag = construct_minimal_padding_template(source, tag, eos_token_id)
        for name in ("teacher_ids", "teacher_logprobs", "extra_fields"):
            self.row.pop(name, None)
        self.seconds = {"replay": 0.0, "teacher": 0.0}

    def _row(self, request: ViewRequest) -> tuple[dict, dict]:
        prompts = torch.tensor(request.context_ids, dtype=torch.int64)
        responses = torch.tensor(request.response_ids, dtype=torch.int64)
        input_ids = torch.cat([prompts, responses])
        attention_mask = torch.ones_like(input_ids)
        ones = torch.ones_like(responses)
        row = dict(self.row)
        row.update(prompts=prompts, responses=responses, input_ids=input_ids, attention_mask=attention_mask,
                   position_ids=build_padding_position_ids(self.row.get("position_ids"), attention_mask),
                   response_mask=ones, loss_mask=ones, rm_scores=torch.zeros(len(responses)))
        if "rollout_log_probs" in row:
            row["rollout_log_probs"] = torch.zeros(len(responses))
        tag = {**self.tag, "is_padding": False, "prompt_len": len(prompts), "response_len": len(responses),
               "seq_len": len(input_ids)}
        return row, tag

    def _score(self, requests: Sequence[ViewRequest]) -> dict[tuple[str, str], np.ndarray]:
        made = [self._row(r) for r in requests]
        made += [made[-1]] * (-len(made) % self.multiple)
        keys = [f"{r.key}|{r.view}" for r in requests]
        keys += [f"ocsd_pad_{i}" for i in range(len(made) - len(requests))]
        tags = [tag for _, tag in made]
        tq.kv_batch_put(keys=keys, partition_id=REPLAY_PARTITION,
                        fields=list_of_dict_to_tensordict([row for row, _ in made]), tags=tags)
        try:
            meta = KVBatchMeta(keys=keys, tags=tags, partition_id=REPLAY_PARTITION,
                               extra_info={"calculate_entropy": False, "compute_loss": False,
                                           "temperature": self.temperature})
            self.worker_group.compute_log_prob(meta)
            data = tq.kv_batch_get(keys=keys[: len(requests)], partition_id=REPLAY_PARTITION,
                                   select_fields=["log_probs", "response_mask"])
            logp = _unbind(response_from_nested(data["log_probs"], data["response_mask"]))
        finally:
            tq.kv_clear(keys=keys, partition_id=REPLAY_PARTITION)
        return {(r.key, r.view): lp.float().numpy() for r, lp in zip(requests, logp)}

    def __call__(self, requests: Sequence[ViewRequest]) -> dict[tuple[str, str], np.ndarray]:
        """``{(row key, view): log-probs}``; the replay views and the privileged teacher are scored in separate
        passes, timed in :attr:`seconds` under ``replay`` and ``teacher``."""
        out = {}
        for kind, part in (("replay", [r for r in requests if r.view != "teacher"]),
                           ("teacher", [r for r in requests if r.view == "teacher"])):
            if part:
                start = time.perf_counter()
                out.update(self._score(part))
                self.seconds[kind] += time.perf_counter() - start
        return out


def metrics_row(row: dict, timing_raw: Mapping[str, float], verl_metrics: Mapping) -> dict:
    """The ``metrics.jsonl`` row: the suite's ``row``, its ``time/<phase>`` keys from verl's timers
    (``time/advantage`` without the replay scoring and teacher passes inside it), and verl's numeric metrics."""
    out = {k: float(v) for k, v in verl_metrics.items()
           if isinstance(v, (int, float, np.number)) and not isinstance(v, bool) and not k.startswith("ocsd/")}
    out.update(row)
    for name, timer in PHASES.items():
        out[name] = float(timing_raw.get(timer, 0.0))
    inner = out["time/replay_scoring"] + out["time/teacher_logprob"]
    out["time/advantage"] = max(0.0, float(timing_raw.get("adv", 0.0)) - inner)
    return out


@register_trainer(TRAINER_MODE)
class OCSDTrainer(PPOTrainerSync):
    """verl's synchronous v1 trainer with the suite's advantages, replay records and metrics (module docstring)."""

    def __init__(self, config):
        super().__init__(config)
        self.ocsd: TrainConfig = ocsd_settings(config)
        loss_mode = config.actor_rollout_ref.actor.get("policy_loss", {}).get("loss_mode", "vanilla")
        self.ocsd_spec = supported_method(self.ocsd.method, loss_mode)
        if config.algorithm.get("use_kl_in_reward", False):
            raise ConfigError("algorithm.use_kl_in_reward=True: the method's advantages replace verl's rewards; "
                              "use the KL loss (actor_rollout_ref.actor.use_kl_loss=True) as the paper does")
        self.ocsd_row: dict = {}

    # -- helpers ------------------------------------------------------------------------------------

    @property
    def run_dir(self) -> str:
        return str(self.config.trainer.default_local_dir)

    def _is_checkpoint_step(self) -> bool:
        freq = int(self.config.trainer.save_freq)
        return freq > 0 and (self.global_steps >= self.total_training_steps or self.global_steps % freq == 0)

    def _actor_dp_size(self) -> int:
        group = self.actor_rollout_wg
        if "actor" not in group._dispatch_info:
            group._dispatch_info["actor"] = group._query_dispatch_info("actor")
        return max(group._dispatch_info["actor"]) + 1

    def _run_info(self) -> dict:
        cfg = self.ocsd
        return {"run": cfg.run_name, "method": cfg.method, "env": cfg.env,
                "model": str(self.config.actor_rollout_ref.model.path), "seed": cfg.seed, "config": cfg.to_dict(),
                "games": task_source(cfg).describe(), "backend": "verl"}

    # -- verl's steps -------------------------------------------------------------------------------

    def install_actor_loss(self) -> bool:
        """Give the actor's workers the distillation loss of the method (:func:`training.verl.losses.actor_loss`
        bound to verl's actor config and the section's ``sdar_coef`` and ``gate_beta``), in place of verl's
        ``ppo_loss``; False for a method without a distillation term (verl's own loss serves it)."""
        from verl.utils.config import omega_conf_to_dataclass

        settings = distillation_settings(self.ocsd)
        if settings is None:
            return False
        actor_config = omega_conf_to_dataclass(self.config.actor_rollout_ref.actor)
        self.actor_rollout_wg.set_loss_fn(actor_loss_fn(actor_config, settings))
        return True

    def on_init_end(self):
        self.install_actor_loss()  # after verl's init_model, which gave the workers verl's ppo_loss
        super().on_init_end()
        RunWriter(self.run_dir).truncate_metrics(int(self.global_steps))  # rows of steps after a resumed checkpoint

    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        cfg, spec, step = self.ocsd, self.ocsd_spec, int(self.global_steps)
        checkpoint = self._is_checkpoint_step()
        record = checkpoint and cfg.write_replay
        rows, old_logp = read_rows(batch)
        scorer = ActorReplayScorer(self.actor_rollout_wg, batch, multiple=self._actor_dp_size(),
                                   temperature=self.config.actor_rollout_ref.rollout.temperature,
                                   eos_token_id=self.tokenizer.eos_token_id)
        views = sorted(set(spec.replay_views) | ({"full", "ablated"} if record else set()))
        scored: dict = {}

        def score(requests):
            got = scorer(requests)
            scored.update(got)
            return got

        context = teacher_context(self.tokenizer, cfg.env, cfg.max_prompt_length)
        result: BatchAdvantages = batch_advantages(rows, old_logp, spec=spec, cfg=cfg, step=step, score=score,
                                                   teacher_context=context, views=views)
        if cfg.keep_batch and checkpoint:
            kept_views = views + (["teacher"] if spec.privileged_teacher else [])
            keep_batch(batch_path(self.run_dir, step), KeptBatch(
                step, kept_views, rows, old_logp, scored, {k: v.numpy() for k, v in result.advantages.items()}))
        self.timing_raw["ocsd_replay_scoring"] = scorer.seconds["replay"]
        self.timing_raw["ocsd_teacher_logprob"] = scorer.seconds["teacher"]
        stored = write_advantages(batch, result.advantages, result.teacher if spec.aux_loss is not None else None)
        self.ocsd_row = step_metrics(spec, step, result.trajs, result.stats, result.inputs, result.token_adv,
                                     result.scores)
        metrics.update({f"ocsd/{k}": v for k, v in self.ocsd_row.items() if k != "step"})
        if record:
            steps_df, tokens_df = record_tables(result.trajs, result.stats, result.scores, RECORDED_VIEWS,
                                                global_step=step, tokenizer=self.tokenizer)
            meta = replay_meta(cfg, global_step=step, model=str(self.config.actor_rollout_ref.model.path),
                               method=cfg.method, views=RECORDED_VIEWS, selection=spec.selection,
                               scores=result.scores, backend="verl")
            hold_replay(self, PendingReplay(step, steps_df, tokens_df, meta, self._run_info()))
        return stored

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        if self.ocsd_row:
            RunWriter(self.run_dir).append_metrics(metrics_row(self.ocsd_row, timing_raw, metrics))
            self.ocsd_row = {}
