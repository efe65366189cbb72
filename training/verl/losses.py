"""The distilling methods' loss in verl's actor: verl's PPO loss plus the suite's gated distillation term.

OPSD, GRPO+OPSD and SDAR add a distillation term from the privileged teacher to the update
(:func:`training.update.policy_loss` in the single-device trainer). In verl the term reaches the actor through two
of verl's extension points, verl's files untouched:

- the loss function of the actor's engine worker (``ActorRolloutRefWorker.set_loss_fn``, what verl's own trainer
  calls with :func:`verl.workers.utils.losses.ppo_loss`): :class:`training.verl.trainer.OCSDTrainer` replaces it by
  :func:`actor_loss` bound to the run's settings (:func:`actor_loss_fn`). It runs verl's ``ppo_loss`` (the policy
  loss of ``actor.policy_loss.loss_mode``, the entropy bonus, the KL loss), then adds
  :func:`training.update.distillation_term` on the batch's per-token field :data:`TEACHER_FIELD`, the teacher's
  log-probs of each response token that the trainer wrote by row key, aggregated by verl's ``agg_loss`` with the
  mini-batch's global token and row counts, so micro-batching gives the same gradient;
- the policy-loss registry (``verl.trainer.ppo.core_algos.register_policy_loss``): :data:`NO_POLICY_GRADIENT`, a
  policy loss of zero, is the ``loss_mode`` of the methods without a policy-gradient term (OPSD), so that verl's
  ``ppo_loss`` computes their KL and entropy terms alone.

The loss of a micro-batch is therefore ``[PPO-clip] + kl_coef * KL + coef * agg(sg(g) (sg(T) - s))`` with
``g = sigmoid(beta_g (T - s))``, the single-device trainer's loss for the same method and settings
(:func:`training.verl.parity.update_parity` compares both).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch
from verl.trainer.ppo.core_algos import register_policy_loss
from verl.utils.metric import AggregationType, Metric
from verl.workers.utils.losses import ppo_loss
from verl.workers.utils.padding import no_padding_2_padding

from ocsd.algorithm.methods import MethodSpec, get_method
from training.update import distillation_term

__all__ = ["NO_POLICY_GRADIENT", "TEACHER_FIELD", "DistillationSettings", "actor_loss", "actor_loss_fn",
           "distillation_settings", "method_actor_config", "no_policy_gradient", "policy_loss_mode"]

TEACHER_FIELD = "teacher_log_probs"
"""The batch field holding the privileged teacher's log-probs of each response token."""
NO_POLICY_GRADIENT = "ocsd_no_policy_gradient"
"""``actor.policy_loss.loss_mode`` of the methods without a policy-gradient term (OPSD)."""


@register_policy_loss(NO_POLICY_GRADIENT)
def no_policy_gradient(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                       response_mask: torch.Tensor, loss_agg_mode: str = "token-mean", config=None,
                       rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """The policy loss of a method without a policy-gradient term: zero, without gradient (verl's policy-loss
    signature; the arguments are unused)."""
    return torch.zeros((), dtype=torch.float32, device=log_prob.device), {}


@dataclass(frozen=True)
class DistillationSettings:
    """What :func:`actor_loss` needs beyond verl's actor config.

    Attributes
    ----------
    method : str
        A registered method with an auxiliary loss (``opsd``, ``grpo_opsd``, ``sdar``).
    sdar_coef : float
        Weight of the term where the method leaves it to the config.
    gate_beta : float
        ``beta_g`` of the gate where the method leaves it to the config.
    """

    method: str
    sdar_coef: float = 0.01
    gate_beta: float = 5.0

    def __post_init__(self) -> None:
        if get_method(self.method).aux_loss is None:
            raise ValueError(f"method {self.method!r} has no distillation term")
        for name in ("sdar_coef", "gate_beta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"{name}={value!r}: must be a number >= 0")

    @property
    def spec(self) -> MethodSpec:
        return get_method(self.method)


def distillation_settings(cfg) -> DistillationSettings | None:
    """The :class:`DistillationSettings` of a :class:`training.config.TrainConfig`, or None for a method whose
    update has no distillation term (verl's own ``ppo_loss`` serves it)."""
    if get_method(cfg.method).aux_loss is None:
        return None
    return DistillationSettings(cfg.method, sdar_coef=float(cfg.sdar_coef), gate_beta=float(cfg.gate_beta))


def policy_loss_mode(spec: MethodSpec, given: str) -> str:
    """The ``actor.policy_loss.loss_mode`` a method runs with: ``given`` for a method with a policy-gradient term,
    :data:`NO_POLICY_GRADIENT` for one without.

    Raises
    ------
    ValueError
        A method without a policy-gradient term and a ``given`` loss other than verl's default ``vanilla``.
    """
    if spec.policy_gradient:
        return given
    if given not in ("vanilla", NO_POLICY_GRADIENT):
        raise ValueError(f"actor_rollout_ref.actor.policy_loss.loss_mode={given!r}: method {spec.name!r} has no "
                         "policy-gradient term; leave the key unset")
    return NO_POLICY_GRADIENT


def method_actor_config(config, spec: MethodSpec):
    """verl's actor config (an ``ActorConfig``) with the method's policy-loss mode (:func:`policy_loss_mode`)."""
    mode = policy_loss_mode(spec, config.policy_loss.get("loss_mode", "vanilla"))
    if mode == config.policy_loss.get("loss_mode", "vanilla"):
        return config
    return dataclasses.replace(config, policy_loss=dataclasses.replace(config.policy_loss, loss_mode=mode))


def _metric_aggregation(config, data) -> AggregationType:
    """verl's ``ppo_loss`` rule: terms normalised by the global batch are summed over micro-batches."""
    normalised = (data["dp_size"] > 1 or data["batch_num_tokens"] is not None
                  or data["global_batch_size"] is not None or config.loss_scale_factor is not None)
    return AggregationType.SUM if normalised else AggregationType.MEAN


def actor_loss(config, model_output, data, dp_group=None, *,
               settings: DistillationSettings) -> tuple[torch.Tensor, dict]:
    """Loss of one micro-batch in verl's actor: verl's ``ppo_loss`` plus the method's distillation term.

    Parameters
    ----------
    config : verl.workers.config.ActorConfig
        The actor's config, its ``policy_loss.loss_mode`` the method's (:func:`method_actor_config`).
    model_output : dict
        The engine's output; ``log_probs`` over each row's sequence (nested, or flat over all tokens).
    data : tensordict.TensorDict
        The micro-batch as verl's engine passes it: ``prompts``, ``responses``, ``response_mask``,
        ``old_log_probs``, ``advantages``, :data:`TEACHER_FIELD` (and ``ref_log_prob`` with the KL loss), with
        the mini-batch's ``dp_size``, ``batch_num_tokens`` and ``global_batch_size``.
    dp_group : optional
        Passed on to ``ppo_loss``.
    settings : DistillationSettings

    Returns
    -------
    (torch.Tensor, dict)
        The loss to back-propagate and verl's metrics with ``actor/distill_loss``.

    Raises
    ------
    KeyError
        A batch without :data:`TEACHER_FIELD` (the trainer writes it for every method with a distillation term).
    """
    loss, metrics = ppo_loss(config, model_output, data, dp_group)
    if TEACHER_FIELD not in data:
        raise KeyError(f"the actor's batch has no {TEACHER_FIELD!r} field: method {settings.method!r} needs the "
                       "privileged teacher's log-probs (written by training.verl.trainer.OCSDTrainer)")
    log_prob = no_padding_2_padding(model_output["log_probs"], data)
    fields = data.select(TEACHER_FIELD, "response_mask").to_padded_tensor()
    weighted, term = distillation_term(settings.spec, log_prob, fields[TEACHER_FIELD].to(log_prob.dtype),
                                       fields["response_mask"].bool(), loss_agg_mode=config.loss_agg_mode,
                                       global_batch_info=config.global_batch_info, gate_beta=settings.gate_beta,
                                       aux_coef=settings.sdar_coef)
    metrics["actor/distill_loss"] = Metric(value=term, aggregation=_metric_aggregation(config, data))
    return loss + weighted, metrics


def actor_loss_fn(config, settings: DistillationSettings) -> functools.partial:
    """:func:`actor_loss` bound to ``config`` (with the method's policy-loss mode) and ``settings``: the loss
    function the actor's worker is given (``set_loss_fn``), as verl binds ``ppo_loss`` to its config."""
    return functools.partial(actor_loss, config=method_actor_config(config, settings.spec), settings=settings)
