"""The engine side of a registered environment, as its registry entry's ``runtime`` names it.

An :class:`EnvironmentRuntime` is the one object that training code asks for an environment's tasks,
batched environments and evaluation: ``get_environment(cfg.env).load_runtime()`` (see
:meth:`ocsd.environments.EnvironmentSpec.load_runtime`). ALFWorld's is
:data:`training.envs.alfworld.runtime.RUNTIME`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

__all__ = ["GENERATED", "EnvironmentRuntime", "TaskLists", "print_expert_play", "step_share", "success_metrics",
           "task_type_list"]

GENERATED = "generated"
"""The ``data`` value that asks for tasks generated into ``games_dir`` instead of real data."""


def task_type_list(text: str | None) -> tuple[str, ...] | None:
    """The task types a ``task_types`` setting names (``"pick, look"`` -> ``("pick", "look")``); None when unset."""
    if text is None:
        return None
    return tuple(dict.fromkeys(kind.strip() for kind in str(text).split(",") if kind.strip()))


@dataclass(frozen=True)
class EnvironmentRuntime:
    """What training and evaluation need from an environment engine.

    Attributes
    ----------
    task_source : callable
        ``task_source(cfg, *, train=True, valid=True, val_split=None, n_valid=None)``: the run's
        training and validation tasks, an object with ``train`` and ``valid`` lists, ``sample_train``,
        ``validation``, ``describe`` and ``make_env(tasks, *, max_steps, workers, seed, reuse=None)`` (the
        batched environments; ``reuse``, an earlier one, may be reloaded instead of built anew), as
        :class:`training.envs.alfworld.tasks.GameSource`. It prints where the tasks come from and raises
        ``data_error`` when the config names no task data.
    evaluation_tasks : callable
        ``evaluation_tasks(cfg, split, n) -> (source, origin)``: a task source whose ``valid`` list holds
        the first ``n`` evaluation tasks of ``split`` (None: the config's; ``n=None``: all of them), and
        where they came from.
    metrics : callable
        ``metrics(trajectories) -> dict`` of finished evaluation trajectories; its keys include the
        metric names of the registry entry's evaluation protocol.
    data_error : type of Exception
        The error the engine raises for missing or unusable task data (a usage error, exit status 2).
    demonstration : callable or None
        ``demonstration(task) -> [(action, reason), ...]``: an expert's winning play of one task with a
        short reason per step, for supervised warm starts (:mod:`training.sft`); None when the
        environment has no expert.
    experts : dict or None
        The environment's experts by name where it has several (ALFWorld: ``search``, ``walkthrough``); the
        ``expert`` setting of :mod:`training.sft` chooses one. ``experts[name](task, seed)`` returns a play
        like ``demonstration``'s, or an expert that reacts to what it sees: ``act(observation, admissible) ->
        (action, reason)``, called with every observation of the episode (the first included), None when it has
        nothing left to do. None: ``demonstration`` is the only expert.
    """

    task_source: Callable[..., Any]
    evaluation_tasks: Callable[[Any, str | None, int | None], tuple[Any, str]]
    metrics: Callable[[Sequence], dict]
    data_error: type[Exception]
    demonstration: Callable[[Any], list[tuple[str, str]]] | None = None
    experts: dict[str, Callable[[Any, int], Any]] | None = None


class TaskLists:
    """What every task source shares: drawing training tasks, the fixed validation set, and run.json's entry.

    A task source (:class:`training.envs.alfworld.tasks.GameSource`, ...) has ``train`` and ``valid`` lists and an
    ``origin``; ``data_error`` is the error its environment raises for unusable task data.
    """

    train: list
    valid: list
    origin: str
    data_error: ClassVar[type[Exception]] = ValueError

    def sample_train(self, rng: np.random.Generator, n: int) -> list:
        """``n`` distinct training tasks (with replacement only when there are fewer than ``n``).

        Raises
        ------
        data_error
            If there is no training task.
        """
        if not self.train:
            raise self.data_error(f"no training tasks ({self.origin})")
        replace = n > len(self.train)
        return [self.train[i] for i in rng.choice(len(self.train), size=n, replace=replace)]

    def validation(self, n: int) -> list:
        """The first ``n`` validation tasks (a fixed set, so validations are comparable)."""
        return self.valid[: min(n, len(self.valid))]

    def describe(self) -> dict:
        """What run.json records about the tasks."""
        return {"origin": self.origin, "n_train": len(self.train), "n_valid": len(self.valid)}


def success_metrics(trajs: Sequence) -> dict:
    """Success overall and per task type of finished trajectories (``won``, ``task_type``, ``steps``).

    Returns
    -------
    dict
        ``n``, ``successes``, ``success_rate``, ``per_type`` {type: {n, successes, success_rate}},
        ``mean_steps``, ``well_formed_rate`` (steps whose output has a well-formed action) and
        ``invalid_action_rate`` (steps whose action the environment rejected, feedback label ``invalid``:
        not admissible or without effect; malformed outputs included).
    """
    per_type: dict[str, dict] = {}
    for t in trajs:
        row = per_type.setdefault(t.task_type, {"n": 0, "successes": 0})
        row["n"] += 1
        row["successes"] += int(bool(t.won))
    for row in per_type.values():
        row["success_rate"] = row["successes"] / row["n"]
    n = len(trajs)
    steps = [s for t in trajs for s in t.steps]
    return {"n": n, "successes": sum(int(bool(t.won)) for t in trajs),
            "success_rate": sum(int(bool(t.won)) for t in trajs) / n if n else float("nan"),
            "per_type": dict(sorted(per_type.items())),
            "mean_steps": sum(len(t.steps) for t in trajs) / n if n else float("nan"),
            "well_formed_rate": step_share(steps, lambda s: s.well_formed),
            "invalid_action_rate": step_share(steps, lambda s: s.feedback_label == "invalid")}


def step_share(steps: Sequence, test: Callable[[Any], bool]) -> float:
    """Share of ``steps`` for which ``test`` holds (nan without steps)."""
    return sum(bool(test(s)) for s in steps) / len(steps) if steps else float("nan")


def print_expert_play(source, demonstration: Callable[[Any], list[tuple[str, str]]], n: int, *, max_steps: int,
                      outcome: Callable[[Any], str], width: int = 60) -> None:
    """Play the expert on the first ``n`` validation tasks of ``source`` and print each action with its labels,
    then ``outcome(result)`` of the step that ended the episode (the environment commands' ``play``)."""
    for task in source.validation(n):
        with source.make_env([task], max_steps=max_steps) as env:
            print(f"{task.game} [{task.task_type}] {env.reset()[0].task}")
            for action, _ in demonstration(task):
                r = env.step([action])[0]
                print(f"  {action:<{width}} {r.feedback_label:<9} {r.progress_label}")
                if r.done:
                    print(f"  {outcome(r)}")
                    break

