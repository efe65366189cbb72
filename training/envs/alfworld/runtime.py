"""ALFWorld's runtime: the engine objects that the registry's ``alfworld`` entry names.

Tasks are real games of a data folder or generated games (:class:`training.envs.alfworld.tasks.GameSource`);
evaluation plays the first ``n`` games of a validation split and reports success overall and per task
type (:func:`training.envs.runtime.success_metrics`). Its experts, for warm starts, are ``search``, which looks
through the receptacles in a plausible order until it finds what the task needs
(:func:`training.envs.alfworld.search.search_expert`), and ``walkthrough``, the planner's plan, which knows where
everything is (:func:`training.envs.alfworld.expert.walkthrough_expert`); both give templated reasons.
"""

from __future__ import annotations

from training.envs.alfworld.engine import AlfworldDataError
from training.envs.alfworld.expert import demonstration, walkthrough_expert
from training.envs.alfworld.search import search_expert
from training.envs.alfworld.tasks import GameSource
from training.envs.runtime import EnvironmentRuntime, success_metrics

__all__ = ["EXPERTS", "RUNTIME", "evaluation_tasks"]


def evaluation_tasks(cfg, split: str | None, n: int | None) -> tuple[GameSource, str]:
    """The first ``n`` games of ``split`` (default the config's ``val_split``; ``data=generated``: the
    generated validation games), and where they came from (``real:<folder>:<split>`` or
    ``generated:<folder>:valid``). ``n=None``: every game of the split."""
    games = GameSource.from_config(cfg, train=False, val_split=split, n_valid=n)
    origin = f"{games.origin}:{split or cfg.val_split}" if games.real else f"{games.origin}:valid"
    return games, origin


EXPERTS = {"search": search_expert, "walkthrough": walkthrough_expert}
"""ALFWorld's experts by name (the ``expert`` setting of :mod:`training.sft`)."""

RUNTIME = EnvironmentRuntime(task_source=GameSource.from_config, evaluation_tasks=evaluation_tasks,
                             metrics=success_metrics, data_error=AlfworldDataError, demonstration=demonstration,
                             experts=EXPERTS)
"""The runtime of :data:`ocsd.environments.alfworld.ALFWORLD`."""
