"""The replay-score format's definition: folder layout, columns and their Arrow types, allowed labels,
``meta.json`` keys, and the errors a reader or writer raises.

Layout of a run folder::

    <run>/run.json                              written once at start
    <run>/metrics.jsonl                         one JSON object per training step
    <run>/global_step_<N>/replay/steps.parquet  one row per interaction step
    <run>/global_step_<N>/replay/tokens.parquet one row per generated token of a scored step
    <run>/global_step_<N>/replay/meta.json      written last; its absence marks the checkpoint incomplete
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from ocsd.cli import InputError

__all__ = [
    "CHECKPOINT_COLUMN",
    "CONTEXT_COLUMNS",
    "FEEDBACK_LABELS",
    "META_FILE",
    "META_KEYS",
    "METRICS_FILE",
    "NULLABLE_STEP_COLUMNS",
    "PROGRESS_LABELS",
    "RECORDED_VIEWS",
    "RUN_FILE",
    "SCHEMA_VERSION",
    "STEPS_FILE",
    "STEP_COLUMNS",
    "STEP_KEY",
    "TOKENS_FILE",
    "TOKEN_COLUMNS",
    "IncompleteCheckpointError",
    "RecordError",
    "is_checkpoint",
    "replay_folder",
]

SCHEMA_VERSION = 1

STEP_COLUMNS: dict[str, pa.DataType] = {
    "global_step": pa.int64(),
    "traj_uid": pa.string(),
    "group_uid": pa.string(),
    "task_type": pa.string(),
    "step_idx": pa.int32(),
    "num_steps": pa.int32(),
    "action": pa.string(),
    "operator": pa.string(),
    "obs_next": pa.string(),
    "feedback_label": pa.string(),
    "progress_label": pa.string(),
    "reward": pa.float64(),
    "advantage": pa.float64(),
    "nll": pa.float64(),
    "selected": pa.bool_(),
    "scored": pa.bool_(),
    "n_tokens": pa.int32(),
}
"""Required columns of ``steps.parquet`` and their Arrow types."""

CONTEXT_COLUMNS: dict[str, pa.DataType] = {
    "task": pa.string(),
    "obs": pa.string(),
    "admissible": pa.list_(pa.string()),
    "history_shown": pa.int32(),
}
"""Optional columns of ``steps.parquet`` that let a tool render a stored step again under any view: the task
description, o_k, the admissible actions at step k, and the number of (o_j, a_j) pairs the rollout prompt
showed (the pairs themselves are the ``obs`` and ``action`` of the trajectory's earlier rows; o_{k+1}, a_{k+1},
o_{k+2} are this and the next rows' ``obs_next`` and ``action``). This suite's writers always add them; the
re-scoring diagnostics (``rescoring.swap``, ``rescoring.audit``) need them, every other reader ignores them.
When present they are type-checked and may not hold nulls."""

RECORDED_VIEWS = ("student", "full", "ablated")
"""Views whose log-probs every scored step records (``logp_<view>`` columns); extra views add columns."""

TOKEN_COLUMNS: dict[str, pa.DataType] = {
    "global_step": pa.int64(),
    "traj_uid": pa.string(),
    "step_idx": pa.int32(),
    "token_idx": pa.int32(),
    "token_id": pa.int64(),
    "token": pa.string(),
    **{f"logp_{view}": pa.float32() for view in RECORDED_VIEWS},
}
"""Required columns of ``tokens.parquet`` and their Arrow types. Extra views add ``logp_<view>``."""

NULLABLE_STEP_COLUMNS = frozenset({"obs_next"})
FEEDBACK_LABELS = ("valid", "invalid", "ambiguous")
PROGRESS_LABELS = ("progress", "no_progress", "invalid")
META_KEYS = ("schema_version", "global_step", "run", "model", "env", "method", "rho", "beta", "views")
STEP_KEY = ("global_step", "traj_uid", "step_idx")
STEPS_FILE, TOKENS_FILE, META_FILE = "steps.parquet", "tokens.parquet", "meta.json"
RUN_FILE, METRICS_FILE = "run.json", "metrics.jsonl"
CHECKPOINT_COLUMN = "checkpoint"
"""Column a reader adds to pooled tables (never stored): the resolved checkpoint folder of each row, so rows
of checkpoints that share ``global_step`` and ``traj_uid`` (two runs) stay apart."""


class RecordError(InputError):
    """A replay-score file is missing, incomplete or does not follow the format.

    The message names the file and, where it applies, the column.
    """


class IncompleteCheckpointError(RecordError):
    """A ``global_step_<N>`` folder has no ``meta.json``: it was not finished."""


def replay_folder(path: Path) -> Path:
    """The ``replay/`` folder of a checkpoint folder; ``path`` itself when it has none."""
    path = Path(path)
    if (path / "replay").is_dir():
        return path / "replay"
    return path


def is_checkpoint(path: Path) -> bool:
    """Whether ``path`` looks like a checkpoint (``global_step_<N>``) or its ``replay/`` folder."""
    return (path / "replay").is_dir() or (path / STEPS_FILE).exists() or (path / META_FILE).exists()
