"""Checkpoints of the replay-score format: writing one, listing a run's, reading and pooling them.

Writes are atomic (temporary name, then :func:`os.replace`), and ``meta.json`` is written only after
both parquet files are complete, so a reader never accepts a half-written checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ocsd.cli import jsonable
from ocsd.records.schema import (
    CHECKPOINT_COLUMN,
    CONTEXT_COLUMNS,
    META_FILE,
    META_KEYS,
    NULLABLE_STEP_COLUMNS,
    SCHEMA_VERSION,
    STEP_COLUMNS,
    STEP_KEY,
    STEPS_FILE,
    TOKEN_COLUMNS,
    TOKENS_FILE,
    IncompleteCheckpointError,
    RecordError,
    is_checkpoint,
    replay_folder,
)
from ocsd.records.validation import check_tables, checked_tables, meta_problems, null_problems

__all__ = [
    "ReplayData",
    "atomic_write_bytes",
    "atomic_write_parquet",
    "checkpoint_dirs",
    "checkpoint_id",
    "checkpoint_folders",
    "read_checkpoint",
    "read_replay",
    "write_replay",
]

_CHECKPOINT_NAME = re.compile(r"^global_step_(\d+)$")


@dataclass
class ReplayData:
    """Replay scores of one or more checkpoints, pooled.

    Attributes
    ----------
    steps : pandas.DataFrame
        Rows of every ``steps.parquet`` read, in checkpoint order.
    tokens : pandas.DataFrame
        Rows of every ``tokens.parquet`` read, in checkpoint order.
    metas : list of dict
        The ``meta.json`` of each checkpoint read, in the same order.
    folders : list of pathlib.Path
        The ``replay/`` folders read.

    Pooled by :func:`read_replay`, both tables carry a categorical :data:`CHECKPOINT_COLUMN` column: the
    :func:`checkpoint_id` of the checkpoint each row came from. Rows of two checkpoints are told apart
    by it, not by ``global_step`` (two runs can share steps and trajectory ids).
    """

    steps: pd.DataFrame
    tokens: pd.DataFrame
    metas: list[dict] = field(default_factory=list)
    folders: list[Path] = field(default_factory=list)

    @property
    def global_steps(self) -> list[int]:
        """Training steps of the checkpoints read, in order."""
        return [int(m["global_step"]) for m in self.metas]


def _check_frame(frame: pd.DataFrame, required: dict[str, pa.DataType], what: str) -> None:
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise RecordError(f"{what}: missing column(s) {missing}")


def _to_table(frame: pd.DataFrame, required: dict[str, pa.DataType], what: str) -> pa.Table:
    """Convert a frame to Arrow with the contract's types; extra ``logp_*`` columns become float32 and the
    optional context columns (:data:`CONTEXT_COLUMNS`) get their types."""
    _check_frame(frame, required, what)
    fields = [pa.field(name, dtype, nullable=True) for name, dtype in required.items()]
    for name in frame.columns:
        if name not in required:
            dtype = pa.float32() if name.startswith("logp_") else CONTEXT_COLUMNS.get(name)
            fields.append(pa.field(name, dtype) if dtype else pa.field(name, pa.infer_type(frame[name].tolist())))
    arrays = []
    for f in fields:
        values = frame[f.name]
        if pa.types.is_string(f.type):
            values = values.astype(object).where(values.notna(), None)
        try:
            as_list = pa.types.is_string(f.type) or pa.types.is_list(f.type)
            arrays.append(pa.array(values.tolist() if as_list else values.to_numpy(),
                                   type=f.type, from_pandas=True))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            raise RecordError(f"{what}: column '{f.name}' cannot be stored as {f.type} ({exc})") from exc
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` under a temporary name, synced, then :func:`os.replace` it."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def atomic_write_parquet(table: pa.Table, path: Path) -> None:
    """Write ``table`` to ``path`` (zstd) under a temporary name, then :func:`os.replace` it."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def write_replay(folder: str | os.PathLike, steps: pd.DataFrame, tokens: pd.DataFrame, meta: dict) -> Path:
    """Write one checkpoint's replay scores atomically, ``meta.json`` last.

    Parameters
    ----------
    folder : path
        The ``replay/`` folder to write (created if needed). If it already holds a checkpoint, its
        ``meta.json`` is removed first, so the folder reads as incomplete until the rewrite ends.
    steps : pandas.DataFrame
        One row per interaction step, with every column of :data:`STEP_COLUMNS`.
    tokens : pandas.DataFrame
        One row per generated token of a scored step, with every column of :data:`TOKEN_COLUMNS`
        (extra views as ``logp_<view>`` columns).
    meta : dict
        At least the keys of :data:`META_KEYS` except ``schema_version``, which is set here.

    Returns
    -------
    pathlib.Path
        The folder written.

    Raises
    ------
    RecordError
        If the tables or meta (its keys and their types) do not follow the format; nothing is written then.
    """
    folder = Path(folder)
    meta = {"schema_version": SCHEMA_VERSION, **meta}
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        raise RecordError(f"{folder / META_FILE}: missing key(s) {missing}")
    problems = meta_problems(jsonable(meta), folder / META_FILE)
    if problems:
        raise RecordError("refusing to write an invalid checkpoint:\n  " + "\n  ".join(problems))
    steps_table = _to_table(steps, STEP_COLUMNS, str(folder / STEPS_FILE))
    tokens_table = _to_table(tokens, TOKEN_COLUMNS, str(folder / TOKENS_FILE))
    problems = check_tables(steps_table.to_pandas(), tokens_table.to_pandas(), folder / STEPS_FILE,
                            folder / TOKENS_FILE, meta, folder / META_FILE)
    problems += null_problems(steps_table, STEP_COLUMNS, NULLABLE_STEP_COLUMNS, folder / STEPS_FILE)
    problems += null_problems(steps_table, CONTEXT_COLUMNS, frozenset(), folder / STEPS_FILE)
    problems += null_problems(tokens_table, TOKEN_COLUMNS, frozenset(), folder / TOKENS_FILE)
    if problems:
        raise RecordError("refusing to write an invalid checkpoint:\n  " + "\n  ".join(problems))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / META_FILE).unlink(missing_ok=True)
    atomic_write_parquet(steps_table, folder / STEPS_FILE)
    atomic_write_parquet(tokens_table, folder / TOKENS_FILE)
    atomic_write_bytes(folder / META_FILE, (json.dumps(jsonable(meta), indent=2) + "\n").encode())
    return folder


def checkpoint_dirs(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """Every ``global_step_<N>`` folder of a run, complete or not, as ``(N, folder)`` sorted by N."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = [(int(m.group(1)), child) for child in run_dir.iterdir()
             if (m := _CHECKPOINT_NAME.match(child.name)) and child.is_dir()]
    return sorted(found)


def checkpoint_folders(run_dir: str | os.PathLike, *, warn: bool = True) -> list[Path]:
    """Complete ``global_step_<N>`` folders of a run, sorted by N; incomplete ones are skipped.

    Parameters
    ----------
    run_dir : path
        A run folder.
    warn : bool, default True
        Warn once per skipped incomplete checkpoint.
    """
    complete = []
    for _, child in checkpoint_dirs(run_dir):
        if (child / "replay" / META_FILE).exists():
            complete.append(child)
        elif warn:
            warnings.warn(f"skipping incomplete checkpoint {child} (no replay/{META_FILE})", stacklevel=2)
    return complete


def checkpoint_id(folder: str | os.PathLike) -> str:
    """The identity of a checkpoint: its resolved ``global_step_<N>`` folder (the parent of ``replay/``),
    or the resolved folder itself when it is not named ``replay``."""
    folder = replay_folder(Path(folder)).resolve()
    return str(folder.parent if folder.name == "replay" else folder)


def _found(path: Path) -> list[Path]:
    """The ``replay/`` folders one path names: a checkpoint, or a run folder's complete checkpoints."""
    if not path.exists():
        raise RecordError(f"{path}: no such file or folder")
    if is_checkpoint(path):
        folder = replay_folder(path)
        if not (folder / META_FILE).exists():
            raise IncompleteCheckpointError(f"{folder}: incomplete checkpoint, {META_FILE} is missing")
        return [folder]
    if not path.is_dir():
        raise RecordError(f"{path}: expected a checkpoint or run folder")
    ckpts = checkpoint_folders(path)
    if not ckpts:
        raise RecordError(f"{path}: neither a checkpoint (global_step_<N>/replay/) nor a run folder "
                          f"with complete checkpoints")
    return [c / "replay" for c in ckpts]


def _resolve(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    """The ``replay/`` folders ``paths`` name, each checkpoint once (a repeat is skipped with a warning)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    folders: dict[str, Path] = {}
    for raw in paths:
        for folder in _found(Path(raw)):
            key = checkpoint_id(folder)
            if key in folders:
                warnings.warn(f"{raw}: checkpoint {key} is named more than once; it is read once", UserWarning,
                              stacklevel=3)
                continue
            folders[key] = folder
    return list(folders.values())


def read_checkpoint(folder: str | os.PathLike, *, token_columns: Sequence[str] | None = None,
                    validate: bool = True) -> ReplayData:
    """Read one checkpoint's replay scores.

    Parameters
    ----------
    folder : path
        A ``global_step_<N>`` folder or its ``replay/`` folder.
    token_columns : sequence of str, optional
        Read only these token columns (plus the step key) to save memory.
    validate : bool, default True
        Run :func:`validate_replay` first and raise on any problem.

    Raises
    ------
    IncompleteCheckpointError
        If ``meta.json`` is missing.
    RecordError
        If the checkpoint does not follow the format; the message lists every problem on one line.
    """
    folder = replay_folder(Path(folder))
    if not (folder / META_FILE).exists():
        raise IncompleteCheckpointError(f"{folder}: incomplete checkpoint, {META_FILE} is missing")
    if validate:
        problems, meta, tables = checked_tables(folder)
        if problems:
            raise RecordError(f"{folder}: invalid replay scores: " + "; ".join(problems))
        steps, tokens = tables[STEPS_FILE], tables[TOKENS_FILE]
    else:
        meta = json.loads((folder / META_FILE).read_text())
        steps = pq.read_table(folder / STEPS_FILE).to_pandas()
        tokens = pq.read_table(folder / TOKENS_FILE).to_pandas()
    if token_columns is not None:
        tokens = tokens[list(dict.fromkeys([*STEP_KEY, *token_columns]))]
    return ReplayData(steps=steps, tokens=tokens, metas=[meta], folders=[folder])


def read_replay(paths: str | os.PathLike | Sequence[str | os.PathLike], *, steps: str = "all",
                token_columns: Sequence[str] | None = None, validate: bool = True) -> ReplayData:
    """Read and pool the replay scores of checkpoints.

    Parameters
    ----------
    paths : path or sequence of paths
        Checkpoint folders (``global_step_<N>`` or their ``replay/``) and/or run folders; a run folder
        contributes all its complete checkpoints, and incomplete ones are skipped with a warning. A
        checkpoint named more than once (directly, by another path, or through its run folder) is read
        once, with a warning.
    steps : {"all", "selected"}, default "all"
        With ``"selected"``, keep only selected steps in both tables.
    token_columns : sequence of str, optional
        Read only these token columns (plus the step key).
    validate : bool, default True
        Validate each checkpoint before reading it.

    Returns
    -------
    ReplayData
        Both tables with the :data:`CHECKPOINT_COLUMN` of each row.
    """
    if steps not in ("all", "selected"):
        raise ValueError(f"steps must be 'all' or 'selected', got {steps!r}")
    folders = _resolve(paths)
    parts = [read_checkpoint(f, token_columns=token_columns, validate=validate) for f in folders]
    if steps == "selected":
        parts = [_selected(p) for p in parts]
    ids = [checkpoint_id(f) for f in folders]
    return ReplayData(
        steps=_pooled([p.steps for p in parts], ids, STEP_COLUMNS),
        tokens=_pooled([p.tokens for p in parts], ids, TOKEN_COLUMNS),
        metas=[m for p in parts for m in p.metas],
        folders=[f for p in parts for f in p.folders],
    )


def _selected(part: ReplayData) -> ReplayData:
    """One checkpoint's selected steps and their tokens."""
    steps = part.steps[part.steps["selected"].to_numpy(bool)].reset_index(drop=True)
    tokens = part.tokens.merge(steps.loc[:, list(STEP_KEY)], on=list(STEP_KEY), how="inner")
    return ReplayData(steps=steps, tokens=tokens, metas=part.metas, folders=part.folders)


def _pooled(frames: list[pd.DataFrame], ids: list[str], columns: dict) -> pd.DataFrame:
    """The frames of several checkpoints, one below the other, with their :data:`CHECKPOINT_COLUMN`."""
    if not frames:
        return pd.DataFrame(columns=[*columns, CHECKPOINT_COLUMN])
    pooled = pd.concat(frames, ignore_index=True)
    codes = np.repeat(np.arange(len(frames)), [len(f) for f in frames])
    pooled[CHECKPOINT_COLUMN] = pd.Categorical.from_codes(codes, categories=ids)
    return pooled
