"""Policy update: PPO-clip with token advantages, low_var_kl to a reference, auxiliary losses.

The clipped surrogate, the KL estimator and the loss aggregation are verl's own functions
(``verl.trainer.ppo.core_algos``); this module splits the step rows into mini-batches (one AdamW
step each, :func:`mini_batch_parts`), runs the forward/backward passes and logs verl's actor metrics
with the importance-ratio statistics. A non-finite loss, gradient norm or updated parameter raises
:class:`FloatingPointError`, so the trainer stops before a checkpoint can hold non-finite weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ocsd.algorithm.methods import MethodSpec, auxiliary_loss_matrix
from ocsd.replay.scoring import response_logprobs
from training.config import COUNT, NON_NEGATIVE, POSITIVE
from training.precision import optimized_parameters


@dataclass
class UpdateBatch:
    """Everything the update needs, one row per interaction step (``S`` rows, ``T`` padded tokens)."""

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    old_logp: torch.Tensor  # (S, T)
    advantages: torch.Tensor  # (S, T)
    mask: torch.Tensor  # (S, T) bool
    ref_logp: torch.Tensor | None = None  # (S, T)
    teacher_logp: torch.Tensor | None = None  # (S, T), privileged-context teacher (baselines)


@dataclass(frozen=True)
class LossSettings:
    """Loss hyperparameters (see :class:`training.config.TrainConfig`)."""

    clip_ratio: float = 0.2
    kl_coef: float = 0.01
    kl_type: str = "low_var_kl"
    loss_agg_mode: str = "token-mean"
    aux_coef: float = 0.01  # weight of the auxiliary loss for methods whose spec leaves it to the config
    gate_beta: float = 5.0
    grad_clip: float = 1.0
    micro_batch_tokens: int = 16384

    def __post_init__(self) -> None:
        for name, allowed in (("clip_ratio", POSITIVE), ("kl_coef", NON_NEGATIVE), ("aux_coef", NON_NEGATIVE),
                              ("gate_beta", NON_NEGATIVE), ("grad_clip", POSITIVE), ("micro_batch_tokens", COUNT)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}={getattr(self, name)!r}: must be {allowed}")


def loss_actor_config(settings: LossSettings):
    """verl's actor config that :func:`policy_loss` passes to verl's loss functions for ``settings`` (the clip
    range, the aggregation), as :func:`ppo_update` builds it."""
    from verl.workers.config.actor import ActorConfig

    # verl's vanilla loss clips to [1 - clip_ratio_low, 1 + clip_ratio_high]; both default to 0.2
    # whatever clip_ratio says, so all three are set
    return ActorConfig(strategy="fsdp", clip_ratio=settings.clip_ratio, clip_ratio_low=settings.clip_ratio,
                       clip_ratio_high=settings.clip_ratio, loss_agg_mode=settings.loss_agg_mode,
                       ppo_mini_batch_size=1, ppo_micro_batch_size_per_gpu=1, rollout_n=1)


def non_finite_parameter(model) -> str | None:
    """Name of the first trainable parameter holding a nan or an infinity, or None when all are finite."""
    params = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    if not params or bool(torch.stack([p.detach().isfinite().all() for _, p in params]).all()):
        return None
    return next(name for name, p in params if not bool(p.detach().isfinite().all()))


def micro_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Split row indices (longest first) into groups whose padded size stays within ``budget`` tokens."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    current: list[int] = []
    for i in order:
        width = lengths[current[0]] if current else lengths[i]
        if current and width * (len(current) + 1) > budget:
            groups.append(current)
            current = []
        current.append(i)
    if current:
        groups.append(current)
    return groups


def mini_batch_parts(n: int, *, mini_batches: int = 1, mini_batch_size: int = 0,
                     rng: np.random.Generator | None = None) -> list[np.ndarray]:
    """Row indices of each optimizer step of one pass over ``n`` step rows.

    ``mini_batch_size > 0``: ``ceil(n / mini_batch_size)`` mini-batches of a seeded permutation, of
    equal sizes (differing by at most one row, none above ``mini_batch_size``). Otherwise
    ``mini_batches`` parts (a permutation when more than one, the row order for one). Empty parts
    are dropped.

    Parameters
    ----------
    n : int
        Step rows of the batch.
    mini_batches : int, default 1
        Parts when ``mini_batch_size`` is 0.
    mini_batch_size : int, default 0
        Rows per optimizer step (verl's ``ppo_mini_batch_size`` counted in step rows).
    rng : numpy.random.Generator, optional
        Shuffles the rows (default: seed 0).
    """
    if mini_batches < 1 or mini_batch_size < 0:
        raise ValueError(f"mini_batches must be >= 1 and mini_batch_size >= 0, got {mini_batches}, {mini_batch_size}")
    parts = -(-n // mini_batch_size) if mini_batch_size > 0 else mini_batches
    rng = rng if rng is not None else np.random.default_rng(0)
    order = rng.permutation(n) if parts > 1 else np.arange(n)
    return [part for part in np.array_split(order, max(parts, 1)) if len(part)]


def ratio_statistics(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Mean, min and max of the importance ratio ``exp(log pi - log pi_old)`` over the masked tokens
    (``actor/ratio_mean``, ``actor/ratio_min``, ``actor/ratio_max``); empty without tokens."""
    mask = mask.bool()
    if not bool(mask.any()):
        return {}
    ratio = torch.exp(logp.detach().float() - old_logp.float())[mask]
    return {"actor/ratio_mean": ratio.mean().item(), "actor/ratio_min": ratio.min().item(),
            "actor/ratio_max": ratio.max().item()}


def reduce_metrics(history: dict[str, list[float]]) -> dict[str, float]:
    """One value per metric of an update: the minimum of ``*_min``, the maximum of ``*_max``, else the mean
    over micro-batches (verl's reduction)."""
    reduce = {"_min": np.min, "_max": np.max}
    return {k: float(reduce.get(k[-4:], np.mean)(v)) for k, v in history.items()}


def policy_loss(
    spec: MethodSpec,
    logp: torch.Tensor,
    rows: UpdateBatch,
    idx: list[int],
    settings: LossSettings,
    actor_config,
    teacher_logp_now: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss of one micro-batch (rows ``idx``), scaled so that micro-batches add up to the batch loss.

    ``logp`` is the current policy's (B, T) log-probs of the micro-batch with gradient.
    """
    from verl.trainer.ppo import core_algos

    width = logp.shape[1]
    mask = rows.mask[idx, :width].to(logp.device)
    old = rows.old_logp[idx, :width].to(logp.device)
    adv = rows.advantages[idx, :width].to(logp.device)
    metrics = ratio_statistics(logp, old, mask)
    loss = torch.zeros((), device=logp.device)
    if spec.policy_gradient:
        pg_loss, pg_metrics = core_algos.compute_policy_loss_vanilla(
            old_log_prob=old, log_prob=logp, advantages=adv, response_mask=mask.float(),
            loss_agg_mode=settings.loss_agg_mode, config=actor_config)
        loss = loss + pg_loss
        metrics.update({"actor/pg_loss": pg_loss.item(), **pg_metrics})
    if settings.kl_coef > 0 and rows.ref_logp is not None:
        ref = rows.ref_logp[idx, :width].to(logp.device)
        kl = core_algos.kl_penalty(logprob=logp, ref_logprob=ref, kl_penalty=settings.kl_type)
        kl_loss = core_algos.agg_loss(kl, mask.float(), settings.loss_agg_mode, **actor_config.global_batch_info)
        loss = loss + settings.kl_coef * kl_loss
        metrics["actor/kl_loss"] = kl_loss.item()
    if spec.aux_loss is not None:
        teacher = rows.teacher_logp[idx, :width].to(logp.device)
        weighted, aux_loss = distillation_term(spec, logp, teacher, mask, loss_agg_mode=settings.loss_agg_mode,
                                               global_batch_info=actor_config.global_batch_info,
                                               gate_beta=settings.gate_beta, aux_coef=settings.aux_coef)
        loss = loss + weighted
        metrics["actor/distill_loss"] = aux_loss.item()
    return loss, metrics


def distillation_term(spec: MethodSpec, logp: torch.Tensor, teacher_logp: torch.Tensor, mask: torch.Tensor, *,
                      loss_agg_mode: str, global_batch_info: dict, gate_beta: float,
                      aux_coef: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The method's auxiliary (distillation) term of one micro-batch, aggregated by verl's ``agg_loss``.

    Parameters
    ----------
    spec : MethodSpec
        A method with an ``aux_loss``.
    logp, teacher_logp : torch.Tensor, shape (B, T)
        Current-policy log-probs (with gradient) and the privileged teacher's (constants).
    mask : torch.Tensor, shape (B, T)
        Response tokens.
    loss_agg_mode : str
        verl's aggregation mode.
    global_batch_info : dict
        verl's ``dp_size``, ``batch_num_tokens``, ``global_batch_size`` (and ``loss_scale_factor``) of the
        mini-batch, so that micro-batches add up to the mini-batch's term.
    gate_beta, aux_coef : float
        The config's ``gate_beta`` and ``sdar_coef``, used where the spec leaves them unset.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        The weighted term added to the loss, and the unweighted aggregated term (``actor/distill_loss``).
    """
    from verl.trainer.ppo import core_algos

    aux = auxiliary_loss_matrix(spec, logp, teacher_logp, gate_beta=gate_beta)
    aux_loss = core_algos.agg_loss(aux, mask.float(), loss_agg_mode, **global_batch_info)
    coef = spec.aux_coef if spec.aux_coef is not None else aux_coef
    return coef * aux_loss, aux_loss


def inert_rows(spec: MethodSpec, rows: UpdateBatch, settings: LossSettings) -> np.ndarray:
    """Rows whose loss is zero whatever the weights, so that they add nothing to any gradient (bool, one per row).

    A row is inert when no term of the loss can reach it: the method has no auxiliary (distillation) loss, no KL
    term applies (``kl_coef`` 0 or no reference log-probs), and the method has no policy-gradient term or the
    row's advantage is 0 on every response token. verl's clipped surrogate is a multiple of the advantage, so such
    a row's surrogate and its gradient are exactly 0; the loss normalisers (the mini-batch's token and row counts)
    do not depend on which rows are computed. In a group whose episodes all end alike (and without invalid-action
    penalties) every row is inert.
    """
    n = len(rows.prompt_ids)
    if spec.aux_loss is not None or (settings.kl_coef > 0 and rows.ref_logp is not None):
        return np.zeros(n, dtype=bool)
    if not spec.policy_gradient:
        return np.ones(n, dtype=bool)
    carries = ((rows.advantages != 0) & rows.mask.bool()).any(dim=1)
    return (~carries).cpu().numpy()


def _zero_missing_gradients(optimizer: torch.optim.Optimizer) -> None:
    """Zero gradients for the optimized parameters that have none, as a backward pass over inert rows leaves them
    (AdamW then still moves them by its momentum and weight decay)."""
    for p in optimized_parameters(optimizer):
        if p.grad is None:
            p.grad = torch.zeros_like(p)


def ppo_update(
    model,
    optimizer: torch.optim.Optimizer,
    spec: MethodSpec,
    rows: UpdateBatch,
    settings: LossSettings,
    *,
    epochs: int = 1,
    mini_batches: int = 1,
    mini_batch_size: int = 0,
    rng: np.random.Generator | None = None,
    scheduler=None,
    skip_inert: bool = True,
) -> dict[str, float]:
    """Run ``epochs`` passes over the batch, one AdamW step per mini-batch (:func:`mini_batch_parts`);
    return the metrics reduced by :func:`reduce_metrics`, with ``actor/optimizer_steps`` and ``actor/inert_rows``
    (the share of rows that :func:`inert_rows` finds without gradient).

    With ``skip_inert`` (the default) inert rows get no forward or backward pass: the gradients, and so the
    updated weights, are those of the full computation up to float rounding (micro-batches are formed from the
    remaining rows). A mini-batch of inert rows only still takes its optimizer step, on zero gradients. The ratio
    and clipping statistics (``actor/ratio_*``, ``actor/pg_clipfrac``, ``actor/ppo_kl``, ``actor/pg_loss``) are
    then those of the rows that carry a gradient, and absent when no row does.

    Each mini-batch's loss is the verl aggregation over all its tokens: micro-batches pass the
    mini-batch token (or sequence) count to ``agg_loss`` so that gradient accumulation gives the
    same gradient as one big batch. The old log-probs stay those of the rollout policy, so from the
    second mini-batch on the importance ratio moves away from 1 and PPO's clipping can act
    (``actor/pg_clipfrac``, ``actor/ppo_kl``, ``actor/ratio_*``).

    Raises
    ------
    FloatingPointError
        If a loss or gradient norm is non-finite (before the optimizer step), or a trainable
        parameter is non-finite after an optimizer step (the message names the step and parameter).
    """
    actor_config = loss_actor_config(settings)
    n = len(rows.prompt_ids)
    rng = rng if rng is not None else np.random.default_rng(0)
    lengths = [len(p) + len(r) for p, r in zip(rows.prompt_ids, rows.response_ids)]
    inert = inert_rows(spec, rows, settings) if skip_inert else np.zeros(n, dtype=bool)
    history: dict[str, list[float]] = {}
    model.train()
    n_steps = 0
    for _ in range(epochs):
        for part in mini_batch_parts(n, mini_batches=mini_batches, mini_batch_size=mini_batch_size, rng=rng):
            part = [int(i) for i in part]
            actor_config.global_batch_info.clear()
            actor_config.global_batch_info.update(
                dp_size=1, batch_num_tokens=int(rows.mask[part].sum()),
                global_batch_size=int((rows.mask[part].sum(dim=1) > 0).sum()))
            optimizer.zero_grad(set_to_none=True)
            live = [i for i in part if not inert[i]]
            for group in micro_batches([lengths[i] for i in live], settings.micro_batch_tokens):
                idx = [live[g] for g in group]
                pairs = [(rows.prompt_ids[i], rows.response_ids[i]) for i in idx]
                logp, _ = response_logprobs(model, pairs, grad=True, padded=True,
                                            token_budget=max(settings.micro_batch_tokens, max(lengths)))
                loss, metrics = policy_loss(spec, logp, rows, idx, settings, actor_config)
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"loss is {loss.item()} (non-finite) in the policy update")
                loss.backward()
                for k, v in metrics.items():
                    history.setdefault(k, []).append(v)
            if len(live) < len(part):
                _zero_missing_gradients(optimizer)
            norm = torch.nn.utils.clip_grad_norm_(optimized_parameters(optimizer), settings.grad_clip)
            if not torch.isfinite(norm):
                raise FloatingPointError(f"gradient norm is {norm.item()} (non-finite) in the policy update")
            optimizer.step()
            n_steps += 1
            bad = non_finite_parameter(model)
            if bad is not None:
                raise FloatingPointError(f"parameter {bad} is non-finite after optimizer step {n_steps} "
                                         f"of the policy update (lr {optimizer.param_groups[0]['lr']})")
            if scheduler is not None:
                scheduler.step()
            history.setdefault("actor/grad_norm", []).append(float(norm))
    model.eval()
    return {**reduce_metrics(history), "actor/optimizer_steps": float(n_steps),
            "actor/inert_rows": float(inert.mean()) if n else 0.0}
