"""Where a run's tasks come from: real ALFWorld data or games generated from the alfworld package.

``GameSource.from_config`` uses real games when ``data`` (or ``$ALFWORLD_DATA``) is set, else it
generates training and validation games once into ``games_dir`` (disjoint generator seeds per
split) and reuses them on later runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from training.envs.alfworld import AlfworldBatchEnv, GameSpec, generate_games, load_games
from training.envs.alfworld_game import AlfworldDataError


def _generated(folder: Path, n: int, split: str, seed: int, progress: bool) -> list[GameSpec]:
    try:
        have = load_games(folder, split=split)
    except AlfworldDataError:
        have = []
    mine = sorted((s for s in have if f"trial_G{seed}_" in s.path), key=lambda s: s.path)
    if len(mine) >= n:
        return mine[:n]
    return generate_games(folder, n, seed=seed, split=split, progress=progress)


@dataclass
class GameSource:
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

    @classmethod
    def from_config(cls, cfg) -> "GameSource":
        """Real games from ``cfg.data_root`` or generated games in ``cfg.games_dir``."""
        root = cfg.data_root
        if root:
            return cls(load_games(root, split=cfg.train_split), load_games(root, split=cfg.val_split),
                       f"real:{root}")
        folder = Path(cfg.games_dir)
        train = _generated(folder, cfg.n_train_games, "train", cfg.seed, cfg.progress)
        valid = _generated(folder, cfg.n_val_games, "valid", cfg.seed, cfg.progress)
        return cls(train, valid, f"generated:{folder}")

    def sample_train(self, rng: np.random.Generator, n: int) -> list[GameSpec]:
        """``n`` distinct training games (with replacement only when there are fewer than ``n``)."""
        replace = n > len(self.train)
        return [self.train[i] for i in rng.choice(len(self.train), size=n, replace=replace)]

    def validation(self, n: int) -> list[GameSpec]:
        """The first ``n`` validation games (a fixed set, so validations are comparable)."""
        return self.valid[: min(n, len(self.valid))]

    @staticmethod
    def make_env(specs: Sequence[GameSpec], *, max_steps: int, workers: int = 0, seed: int = 0) -> AlfworldBatchEnv:
        """A batched environment with one game per entry of ``specs``."""
        return AlfworldBatchEnv(list(specs), max_steps=max_steps, num_workers=workers, seed=seed)

    def describe(self) -> dict:
        """What run.json records about the games."""
        return {"origin": self.origin, "n_train": len(self.train), "n_valid": len(self.valid)}
