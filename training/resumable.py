"""Which checkpoints of a run a training run can resume from: complete ones (``replay/meta.json`` written) whose
``actor/`` holds the trainer's state. Kept apart from :mod:`training.trainer` so that :mod:`training.resume_pack`,
which a GPU machine runs before its stack is on the path, reads the same rule without importing the trainer."""

from __future__ import annotations

import os
from pathlib import Path

from ocsd.records.checkpoint import checkpoint_dirs, checkpoint_folders

__all__ = ["STATE_FILE", "resumable_checkpoints"]

#: the trainer's state (optimizer, master weights, step) in a checkpoint's ``actor/``
STATE_FILE = "trainer_state.pt"


def resumable_checkpoints(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """``(N, global_step_N)`` of every complete checkpoint of ``run_dir`` with ``actor/`` + :data:`STATE_FILE`, by N;
    a half-written checkpoint (weights saved, replay scores not yet) is passed over."""
    complete = set(checkpoint_folders(run_dir, warn=False))
    return [(n, path) for n, path in checkpoint_dirs(run_dir)
            if path in complete and (path / "actor" / STATE_FILE).is_file()]
