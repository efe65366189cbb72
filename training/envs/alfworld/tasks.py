"""Where a run's tasks come from: real ALFWorld data or games generated from the alfworld package.

``GameSource.from_config`` uses real games from the folder that ``data`` (or ``$ALFWORLD_DATA``) names;
with ``data=generated`` it generates training and validation games once into ``games_dir`` (disjoint
generator seeds per split) and reuses them on later runs. With neither it refuses: generated games are
never a silent fallback. Training, collection and evaluation all get their games here, and each prints
where they came from (one line on stderr) before it starts.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from training.envs.alfworld import SHORT_TASK_TYPES, AlfworldBatchEnv, GameSpec, generate_games, load_games
from training.envs.alfworld.engine import AlfworldDataError
from training.envs.alfworld.game import named_data_folder
from training.envs.runtime import TaskLists, task_type_list


def generated_games(folder: Path, n: int, split: str, seed: int, progress: bool = True,
                    task_types: tuple[str, ...] | None = None) -> list[GameSpec]:
    """``n`` generated games of ``split`` with generator seed ``seed`` in ``folder``: the ones already
    there, else newly generated (deterministic, so regenerating writes the same games).

    Game ``i`` has task type ``task_types[i % len(task_types)]`` (default: all six in turn). Games are in
    generation order (their ``trial_G<seed>_<index>`` folder) whether they were just generated or loaded,
    so a run samples the same tasks on its first and on later invocations."""
    kinds = tuple(task_types or SHORT_TASK_TYPES)
    try:
        have = load_games(folder, split=split)
    except AlfworldDataError:
        have = []
    wanted = {f"trial_G{seed}_{i:05d}": kinds[i % len(kinds)] for i in range(n)}
    mine = sorted((s for s in have if wanted.get(Path(s.path).parent.name) == s.task_type),
                  key=lambda s: Path(s.path).parent.name)
    if len(mine) == n:
        return mine
    return generate_games(folder, n, seed=seed, split=split, task_types=kinds, progress=progress)


def _split_games(root: str, setting: str, split: str, kinds: tuple[str, ...] | None) -> list[GameSpec]:
    """The solvable games of ``split`` under ``root``; the error names the ``setting`` that chose the split."""
    try:
        return load_games(root, split=split, task_types=kinds)
    except AlfworldDataError as exc:
        raise AlfworldDataError(f"{setting}={split!r}: {exc}") from None


@dataclass
class GameSource(TaskLists):
    """Training and validation games of a run.

    Attributes
    ----------
    train, valid : list of GameSpec
    origin : str
        ``"real:<folder>"`` or ``"generated:<folder>"``.
    """

    train: list[GameSpec]
    valid: list[GameSpec]
    origin: str
    data_error = AlfworldDataError

    @classmethod
    def from_config(cls, cfg, *, train: bool = True, valid: bool = True, val_split: str | None = None,
                    n_valid: int | None = None) -> "GameSource":
        """Real games from the folder ``cfg.data`` (or ``$ALFWORLD_DATA``) names or, for ``data=generated``,
        generated games in ``cfg.games_dir``.

        ``train``/``valid`` choose which splits are loaded (or generated); ``val_split`` and
        ``n_valid`` override the config's validation split and size. Prints the games' origin and
        counts (:meth:`announce`) to stderr.

        Raises
        ------
        AlfworldDataError
            Naming ``data`` when neither it nor ``$ALFWORLD_DATA`` is set, or when the data is unusable.
        """
        root = named_data_folder(cfg.data)
        kinds = task_type_list(getattr(cfg, "task_types", None))
        if root:
            split = val_split or cfg.val_split
            source = cls(_split_games(root, "train_split", cfg.train_split, kinds) if train else [],
                         _split_games(root, "val_split", split, kinds)[:n_valid] if valid else [], f"real:{root}")
        else:
            folder = Path(cfg.games_dir)
            source = cls(generated_games(folder, cfg.n_train_games, "train", cfg.seed, cfg.progress, kinds)
                         if train else [],
                         generated_games(folder, n_valid or cfg.n_val_games, "valid", cfg.seed, cfg.progress, kinds)
                         if valid else [], f"generated:{folder}")
        print(source.announce(), file=sys.stderr)
        return source

    @property
    def real(self) -> bool:
        """Whether the games are the ALFWorld release's (not generated)."""
        return self.origin.startswith("real:")

    def announce(self) -> str:
        """One line saying where the games come from and how many there are."""
        kind = "real ALFWorld games from" if self.real else "generated games (data=generated) in"
        return (f"games: {kind} {self.origin.split(':', 1)[1]}: {len(self.train)} training, "
                f"{len(self.valid)} validation")

    @staticmethod
    def make_env(specs: Sequence[GameSpec], *, max_steps: int, workers: int = 0, seed: int = 0,
                 reuse: AlfworldBatchEnv | None = None) -> AlfworldBatchEnv:
        """A batched environment with one game per entry of ``specs``; ``reuse``, an open environment
        with ``workers`` worker processes, is reloaded with them instead of starting new processes."""
        if reuse is not None and not reuse.closed and reuse.num_workers == workers:
            return reuse.reload(list(specs), max_steps=max_steps, seed=seed)
        return AlfworldBatchEnv(list(specs), max_steps=max_steps, num_workers=workers, seed=seed)
