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
    (:mod:`training.envs.alfworld_gen`), saved in the release layout.
``RUNTIME`` (:mod:`training.envs.alfworld_runtime`)
    What the environment registry's ALFWorld entry names as its runtime: task loading, evaluation
    tasks and metrics.

Labels (paper appendix "Local-Feedback Labels", the text rules and the operators are the ``labels``
of the registry's entry :data:`ocsd.environments.alfworld.ALFWORLD`): ``invalid`` when the command
is not admissible or the feedback contains a no-effect template; ``valid`` when it is accepted with
progress; else ``ambiguous``. Progress: the step reaches a world state (the engine's PDDL facts, less the
``checked`` bookkeeping of look/examine/inventory) not seen earlier in the episode. The reward
is 1 on success else 0; the trainer subtracts its invalid-action penalty (``InvalidPenalty``).

Commands (a bad flag, an ``--out`` that is a file, a game file that is a folder or not text: one
``error:`` line and exit status 2, before any work)::

    python -m training.envs.alfworld generate --out DIR --n 200 --seed 0 [--split train]
    python -m training.envs.alfworld play GAMEFILE [--actions "a; b; ..."]
    python -m training.envs.alfworld list [--data DIR] [--split valid_seen]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ocsd.cli import output_folder, positive_int
from ocsd.environments.alfworld import ALFWORLD
from training.envs.alfworld_batch import AlfworldBatchEnv
from training.envs.alfworld_engine import AlfworldDataError
from training.envs.alfworld_game import (SHORT_TASK_TYPES, TASK_TYPES, AlfworldGame, GameScan, GameSpec,
                                         Observation, StepResult, data_root, expert_walkthrough, load_games,
                                         play, read_game_file, scan_games, spec_of_file, task_type_of_goal)
from training.envs.alfworld_gen import SPLITS, generate_game, generate_games

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


def _task_types(text: str) -> tuple[str, ...]:
    """``--task-types``: comma-separated short task types, each known."""
    types = tuple(t.strip() for t in text.split(","))
    unknown = [t for t in types if t not in SHORT_TASK_TYPES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown task type(s) {unknown}; known: {','.join(SHORT_TASK_TYPES)}")
    return types


def _game_file(text: str) -> str:
    """``GAMEFILE``: not a folder, and text (a missing file is reported when it is read)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a folder; give a .tw-pddl game file")
    if path.is_file():
        try:
            path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError) as exc:
            raise argparse.ArgumentTypeError(f"game file {path} cannot be read as text ({type(exc).__name__})")
    return text


def _cmd_generate(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    specs = generate_games(args.out, args.n, seed=args.seed, split=args.split, task_types=args.task_types,
                           command_style=args.command_style)
    dt = time.perf_counter() - t0
    counts = {t: sum(s.task_type == t for s in specs) for t in SHORT_TASK_TYPES}
    print(f"wrote {len(specs)} games to {args.out}/json_2.1.1/{args.split} in {dt:.1f} s "
          f"({dt / len(specs):.2f} s/game): {counts}")
    return 0


def _cmd_play(args: argparse.Namespace) -> int:
    actions = None
    if args.actions is not None:
        actions = [a.strip() for a in args.actions.split(";") if a.strip()]
    first, results = play(args.gamefile, actions, max_steps=args.max_steps)
    print(first.text)
    print(f"[task_type={first.task_type}]")
    for r in results:
        print(f"> {r.action}")
        print(r.obs)
        print(f"  [operator={r.operator} admissible={r.action_admissible} "
              f"feedback={r.feedback_label} progress={r.progress_label} reward={r.reward:g} "
              f"done={r.done}]")
    print("won" if results and results[-1].won else "not won")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    scan = scan_games(args.data, split=args.split)
    for s in scan.specs:
        print(f"{s.split}\t{s.task_type}\t{s.task}\t{s.path}")
    print(f"{len(scan.specs)} solvable games, {len(scan.unsolvable)} unsolvable skipped",
          file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.envs.alfworld", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="generate solvable .tw-pddl games")
    g.add_argument("--out", required=True, type=output_folder,
                   help="output folder (games go to OUT/json_2.1.1/SPLIT/...)")
    g.add_argument("--n", type=positive_int("--n"), default=200, help="number of games")
    g.add_argument("--seed", type=int, default=0, help="generator seed")
    g.add_argument("--split", default="train", choices=tuple(SPLITS), help="split to write")
    g.add_argument("--task-types", type=_task_types, default=None,
                   help="comma-separated subset of " + ",".join(SHORT_TASK_TYPES))
    g.add_argument("--command-style", default="put", choices=("put", "move"),
                   help="'put X in/on Y' as the release's games (default) or alfworld 0.4.2's 'move X to Y'")
    p = sub.add_parser("play", help="play a game file and print the labelled transcript")
    p.add_argument("gamefile", type=_game_file)
    p.add_argument("--actions", default=None, help='"a; b; ..." (default: the planner walkthrough)')
    p.add_argument("--max-steps", type=positive_int("--max-steps"), default=ALFWORLD.max_steps)
    ls = sub.add_parser("list", help="list the solvable games of a data folder")
    ls.add_argument("--data", default=None, help="data folder (default $ALFWORLD_DATA)")
    ls.add_argument("--split", default=None)
    args = parser.parse_args(argv)
    try:
        return {"generate": _cmd_generate, "play": _cmd_play, "list": _cmd_list}[args.cmd](args)
    except AlfworldDataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
