"""Policy update: PPO-clip with token advantages, low_var_kl to a reference, auxiliary losses.

The clipped surrogate, the KL estimator and the loss aggregation are verl's own functions
(``verl.trainer.ppo.core_algos``); this module batches the steps, runs the forward/backward passes
and the AdamW step. A non-finite loss, gradient norm or updated parameter raises
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


def _actor_config(settings: LossSettings):
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
    metrics: dict[str, float] = {}
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
        aux = auxiliary_loss_matrix(spec, logp, teacher, gate_beta=settings.gate_beta)
        aux_loss = core_algos.agg_loss(aux, mask.float(), settings.loss_agg_mode, **actor_config.global_batch_info)
        coef = spec.aux_coef if spec.aux_coef is not None else settings.aux_coef
        loss = loss + coef * aux_loss
        metrics["actor/distill_loss"] = aux_loss.item()
    return loss, metrics


def ppo_update(
    model,
    optimizer: torch.optim.Optimizer,
    spec: MethodSpec,
    rows: UpdateBatch,
    settings: LossSettings,
    *,
    epochs: int = 1,
    mini_batches: int = 1,
    rng: np.random.Generator | None = None,
    scheduler=None,
) -> dict[str, float]:
    """Run ``epochs`` passes of ``mini_batches`` AdamW steps over the batch; return averaged metrics.

    Each mini-batch's loss is the verl aggregation over all its tokens: micro-batches pass the
    mini-batch token (or sequence) count to ``agg_loss`` so that gradient accumulation gives the
    same gradient as one big batch.

    Raises
    ------
    FloatingPointError
        If a loss or gradient norm is non-finite (before the optimizer step), or a trainable
        parameter is non-finite after an optimizer step (the message names the step and parameter).
    """
    actor_config = _actor_config(settings)
    n = len(rows.prompt_ids)
    rng = rng if rng is not None else np.random.default_rng(0)
    lengths = [len(p) + len(r) for p, r in zip(rows.prompt_ids, rows.response_ids)]
    history: dict[str, list[float]] = {}
    model.train()
    n_steps = 0
    for _ in range(epochs):
        order = rng.permutation(n) if mini_batches > 1 else np.arange(n)
        for part in np.array_split(order, mini_batches):
            part = [int(i) for i in part]
            if not part:
                continue
            actor_config.global_batch_info.clear()
            actor_config.global_batch_info.update(
                dp_size=1, batch_num_tokens=int(rows.mask[part].sum()),
                global_batch_size=int((rows.mask[part].sum(dim=1) > 0).sum()))
            optimizer.zero_grad(set_to_none=True)
            for group in micro_batches([lengths[i] for i in part], settings.micro_batch_tokens):
                idx = [part[g] for g in group]
                pairs = [(rows.prompt_ids[i], rows.response_ids[i]) for i in idx]
                logp, _ = response_logprobs(model, pairs, grad=True, padded=True,
                                            token_budget=max(settings.micro_batch_tokens, max(lengths)))
                loss, metrics = policy_loss(spec, logp, rows, idx, settings, actor_config)
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"loss is {loss.item()} (non-finite) in the policy update")
                loss.backward()
                for k, v in metrics.items():
                    history.setdefault(k, []).append(v)
            params = [p for p in model.parameters() if p.requires_grad]
            norm = torch.nn.utils.clip_grad_norm_(params, settings.grad_clip)
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
    return {k: float(np.mean(v)) for k, v in history.items()}
