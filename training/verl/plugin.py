"""Registration of the suite in verl, loaded in every process that imports verl.

verl imports the modules of the ``verl.plugins`` entry-point group at ``import verl`` (this package declares
``ocsd = "training.verl.plugin"`` in ``pyproject.toml``); ``VERL_USE_EXTERNAL_MODULES=training.verl.plugin`` does
the same where the package is not installed. Importing this module registers the agent loop
:class:`training.verl.agent_loop.EnvironmentAgentLoop` under ``agent_name`` ``ocsd_env``, so Ray workers that
import verl find it by name.
"""

from __future__ import annotations

from training.verl import agent_loop  # noqa: F401  (registers the agent loop)
from training.verl.tasks import AGENT_NAME

__all__ = ["AGENT_NAME", "registered"]


def registered() -> bool:
    """Whether verl's agent-loop registry holds the suite's agent loop."""
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    return _agent_loop_registry.get(AGENT_NAME, {}).get("_target_") == (
        f"{agent_loop.EnvironmentAgentLoop.__module__}.{agent_loop.EnvironmentAgentLoop.__qualname__}")
