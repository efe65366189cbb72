"""One dispatch path for training methods.

A method name maps to a :class:`MethodSpec` that tells a trainer everything method-specific:
which steps are selected, which replay views to score, which teacher context the baselines use,
how token advantages are formed, and which auxiliary loss is added with which weight. Trainers never
branch on the method name; they read the spec and call :func:`token_advantages`,
:func:`token_signal` and :func:`auxiliary_loss_matrix`.

======================  =========  ==========  ================  ===========  ================================
name                    selection  signal      advantage         pg term      auxiliary loss (weight)
======================  =========  ==========  ================  ===========  ================================
grpo                    top        -           grpo              yes          -
ocsd                    top        residual    ocsd (sign)       yes          -
ocsd_no_ablated         top        delta_F     ocsd (sign)       yes          -
ocsd_random_select      random     residual    ocsd (sign)       yes          -
ocsd_all_steps          all        residual    ocsd (sign)       yes          -
ocsd_no_sign            top        residual    ocsd (no sign)    yes          -
opsd                    top        -           grpo              no           gated distill, beta_g (config)
grpo_opsd               top        -           grpo              yes          gated distill, beta_g=0 (config)
rlsd                    top        -           rlsd              yes          -
sdar                    top        -           grpo              yes          gated distill, beta_g (config)
======================  =========  ==========  ================  ===========  ================================

"(config)" is the trainer's ``sdar_coef`` (0.01) and ``beta_g`` its ``gate_beta`` (5.0), the values of
every SDAR ALFWorld script. The three distilling baselines are one loss in the SDAR repository
(``verl/workers/actor/dp_actor.py:412-419, 446-457``: ``pg_loss_coef * pg_loss + sdar_coef * L_gated``,
plus the KL loss) run by ``verl/trainer/main_sdar.py`` with different script settings:

- OPSD, ``examples/opsd_trainer/run_alfworld_qwen3.sh``: ``sdar_coef=0.01`` (line 7), ``gate_beta=5.0``
  (line 8), ``pg_loss_coef=0`` (line 61): SDAR without the policy-gradient term, so the teacher still
  enters the gradient through the gate.
- GRPO+OPSD, ``examples/grpo_opsd_trainer/run_alfworld_qwen3.sh``: ``sdar_coef=0.01`` (line 7),
  ``gate_beta=0.0`` (line 8), policy-gradient term on (``pg_loss_coef`` unset, default 1,
  ``dp_actor.py:412``): a constant gate of 1/2.
- SDAR, ``examples/sdar_trainer/run_alfworld_qwen3.sh``: ``sdar_coef=0.01`` (line 7), ``gate_beta=5.0``
  (line 8), policy-gradient term on.
- RLSD, ``examples/rlsd_trainer/run_alfworld_qwen3.sh``: ``rlsd_lambda=0.5``, ``warmdown_steps=100``,
  ``clip_eps=0.2`` (lines 56-58), the trainer's ``rlsd_*`` settings.

The ``_3b`` and ``_7b`` ALFWorld scripts of each method set the same values (there OPSD's ``pg_loss_coef=0``
is line 60 and RLSD's settings lines 55-57), and so do its WebShop and Search scripts.

For ``grpo`` and the baselines, selection only decides which steps get replay scores written for the
diagnostics; it does not change their update.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from ocsd.algorithm.advantages import gated_distill_loss_matrix, ocsd_token_advantage, rlsd_token_advantage
from ocsd.algorithm.protocol import PAPER_BETA
from ocsd.algorithm.signals import calibration_signal, observation_residual


@dataclass(frozen=True)
class MethodSpec:
    """What a trainer computes for one method.

    Attributes
    ----------
    name : str
        Registry name.
    selection : {"top", "random", "all"}
        Step-selection mode passed to :func:`ocsd.algorithm.signals.select_steps`.
    signal : {"residual", "full", None}
        Token signal mapped to ``q``: the residual ``e`` (OCSD) or the Full support ``delta_F``.
    advantage : {"grpo", "ocsd", "rlsd"}
        Token-advantage rule (key of :data:`ADVANTAGE_RULES`).
    sign_align : bool
        Multiply ``q`` by ``sgn(A)`` (OCSD); False for the "w/o sign alignment" ablation.
    policy_gradient : bool
        Include the PPO-clip policy-gradient term (False for OPSD, which distils only).
    aux_loss : {"gated_distill", None}
        Auxiliary loss computed from the privileged teacher (key of :data:`AUX_LOSSES`).
    gate_beta : float or None
        ``beta_g`` of the gated distillation loss; None means "from the config" (SDAR's 5.0).
    aux_coef : float or None
        Weight of the auxiliary loss in the update; None means "from the config" (``sdar_coef``,
        SDAR's 0.01, also OPSD's).
    privileged_teacher : bool
        Needs the privileged-context teacher log-probs on every response token (baselines).
    description : str
        One line for ``--help`` and tables.
    """

    name: str
    selection: str = "top"
    signal: str | None = None
    advantage: str = "grpo"
    sign_align: bool = True
    policy_gradient: bool = True
    aux_loss: str | None = None
    gate_beta: float | None = None
    aux_coef: float | None = None
    privileged_teacher: bool = False
    description: str = ""

    @property
    def replay_views(self) -> tuple[str, ...]:
        """Replay views the update needs (the record writer adds the rest of ``student/full/ablated``)."""
        return {"residual": ("full", "ablated"), "full": ("full",)}.get(self.signal, ())


METHODS: dict[str, MethodSpec] = {}


def register_method(spec: MethodSpec) -> MethodSpec:
    """Add a method to the registry; names are unique."""
    if spec.name in METHODS:
        raise ValueError(f"method {spec.name!r} is already registered")
    for value, allowed, what in (
        (spec.selection, ("top", "random", "all"), "selection"),
        (spec.signal, ("residual", "full", None), "signal"),
        (spec.advantage, tuple(ADVANTAGE_RULES), "advantage"),
        (spec.aux_loss, (*AUX_LOSSES, None), "aux_loss"),
    ):
        if value not in allowed:
            raise ValueError(f"method {spec.name!r}: {what}={value!r} not in {allowed}")
    for what, value in (("gate_beta", spec.gate_beta), ("aux_coef", spec.aux_coef)):
        if value is None:
            continue
        if spec.aux_loss is None:
            raise ValueError(f"method {spec.name!r}: {what}={value!r} is set but the method has no aux_loss")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"method {spec.name!r}: {what}={value!r} must be a finite number >= 0")
    METHODS[spec.name] = spec
    return spec


def get_method(name: str) -> MethodSpec:
    """The spec registered under ``name``; a clear error lists the known names."""
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(METHODS)}") from None


# ----------------------------------------------------------------------------------------------
# token advantages
# ----------------------------------------------------------------------------------------------


@dataclass
class TokenInputs:
    """Per-step token tensors a rule may read. Shapes: ``(S, T)`` right-padded, ``mask`` True on tokens.

    ``adv`` is ``(S,)``: the GRPO advantage of each step's trajectory. Log-prob tensors that a
    method does not need may be None; for the replay views they need only be finite on selected steps.
    """

    adv: torch.Tensor
    mask: torch.Tensor
    selected: torch.Tensor
    logp_student: torch.Tensor | None = None
    logp_full: torch.Tensor | None = None
    logp_ablated: torch.Tensor | None = None
    logp_teacher: torch.Tensor | None = None


def _require(inputs: TokenInputs, *names: str) -> list[torch.Tensor]:
    missing = [n for n in names if getattr(inputs, n) is None]
    if missing:
        raise ValueError(f"token advantage needs {missing}")
    return [getattr(inputs, n) for n in names]


def _rows(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    return torch.where(rows.unsqueeze(1), x, torch.zeros_like(x))


def token_signal(spec: MethodSpec, inputs: TokenInputs) -> torch.Tensor:
    """The method's token signal on selected steps (zeros elsewhere), shape (S, T).

    ``residual``: ``e = logp_full - logp_ablated``; ``full``: ``delta_F = logp_full - logp_student``.
    Padding positions are 0.
    """
    sel = inputs.selected.bool().unsqueeze(1) & inputs.mask.bool()
    if spec.signal == "residual":
        full, ablated = _require(inputs, "logp_full", "logp_ablated")
        e = observation_residual(full[sel], ablated[sel])
    elif spec.signal == "full":
        full, student = _require(inputs, "logp_full", "logp_student")
        e = observation_residual(full[sel], student[sel])
    else:
        raise ValueError(f"method {spec.name!r} has no token signal")
    out = torch.zeros(inputs.mask.shape, dtype=e.dtype, device=e.device)
    out[sel] = e
    return out


def _grpo_rule(spec: MethodSpec, inputs: TokenInputs, **_: float) -> torch.Tensor:
    return inputs.adv.unsqueeze(1).expand(inputs.mask.shape).clone()


def _ocsd_rule(spec: MethodSpec, inputs: TokenInputs, *, beta: float, **_: float) -> torch.Tensor:
    q = calibration_signal(token_signal(spec, inputs))
    return ocsd_token_advantage(inputs.adv, q, inputs.selected.bool(), beta, sign_align=spec.sign_align)


def _rlsd_rule(spec: MethodSpec, inputs: TokenInputs, *, rlsd_lambda: float, rlsd_clip_eps: float,
               **_: float) -> torch.Tensor:
    teacher, student = _require(inputs, "logp_teacher", "logp_student")
    return rlsd_token_advantage(inputs.adv, teacher, student, inputs.mask, rlsd_lambda, rlsd_clip_eps)


ADVANTAGE_RULES: dict[str, Callable[..., torch.Tensor]] = {
    "grpo": _grpo_rule,
    "ocsd": _ocsd_rule,
    "rlsd": _rlsd_rule,
}
"""Token-advantage rules by name: ``rule(spec, inputs, **hyper) -> (S, T)``."""


def token_advantages(spec: MethodSpec, inputs: TokenInputs, *, beta: float = PAPER_BETA, rlsd_lambda: float = 0.0,
                     rlsd_clip_eps: float = 0.2) -> torch.Tensor:
    """Token advantages of a method, shape (S, T), 0 on padding.

    Parameters
    ----------
    spec : MethodSpec
    inputs : TokenInputs
    beta : float
        OCSD modulation strength.
    rlsd_lambda, rlsd_clip_eps : float
        RLSD's mixing weight (already decayed for the current step) and clip range.
    """
    out = ADVANTAGE_RULES[spec.advantage](spec, inputs, beta=beta, rlsd_lambda=rlsd_lambda,
                                          rlsd_clip_eps=rlsd_clip_eps)
    return torch.where(inputs.mask.bool(), out, torch.zeros_like(out))


def _gated_distill(spec: MethodSpec, logp_student: torch.Tensor, logp_teacher: torch.Tensor, *,
                   gate_beta: float) -> torch.Tensor:
    beta_g = spec.gate_beta if spec.gate_beta is not None else gate_beta
    return gated_distill_loss_matrix(logp_student, logp_teacher, beta_g)


AUX_LOSSES: dict[str, Callable[..., torch.Tensor]] = {"gated_distill": _gated_distill}
"""Auxiliary per-token losses by name: ``loss(spec, logp_student, logp_teacher, **hyper) -> (N, T)``."""


def auxiliary_loss_matrix(spec: MethodSpec, logp_student: torch.Tensor, logp_teacher: torch.Tensor, *,
                          gate_beta: float = 5.0) -> torch.Tensor | None:
    """The method's per-token auxiliary loss (aggregate with verl's ``agg_loss``), or None."""
    if spec.aux_loss is None:
        return None
    return AUX_LOSSES[spec.aux_loss](spec, logp_student, logp_teacher, gate_beta=gate_beta)


for _spec in (
    MethodSpec("grpo", description="GRPO: one trajectory advantage for every token"),
    MethodSpec("ocsd", signal="residual", advantage="ocsd",
               description="OCSD: A(1 + beta sgn(A) tanh(e/2)) on top-rho high-NLL steps"),
    MethodSpec("ocsd_no_ablated", signal="full", advantage="ocsd",
               description="OCSD w/o Ablated view: Full support delta_F in place of the residual"),
    MethodSpec("ocsd_random_select", selection="random", signal="residual", advantage="ocsd",
               description="OCSD w/ random step selection of the same size"),
    MethodSpec("ocsd_all_steps", selection="all", signal="residual", advantage="ocsd",
               description="OCSD on every step (no NLL-guided selection)"),
    MethodSpec("ocsd_no_sign", signal="residual", advantage="ocsd", sign_align=False,
               description="OCSD w/o sign alignment: A(1 + beta q)"),
    # SDAR examples/opsd_trainer/run_alfworld_qwen3.sh: pg_loss_coef=0 (line 61); gate_beta=5.0 (line 8) and
    # sdar_coef=0.01 (line 7) are the config's gate_beta and sdar_coef (None here)
    MethodSpec("opsd", policy_gradient=False, aux_loss="gated_distill", privileged_teacher=True,
               description="OPSD: gated self-distillation from the privileged-context teacher, no RL term"),
    # SDAR examples/grpo_opsd_trainer/run_alfworld_qwen3.sh: gate_beta=0.0 (line 8); sdar_coef=0.01 (line 7) is
    # the config's; PG term on (pg_loss_coef unset, default 1.0 at verl/workers/actor/dp_actor.py:412)
    MethodSpec("grpo_opsd", aux_loss="gated_distill", gate_beta=0.0, privileged_teacher=True,
               description="GRPO+OPSD: GRPO plus the ungated distillation term"),
    # SDAR examples/rlsd_trainer/run_alfworld_qwen3.sh:56-58: lambda 0.5, warmdown 100, clip 0.2 (the config's)
    MethodSpec("rlsd", advantage="rlsd", privileged_teacher=True,
               description="RLSD: teacher-weighted token advantages, lambda decayed to 0"),
    # SDAR examples/sdar_trainer/run_alfworld_qwen3.sh: gate_beta=5.0 (line 8), sdar_coef=0.01 (line 7), the
    # config's; PG term on (pg_loss_coef unset)
    MethodSpec("sdar", aux_loss="gated_distill", privileged_teacher=True,
               description="SDAR: GRPO plus the sigmoid-gated distillation term"),
):
    register_method(_spec)
