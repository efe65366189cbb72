"""The replay-score format, version 1 (``shared/CONTRACT.md``).

Every trainer writes these files at every checkpoint and every diagnostic reads only them::

    <run>/run.json                              written once at start
    <run>/metrics.jsonl                         one JSON object per training step
    <run>/global_step_<N>/replay/steps.parquet  one row per interaction step
    <run>/global_step_<N>/replay/tokens.parquet one row per generated token of a scored step
    <run>/global_step_<N>/replay/meta.json      written last; its absence marks the checkpoint incomplete

Modules:

- :mod:`ocsd.records.schema`: layout, columns and their types, labels, ``meta.json`` keys, errors;
- :mod:`ocsd.records.validation`: checks of one checkpoint (:func:`validate_replay`);
- :mod:`ocsd.records.checkpoint`: writing one checkpoint atomically, listing a run's, reading them;
- :mod:`ocsd.records.run`: the run folder (:class:`RunWriter`, ``run.json``, ``metrics.jsonl``);
- :mod:`ocsd.records.lock`: one writer per run folder (:class:`RunLock` on ``<run>/.lock``);
- ``python -m ocsd.records validate PATH``: checks a checkpoint, its ``replay/`` folder, or a run folder.
"""

from ocsd.records.checkpoint import (
    ReplayData,
    checkpoint_dirs,
    checkpoint_folders,
    checkpoint_id,
    read_checkpoint,
    read_replay,
    write_replay,
)
from ocsd.records.lock import LOCK_FILE, LockInfo, RunInUseError, RunLock, read_lock
from ocsd.records.run import RunWriter, read_metrics, read_run_info, validate_path
from ocsd.records.schema import (
    CHECKPOINT_COLUMN,
    CONTEXT_COLUMNS,
    FEEDBACK_LABELS,
    META_FILE,
    META_KEYS,
    METRICS_FILE,
    NULLABLE_STEP_COLUMNS,
    PROGRESS_LABELS,
    RECORDED_VIEWS,
    RUN_FILE,
    SCHEMA_VERSION,
    STEP_COLUMNS,
    STEP_KEY,
    STEPS_FILE,
    TOKEN_COLUMNS,
    TOKENS_FILE,
    IncompleteCheckpointError,
    RecordError,
)
from ocsd.records.validation import validate_replay

__all__ = [
    "CHECKPOINT_COLUMN",
    "CONTEXT_COLUMNS",
    "FEEDBACK_LABELS",
    "LOCK_FILE",
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
    "LockInfo",
    "RecordError",
    "ReplayData",
    "RunInUseError",
    "RunLock",
    "RunWriter",
    "checkpoint_dirs",
    "checkpoint_folders",
    "checkpoint_id",
    "read_checkpoint",
    "read_lock",
    "read_metrics",
    "read_replay",
    "read_run_info",
    "validate_path",
    "validate_replay",
    "write_replay",
]
