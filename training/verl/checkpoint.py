"""Replay scores beside every verl checkpoint, through ``trainer.checkpoint_callback_class``.

verl's v1 trainer calls the callback named by ``trainer.checkpoint_callback_class`` on the driver after each
checkpoint save, with the ``global_step_N`` folder it wrote. The OCSD trainer holds the records of the step it
is about to save (:func:`hold_replay`: the ``steps`` and ``tokens`` tables and ``meta.json`` of the replay-score
format, ``docs/replay-format.md``); :class:`ReplayCheckpointCallback` writes them to ``global_step_N/replay/`` with
:func:`ocsd.records.write_replay` (``meta.json`` last), so every diagnostic and figure reads a verl run as it
reads a single-device one. The run folder's ``run.json`` is written at the first save when it is missing.

Set it with the Hydra override
``trainer.checkpoint_callback_class=training.verl.checkpoint.ReplayCheckpointCallback``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from verl.trainer.ppo.checkpoint_callback import CheckpointCallback

from ocsd.records import RUN_FILE, RunWriter, write_replay

__all__ = ["PENDING_ATTRIBUTE", "PendingReplay", "ReplayCheckpointCallback", "hold_replay"]

PENDING_ATTRIBUTE = "ocsd_pending_replay"
"""Attribute of the trainer that holds the :class:`PendingReplay` of the step to be saved."""


@dataclass(frozen=True)
class PendingReplay:
    """The replay-score records of one training step, waiting for its checkpoint.

    Attributes
    ----------
    global_step : int
    steps, tokens : pandas.DataFrame
        The checkpoint's tables (:data:`ocsd.records.STEP_COLUMNS`, :data:`ocsd.records.TOKEN_COLUMNS`).
    meta : dict
        Its ``meta.json`` (:data:`ocsd.records.META_KEYS` but ``schema_version``).
    run_info : dict
        What ``run.json`` holds (written once, at the first save).
    """

    global_step: int
    steps: pd.DataFrame
    tokens: pd.DataFrame
    meta: dict
    run_info: dict


def hold_replay(trainer, pending: PendingReplay) -> None:
    """Keep ``pending`` on ``trainer`` until its checkpoint is saved (the newest step replaces an older one)."""
    setattr(trainer, PENDING_ATTRIBUTE, pending)


class ReplayCheckpointCallback(CheckpointCallback):
    """Writes the held replay records into ``global_step_N/replay/`` after verl saves ``global_step_N``.

    A save without held records of that step (a run that writes no replay scores, or a step saved before any
    was held) writes nothing. A failure to write raises: verl then stops training, as it does for any
    checkpoint callback error, rather than lose the records.
    """

    def on_save(self, trainer, global_step: int, checkpoint_dir: str, async_save: bool = False, **kwargs) -> None:
        pending = getattr(trainer, PENDING_ATTRIBUTE, None)
        if not isinstance(pending, PendingReplay) or pending.global_step != int(global_step):
            return
        folder = Path(checkpoint_dir)
        if not (folder.parent / RUN_FILE).exists():
            RunWriter(folder.parent).write_run_json(pending.run_info)
        write_replay(folder / "replay", pending.steps, pending.tokens, pending.meta)
        setattr(trainer, PENDING_ATTRIBUTE, None)
