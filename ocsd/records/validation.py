"""Validation of one checkpoint's replay folder, and of a run's metrics rows, against the format.

Each ``*_problems`` function returns messages that name the file and, where it applies, the column or
key; :func:`validate_replay` collects them for a folder, :func:`checked_tables` also returns what it read
so that a reader validates and reads in one pass, :func:`check_tables` checks tables before a writer
stores them, :func:`meta_problems` checks ``meta.json``'s keys and their types, and
:func:`metrics_problems` the ``step`` field of ``metrics.jsonl`` rows.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ocsd.records.schema import (
    CONTEXT_COLUMNS,
    FEEDBACK_LABELS,
    META_FILE,
    META_KEYS,
    NULLABLE_STEP_COLUMNS,
    PROGRESS_LABELS,
    SCHEMA_VERSION,
    STEP_COLUMNS,
    STEP_KEY,
    STEPS_FILE,
    TOKEN_COLUMNS,
    TOKENS_FILE,
    replay_folder,
)

__all__ = ["check_tables", "checked_tables", "meta_problems", "metrics_problems", "null_problems",
           "validate_replay"]


def _is_integer(value: Any) -> bool:
    """Whether ``value`` is a JSON integer (``True``/``False`` are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_META_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "global_step": (lambda v: _is_integer(v) and v >= 0, "an integer >= 0"),
    "run": (lambda v: isinstance(v, str), "a string"),
    "model": (lambda v: isinstance(v, str), "a string"),
    "env": (lambda v: isinstance(v, str), "a string"),
    "method": (lambda v: isinstance(v, str), "a string"),
    "rho": (lambda v: v is None or _is_number(v), "a number or null"),
    "beta": (lambda v: v is None or _is_number(v), "a number or null"),
    "views": (lambda v: isinstance(v, list) and all(isinstance(x, str) and x for x in v),
              "a list of view names (strings)"),
}
"""``meta.json`` key -> (check of its value, what the value must be)."""


def _type_ok(actual: pa.DataType, expected: pa.DataType) -> bool:
    if pa.types.is_list(expected):
        return (pa.types.is_list(actual) or pa.types.is_large_list(actual)) and _type_ok(actual.value_type,
                                                                                         expected.value_type)
    if pa.types.is_string(expected):
        return pa.types.is_string(actual) or pa.types.is_large_string(actual) or pa.types.is_null(actual)
    return actual == expected


def _schema_problems(schema: pa.Schema, required: dict[str, pa.DataType], path: Path,
                     optional: dict[str, pa.DataType] | None = None) -> list[str]:
    problems = []
    names = set(schema.names)
    for name, dtype in (optional or {}).items():
        if name in names and not _type_ok(schema.field(name).type, dtype):
            problems.append(f"{path}: column '{name}' has type {schema.field(name).type}, expected {dtype}")
    for name, dtype in required.items():
        if name not in names:
            problems.append(f"{path}: missing column '{name}' ({dtype})")
        elif not _type_ok(schema.field(name).type, dtype):
            problems.append(f"{path}: column '{name}' has type {schema.field(name).type}, expected {dtype}")
    for name in names - set(required):
        if name.startswith("logp_") and not pa.types.is_floating(schema.field(name).type):
            problems.append(f"{path}: column '{name}' has type {schema.field(name).type}, expected float32")
    return problems


def null_problems(table: pa.Table, required: Iterable[str], nullable: frozenset, path: Path) -> list[str]:
    """One problem per ``required`` column of ``table`` that holds nulls, except the ``nullable`` ones."""
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


def meta_problems(meta: Mapping, meta_path: Path) -> list[str]:
    """Problems of a checkpoint's ``meta.json`` object: a missing key of :data:`META_KEYS`, an unknown
    ``schema_version``, or a key whose value has the wrong type (``global_step`` an integer >= 0,
    ``views`` a list of names, ``run``/``model``/``env``/``method`` strings, ``rho``/``beta`` numbers)."""
    problems = [f"{meta_path}: missing key '{k}'" for k in META_KEYS if k not in meta]
    if "schema_version" in meta and meta["schema_version"] != SCHEMA_VERSION:
        problems.append(
            f"{meta_path}: unknown schema_version {meta['schema_version']!r} (this reader knows {SCHEMA_VERSION})"
        )
    for key, (check, expected) in _META_TYPES.items():
        if key in meta and not check(meta[key]):
            problems.append(f"{meta_path}: key '{key}' is {json.dumps(meta[key])[:60]}, expected {expected}")
    return problems


def metrics_problems(steps: Sequence[int], lines: Sequence[int], path: Path) -> list[str]:
    """Problems of the ``step`` field of a run's ``metrics.jsonl``: one row per training step, in order.

    Parameters
    ----------
    steps : sequence of int
        The ``step`` of each row, in file order.
    lines : sequence of int
        The line number of each row (1-based).
    path : path
        The file, named in the messages.
    """
    problems = []
    repeated = sorted(step for step, n in Counter(steps).items() if n > 1)
    if repeated:
        where = [line for step, line in zip(steps, lines) if step in repeated[:5]]
        problems.append(f"{path}: field 'step' repeats step(s) {repeated[:5]} (lines {where[:8]}): two writers "
                        f"or two runs share this folder")
    back = [(line, prev, step) for prev, step, line in zip(steps, steps[1:], lines[1:]) if step < prev]
    if back and not repeated:
        line, prev, step = back[0]
        problems.append(f"{path}: field 'step' goes back from {prev} to {step} at line {line}")
    return problems


def _read_meta(meta_path: Path) -> tuple[dict | None, list[str]]:
    if not meta_path.exists():
        return None, [f"{meta_path.parent}: incomplete checkpoint, {META_FILE} is missing"]
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, [f"{meta_path}: not valid JSON ({exc})"]
    if not isinstance(meta, dict):
        return None, [f"{meta_path}: expected a JSON object"]
    return meta, meta_problems(meta, meta_path)


def check_tables(steps: pd.DataFrame, tokens: pd.DataFrame, steps_path: Path, tokens_path: Path,
                 meta: dict | None, meta_path: Path) -> list[str]:
    """Problems of a checkpoint's tables whose columns are in place: labels, log-prob values, step keys,
    token rows against ``n_tokens``, and agreement with ``meta`` (its ``global_step`` and ``views``).
    """
    problems = _label_problems(steps, steps_path) + _finite_problems(tokens, tokens_path)
    problems += _key_problems(steps, tokens, steps_path, tokens_path)
    if meta is not None and _is_integer(meta.get("global_step")):
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


def checked_tables(folder: Path) -> tuple[list[str], dict | None, dict[str, pd.DataFrame]]:
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
        optional = CONTEXT_COLUMNS if name == STEPS_FILE else {}
        found = _schema_problems(table.schema, required, path, optional)
        found += null_problems(table, required, NULLABLE_STEP_COLUMNS if name == STEPS_FILE else frozenset(), path)
        found += null_problems(table, optional, frozenset(), path)
        problems += found
        if not found:
            tables[name] = table.to_pandas()
    if len(tables) == 2:
        problems += check_tables(tables[STEPS_FILE], tables[TOKENS_FILE], folder / STEPS_FILE,
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
    return checked_tables(replay_folder(Path(folder)))[0]
