"""The run folder of the replay-score format: ``run.json`` (written once), ``metrics.jsonl`` (one row per
training step) and its ``global_step_<N>`` checkpoints, written with :class:`RunWriter` and checked as a
whole with :func:`validate_path`.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path

from ocsd.cli import jsonable
from ocsd.records.checkpoint import atomic_write_bytes, checkpoint_dirs
from ocsd.records.schema import METRICS_FILE, RUN_FILE, SCHEMA_VERSION, RecordError, is_checkpoint
from ocsd.records.validation import metrics_problems, validate_replay

__all__ = ["RunWriter", "read_metrics", "read_run_info", "validate_path", "EVALUATION_NAME", "evaluation_files"]

EVALUATION_NAME = re.compile(r"eval_(?P<run>.+)_step(?P<step>\d+)\.json")
"""The name of an evaluation kept outside its run folder, ``eval_<RUN>_step<K>.json`` (``training.evaluate --json``
of the run ``<RUN>``'s checkpoint ``global_step_<K>``, as ``results/paper_scale_on_gpu.sh eval`` names it)."""


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
        atomic_write_bytes(path, (json.dumps(jsonable({"schema_version": SCHEMA_VERSION, **info}), indent=2)
                                  + "\n").encode())
        return path

    def append_metrics(self, row: dict) -> None:
        """Append one JSON object to ``metrics.jsonl``; it must have a ``step`` key."""
        if "step" not in row:
            raise RecordError(f"{self.run_dir / METRICS_FILE}: a metrics row needs a 'step' key")
        with open(self.run_dir / METRICS_FILE, "a") as fh:
            fh.write(json.dumps(jsonable(row)) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def truncate_metrics(self, last_step: int) -> None:
        """Drop metrics rows with ``step > last_step`` (used when resuming from a checkpoint)."""
        path = self.run_dir / METRICS_FILE
        if not path.exists():
            return
        kept = [row for row in read_metrics(self.run_dir) if int(row["step"]) <= last_step]
        atomic_write_bytes(path, "".join(json.dumps(r) + "\n" for r in kept).encode())

    def checkpoint_dir(self, step: int) -> Path:
        """The ``global_step_<step>`` folder (not created)."""
        return self.run_dir / f"global_step_{int(step)}"

    def replay_dir(self, step: int) -> Path:
        """The ``global_step_<step>/replay`` folder (not created)."""
        return self.checkpoint_dir(step) / "replay"


def _read_text(path: Path) -> str:
    """The UTF-8 text of a record file; :class:`RecordError` naming it if it cannot be read or is not text."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except IsADirectoryError:
        raise RecordError(f"{path}: is a folder, not a file") from None
    except OSError as exc:
        raise RecordError(f"{path}: cannot be read ({exc.strerror or type(exc).__name__})") from None


def _metrics_rows(path: Path) -> tuple[list[dict], list[int]]:
    """Rows of ``metrics.jsonl`` and their line numbers; a torn last line is left out with a warning."""
    lines = _read_text(path).splitlines()
    rows, numbers = [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):
                warnings.warn(f"{path}: ignoring a torn last line", stacklevel=3)
                break
            raise RecordError(f"{path}: line {number} is not valid JSON ({exc})") from exc
        if not isinstance(row, dict) or "step" not in row:
            raise RecordError(f"{path}: line {number} is not a JSON object with a 'step' key")
        if not isinstance(row["step"], int) or isinstance(row["step"], bool) or row["step"] < 0:
            raise RecordError(f"{path}: line {number}: field 'step' is {json.dumps(row['step'])[:40]}, expected an "
                              f"integer >= 0")
        rows.append(row)
        numbers.append(number)
    return rows, numbers


def read_metrics(run_dir: str | os.PathLike) -> list[dict]:
    """Rows of a run's ``metrics.jsonl``; a torn last line (crash mid-write) is ignored.

    Rows whose steps repeat or go back (two writers in one folder) are returned as they are, with a
    warning naming the file, the field and the steps (:func:`~ocsd.records.validation.metrics_problems`).

    Raises
    ------
    RecordError
        If the file cannot be read or is not UTF-8 text, a line other than the last is not a JSON object
        with a ``step`` key, or its ``step`` is not an integer >= 0.
    """
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    rows, numbers = _metrics_rows(path)
    for problem in metrics_problems([r["step"] for r in rows], numbers, path):
        warnings.warn(problem, stacklevel=2)
    return rows


def read_run_info(run_dir: str | os.PathLike) -> dict:
    """The run's ``run.json``.

    Raises
    ------
    RecordError
        If it is missing, cannot be read, is not UTF-8 text, not a JSON object, or of an unknown
        ``schema_version``.
    """
    path = Path(run_dir) / RUN_FILE
    if not path.exists():
        raise RecordError(f"{path}: file is missing")
    text = _read_text(path)
    try:
        info = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(info, dict):
        raise RecordError(f"{path}: not a JSON object")
    if info.get("schema_version") != SCHEMA_VERSION:
        raise RecordError(f"{path}: unknown schema_version {info.get('schema_version')!r}")
    return info


def validate_path(path: str | os.PathLike) -> list[str]:
    """Validate a checkpoint, its ``replay/`` folder, or a whole run folder.

    For a run folder, ``run.json`` and ``metrics.jsonl`` (its rows, and their ``step`` field: one row
    per step, in order) are checked too and every ``global_step_<N>`` folder is validated (an
    incomplete one is reported).
    """
    path = Path(path)
    if not path.exists():
        return [f"{path}: no such file or folder"]
    if is_checkpoint(path):
        return validate_replay(path)
    ckpts = checkpoint_dirs(path)
    if not ckpts:
        return [f"{path}: neither a checkpoint (global_step_<N>/replay/) nor a run folder"]
    problems = []
    try:
        read_run_info(path)
    except RecordError as exc:
        problems.append(str(exc))
    if (path / METRICS_FILE).exists():
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                rows, numbers = _metrics_rows(path / METRICS_FILE)
            problems += [str(w.message) for w in caught]  # a torn last line: readers skip it, validation reports it
            problems += metrics_problems([r["step"] for r in rows], numbers, path / METRICS_FILE)
        except RecordError as exc:
            problems.append(str(exc))
    for _, ckpt in ckpts:
        problems += validate_replay(ckpt)
    return problems


def evaluation_files(folder: str | os.PathLike) -> dict[str, dict[int, Path]]:
    """The evaluations kept in ``folder`` or any folder below it, by run name and step.

    Parameters
    ----------
    folder : path
        Searched recursively for files named as :data:`EVALUATION_NAME` says (``eval_<RUN>_step<K>.json``).

    Returns
    -------
    dict of str to dict of int to Path
        ``{run name: {step: file}}``, steps in increasing order; where one file name occurs twice the first by path
        is taken. Other ``eval_*.json`` names are not evaluations of a checkpoint and are left out.
    """
    found: dict[str, dict[int, Path]] = {}
    for path in sorted(Path(folder).rglob("eval_*.json")):
        match = EVALUATION_NAME.fullmatch(path.name)
        if match:
            found.setdefault(match["run"], {}).setdefault(int(match["step"]), path)
    return {run: dict(sorted(steps.items())) for run, steps in found.items()}
