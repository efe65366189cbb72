"""ALFWorld on the real engine: game files, batched environments, generated games, labels.

Games are ALFWorld ``.tw-pddl`` files played by TextWorld's PDDL engine
(``textworld.envs.pddl.PddlEnv``) wrapped in alfworld's ``AlfredDemangler`` and ``AlfredInfos``
(``alfworld==0.4.2``, ``textworld[pddl]==1.7.0``).

Interface
---------
``GameSpec(path, task_type, task, split, name)``
    One game. ``task_type`` is ``pick``, ``look``, ``clean``, ``heat``, ``cool`` or ``pick2``
    (from the task folder name of the release layout, else from the PDDL goal).
``load_games(root=None, *, split=None, task_types=None) -> list[GameSpec]``
    Solvable games under ``root`` (default ``$ALFWORLD_DATA``): the release layout
    ``json_2.1.1/<split>/<task>/<trial>/game.tw-pddl`` or a flat folder of ``*.tw-pddl`` files.
    ``scan_games`` also returns the skipped unsolvable files.
``AlfworldBatchEnv(specs_per_env, *, max_steps=50, num_workers=0, seed=0)``
    ``reset(seed=None) -> list[Observation]`` (``task``, ``task_type``, ``text``,
    ``admissible``); ``step(actions) -> list[StepResult]`` with ``obs``, ``reward`` (1.0 on the
    winning step else 0.0), ``done``, ``won``, ``admissible`` (next step's commands),
    ``feedback_label``, ``progress_label``, ``operator``, ``action_admissible``, ``truncated``
    and ``active`` (False once the environment was done: it ignores further actions).
    ``close()`` stops workers. The trainer builds the G copies of each of B tasks.
``AlfworldGame(spec, *, max_steps=50)``
    One game with the same ``reset``/``step``.
``expert_walkthrough(spec) -> list[str]`` / ``play(spec, actions=None)``
    The planner's walkthrough, and a played transcript.
``generate_games(out_dir, n, *, seed=0, split="train")``
    Real ``.tw-pddl`` games from the floor plans shipped with alfworld
    (:mod:`training.envs.alfworld.gen`), saved in the release layout.
``GameSource`` (:mod:`training.envs.alfworld.tasks`)
    A run's training and validation games: real games of a data folder, or generated ones.
``RUNTIME`` (:mod:`training.envs.alfworld.runtime`)
    What the environment registry's ALFWorld entry names as its runtime: task loading, evaluation
    tasks and metrics.

Labels (paper appendix "Local-Feedback Labels", the text rules and the operators are the ``labels``
of the registry's entry :data:`ocsd.environments.alfworld.ALFWORLD`): ``invalid`` when the command
is not admissible or the feedback contains a no-effect template; ``valid`` when it is accepted with
progress; else ``ambiguous``. Progress: the step reaches a world state (the engine's PDDL facts, less the
``checked`` bookkeeping of look/examine/inventory) not seen earlier in the episode. The reward
is 1 on success else 0; the trainer subtracts its invalid-action penalty (``InvalidPenalty``).

Commands (:mod:`training.envs.alfworld.__main__`; a bad flag, an ``--out`` that is a file, a game file that is a
folder or not text: one ``error:`` line and exit status 2, before any work)::

    python -m training.envs.alfworld generate --out DIR --n 200 --seed 0 [--split train]
    python -m training.envs.alfworld play GAMEFILE [--actions "a; b; ..."]
    python -m training.envs.alfworld list [--data DIR] [--split valid_seen]
"""

from __future__ import annotations

from dataclasses import dataclass

from training.envs.alfworld.batch import AlfworldBatchEnv
from training.envs.alfworld.engine import AlfworldDataError
from training.envs.alfworld.game import (SHORT_TASK_TYPES, TASK_TYPES, AlfworldGame, GameScan, GameSpec,
                                         Observation, StepResult, data_root, expert_walkthrough, load_games,
                                         play, read_game_file, scan_games, spec_of_file, task_type_of_goal)
from training.envs.alfworld.gen import SPLITS, generate_game, generate_games

__all__ = [
    "AlfworldBatchEnv", "AlfworldDataError", "AlfworldGame", "GameScan", "GameSpec", "InvalidPenalty",
    "Observation", "SHORT_TASK_TYPES", "SPLITS", "StepResult", "TASK_TYPES",
    "data_root", "expert_walkthrough", "generate_game", "generate_games", "load_games",
    "play", "read_game_file", "scan_games", "spec_of_file", "task_type_of_goal",
]


@dataclass(frozen=True)
class InvalidPenalty:
    """Invalid-action penalty the trainer adds to the 0/1 success reward.

    Attributes
    ----------
    coef : float
        Subtracted once per step whose ``feedback_label`` is ``invalid`` (0.1 in SDAR's protocol).
    """

    coef: float = 0.1

    def __post_init__(self) -> None:
        if not self.coef >= 0.0:
            raise ValueError(f"InvalidPenalty.coef must be >= 0, got {self.coef}")

    def __call__(self, success_reward: float, n_invalid: int) -> float:
        """Shaped trajectory reward: ``success_reward - coef * n_invalid``."""
        if n_invalid < 0:
            raise ValueError(f"n_invalid must be >= 0, got {n_invalid}")
        return float(success_reward) - self.coef * int(n_invalid)
