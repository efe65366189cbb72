"""Registration of the suite in verl, loaded in every process that imports verl.

verl imports the modules of the ``verl.plugins`` entry-point group at ``import verl`` (this package declares
``ocsd = "training.verl.plugin"`` in ``pyproject.toml``); ``VERL_USE_EXTERNAL_MODULES=training.verl.plugin`` does
the same where the package is not installed. Importing this module registers

- the agent loop :class:`training.verl.agent_loop.EnvironmentAgentLoop` under ``agent_name`` ``ocsd_env``;
- the trainer :class:`training.verl.trainer.OCSDTrainer` under ``trainer.v1.trainer_mode`` ``ocsd_sync``;
- the policy loss :func:`training.verl.losses.no_policy_gradient` under ``actor.policy_loss.loss_mode``
  ``ocsd_no_policy_gradient`` (OPSD's update, without a policy-gradient term);

so the Ray processes that import verl (the task runner, the agent-loop workers) find them by name. Where flash-attn
is not installed it also replaces verl's per-token log-prob fallback by the same computation in blocks of rows
(:mod:`training.verl.logprobs`), in every process, the actor's workers included. And it leaves cuDNN's kernel out of
torch's scaled-dot-product attention in those processes: the actor runs padded bfloat16 rows through ``sdpa``, where
that kernel's backward gave non-finite gradients on an H100 (the single-device trainer's differentiated passes leave
it out the same way, :func:`ocsd.replay.scoring.cache.differentiable_attention`). vLLM's attention is its own.
"""

from __future__ import annotations

import logging
import warnings

import torch

# Importing verl's trainer imports its optional engines and detects the accelerator. Where verl only serves the
# single-device trainer's loss functions (a CPU machine), both merely list what is absent: kept out of the output.
_PLATFORM_LOG = logging.getLogger("verl.plugin.platform.platform_manager")
_LEVEL = _PLATFORM_LOG.level
_PLATFORM_LOG.setLevel(logging.ERROR)
try:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".* engine is not available", category=UserWarning)
        # register the agent loop, the trainer and (imported by the trainer) the policy loss
        from training.verl import agent_loop, losses, trainer
finally:
    _PLATFORM_LOG.setLevel(_LEVEL)
from training.verl.logprobs import install as _install_logprobs
from training.verl.tasks import AGENT_NAME
from training.verl.trainer import TRAINER_MODE

_install_logprobs()
torch.backends.cuda.enable_cudnn_sdp(False)

__all__ = ["AGENT_NAME", "TRAINER_MODE", "registered"]


def registered() -> bool:
    """Whether verl's registries hold the suite's agent loop, trainer and policy loss."""
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.trainer.ppo.v1 import get_trainer_cls

    loop = _agent_loop_registry.get(AGENT_NAME, {}).get("_target_") == (
        f"{agent_loop.EnvironmentAgentLoop.__module__}.{agent_loop.EnvironmentAgentLoop.__qualname__}")
    return (loop and get_trainer_cls(TRAINER_MODE) is trainer.OCSDTrainer
            and get_policy_loss_fn(losses.NO_POLICY_GRADIENT) is losses.no_policy_gradient)
