"""Token and step signals of OCSD: observation residual, calibration signal, step NLL, step selection.

All functions are pure and work on torch tensors. Notation follows the paper: ``S`` interaction
steps (over all trajectories of a batch), ``T`` padded tokens per step.
"""

from __future__ import annotations

import math

import numpy as np
import torch

SELECTION_MODES = ("top", "random", "all")


def _check_finite(name: str, x: torch.Tensor) -> None:
    if not torch.isfinite(x).all():
        n_bad = int((~torch.isfinite(x)).sum())
        raise ValueError(f"{name} has {n_bad} non-finite value(s)")


def observation_residual(logp_full: torch.Tensor, logp_ablated: torch.Tensor) -> torch.Tensor:
    """Observation residual ``e = log pi_F - log pi_A`` (paper Eq. observation_residual_expanded).

    Equal to ``delta_F - delta_A``: the student log-probability cancels.

    Parameters
    ----------
    logp_full : torch.Tensor, shape (...)
        Log-probabilities of the generated tokens under the Full replay view.
    logp_ablated : torch.Tensor, shape (...)
        Log-probabilities of the same tokens under the Observation-Ablated view.

    Returns
    -------
    torch.Tensor, shape (...)
        The residual ``e``.

    Raises
    ------
    ValueError
        On a shape mismatch or non-finite input.
    """
    if logp_full.shape != logp_ablated.shape:
        raise ValueError(f"logp_full {tuple(logp_full.shape)} and logp_ablated {tuple(logp_ablated.shape)} differ")
    _check_finite("logp_full", logp_full)
    _check_finite("logp_ablated", logp_ablated)
    return logp_full - logp_ablated


def calibration_signal(e: torch.Tensor) -> torch.Tensor:
    """Bounded observation-calibrated signal ``q = tanh(e / 2)``, in ``[-1, 1]``.

    Parameters
    ----------
    e : torch.Tensor, shape (...)
        A token signal: the residual for OCSD, ``delta_F`` for the "w/o Ablated view" ablation.

    Returns
    -------
    torch.Tensor, shape (...)
    """
    _check_finite("e", e)
    return torch.tanh(e / 2)


def step_nll(logp_old: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Step uncertainty ``u = -mean_t log pi_old(y_t | h_t)`` over the valid tokens of each step.

    Parameters
    ----------
    logp_old : torch.Tensor, shape (S, T)
        Old-policy log-probabilities of the generated tokens, right-padded.
    mask : torch.Tensor, shape (S, T)
        True (or 1) on valid tokens.

    Returns
    -------
    torch.Tensor, shape (S,)
        Mean token NLL per step.

    Raises
    ------
    ValueError
        On a shape mismatch, a step without valid tokens, or non-finite log-probs on valid tokens.
    """
    if logp_old.shape != mask.shape or logp_old.dim() != 2:
        raise ValueError(f"logp_old {tuple(logp_old.shape)} and mask {tuple(mask.shape)} must be equal (S, T)")
    mask = mask.bool()
    counts = mask.sum(dim=1)
    if (counts == 0).any():
        empty = torch.nonzero(counts == 0).flatten().tolist()
        raise ValueError(f"step(s) {empty[:10]} have no valid tokens in mask")
    _check_finite("logp_old (valid tokens)", logp_old[mask])
    total = torch.where(mask, -logp_old, torch.zeros_like(logp_old)).sum(dim=1)
    return total / counts.to(logp_old.dtype)


def num_selected(num_steps: int, rho: float) -> int:
    """``ceil(rho * K)`` computed without floating-point overshoot (``0.2 * 15`` is 3, not 4)."""
    return max(1, math.ceil(round(rho * num_steps, 9)))


def _check_rho(rho: float) -> None:
    if not isinstance(rho, (int, float)) or isinstance(rho, bool) or not (0.0 < float(rho) <= 1.0):
        raise ValueError(f"rho must be in (0, 1], got {rho!r}")


def select_steps(
    nll: torch.Tensor,
    traj_index: torch.Tensor,
    rho: float,
    mode: str = "top",
    generator: np.random.Generator | int | None = None,
) -> torch.Tensor:
    """Choose the steps whose tokens get replay scoring (paper Eq. top_step_selection).

    Parameters
    ----------
    nll : torch.Tensor, shape (S,)
        Step NLL ``u`` (see :func:`step_nll`).
    traj_index : torch.Tensor, shape (S,)
        Integer trajectory id of each step; steps of one trajectory need not be contiguous.
    rho : float
        Selection ratio in (0, 1]: ``ceil(rho * K_i)`` steps of each trajectory with ``K_i`` steps.
    mode : {"top", "random", "all"}, default "top"
        ``"top"``: the highest-NLL steps, ties broken by the earlier position in ``nll``;
        ``"random"``: a uniformly random subset of the same size; ``"all"``: every step.
    generator : numpy.random.Generator or int, optional
        Randomness for ``mode="random"`` (a seed or a Generator); required there.

    Returns
    -------
    torch.Tensor of bool, shape (S,)

    Raises
    ------
    ValueError
        On bad ``rho``/``mode``, shape mismatch, non-finite NLL, or ``mode="random"`` without a generator.
    """
    _check_rho(rho)
    if mode not in SELECTION_MODES:
        raise ValueError(f"mode must be one of {SELECTION_MODES}, got {mode!r}")
    if nll.dim() != 1 or traj_index.shape != nll.shape:
        raise ValueError(f"nll {tuple(nll.shape)} and traj_index {tuple(traj_index.shape)} must be equal (S,)")
    _check_finite("nll", nll)
    n = nll.numel()
    if mode == "all" or n == 0:
        return torch.ones(n, dtype=torch.bool, device=nll.device)
    traj = traj_index.detach().cpu().numpy().astype(np.int64)
    if mode == "top":
        key = -nll.detach().cpu().double().numpy()
    else:
        if generator is None:
            raise ValueError("mode='random' needs a generator (a seed or numpy.random.Generator)")
        key = np.random.default_rng(generator).random(n)
    position = np.arange(n)
    order = np.lexsort((position, key, traj))  # by trajectory, then key, then position
    sorted_traj = traj[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_traj)) + 1]
    sizes = np.diff(np.r_[starts, n])
    rank = position - np.repeat(starts, sizes)  # rank of each sorted element within its trajectory
    quota = np.array([num_selected(int(k), rho) for k in sizes])
    chosen = np.zeros(n, dtype=bool)
    chosen[order] = rank < np.repeat(quota, sizes)
    return torch.from_numpy(chosen).to(nll.device)
