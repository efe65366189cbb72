"""Advantages and token terms: GRPO, OCSD's sign-preserving modulation, and the baselines' terms.

Pure functions on torch tensors. Shapes: ``N`` trajectories, ``S`` steps, ``T`` padded tokens.

Baseline forms follow the public SDAR repository (ZJU-REAL/SDAR), which implements OPSD,
GRPO+OPSD, RLSD and SDAR on top of verl for the same three environments:

- RLSD: ``verl/trainer/ppo/rlsd_ray_trainer.py`` (token advantages from the teacher-student gap,
  ``rlsd_lambda=0.5`` decayed linearly to 0 over ``warmdown_steps=100``, ``clip_eps=0.2``).
- SDAR: ``examples/sdar_trainer/*.sh`` (``sdar_coef=0.01``, ``gate_beta=5.0``) and the gated
  self-distillation loss computed in the actor update.

The multi-turn reward protocol of those runs (:func:`protocol_advantages`, ``mode="sdar"``) is
verl-agent's: every interaction step is one sample of its task's group, scored by its episode's
success reward minus the invalid-action penalty of that step alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

REWARD_MODES = ("sdar", "trajectory")
"""Reward protocols of :func:`protocol_advantages`."""

SUCCESS_REWARD = {
    # SDAR agent_system/environments/env_package/alfworld/envs.py:48-53: 10 * won (text mode)
    "sdar": 10.0,
    "trajectory": 1.0,
}
"""Reward of a won episode under each protocol."""


def _check_finite(name: str, x: torch.Tensor) -> None:
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} has {int((~torch.isfinite(x)).sum())} non-finite value(s)")


def grpo_advantage(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    eps: float = 1e-6,
    norm_by_std: bool = True,
) -> torch.Tensor:
    """Group-relative advantage (paper Eq. grpo_advantage).

    ``A_i = (R_i - mean_g R) / (std_g R + eps)``, with the unbiased standard deviation over the G
    trajectories of the group, as verl's ``compute_grpo_outcome_advantage``; a group of one
    trajectory has mean 0 and std 1 there, and so here. With ``norm_by_std=False`` the result is
    ``R_i - mean_g R`` (Dr. GRPO).

    Parameters
    ----------
    rewards : torch.Tensor, shape (N,)
        Terminal reward of each trajectory.
    group_index : torch.Tensor, shape (N,)
        Integer id of each trajectory's task group.
    eps : float, default 1e-6
        ``epsilon_adv``.
    norm_by_std : bool, default True
        Divide by the group standard deviation.

    Returns
    -------
    torch.Tensor, shape (N,)
        Same dtype as ``rewards`` (float32 if an integer type).
    """
    if rewards.dim() != 1 or group_index.shape != rewards.shape:
        raise ValueError(f"rewards {tuple(rewards.shape)} and group_index {tuple(group_index.shape)} must be (N,)")
    rewards = rewards if rewards.is_floating_point() else rewards.float()
    _check_finite("rewards", rewards)
    if rewards.numel() == 0:
        return rewards.clone()
    _, inverse, counts = torch.unique(group_index, return_inverse=True, return_counts=True)
    n_groups = counts.numel()
    sums = torch.zeros(n_groups, dtype=rewards.dtype, device=rewards.device).index_add_(0, inverse, rewards)
    means = sums / counts.to(rewards.dtype)
    sq = torch.zeros_like(sums).index_add_(0, inverse, (rewards - means[inverse]) ** 2)
    std = torch.sqrt(sq / (counts - 1).clamp(min=1).to(rewards.dtype))
    single = counts == 1
    means = torch.where(single, torch.zeros_like(means), means)
    std = torch.where(single, torch.ones_like(std), std)
    centred = rewards - means[inverse]
    return centred / (std[inverse] + eps) if norm_by_std else centred


@dataclass(frozen=True)
class StepAdvantages:
    """Rewards and advantages of one batch under a reward protocol, one entry per step row."""

    rewards: torch.Tensor  # (S,) the score each step sample is normalised with
    advantages: torch.Tensor  # (S,) its GRPO advantage
    returns: torch.Tensor  # (N,) per trajectory: success reward minus every penalty of its steps


def protocol_advantages(
    won: torch.Tensor,
    invalid: torch.Tensor,
    traj_index: torch.Tensor,
    group_index: torch.Tensor,
    *,
    mode: str = "sdar",
    invalid_penalty: float = 0.1,
    eps: float = 1e-6,
) -> StepAdvantages:
    """Step rewards and GRPO advantages of a multi-turn batch under a reward protocol.

    ``mode="sdar"`` (the runs of the SDAR repository, verl-agent's protocol): the step sample
    ``k`` of trajectory ``i`` scores ``r_ik = 10 won_i - penalty invalid_ik``, and the advantage
    normalises it over every step sample of the group, ``A_ik = (r_ik - mean_G r) / (std_G r + eps)``,
    so a longer trajectory weighs more in the group's statistics and an invalid step gets a lower
    advantage than the valid steps of its own trajectory. Sources (SDAR repository): the success
    reward of 10, ``env_package/alfworld/envs.py:48-53``; the episode reward copied to every step
    sample, ``multi_turn_rollout/rollout_loop.py:281`` and ``reward_manager/episode.py:72-79``;
    the penalty subtracted from the offending step's own sample only,
    ``verl/trainer/ppo/ray_trainer.py:200-217``; the statistics over all step samples sharing the
    task's ``uid`` (``compute_mean_std_cross_steps=True``), ``verl/trainer/ppo/core_algos.py:113-174``.

    ``mode="trajectory"``: one reward per trajectory, ``R_i = won_i - penalty (invalid steps of i)``,
    GRPO over the G trajectories of the group, the same advantage on each of its steps.

    Parameters
    ----------
    won : torch.Tensor of bool, shape (N,)
        Whether each trajectory was won.
    invalid : torch.Tensor of bool, shape (S,)
        Whether each step's output had no well-formed action.
    traj_index : torch.Tensor of int, shape (S,)
        Trajectory of each step row (0 .. N-1).
    group_index : torch.Tensor of int, shape (N,)
        Task group of each trajectory.
    mode : {"sdar", "trajectory"}
    invalid_penalty : float, default 0.1
        Penalty per invalid step (>= 0).
    eps : float, default 1e-6
        ``epsilon_adv`` of :func:`grpo_advantage`.

    Returns
    -------
    StepAdvantages
        float64 tensors.
    """
    if mode not in REWARD_MODES:
        raise ValueError(f"reward mode must be one of {REWARD_MODES}, got {mode!r}")
    if not invalid_penalty >= 0:
        raise ValueError(f"invalid_penalty must be >= 0, got {invalid_penalty!r}")
    n = won.shape[0]
    if group_index.shape != (n,) or invalid.shape != traj_index.shape or invalid.dim() != 1:
        raise ValueError(f"won {tuple(won.shape)} and group_index {tuple(group_index.shape)} must be (N,), "
                         f"invalid {tuple(invalid.shape)} and traj_index {tuple(traj_index.shape)} (S,)")
    traj_index = traj_index.long()
    penalties = invalid_penalty * invalid.double()
    success = SUCCESS_REWARD[mode] * won.double()
    returns = success - torch.zeros(n, dtype=torch.float64).index_add_(0, traj_index, penalties)
    if mode == "sdar":
        rewards = success[traj_index] - penalties
        return StepAdvantages(rewards, grpo_advantage(rewards, group_index[traj_index], eps=eps), returns)
    advantages = grpo_advantage(returns, group_index, eps=eps)
    return StepAdvantages(returns[traj_index], advantages[traj_index], returns)


def _check_beta(beta: float) -> None:
    if not isinstance(beta, (int, float)) or isinstance(beta, bool) or not (0.0 <= float(beta) <= 1.0):
        raise ValueError(f"beta must be in [0, 1], got {beta!r}")


def ocsd_token_advantage(
    adv: torch.Tensor,
    q: torch.Tensor,
    selected: torch.Tensor,
    beta: float,
    sign_align: bool = True,
) -> torch.Tensor:
    """Observation-calibrated token advantage (paper Eq. ocsd_advantage).

    ``A (1 + beta sgn(A) q)`` on tokens of selected steps, ``A`` elsewhere. With
    ``sign_align=False`` (the "w/o sign alignment" ablation), ``A (1 + beta q)``. For ``beta`` in
    [0, 1] and ``q`` in [-1, 1] the factor is non-negative, so the sign of ``A`` is kept.

    Parameters
    ----------
    adv : torch.Tensor, shape (S,) or (S, T)
        GRPO advantage of each step's trajectory (broadcast over tokens if 1-D).
    q : torch.Tensor, shape (S, T)
        Calibration signal in [-1, 1]; only read on selected steps (other rows may hold anything
        finite, e.g. zeros).
    selected : torch.Tensor of bool, shape (S,)
        Steps chosen by :func:`ocsd.algorithm.signals.select_steps`.
    beta : float
        Modulation strength in [0, 1].
    sign_align : bool, default True
        Multiply ``q`` by ``sgn(A)``.

    Returns
    -------
    torch.Tensor, shape (S, T)
    """
    _check_beta(beta)
    if q.dim() != 2 or selected.shape != q.shape[:1]:
        raise ValueError(f"q must be (S, T) and selected (S,), got {tuple(q.shape)} and {tuple(selected.shape)}")
    adv_tok = adv.unsqueeze(1).expand_as(q) if adv.dim() == 1 else adv
    if adv_tok.shape != q.shape:
        raise ValueError(f"adv {tuple(adv.shape)} does not match q {tuple(q.shape)}")
    _check_finite("adv", adv_tok)
    sel = selected.bool()
    q_sel = q[sel]
    _check_finite("q on selected steps", q_sel)
    if (q_sel.abs() > 1 + 1e-6).any():
        raise ValueError("q must lie in [-1, 1] on selected steps")
    direction = torch.sign(adv_tok) if sign_align else torch.ones_like(adv_tok)
    q_used = torch.where(sel.unsqueeze(1), q, torch.zeros_like(q))
    return adv_tok * (1 + beta * direction * q_used)


# ----------------------------------------------------------------------------------------------
# baselines
# ----------------------------------------------------------------------------------------------


def linear_decay(step: int, initial: float, warmdown_steps: int) -> float:
    """``initial * (1 - step / warmdown_steps)`` until ``warmdown_steps``, then 0 (RLSD's lambda).

    A non-positive ``warmdown_steps`` keeps ``initial`` constant.
    """
    if warmdown_steps <= 0:
        return float(initial)
    if step >= warmdown_steps:
        return 0.0
    return float(initial) * (1.0 - step / warmdown_steps)


def rlsd_token_advantage(
    adv: torch.Tensor,
    logp_teacher: torch.Tensor,
    logp_student: torch.Tensor,
    mask: torch.Tensor,
    lam: float,
    clip_eps: float = 0.2,
) -> torch.Tensor:
    """RLSD token advantage (SDAR repository, ``rlsd_ray_trainer.py``).

    ``w = clip(exp(sgn(A) sg(T - s)), 1 - eps_w, 1 + eps_w)`` and
    ``A_t = A ((1 - lambda) + lambda w)``, where ``T`` and ``s`` are the teacher (privileged
    context) and student log-probs of the token. Padding positions get 0.

    Parameters
    ----------
    adv : torch.Tensor, shape (N,) or (N, T)
        Sequence advantage.
    logp_teacher, logp_student : torch.Tensor, shape (N, T)
    mask : torch.Tensor, shape (N, T)
    lam : float
        Mixing weight lambda in [0, 1] (see :func:`linear_decay`).
    clip_eps : float, default 0.2
        ``eps_w``.

    Returns
    -------
    torch.Tensor, shape (N, T)
    """
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lambda must be in [0, 1], got {lam}")
    if not clip_eps >= 0:
        raise ValueError(f"clip_eps must be >= 0, got {clip_eps}")
    adv_tok = adv.unsqueeze(1).expand_as(logp_teacher) if adv.dim() == 1 else adv
    gap = (logp_teacher - logp_student).detach()
    gap = torch.where(mask.bool(), gap, torch.zeros_like(gap))
    w = torch.exp(torch.sign(adv_tok) * gap).clamp(1 - clip_eps, 1 + clip_eps)
    out = adv_tok * ((1 - lam) + lam * w)
    return torch.where(mask.bool(), out, torch.zeros_like(out))


def gated_distill_loss_matrix(
    logp_student: torch.Tensor,
    logp_teacher: torch.Tensor,
    gate_beta: float,
) -> torch.Tensor:
    """Per-token gated self-distillation loss of SDAR: ``sg(sigmoid(beta_g (T - s))) (sg(T) - s)``.

    Minimising it raises the student log-prob ``s`` of tokens the teacher supports, each weighted
    by a stop-gradient gate. ``gate_beta=0`` gives a constant gate of 1/2 (GRPO+OPSD).
    Aggregate with verl's ``agg_loss``.

    Parameters
    ----------
    logp_student : torch.Tensor, shape (N, T)
        Current-policy log-probs (with gradient).
    logp_teacher : torch.Tensor, shape (N, T)
        Privileged-context log-probs (treated as constants).
    gate_beta : float
        ``beta_g`` >= 0 (SDAR default 5.0).

    Returns
    -------
    torch.Tensor, shape (N, T)
    """
    if gate_beta < 0:
        raise ValueError(f"gate_beta must be >= 0, got {gate_beta}")
    teacher = logp_teacher.detach()
    gate = torch.sigmoid(gate_beta * (teacher - logp_student.detach()))
    return gate * (teacher - logp_student)
