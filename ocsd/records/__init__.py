"""The replay-score format, version 1 (``shared/CONTRACT.md``).

Every trainer writes these files at every checkpoint and every diagnostic reads only them::

    <run>/run.json                              written once at start
    <run>/metrics.jsonl                         one JSON object per training step
    <run>/global_step_<N>/replay/steps.parquet  one row per interaction step
    <run>/global_step_<N>/replay/tokens.parquet one row per generated token of a scored step
    <run>/global_step_<N>/replay/meta.json      written last; its absence marks the checkpoint incomplete

Writes are atomic (temporary name, then :func:`os.replace`), and ``meta.json`` is written only after
both parquet files are complete, so a reader never accepts a half-written checkpoint.

Command line::

    python -m ocsd.records validate PATH   # a checkpoint, its replay/ folder, or a run folder
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

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
_CKPT_RE = re.compile(r"^global_step_(\d+)$")


class RecordError(ValueError):
    """A replay-score file is missing, incomplete or does not follow the format.

    The message names the file and, where it applies, the column.
    """


class IncompleteCheckpointError(RecordError):
    """A ``global_step_<N>`` folder has no ``meta.json``: it was not finished."""


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
    """

    steps: pd.DataFrame
    tokens: pd.DataFrame
    metas: list[dict] = field(default_factory=list)
    folders: list[Path] = field(default_factory=list)

    @property
    def global_steps(self) -> list[int]:
        """Training steps of the checkpoints read, in order."""
        return [int(m["global_step"]) for m in self.metas]


# ----------------------------------------------------------------------------------------------
# validation
# ----------------------------------------------------------------------------------------------


def _type_ok(actual: pa.DataType, expected: pa.DataType) -> bool:
    if pa.types.is_string(expected):
        return pa.types.is_string(actual) or pa.types.is_large_string(actual) or pa.types.is_null(actual)
    return actual == expected


def _schema_problems(schema: pa.Schema, required: dict[str, pa.DataType], path: Path) -> list[str]:
    problems = []
    names = set(schema.names)
    for name, dtype in required.items():
        if name not in names:
            problems.append(f"{path}: missing column '{name}' ({dtype})")
        elif not _type_ok(schema.field(name).type, dtype):
            problems.append(f"{path}: column '{name}' has type {schema.field(name).type}, expected {dtype}")
    for name in names - set(required):
        if name.startswith("logp_") and not pa.types.is_floating(schema.field(name).type):
            problems.append(f"{path}: column '{name}' has type {schema.field(name).type}, expected float32")
    return problems


def _null_problems(table: pa.Table, required: Iterable[str], nullable: frozenset, path: Path) -> list[str]:
    return [
        f"{path}: column '{name}' has {table.column(name).null_count} null value(s)"
        for name in required
        if name in table.column_names and name not in nullable and table.column(name).null_count
    ]


def _label_problems(steps: pd.DataFrame, path: Path) -> list[str]:
    problems = []
    for col, allowed in (("feedback_label", FEEDBACK_LABELS), ("progress_label", PROGRESS_LABELS)):
        if col in steps:
            bad = sorted(set(steps[col].dropna().astype(str)) - set(allowed))
            if bad:
                problems.append(f"{path}: column '{col}' has values {bad[:5]}, allowed {list(allowed)}")
    return problems


def _finite_problems(tokens: pd.DataFrame, path: Path) -> list[str]:
    problems = []
    for col in [c for c in tokens.columns if c.startswith("logp_")]:
        values = tokens[col].to_numpy(dtype=np.float64, na_value=np.nan)
        n_bad = int((~np.isfinite(values)).sum())
        if n_bad:
            problems.append(f"{path}: column '{col}' has {n_bad} non-finite log-prob(s)")
        elif np.any(values > 1e-4):
            problems.append(f"{path}: column '{col}' has positive log-probs (max {values.max():.4g})")
    return problems


def _key_problems(steps: pd.DataFrame, tokens: pd.DataFrame, steps_path: Path, tokens_path: Path) -> list[str]:
    problems = []
    if steps.duplicated(list(STEP_KEY)).any():
        n = int(steps.duplicated(list(STEP_KEY)).sum())
        problems.append(f"{steps_path}: {n} duplicate (global_step, traj_uid, step_idx) row(s)")
    if ((steps["step_idx"] < 0) | (steps["step_idx"] >= steps["num_steps"])).any():
        problems.append(f"{steps_path}: column 'step_idx' outside [0, num_steps)")
    for col in ("nll", "reward", "advantage"):
        values = steps[col].to_numpy(dtype=np.float64, na_value=np.nan)
        if not np.all(np.isfinite(values)):
            problems.append(f"{steps_path}: column '{col}' has non-finite value(s)")
    step_keys = steps.loc[:, list(STEP_KEY)].assign(_scored=steps["scored"].to_numpy(bool))
    counts = tokens.groupby(list(STEP_KEY), sort=False).size().rename("_rows").reset_index()
    merged = counts.merge(step_keys, on=list(STEP_KEY), how="left", indicator=True)
    orphans = merged[merged["_merge"] == "left_only"]
    if len(orphans):
        first = orphans.iloc[0]
        problems.append(
            f"{tokens_path}: {int(orphans['_rows'].sum())} token row(s) of {len(orphans)} step(s) have no step row "
            f"in {steps_path.name} (first: traj_uid={first['traj_uid']!r}, step_idx={first['step_idx']})"
        )
    unscored = merged[(merged["_merge"] == "both") & ~merged["_scored"].astype(bool)]
    if len(unscored):
        problems.append(f"{tokens_path}: token rows exist for {len(unscored)} step(s) with scored=False")
    scored = steps[steps["scored"].to_numpy(bool)]
    have = scored.merge(counts, on=list(STEP_KEY), how="left")
    missing = have[have["_rows"].isna()]
    if len(missing):
        first = missing.iloc[0]
        problems.append(
            f"{steps_path}: {len(missing)} step(s) marked scored have no token rows in {tokens_path.name} "
            f"(first: traj_uid={first['traj_uid']!r}, step_idx={first['step_idx']})"
        )
    wrong = have[have["_rows"].notna() & (have["_rows"] != have["n_tokens"])]
    if len(wrong):
        problems.append(f"{tokens_path}: {len(wrong)} scored step(s) have a token row count different from n_tokens")
    return problems


def _read_meta(meta_path: Path) -> tuple[dict | None, list[str]]:
    if not meta_path.exists():
        return None, [f"{meta_path.parent}: incomplete checkpoint, {META_FILE} is missing"]
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        return None, [f"{meta_path}: not valid JSON ({exc})"]
    if not isinstance(meta, dict):
        return None, [f"{meta_path}: expected a JSON object"]
    problems = [f"{meta_path}: missing key '{k}'" for k in META_KEYS if k not in meta]
    if "schema_version" in meta and meta["schema_version"] != SCHEMA_VERSION:
        problems.append(
            f"{meta_path}: unknown schema_version {meta['schema_version']!r} (this reader knows {SCHEMA_VERSION})"
        )
    return meta, problems


def _check_tables(steps: pd.DataFrame, tokens: pd.DataFrame, steps_path: Path, tokens_path: Path,
                  meta: dict | None, meta_path: Path) -> list[str]:
    problems = _label_problems(steps, steps_path) + _finite_problems(tokens, tokens_path)
    problems += _key_problems(steps, tokens, steps_path, tokens_path)
    if meta is not None and "global_step" in meta:
        for path, table in ((steps_path, steps), (tokens_path, tokens)):
            other = set(table["global_step"].unique().tolist()) - {int(meta["global_step"])}
            if other:
                problems.append(f"{path}: column 'global_step' has {sorted(other)[:3]}, {meta_path.name} says "
                                f"{meta['global_step']}")
    if meta is not None and isinstance(meta.get("views"), list):
        for view in meta["views"]:
            if f"logp_{view}" not in tokens.columns:
                problems.append(f"{tokens_path}: missing column 'logp_{view}' for view '{view}' listed in "
                                f"{meta_path.name}")
    return problems


def _replay_folder(path: Path) -> Path:
    path = Path(path)
    if (path / "replay").is_dir():
        return path / "replay"
    return path


def _is_checkpoint(path: Path) -> bool:
    return (path / "replay").is_dir() or (path / STEPS_FILE).exists() or (path / META_FILE).exists()


def _checked_tables(folder: Path) -> tuple[list[str], dict | None, dict[str, pd.DataFrame]]:
    """Problems, meta and the tables read while checking one ``replay/`` folder."""
    if not folder.is_dir():
        return [f"{folder}: no such folder"], None, {}
    meta_path = folder / META_FILE
    meta, problems = _read_meta(meta_path)
    tables: dict[str, pd.DataFrame] = {}
    for name, required in ((STEPS_FILE, STEP_COLUMNS), (TOKENS_FILE, TOKEN_COLUMNS)):
        path = folder / name
        if not path.exists():
            problems.append(f"{path}: file is missing")
            continue
        try:
            table = pq.read_table(path)
        except Exception as exc:  # pyarrow raises several types for corrupt files
            problems.append(f"{path}: cannot be read as parquet ({exc})")
            continue
        found = _schema_problems(table.schema, required, path)
        found += _null_problems(table, required, NULLABLE_STEP_COLUMNS if name == STEPS_FILE else frozenset(), path)
        problems += found
        if not found:
            tables[name] = table.to_pandas()
    if len(tables) == 2:
        problems += _check_tables(tables[STEPS_FILE], tables[TOKENS_FILE], folder / STEPS_FILE,
                                  folder / TOKENS_FILE, meta, meta_path)
    return problems, meta, tables


def validate_replay(folder: str | os.PathLike) -> list[str]:
    """Check one checkpoint's replay folder against the format.

    Parameters
    ----------
    folder : path
        A ``global_step_<N>`` folder or its ``replay/`` folder.

    Returns
    -------
    list of str
        Every problem found, each naming the file and column; empty when the folder is valid.
    """
    return _checked_tables(_replay_folder(Path(folder)))[0]


def _check_frame(frame: pd.DataFrame, required: dict[str, pa.DataType], what: str) -> None:
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise RecordError(f"{what}: missing column(s) {missing}")


def _to_table(frame: pd.DataFrame, required: dict[str, pa.DataType], what: str) -> pa.Table:
    """Convert a frame to Arrow with the contract's types; extra ``logp_*`` columns become float32."""
    _check_frame(frame, required, what)
    fields = [pa.field(name, dtype, nullable=True) for name, dtype in required.items()]
    for name in frame.columns:
        if name not in required:
            dtype = pa.float32() if name.startswith("logp_") else None
            fields.append(pa.field(name, dtype) if dtype else pa.field(name, pa.infer_type(frame[name].tolist())))
    arrays = []
    for f in fields:
        values = frame[f.name]
        if pa.types.is_string(f.type):
            values = values.astype(object).where(values.notna(), None)
        try:
            arrays.append(pa.array(values.tolist() if pa.types.is_string(f.type) else values.to_numpy(),
                                   type=f.type, from_pandas=True))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            raise RecordError(f"{what}: column '{f.name}' cannot be stored as {f.type} ({exc})") from exc
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _atomic_write_parquet(table: pa.Table, path: Path) -> None:
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
        If the tables or meta do not follow the format; nothing is written then.
    """
    folder = Path(folder)
    meta = {"schema_version": SCHEMA_VERSION, **meta}
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        raise RecordError(f"{folder / META_FILE}: missing key(s) {missing}")
    steps_table = _to_table(steps, STEP_COLUMNS, str(folder / STEPS_FILE))
    tokens_table = _to_table(tokens, TOKEN_COLUMNS, str(folder / TOKENS_FILE))
    problems = _check_tables(steps_table.to_pandas(), tokens_table.to_pandas(), folder / STEPS_FILE,
                             folder / TOKENS_FILE, meta, folder / META_FILE)
    problems += _null_problems(steps_table, STEP_COLUMNS, NULLABLE_STEP_COLUMNS, folder / STEPS_FILE)
    problems += _null_problems(tokens_table, TOKEN_COLUMNS, frozenset(), folder / TOKENS_FILE)
    if problems:
        raise RecordError("refusing to write an invalid checkpoint:\n  " + "\n  ".join(problems))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / META_FILE).unlink(missing_ok=True)
    _atomic_write_parquet(steps_table, folder / STEPS_FILE)
    _atomic_write_parquet(tokens_table, folder / TOKENS_FILE)
    _atomic_write_bytes(folder / META_FILE, (json.dumps(_jsonable(meta), indent=2) + "\n").encode())
    return folder


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, Path):
        return str(value)
    return value


# ----------------------------------------------------------------------------------------------
# reading
# ----------------------------------------------------------------------------------------------


def checkpoint_dirs(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """Every ``global_step_<N>`` folder of a run, complete or not, as ``(N, folder)`` sorted by N."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = [(int(m.group(1)), child) for child in run_dir.iterdir()
             if (m := _CKPT_RE.match(child.name)) and child.is_dir()]
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


def _resolve(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    folders: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise RecordError(f"{path}: no such file or folder")
        if _is_checkpoint(path):
            folder = _replay_folder(path)
            if not (folder / META_FILE).exists():
                raise IncompleteCheckpointError(f"{folder}: incomplete checkpoint, {META_FILE} is missing")
            folders.append(folder)
        elif path.is_dir():
            ckpts = checkpoint_folders(path)
            if not ckpts:
                raise RecordError(f"{path}: neither a checkpoint (global_step_<N>/replay/) nor a run folder "
                                  f"with complete checkpoints")
            folders.extend(c / "replay" for c in ckpts)
        else:
            raise RecordError(f"{path}: expected a checkpoint or run folder")
    return folders


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
        If the checkpoint does not follow the format; the message lists every problem.
    """
    folder = _replay_folder(Path(folder))
    if not (folder / META_FILE).exists():
        raise IncompleteCheckpointError(f"{folder}: incomplete checkpoint, {META_FILE} is missing")
    if validate:
        problems, meta, tables = _checked_tables(folder)
        if problems:
            raise RecordError(f"{folder}: invalid replay scores:\n  " + "\n  ".join(problems))
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
        contributes all its complete checkpoints, and incomplete ones are skipped with a warning.
    steps : {"all", "selected"}, default "all"
        With ``"selected"``, keep only selected steps in both tables.
    token_columns : sequence of str, optional
        Read only these token columns (plus the step key).
    validate : bool, default True
        Validate each checkpoint before reading it.

    Returns
    -------
    ReplayData
    """
    if steps not in ("all", "selected"):
        raise ValueError(f"steps must be 'all' or 'selected', got {steps!r}")
    parts = [read_checkpoint(f, token_columns=token_columns, validate=validate) for f in _resolve(paths)]
    step_frames = [p.steps for p in parts]
    token_frames = [p.tokens for p in parts]
    data = ReplayData(
        steps=pd.concat(step_frames, ignore_index=True) if step_frames else pd.DataFrame(columns=list(STEP_COLUMNS)),
        tokens=pd.concat(token_frames, ignore_index=True) if token_frames else pd.DataFrame(columns=list(TOKEN_COLUMNS)),
        metas=[m for p in parts for m in p.metas],
        folders=[f for p in parts for f in p.folders],
    )
    if steps == "selected":
        data.steps = data.steps[data.steps["selected"].to_numpy(bool)].reset_index(drop=True)
        keys = data.steps.loc[:, list(STEP_KEY)]
        data.tokens = data.tokens.merge(keys, on=list(STEP_KEY), how="inner")
    return data


# ----------------------------------------------------------------------------------------------
# run folders
# ----------------------------------------------------------------------------------------------


class RunWriter:
    """Writes a run folder: ``run.json`` once, ``metrics.jsonl`` per step, checkpoints.

    Parameters
    ----------
    run_dir : path
        The run folder (created if needed).
    """

    def __init__(self, run_dir: str | os.PathLike):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)

    def write_run_json(self, info: dict) -> Path:
        """Write ``run.json`` (run name, method, env, model, seed, full config); adds ``schema_version``."""
        path = self.run_dir / RUN_FILE
        _atomic_write_bytes(path, (json.dumps(_jsonable({"schema_version": SCHEMA_VERSION, **info}), indent=2)
                                   + "\n").encode())
        return path

    def append_metrics(self, row: dict) -> None:
        """Append one JSON object to ``metrics.jsonl``; it must have a ``step`` key."""
        if "step" not in row:
            raise RecordError(f"{self.run_dir / METRICS_FILE}: a metrics row needs a 'step' key")
        with open(self.run_dir / METRICS_FILE, "a") as fh:
            fh.write(json.dumps(_jsonable(row)) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def truncate_metrics(self, last_step: int) -> None:
        """Drop metrics rows with ``step > last_step`` (used when resuming from a checkpoint)."""
        path = self.run_dir / METRICS_FILE
        if not path.exists():
            return
        kept = [row for row in read_metrics(self.run_dir) if int(row["step"]) <= last_step]
        _atomic_write_bytes(path, "".join(json.dumps(r) + "\n" for r in kept).encode())

    def checkpoint_dir(self, step: int) -> Path:
        """The ``global_step_<step>`` folder (not created)."""
        return self.run_dir / f"global_step_{int(step)}"

    def replay_dir(self, step: int) -> Path:
        """The ``global_step_<step>/replay`` folder (not created)."""
        return self.checkpoint_dir(step) / "replay"


def read_metrics(run_dir: str | os.PathLike) -> list[dict]:
    """Rows of a run's ``metrics.jsonl``; a torn last line (crash mid-write) is ignored.

    Raises
    ------
    RecordError
        If a line other than the last is not a JSON object with a ``step`` key.
    """
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):
                warnings.warn(f"{path}: ignoring a torn last line", stacklevel=2)
                break
            raise RecordError(f"{path}: line {number} is not valid JSON ({exc})") from exc
        if not isinstance(row, dict) or "step" not in row:
            raise RecordError(f"{path}: line {number} is not a JSON object with a 'step' key")
        rows.append(row)
    return rows


def read_run_info(run_dir: str | os.PathLike) -> dict:
    """The run's ``run.json``.

    Raises
    ------
    RecordError
        If it is missing, not JSON, or of an unknown ``schema_version``.
    """
    path = Path(run_dir) / RUN_FILE
    if not path.exists():
        raise RecordError(f"{path}: file is missing")
    try:
        info = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path}: not valid JSON ({exc})") from exc
    if info.get("schema_version") != SCHEMA_VERSION:
        raise RecordError(f"{path}: unknown schema_version {info.get('schema_version')!r}")
    return info


def validate_path(path: str | os.PathLike) -> list[str]:
    """Validate a checkpoint, its ``replay/`` folder, or a whole run folder.

    For a run folder, ``run.json`` and ``metrics.jsonl`` are checked too and every
    ``global_step_<N>`` folder is validated (an incomplete one is reported).
    """
    path = Path(path)
    if not path.exists():
        return [f"{path}: no such file or folder"]
    if _is_checkpoint(path):
        return validate_replay(path)
    ckpts = checkpoint_dirs(path)
    if not ckpts:
        return [f"{path}: neither a checkpoint (global_step_<N>/replay/) nor a run folder"]
    problems = []
    for loader in (read_run_info, read_metrics):
        try:
            with warnings.catch_warnings(record=True):
                loader(path)
        except RecordError as exc:
            problems.append(str(exc))
    for _, ckpt in ckpts:
        problems += validate_replay(ckpt)
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ocsd.records validate PATH [PATH ...]``: print problems or ``ok``."""
    parser = argparse.ArgumentParser(prog="python -m ocsd.records", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    val = sub.add_parser("validate", help="check checkpoint or run folders against the format")
    val.add_argument("paths", nargs="+", metavar="PATH")
    args = parser.parse_args(argv)
    problems = [p for path in args.paths for p in validate_path(path)]
    for problem in problems:
        print(problem)
    if not problems:
        print("ok")
    return 1 if problems else 0

