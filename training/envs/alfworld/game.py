"""ALFWorld game files: specs, the data-folder loader and one playable game on the real engine.

Games are TextWorld PDDL files (``*.tw-pddl``: JSON with ``pddl_domain``, ``grammar``,
``pddl_problem``, ``solvable``) played by :class:`textworld.envs.pddl.PddlEnv` wrapped in
alfworld's ``AlfredDemangler`` and ``AlfredInfos`` (:mod:`training.envs.alfworld.engine`). See
:mod:`training.envs.alfworld` for the public interface.

Progress rule (used by the step labels, whose text rules are the ``labels`` of the registry's
ALFWorld entry, :data:`ocsd.environments.alfworld.ALFWORLD`): the engine's world state is its set
of PDDL facts, without the bookkeeping facts ``checked`` (set by ``look``, ``inventory`` and
``examine``) and fast-downward's derived ``new-axiom@`` facts. An accepted step makes *progress* when it reaches a
world state that has not occurred earlier in the episode (the initial state included). Moving
to a new place, opening, taking, putting, heating, cleaning, cooling and switching a lamp on are
progress the first time; looking, examining, inventory and undoing a change (closing what was
just opened, walking back) are not.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ocsd.environments.alfworld import ALFWORLD
from training.envs.runtime import GENERATED
from training.envs.steps import Observation, StepResult
from training.envs.alfworld.engine import (AlfworldDataError, close_engine, load_game, make_engine,
                                           memoized_translation)

_LABELS = ALFWORLD.labels

# alfworld's ``alfworld.info`` sets ``ALFWORLD_DATA`` to this folder when it is unset.
_ALFWORLD_DEFAULT_DATA = os.path.expanduser("~/.cache/alfworld")


def user_data_folder() -> str | None:
    """The user's ``$ALFWORLD_DATA``, or None.

    Importing alfworld sets the variable to ``~/.cache/alfworld`` when it is unset; that value counts
    only when the folder holds game files (a user's ``alfworld-download`` puts them there).
    """
    value = os.environ.get("ALFWORLD_DATA")
    if not value:
        return None
    folder = Path(value).expanduser()
    if str(folder) == _ALFWORLD_DEFAULT_DATA and not (folder.is_dir() and next(folder.rglob("*.tw-pddl"), None)):
        return None
    return value


NO_DATA = ("data: no games named: set data=DIR (or $ALFWORLD_DATA) to the real ALFWorld games, the folder holding "
           "json_2.1.1/<split>/ that `alfworld-download` fills (~/.cache/alfworld; nothing is downloaded here), "
           "or data=generated for games generated into games_dir")
"""The error when neither ``data`` nor ``$ALFWORLD_DATA`` says where the games come from."""


def named_data_folder(data: str | None) -> str | None:
    """The real-data folder a ``data`` setting names (``$ALFWORLD_DATA`` when unset); None for ``generated``.

    Raises
    ------
    AlfworldDataError
        :data:`NO_DATA`, when neither ``data`` nor ``$ALFWORLD_DATA`` is set (generated games are never a silent
        fallback).
    """
    if data == GENERATED:
        return None
    root = data or user_data_folder()
    if root is None:
        raise AlfworldDataError(NO_DATA)
    return root

TASK_TYPES: dict[str, str] = {
    "pick_and_place_simple": "pick",
    "look_at_obj_in_light": "look",
    "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
    "pick_two_obj_and_place": "pick2",
}
"""ALFWorld task folder prefix -> short task type of docs/replay-format.md."""

SHORT_TASK_TYPES: tuple[str, ...] = tuple(TASK_TYPES.values())
REQUIRED_KEYS: tuple[str, ...] = ("pddl_domain", "grammar", "pddl_problem")
_TASK_RE = re.compile(r"Your task is to: (.*?)\s*\"")
_IGNORED_PREDICATES = ("checked",)


@dataclass(frozen=True)
class GameSpec:
    """One ALFWorld game.

    Attributes
    ----------
    path : str
        The ``.tw-pddl`` file.
    task_type : str
        ``pick``, ``look``, ``clean``, ``heat``, ``cool`` or ``pick2``.
    task : str
        Task text shown to the agent (``"put a clean mug in coffeemachine"``).
    split : str
        Split folder (``valid_seen``, ``train``, ...) or the folder name of a flat folder.
    name : str
        Short identifier: ``<task folder>/<trial>`` or the file stem.
    """

    path: str
    task_type: str
    task: str
    split: str
    name: str

    def __post_init__(self) -> None:
        if self.task_type not in SHORT_TASK_TYPES:
            raise ValueError(f"GameSpec {self.path}: unknown task_type {self.task_type!r}; "
                             f"expected one of {SHORT_TASK_TYPES}")


@dataclass
class GameScan:
    """Result of scanning a data folder: playable specs and skipped unsolvable files."""

    specs: list[GameSpec] = field(default_factory=list)
    unsolvable: list[str] = field(default_factory=list)


def data_root(path: str | os.PathLike | None = None) -> Path:
    """Folder of ALFWorld game files: ``path``, else ``$ALFWORLD_DATA``.

    Raises
    ------
    AlfworldDataError
        When neither is given or the folder does not exist.
    """
    chosen = path if path is not None else user_data_folder()
    if chosen is None:
        raise AlfworldDataError("no ALFWorld data folder: pass --data DIR or set ALFWORLD_DATA "
                                "(the ALFWorld release's json_2.1.1 layout or a flat folder of "
                                ".tw-pddl files; `python -m training.envs.alfworld generate` "
                                "writes one)")
    root = Path(chosen).expanduser()
    if not root.is_dir():
        raise AlfworldDataError(f"ALFWorld data folder {root} does not exist")
    return root


def read_game_file(path: str | os.PathLike) -> dict:
    """Read and check one ``.tw-pddl`` file; errors name the file and the problem."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise AlfworldDataError(f"game file {path} does not exist") from None
    except json.JSONDecodeError as exc:
        raise AlfworldDataError(f"game file {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise AlfworldDataError(f"game file {path} must hold a JSON object, got {type(data).__name__}")
    missing = [k for k in REQUIRED_KEYS if not isinstance(data.get(k), str)]
    if missing:
        raise AlfworldDataError(f"game file {path} lacks the string field(s) {missing}")
    return data


def task_text_of(grammar: str) -> str:
    """Task text from a game grammar (``"Your task is to: ..."``), without the final period."""
    match = _TASK_RE.search(grammar)
    if match is None:
        return ""
    return match.group(1).rstrip(".").strip()


def task_type_of_goal(pddl_problem: str) -> str:
    """Task type read from the PDDL goal (used where no task folder name says it)."""
    idx = pddl_problem.find("(:goal")
    goal = pddl_problem[idx:] if idx >= 0 else pddl_problem
    if "isToggled" in goal:
        return "look"
    if "isClean" in goal:
        return "clean"
    if "isHot" in goal:
        return "heat"
    if "isCool" in goal:
        return "cool"
    if re.search(r"\(not\s*\(=\s*\?o1\s+\?o2\)\)", goal):
        return "pick2"
    return "pick"


def _task_type_of_folder(folder: str) -> str | None:
    prefix = folder.split("-", 1)[0]
    return TASK_TYPES.get(prefix)


def spec_of_file(path: str | os.PathLike, data: dict | None = None) -> GameSpec:
    """Build the :class:`GameSpec` of one game file (json_2.1.1 layout or flat)."""
    path = Path(path)
    data = read_game_file(path) if data is None else data
    task = task_text_of(data["grammar"])
    trial, task_dir = path.parent, path.parent.parent
    folder_type = _task_type_of_folder(task_dir.name)
    if folder_type is not None:
        return GameSpec(str(path), folder_type, task, task_dir.parent.name,
                        f"{task_dir.name}/{trial.name}")
    meta = data.get("generator") if isinstance(data.get("generator"), dict) else {}
    split = str(meta.get("split") or path.parent.name)
    return GameSpec(str(path), task_type_of_goal(data["pddl_problem"]), task, split, path.stem)


def scan_games(root: str | os.PathLike | None = None, *, split: str | None = None,
               task_types: tuple[str, ...] | None = None) -> GameScan:
    """Find the solvable games under a data folder.

    Parameters
    ----------
    root : path, optional
        A folder holding ``json_2.1.1/<split>/<task>/<trial>/game.tw-pddl`` (at any depth) or a
        flat folder of ``*.tw-pddl`` files; default ``$ALFWORLD_DATA``.
    split : str, optional
        Keep only games of this split (``valid_seen``, ``train``, ...).
    task_types : tuple of str, optional
        Keep only these short task types.

    Returns
    -------
    GameScan
        ``specs`` sorted by path; ``unsolvable`` lists files marked ``"solvable": false``.
    """
    base = data_root(root)
    if task_types is not None:
        bad = [t for t in task_types if t not in SHORT_TASK_TYPES]
        if bad:
            raise AlfworldDataError(f"unknown task type(s) {bad}; expected {SHORT_TASK_TYPES}")
    scan = GameScan()
    for path in sorted(base.rglob("*.tw-pddl")):
        data = read_game_file(path)
        spec = spec_of_file(path, data)
        if split is not None and spec.split != split:
            continue
        if task_types is not None and spec.task_type not in task_types:
            continue
        if data.get("solvable") is False:
            scan.unsolvable.append(str(path))
            continue
        scan.specs.append(spec)
    return scan


def load_games(root: str | os.PathLike | None = None, *, split: str | None = None,
               task_types: tuple[str, ...] | None = None) -> list[GameSpec]:
    """Solvable games under ``root`` (see :func:`scan_games`); raises when none are found."""
    scan = scan_games(root, split=split, task_types=task_types)
    if not scan.specs:
        where = data_root(root)
        raise AlfworldDataError(f"no solvable .tw-pddl games under {where}"
                                + (f" for split {split!r}" if split else "")
                                + f" ({len(scan.unsolvable)} unsolvable skipped)")
    return scan.specs


# ---------------------------------------------------------------------------------------------
# Playing a game


def _world_state(facts) -> frozenset:
    return frozenset(str(f) for f in facts
                     if f.name not in _IGNORED_PREDICATES and not f.name.startswith("new-axiom@"))


class AlfworldGame:
    """One ALFWorld game on the real engine with a step cap and per-step labels.

    Parameters
    ----------
    spec : GameSpec or path
        The game to play.
    max_steps : int
        Step cap; the step that reaches it ends the episode with ``truncated=True``.
    """

    def __init__(self, spec: GameSpec | str | os.PathLike, *, max_steps: int = ALFWORLD.max_steps) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.spec = spec if isinstance(spec, GameSpec) else spec_of_file(spec)
        self.max_steps = int(max_steps)
        read_game_file(self.spec.path)
        self._env = make_engine()
        load_game(self._env, self.spec.path)
        self._state = None
        self._seen: set[frozenset] = set()
        self._steps = 0
        self._done = True
        self._won = False

    def reset(self) -> Observation:
        """Start a fresh episode and return its first observation."""
        with memoized_translation():
            self._state = self._env.reset()
        self._seen = {_world_state(self._state["_facts"])}
        self._steps, self._done, self._won = 0, False, False
        return Observation(task=self.spec.task, task_type=self.spec.task_type,
                           text=self._state.feedback, admissible=list(self._state["admissible_commands"]),
                           game=self.spec.path, split=self.spec.split)

    @property
    def done(self) -> bool:
        return self._done

    def step(self, action: str) -> StepResult:
        """Execute ``action``; a done game ignores it and returns an inactive result."""
        action = str(action)
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            return StepResult.inactive(action, operator=_LABELS.operator_of(action), step=self._steps, won=self._won)
        admissible = action.strip() in self._state["admissible_commands"]
        self._state, _, _ = self._env.step(action)
        self._steps += 1
        world = _world_state(self._state["_facts"])
        progressed = admissible and world not in self._seen
        self._seen.add(world)
        feedback = self._state.feedback
        self._won = bool(self._state["won"])
        truncated = (not self._won) and self._steps >= self.max_steps
        self._done = self._won or truncated
        return StepResult(action=action, obs=feedback, reward=1.0 if self._won else 0.0,
                          done=self._done, won=self._won,
                          admissible=list(self._state["admissible_commands"]),
                          feedback_label=_LABELS.feedback_label(admissible, feedback, progressed),
                          progress_label=_LABELS.progress_label(admissible, feedback, progressed),
                          operator=_LABELS.operator_of(action), action_admissible=admissible,
                          step=self._steps, truncated=truncated)

    def close(self) -> None:
        """Release the engine (its private copy of the planner library)."""
        env, self._env = self._env, None
        if env is not None:
            close_engine(env)


def goal_only_pickupable(pddl_problem: str) -> str:
    """The problem with ``pickupable`` kept only for objects of the goal's object types.

    The planner's uniform-cost search over every movable object of a large room can run for minutes;
    on this copy it takes seconds, and (checked by :func:`expert_walkthrough`) its plan still wins the
    full game because the removed objects never need to be moved.
    """
    goal = pddl_problem[pddl_problem.find("(:goal"):]
    goal_types = set(re.findall(r"\(objectType \?\w+ (\w+)\)", goal))
    wanted = set(re.findall(r"\(objectType (\S+) (\w+)\)", pddl_problem))
    keep = {obj for obj, kind in wanted if kind in goal_types}
    return re.sub(r"\(pickupable (\S+)\)", lambda m: m.group(0) if m.group(1) in keep else "", pddl_problem)


def _planner_walkthrough(path: str, data: dict | None = None) -> list[str]:
    env = make_engine(walkthrough=True)
    try:
        load_game(env, data if data is not None else path,
                  label=None if data is None else f"planning copy of {path}")
        try:
            with memoized_translation():
                state = env.reset()
        except KeyError as exc:
            raise AlfworldDataError(f"game file {path}: the planner found no plan "
                                    f"(KeyError {exc}); the game is unsolvable") from None
        return list(state.get("extra.walkthrough") or [])
    finally:
        close_engine(env)


def wins(path: str | os.PathLike, actions: list[str]) -> bool:
    """Whether playing ``actions`` from the start wins the game (False when it cannot be played)."""
    game = AlfworldGame(str(path), max_steps=max(1, len(actions)))
    try:
        game.reset()
        result = None
        for action in actions:
            result = game.step(action)
        return bool(result is not None and result.won)
    except AlfworldDataError:
        return False
    finally:
        game.close()


def expert_walkthrough(spec: GameSpec | str | os.PathLike) -> list[str]:
    """The planner's walkthrough of a game from its initial state (the stored one if the file has it).

    The planner first runs on :func:`goal_only_pickupable`'s copy of the problem; that plan is kept
    when it wins the full game, else the full problem is planned.

    Raises
    ------
    AlfworldDataError
        When the file cannot be loaded or the planner finds no plan.
    """
    path = spec.path if isinstance(spec, GameSpec) else str(spec)
    data = read_game_file(path)
    if data.get("walkthrough"):
        return list(data["walkthrough"])
    quick = dict(data, pddl_problem=goal_only_pickupable(data["pddl_problem"]))
    try:
        plan = _planner_walkthrough(path, quick)
    except AlfworldDataError:
        plan = []
    if not (plan and wins(path, plan)):
        plan = _planner_walkthrough(path)
    if not plan:
        raise AlfworldDataError(f"game file {path}: the planner returned no walkthrough")
    return plan


def play(spec: GameSpec | str | os.PathLike, actions: list[str] | None = None, *,
         max_steps: int = ALFWORLD.max_steps) -> tuple[Observation, list[StepResult]]:
    """Play ``actions`` (default: the planner walkthrough) and return the transcript."""
    actions = expert_walkthrough(spec) if actions is None else list(actions)
    game = AlfworldGame(spec, max_steps=max_steps)
    try:
        first = game.reset()
        results = []
        for action in actions:
            if game.done:
                break
            results.append(game.step(action))
    finally:
        game.close()
    return first, results
