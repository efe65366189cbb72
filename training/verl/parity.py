"""One verl batch through both trainers: ``python -m training.verl.parity RUN [--step N] [--weights DIR]``.

With ``ocsd.keep_batch=true`` the OCSD trainer (:class:`training.verl.trainer.OCSDTrainer`) keeps what it read and
wrote at each checkpoint step in ``RUN/batches/global_step_N.pt`` (:func:`keep_batch`): the batch's rows (prompt and
response ids, the agent loop's ``extra_fields``), verl's old log-probs, what the actor's ``compute_log_prob``
returned for every replay-view row (the privileged teacher's rows included), and the token advantages it stored.
This command then answers three questions about that batch:

``verl``
    Recomputed from the kept inputs (old log-probs and view scores as verl computed them) with
    :func:`training.verl.batch.batch_advantages`, do the advantages equal the stored ones? They must, bit for bit:
    the rows were read back and written by key, none lost or misplaced.
``single-device``
    The single-device trainer's computation of the same batch (:func:`single_device_advantages`): old log-probs by
    a plain forward of the step's weights, the selection from them, the Full and Ablated views rendered again from
    the rebuilt trajectories and scored by :class:`ocsd.replay.scoring.ReplayScorer`, then the method's advantages.
    Printed beside verl's: the largest and mean token differences of the old log-probs, the view scores and the
    advantages, how many selected steps agree, whether the agent loop's pre-rendered view ids equal the renderer's,
    and the share of tokens whose advantage keeps its sign. The log-probs of two implementations differ by their
    rounding (verl's actor computes in bfloat16), so these differences are not zero; the recomputation must be.
``update``
    Does the update give the same loss and gradient through both trainers? For the run's method and the three
    methods with a distillation term (``--update-methods``), the batch's update (one mini-batch of all its rows,
    the stored advantages, the teacher's log-probs kept, or scored with the step's weights for a run without a
    privileged teacher) goes through the single-device trainer's :func:`training.update.policy_loss` and
    :func:`training.update.ppo_update` and through the loss the verl trainer gives the actor
    (:mod:`training.verl.losses`) on micro-batches made by verl's own ``prepare_micro_batches``
    (:func:`update_parity`), with two micro-batch sizes. Printed: each side's loss and gradient norm and their
    largest relative difference, which only rounding may make non-zero.

The weights of step N are those before its update: the run's initial weights for step 1 (``model`` of
``run.json``), otherwise a Hugging Face folder named with ``--weights``. ``--groups N`` compares the first N task
groups only (the advantages of a group depend on that group alone), for a check on a CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from ocsd.algorithm.methods import METHODS, MethodSpec, TokenInputs, get_method
from ocsd.records import RUN_FILE, read_run_info
from training.config import TrainConfig, make_config
from training.pipeline import BatchStatistics, forward_scoring, step_advantages
from training.replay import ReplayScores, step_record
from training.rollout.loop import StepSample, Trajectory
from training.verl.batch import StepRow, ViewRequest, batch_advantages, trajectories_of_rows

__all__ = ["KeptBatch", "SingleDevice", "UPDATE_METHODS", "batch_path", "compare", "first_groups", "keep_batch",
           "loss_settings", "main", "read_kept_batch", "recompute", "single_device_advantages", "single_device_update",
           "teacher_scores", "update_batch", "update_methods", "update_parity", "update_splits",
           "verl_actor_config", "verl_update"]

BATCH_FOLDER = "batches"
"""Folder of a run that holds the kept batches."""


def batch_path(run_dir: str | Path, step: int) -> Path:
    """Where the batch of ``step`` is kept: ``RUN/batches/global_step_<step>.pt``."""
    return Path(run_dir) / BATCH_FOLDER / f"global_step_{int(step)}.pt"


@dataclass
class KeptBatch:
    """What the verl trainer read and wrote at one step.

    Attributes
    ----------
    step : int
    views : list of str
        The replay views scored (``full``/``ablated``; ``teacher`` for methods with a privileged teacher).
    rows : list of StepRow
        The batch (verl's padding rows left out).
    old_logp : dict of str to numpy.ndarray
        verl's old log-probs of each row's response.
    scores : dict of (str, str) to numpy.ndarray
        The actor's log-probs of each (row key, view) it scored.
    advantages : dict of str to numpy.ndarray
        The token advantages stored for each row.
    """

    step: int
    views: list[str]
    rows: list[StepRow]
    old_logp: dict[str, np.ndarray]
    scores: dict[tuple[str, str], np.ndarray]
    advantages: dict[str, np.ndarray]


def keep_batch(path: str | Path, kept: KeptBatch) -> Path:
    """Write ``kept`` to ``path`` (a temporary file renamed into place, so a reader never sees half of it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"step": int(kept.step), "views": list(kept.views),
               "rows": [(r.key, list(r.prompt_ids), list(r.response_ids), dict(r.extra)) for r in kept.rows],
               "old_logp": {k: np.asarray(v, np.float32) for k, v in kept.old_logp.items()},
               "scores": {f"{k}|{v}": np.asarray(x, np.float32) for (k, v), x in kept.scores.items()},
               "advantages": {k: np.asarray(v, np.float32) for k, v in kept.advantages.items()}}
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    tmp.replace(path)
    return path


def read_kept_batch(path: str | Path) -> KeptBatch:
    """The batch kept in ``path``.

    Raises
    ------
    FileNotFoundError
        No such file (with the setting that writes it).
    ValueError
        A file that is not a kept batch (the missing field named).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no kept batch; run verl with ocsd.keep_batch=true to keep the batch of "
                                "every checkpoint step")
    payload = torch.load(path, map_location="cpu", weights_only=False)  # the suite's own file
    missing = [k for k in ("step", "views", "rows", "old_logp", "scores", "advantages") if k not in payload]
    if missing:
        raise ValueError(f"{path}: not a kept batch (missing {missing})")
    scores = {}
    for name, value in payload["scores"].items():
        key, view = name.rsplit("|", 1)
        scores[(key, view)] = value
    return KeptBatch(int(payload["step"]), list(payload["views"]), [StepRow(*row) for row in payload["rows"]],
                     dict(payload["old_logp"]), scores, dict(payload["advantages"]))


def first_groups(kept: KeptBatch, n: int) -> KeptBatch:
    """The kept batch restricted to its first ``n`` task groups (by group id).

    The advantages of a group's rows depend on that group alone (GRPO normalises within a group; the top-rho
    selection is per trajectory), so the restriction changes none of them. With random selection the draw depends
    on the whole batch: :func:`main` refuses ``--groups`` for such methods.

    Raises
    ------
    ValueError
        ``n`` < 1.
    """
    if n < 1:
        raise ValueError(f"--groups {n}: name at least one group")
    groups = sorted({str(r.extra.get("ocsd_group_uid")) for r in kept.rows})[:n]
    rows = [r for r in kept.rows if str(r.extra.get("ocsd_group_uid")) in groups]
    keys = {r.key for r in rows}
    return KeptBatch(kept.step, kept.views, rows, {k: v for k, v in kept.old_logp.items() if k in keys},
                     {k: v for k, v in kept.scores.items() if k[0] in keys},
                     {k: v for k, v in kept.advantages.items() if k in keys})


def recompute(kept: KeptBatch, cfg: TrainConfig, spec: MethodSpec,
              teacher_context: Callable[[Trajectory, StepSample], list[int]] | None = None) -> dict[str, np.ndarray]:
    """The token advantages of the kept batch from its kept inputs, by :func:`training.verl.batch.batch_advantages`.

    Raises
    ------
    KeyError
        A view score the computation asks for was not kept.
    """
    def kept_scores(requests: Sequence[ViewRequest]) -> dict[tuple[str, str], np.ndarray]:
        return {(r.key, r.view): kept.scores[(r.key, r.view)] for r in requests}

    views = [v for v in kept.views if v != "teacher"]
    result = batch_advantages(kept.rows, kept.old_logp, spec=spec, cfg=cfg, step=kept.step, score=kept_scores,
                              teacher_context=teacher_context or (lambda traj, step: []), views=views)
    return {k: v.numpy() for k, v in result.advantages.items()}


@dataclass
class SingleDevice:
    """The single-device trainer's quantities of a batch, rows in (trajectory, step) order.

    Attributes
    ----------
    keys : list of (int, int)
    stats : training.pipeline.BatchStatistics
        Old log-probs, rewards, GRPO advantages, step NLL and the selection.
    scores : training.replay.ReplayScores
    inputs : ocsd.algorithm.methods.TokenInputs
    advantages : torch.Tensor
        (steps, tokens) token advantages, zero past each response.
    """

    keys: list
    stats: BatchStatistics
    scores: ReplayScores
    inputs: TokenInputs
    advantages: torch.Tensor = field(repr=False)


def single_device_advantages(trajs: Sequence[Trajectory], model, renderer, *, spec: MethodSpec, cfg: TrainConfig,
                             step: int, views: Sequence[str] | None = None,
                             teacher_context: Callable[[Trajectory, StepSample], list[int]] | None = None
                             ) -> SingleDevice:
    """The method's token advantages of ``trajs`` as :meth:`training.trainer.Trainer.train_step` computes them
    (:func:`training.pipeline.step_advantages`) with ``model`` as the old policy: old log-probs, statistics and
    selection, the selected steps' views rendered by ``renderer`` and scored by the replay scorer, the teacher's
    log-probs (baselines), then the advantages.

    ``views`` are the replay views to score (default: the method's); ``teacher_context`` builds the privileged
    teacher's prompt of a step (required by methods with one).
    """
    from ocsd.replay.scoring import ReplayScorer, response_logprobs

    if spec.privileged_teacher and teacher_context is None:
        raise ValueError(f"method {spec.name!r} needs the privileged teacher's prompts: pass teacher_context")
    budget = cfg.scoring_token_budget

    def logprobs(pairs):  # as training.policy.Policy.logprobs
        logp, mask = response_logprobs(model, pairs, padded=True, token_budget=budget)
        return logp.float().cpu(), mask.cpu()

    score = forward_scoring(trajs, list(spec.replay_views if views is None else views),
                            scorer=ReplayScorer(model, token_budget=budget, progress=False), renderer=renderer,
                            logprobs=logprobs, teacher_context=teacher_context if spec.privileged_teacher else None,
                            env_name=cfg.env, max_prompt_length=cfg.max_prompt_length)
    result = step_advantages(trajs, spec=spec, cfg=cfg, step=step, old_logprobs=logprobs, score=score)
    return SingleDevice(result.stats.keys, result.stats, result.scores, result.inputs, result.token_adv)


# -- the update: the same loss and gradient through both trainers --------------------------------------------------

UPDATE_METHODS = ("opsd", "grpo_opsd", "sdar")
"""The methods whose update adds a distillation term: the update check covers them on any kept batch."""


def _padded_rows(values: Sequence[np.ndarray], width: int) -> torch.Tensor:
    out = torch.zeros(len(values), width, dtype=torch.float32)
    for i, v in enumerate(values):
        out[i, : len(v)] = torch.as_tensor(np.asarray(v, dtype=np.float32))
    return out


def update_batch(kept: KeptBatch, teacher: dict[str, np.ndarray] | None = None):
    """The kept batch as the single-device update takes it (:class:`training.update.UpdateBatch`), rows in the
    kept order: ids, verl's old log-probs, the stored advantages, the old log-probs again as the reference (the
    reference log-probs are not kept; at step 1 the step's weights are the reference) and ``teacher`` (default: the
    kept ``teacher`` scores, when there are)."""
    from training.update import UpdateBatch

    keys = [r.key for r in kept.rows]
    lengths = [len(r.response_ids) for r in kept.rows]
    width = max(lengths, default=0)
    mask = torch.zeros(len(keys), width, dtype=torch.bool)
    for i, n in enumerate(lengths):
        mask[i, :n] = True
    old = _padded_rows([kept.old_logp[k] for k in keys], width)
    if teacher is None and all((k, "teacher") in kept.scores for k in keys):
        teacher = {k: kept.scores[(k, "teacher")] for k in keys}
    return UpdateBatch(prompt_ids=[list(r.prompt_ids) for r in kept.rows],
                       response_ids=[list(r.response_ids) for r in kept.rows], old_logp=old,
                       advantages=_padded_rows([kept.advantages[k] for k in keys], width), mask=mask,
                       ref_logp=old.clone(),
                       teacher_logp=None if teacher is None else _padded_rows([teacher[k] for k in keys], width))


def loss_settings(cfg: TrainConfig, micro_batch_tokens: int | None = None):
    """The single-device trainer's :class:`training.update.LossSettings` of ``cfg``."""
    from training.update import LossSettings

    return LossSettings(clip_ratio=cfg.clip_ratio, kl_coef=cfg.kl_coef, kl_type=cfg.kl_type,
                        loss_agg_mode=cfg.loss_agg_mode, aux_coef=cfg.sdar_coef, gate_beta=cfg.gate_beta,
                        grad_clip=cfg.grad_clip, micro_batch_tokens=micro_batch_tokens or cfg.micro_batch_tokens)


def _grad_norm(model) -> float:
    grads = [p.grad.detach().double().norm() for p in model.parameters() if p.requires_grad and p.grad is not None]
    return float(torch.stack(grads).norm()) if grads else 0.0


def single_device_update(model, spec: MethodSpec, rows, settings) -> dict[str, float]:
    """Loss and gradient norm of one mini-batch of all ``rows`` through the single-device trainer: the sum of
    :func:`training.update.policy_loss` over the micro-batches :func:`training.update.ppo_update` makes
    (``settings.micro_batch_tokens``), and the gradient norm ``ppo_update`` reports for one optimizer step of
    learning rate 0 (the weights are left as they were).

    Returns
    -------
    dict
        ``loss``, ``grad_norm``, ``micro_batches`` and ``distill_loss`` (the unweighted distillation term, for a
        method with one).
    """
    from ocsd.replay.scoring import response_logprobs
    from training.update import loss_actor_config, micro_batches, policy_loss, ppo_update

    actor_config = loss_actor_config(settings)
    actor_config.global_batch_info.update(dp_size=1, batch_num_tokens=int(rows.mask.sum()),
                                          global_batch_size=int((rows.mask.sum(dim=1) > 0).sum()))
    lengths = [len(p) + len(r) for p, r in zip(rows.prompt_ids, rows.response_ids)]
    groups = micro_batches(lengths, settings.micro_batch_tokens)
    total, distill = 0.0, 0.0
    with torch.no_grad():
        for group in groups:
            logp, _ = response_logprobs(model, [(rows.prompt_ids[i], rows.response_ids[i]) for i in group],
                                        padded=True, token_budget=max(settings.micro_batch_tokens, max(lengths)))
            loss, metrics = policy_loss(spec, logp, rows, list(group), settings, actor_config)
            total += float(loss)
            distill += metrics.get("actor/distill_loss", 0.0)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    metrics = ppo_update(model, optimizer, spec, rows, settings)
    model.zero_grad(set_to_none=True)
    out = {"loss": total, "grad_norm": metrics["actor/grad_norm"], "micro_batches": len(groups)}
    if spec.aux_loss is not None:
        out["distill_loss"] = distill
    return out


def verl_actor_config(settings):
    """verl's actor config with the loss settings of the single-device trainer (PPO clip, KL loss, aggregation)."""
    from verl.workers.config.actor import FSDPActorConfig

    return FSDPActorConfig(clip_ratio=settings.clip_ratio, clip_ratio_low=settings.clip_ratio,
                           clip_ratio_high=settings.clip_ratio, loss_agg_mode=settings.loss_agg_mode,
                           use_kl_loss=settings.kl_coef > 0, kl_loss_coef=settings.kl_coef,
                           kl_loss_type=settings.kl_type, ppo_mini_batch_size=1, use_dynamic_bsz=True,
                           ppo_max_token_len_per_gpu=settings.micro_batch_tokens, rollout_n=1)


def verl_update(model, spec: MethodSpec, rows, settings, *, max_token_len: int) -> dict[str, float]:
    """Loss and gradient norm of one mini-batch of all ``rows`` through verl's side of the update: the rows as the
    actor's engine receives them (nested per-row fields, ``teacher_log_probs`` among them, the mini-batch's
    ``dp_size``, ``batch_num_tokens`` and ``global_batch_size``), split by verl's own ``prepare_micro_batches``
    (``max_token_len`` real tokens a micro-batch), and per micro-batch the loss function the trainer gives the
    actor (:func:`training.verl.losses.actor_loss` for a method with a distillation term, else verl's
    ``ppo_loss``) on the current log-probs of the whole sequence, back-propagated; the gradients are summed.

    Returns
    -------
    dict
        ``loss``, ``grad_norm``, ``micro_batches`` and ``distill_loss`` (the unweighted term summed over the
        micro-batches, as verl sums its metric).
    """
    import functools

    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine.utils import prepare_micro_batches
    from verl.workers.utils.losses import ppo_loss

    from ocsd.replay.scoring import response_logprobs
    from ocsd.replay.scoring.checks import model_device
    from training.verl.losses import TEACHER_FIELD, DistillationSettings, actor_loss_fn

    config = verl_actor_config(settings)
    if spec.aux_loss is not None:
        loss_fn = actor_loss_fn(config, DistillationSettings(spec.name, settings.aux_coef, settings.gate_beta))
    else:
        loss_fn = functools.partial(ppo_loss, config=config)
    n = len(rows.prompt_ids)
    lengths = [int(m.sum()) for m in rows.mask]

    def nested(values):
        return torch.nested.as_nested_tensor(list(values), layout=torch.jagged)

    fields = {"prompts": nested(torch.tensor(p, dtype=torch.int64) for p in rows.prompt_ids),
              "responses": nested(torch.tensor(r, dtype=torch.int64) for r in rows.response_ids),
              "input_ids": nested(torch.tensor(list(p) + list(r), dtype=torch.int64)
                                  for p, r in zip(rows.prompt_ids, rows.response_ids)),
              "response_mask": nested(torch.ones(n_i, dtype=torch.int64) for n_i in lengths),
              "old_log_probs": nested(rows.old_logp[i, : lengths[i]] for i in range(n)),
              "advantages": nested(rows.advantages[i, : lengths[i]] for i in range(n)),
              "ref_log_prob": nested(rows.ref_logp[i, : lengths[i]] for i in range(n))}
    if spec.aux_loss is not None:
        fields[TEACHER_FIELD] = nested(rows.teacher_logp[i, : lengths[i]] for i in range(n))
    fields["loss_mask"] = fields["response_mask"]
    # on the model's device, as verl's engine hands the loss its batch
    data = TensorDict(fields, batch_size=n).to(model_device(model))
    tu.assign_non_tensor(data, use_dynamic_bsz=True, max_token_len_per_gpu=int(max_token_len), dp_size=1,
                         batch_num_tokens=int(sum(lengths)), global_batch_size=n)
    groups, _ = prepare_micro_batches(data, dp_group=None)
    model.zero_grad(set_to_none=True)
    model.train()
    total, distill = 0.0, 0.0
    for micro in groups:
        prompts, responses = list(micro["prompts"].unbind(0)), list(micro["responses"].unbind(0))
        pairs = [(p.tolist(), r.tolist()) for p, r in zip(prompts, responses)]
        budget = max(int(max_token_len), max(len(a) + len(b) for a, b in pairs))
        logp, _ = response_logprobs(model, pairs, grad=True, padded=True, token_budget=budget)
        # verl's engine returns log-probs over each row's sequence, position t holding log p(token t + 1)
        sequences = [torch.cat([logp.new_zeros(len(p) - 1), logp[i, : len(r)], logp.new_zeros(1)])
                     for i, (p, r) in enumerate(zip(prompts, responses))]
        loss, metrics = loss_fn(model_output={"log_probs": nested(sequences)}, data=micro)
        loss.backward()
        total += float(loss.detach())
        if "actor/distill_loss" in metrics:
            distill += sum(metrics["actor/distill_loss"].values)
    model.eval()
    out = {"loss": total, "grad_norm": _grad_norm(model), "micro_batches": len(groups)}
    model.zero_grad(set_to_none=True)
    if spec.aux_loss is not None:
        out["distill_loss"] = distill
    return out


def _spread(values: Sequence[float]) -> float:
    """Largest difference of ``values`` relative to the largest magnitude among them."""
    values = np.asarray(values, dtype=np.float64)
    return float((values.max() - values.min()) / max(np.abs(values).max(), 1e-12))


def update_parity(rows, cfg: TrainConfig, model, methods: Sequence[str],
                  splits: Sequence[int] = (0,)) -> dict[str, dict]:
    """The update of ``rows`` (:func:`update_batch`) through both trainers, for each method of ``methods``.

    Parameters
    ----------
    rows : training.update.UpdateBatch
        With ``teacher_logp`` for methods with a distillation term.
    cfg : TrainConfig
        The loss settings (clip, KL, aggregation, ``sdar_coef``, ``gate_beta``).
    model
        The step's weights (left unchanged).
    methods : sequence of str
    splits : sequence of int
        Micro-batch token budgets to run each side with (0: ``cfg.micro_batch_tokens``): the single-device trainer
        splits by padded tokens, verl by real tokens, so the two sides' micro-batches differ, and the loss and
        gradient must not.

    Returns
    -------
    dict
        ``{method: {"single_device": [...], "verl": [...], "loss_max_rel", "grad_norm_max_rel"}}``, one entry of
        each side per split; the largest relative differences are over all pairs of runs of the method.
    """
    report = {}
    for name in methods:
        spec = get_method(name)
        if spec.aux_loss is not None and rows.teacher_logp is None:
            raise ValueError(f"method {name!r}: the batch has no teacher log-probs")
        ours, theirs = [], []
        for budget in splits:
            settings = loss_settings(cfg, budget or None)
            ours.append(single_device_update(model, spec, rows, settings))
            theirs.append(verl_update(model, spec, rows, settings, max_token_len=settings.micro_batch_tokens))
        runs = ours + theirs
        report[name] = {"single_device": ours, "verl": theirs, "loss_max_rel": _spread([r["loss"] for r in runs]),
                        "grad_norm_max_rel": _spread([r["grad_norm"] for r in runs])}
    return report


def teacher_scores(kept: KeptBatch, model, tokenizer, cfg: TrainConfig) -> dict[str, np.ndarray]:
    """The privileged teacher's log-probs of every kept row: the kept ``teacher`` scores where the run's method
    scored them, else the responses under the teacher's prompts (:mod:`training.teachers`) scored by ``model``."""
    from ocsd.replay.scoring import response_logprobs
    from training.teachers import teacher_context

    if all((r.key, "teacher") in kept.scores for r in kept.rows):
        return {r.key: np.asarray(kept.scores[(r.key, "teacher")], np.float32) for r in kept.rows}
    trajs, where = trajectories_of_rows(kept.rows)
    context = teacher_context(tokenizer, cfg.env, cfg.max_prompt_length)
    keys = [r.key for r in kept.rows]
    pairs = [(context(trajs[where[k][0]], trajs[where[k][0]].steps[where[k][1]]),
              trajs[where[k][0]].steps[where[k][1]].response_ids) for k in keys]
    logp = response_logprobs(model, pairs, token_budget=cfg.scoring_token_budget)
    return {k: lp.float().cpu().numpy() for k, lp in zip(keys, logp)}


def _differences(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> dict[str, float]:
    if not pairs:
        return {"tokens": 0, "max_abs": float("nan"), "mean_abs": float("nan")}
    diff = np.concatenate([np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)) for a, b in pairs])
    return {"tokens": int(diff.size), "max_abs": float(diff.max(initial=0.0)), "mean_abs": float(diff.mean())}


def update_methods(method: str) -> list[str]:
    """The methods whose update :func:`compare` checks by default: the run's and those of :data:`UPDATE_METHODS`."""
    return list(dict.fromkeys([method, *UPDATE_METHODS]))


def update_splits(cfg: TrainConfig, rows) -> tuple[int, ...]:
    """Micro-batch token budgets of the update check: the run's ``micro_batch_tokens`` and a quarter of it (at
    least the longest row, which verl's split requires)."""
    longest = max((len(p) + len(r) for p, r in zip(rows.prompt_ids, rows.response_ids)), default=1)
    budgets = (max(cfg.micro_batch_tokens, longest), max(cfg.micro_batch_tokens // 4, longest))
    return tuple(dict.fromkeys(budgets))


def compare(kept: KeptBatch, cfg: TrainConfig, model, tokenizer, methods: Sequence[str] | None = None) -> dict:
    """The report of the module docstring for ``kept``, with ``model`` as the step's old policy.

    Parameters
    ----------
    methods : sequence of str, optional
        The methods whose update is checked (default :func:`update_methods`; empty: none).

    Returns
    -------
    dict
        ``verl_recomputed`` (largest token difference of the recomputed advantages, 0 when they are equal),
        ``old_logp``, ``view_scores``, ``advantages`` (``tokens``, ``max_abs``, ``mean_abs`` and, for the
        advantages, ``sign_agreement``), ``selection`` (counts and overlap), ``view_ids`` (selected steps whose
        pre-rendered Full and Ablated ids equal the renderer's) and ``update`` (:func:`update_parity` of each
        method, with ``splits``).
    """
    from ocsd.replay.prompts import PromptRenderer
    from ocsd.replay.render import render_steps
    from training.teachers import teacher_context

    spec = get_method(cfg.method)
    context = teacher_context(tokenizer, cfg.env, cfg.max_prompt_length)
    again = recompute(kept, cfg, spec, context)
    exact = max((float(np.abs(again[k] - kept.advantages[k]).max(initial=0.0)) for k in kept.advantages),
                default=0.0)
    trajs, where = trajectories_of_rows(kept.rows)
    key_of = {tk: key for key, tk in where.items()}
    views = [v for v in kept.views if v != "teacher"]
    renderer = PromptRenderer(tokenizer)
    ref = single_device_advantages(trajs, model, renderer, spec=spec, cfg=cfg, step=kept.step, views=views,
                                   teacher_context=context)
    lengths = ref.stats.mask.sum(dim=1).tolist()
    rows_of = list(enumerate(zip(ref.keys, lengths)))
    old = [(kept.old_logp[key_of[tk]], ref.stats.old_logp[i, :n].numpy()) for i, (tk, n) in rows_of]
    ours = {key_of[tk]: ref.advantages[i, :n].numpy() for i, (tk, n) in rows_of}
    adv_pairs = [(kept.advantages[k], ours[k]) for k in ours]
    signs = np.concatenate([np.sign(a) == np.sign(b) for a, b in adv_pairs]) if adv_pairs else np.zeros(0)
    verl_selected = {tk for tk in ref.keys if any((key_of[tk], v) in kept.scores for v in views)}
    ours_selected = set(ref.scores.logp)
    both = sorted(verl_selected & ours_selected)
    view_scores = {v: _differences([(kept.scores[(key_of[tk], v)], ref.scores.logp[tk][v]) for tk in both
                                    if v in ref.scores.logp[tk]]) for v in views}
    records = [step_record(trajs[t], trajs[t].steps[k], cfg.env) for t, k in both]
    rendered, _ = render_steps(records, views, renderer, cfg.max_prompt_length)
    rows = {r.key: r for r in kept.rows}
    same_ids = sum(all(list(step.contexts[v]) == list(rows[key_of[both[i]]].extra["ocsd_view_ids"][v]) for v in views)
                   for i, step in rendered)
    adv = _differences(adv_pairs)
    adv["sign_agreement"] = float(signs.mean()) if signs.size else float("nan")
    return {"step": kept.step, "method": cfg.method, "rows": len(kept.rows), "verl_recomputed": exact,
            "old_logp": _differences(old), "view_scores": view_scores, "advantages": adv,
            "selection": {"verl": len(verl_selected), "single_device": len(ours_selected), "both": len(both)},
            "view_ids": {"compared": len(rendered), "identical": int(same_ids)},
            "update": _update_report(kept, cfg, model, tokenizer, update_methods(cfg.method) if methods is None
                                     else list(methods))}


def _update_report(kept: KeptBatch, cfg: TrainConfig, model, tokenizer, methods: list[str]) -> dict:
    if not methods:
        return {}
    distilling = any(get_method(m).aux_loss is not None for m in methods)
    rows = update_batch(kept, teacher_scores(kept, model, tokenizer, cfg) if distilling else None)
    splits = update_splits(cfg, rows)
    return {"splits": list(splits), "methods": update_parity(rows, cfg, model, methods, splits)}


def _print(report: dict) -> None:
    sel, ids = report["selection"], report["view_ids"]
    print(f"step {report['step']} of a {report['method']} run: {report['rows']} rows")
    print(f"verl's advantages recomputed from its kept inputs: largest difference {report['verl_recomputed']:.3g}")
    print(f"selected steps: verl {sel['verl']}, single-device {sel['single_device']}, both {sel['both']}")
    print(f"view prompt ids of the steps selected by both: {ids['identical']} of {ids['compared']} identical")
    print("single-device against verl (per token)      tokens    max |diff|   mean |diff|")
    lines = [("old log-probs", report["old_logp"])] + [(f"{v} log-probs", d) for v, d in report["view_scores"].items()]
    for name, d in lines + [("token advantages", report["advantages"])]:
        print(f"  {name:<40} {d['tokens']:>7}  {d['max_abs']:>11.4g}  {d['mean_abs']:>11.4g}")
    print(f"token advantages with the same sign: {report['advantages']['sign_agreement']:.2%}")
    update = report.get("update") or {}
    if update:
        print(f"the update (one mini-batch, micro-batches of {' and '.join(map(str, update['splits']))} tokens):")
        print("  method        side            loss     grad norm   micro-batches")
        for name, got in update["methods"].items():
            for side in ("single_device", "verl"):
                for run in got[side]:
                    print(f"  {name:<12}  {side:<13} {run['loss']:>10.6g}  {run['grad_norm']:>11.6g}  "
                          f"{run['micro_batches']:>6}")
            print(f"  {name:<12}  largest relative difference: loss {got['loss_max_rel']:.3g}, "
                  f"gradient norm {got['grad_norm_max_rel']:.3g}")


def main(argv: Sequence[str] | None = None) -> int:
    """The command (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m training.verl.parity", description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, help="the verl run folder (trainer.default_local_dir)")
    parser.add_argument("--step", type=int, default=1, help="the kept step (default 1)")
    parser.add_argument("--weights", type=Path, help="Hugging Face folder of the weights before the step's update "
                        "(default for step 1: the run's initial weights, model of run.json)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 on the CPU")
    parser.add_argument("--groups", type=int, help="compare the first N task groups only (each group's advantages "
                        "depend on it alone; for a quicker check on a CPU)")
    parser.add_argument("--update-methods", nargs="*", metavar="METHOD",
                        help="methods whose update (loss and gradient norm) is compared (default: the run's method "
                        f"and {', '.join(UPDATE_METHODS)}; none named: no update check)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    from ocsd.replay.models import load_model, load_tokenizer
    from training.policy import policy_tokenizer

    info_file = args.run / RUN_FILE
    try:
        info = read_run_info(args.run)
        cfg = make_config(info["config"], source=str(info_file))
        kept = read_kept_batch(batch_path(args.run, args.step))
        if args.groups is not None:
            if get_method(cfg.method).selection == "random":
                raise ValueError(f"--groups: method {cfg.method!r} selects steps at random over the whole batch; "
                                 "compare it whole")
            kept = first_groups(kept, args.groups)
        for name in args.update_methods or []:
            if name not in METHODS:
                raise ValueError(f"--update-methods: unknown method {name!r}; known: {', '.join(METHODS)}")
    except (OSError, ValueError, KeyError) as err:
        print(f"training.verl.parity: {err if not isinstance(err, KeyError) else f'{info_file}: no {err}'}",
              file=sys.stderr)
        return 2
    weights = args.weights
    if weights is None:
        if args.step != 1:
            print(f"training.verl.parity: step {args.step} was scored with the weights of step {args.step - 1}: "
                  "name them with --weights", file=sys.stderr)
            return 2
        weights = Path(info["model"])
    dtype = args.dtype or ("bfloat16" if str(args.device).startswith("cuda") else "float32")
    model = load_model(weights, device=args.device, dtype=dtype).eval()
    tokenizer = (load_tokenizer(weights) if (Path(weights) / "tokenizer_config.json").is_file()
                 else policy_tokenizer(cfg.model))
    report = compare(kept, cfg, model, tokenizer, args.update_methods)
    print(json.dumps(report, indent=1)) if args.json else _print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
