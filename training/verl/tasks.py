"""The suite's tasks as rows of a verl data set, and back.

verl feeds its agent loops one data-set row per prompt (``RLHFDataset``: a parquet file, its columns handed to
the loop as keyword arguments). A row of ours names the agent loop (:data:`AGENT_NAME`), the environment and the
task by where it lies in the run's task source (split and index) and by its identifier (``game``, ``path`` or
``name``), so every process rebuilds the same task from the same task data (ALFWorld's games, WebShop's
catalogue, ...) whatever the task object holds. The ``prompt`` column holds the task text as one user message
(verl's data set reads it and checks its length; the agent loop renders its own prompts).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

__all__ = ["AGENT_NAME", "TaskRowError", "task_id", "task_row", "task_of_row", "write_task_rows"]

AGENT_NAME = "ocsd_env"
"""Name the agent loop is registered under (``agent_name`` of every row)."""
SPLITS = ("train", "valid")


class TaskRowError(ValueError):
    """A data-set row that does not name a task of this suite's task source."""


def task_id(task: Any) -> str:
    """The identifier of a task: its ``game``, else its ``path``, else its ``name`` ("" when it has none)."""
    for name in ("game", "path", "name"):
        value = getattr(task, name, None)
        if value:
            return str(value)
    return ""


def task_row(env: str, task: Any, *, index: int, split: str) -> dict:
    """One verl data-set row for the task at ``index`` of the task source's ``split`` list.

    Parameters
    ----------
    env : str
        Registry name of the environment.
    task : object
        The task (``source.train[index]`` or ``source.valid[index]``).
    index : int
        Its index in that list.
    split : {"train", "valid"}
    """
    if split not in SPLITS:
        raise TaskRowError(f"split must be one of {SPLITS}, got {split!r}")
    text = str(getattr(task, "task", "") or task_id(task))
    return {"data_source": env, "agent_name": AGENT_NAME, "prompt": [{"role": "user", "content": text}],
            "ocsd_env": env, "ocsd_split": split, "ocsd_index": int(index), "ocsd_game": task_id(task),
            "extra_info": {"index": int(index), "split": split}}


def task_of_row(row: dict, source) -> tuple[str, Any]:
    """``(env, task)`` of a row written by :func:`task_row`, looked up in ``source`` (a task source with ``train``
    and ``valid`` lists).

    Raises
    ------
    TaskRowError
        Naming the missing column, an index out of range, or a task source that holds another task there (the
        data set was written from other task data).
    """
    missing = [k for k in ("ocsd_env", "ocsd_split", "ocsd_index", "ocsd_game") if k not in row]
    if missing:
        raise TaskRowError(f"data-set row lacks {missing}: write the data set with training.verl.tasks")
    split, index = str(row["ocsd_split"]), int(row["ocsd_index"])
    tasks = getattr(source, split, None) if split in SPLITS else None
    if tasks is None:
        raise TaskRowError(f"ocsd_split={split!r}: expected one of {SPLITS}")
    if not 0 <= index < len(tasks):
        raise TaskRowError(f"ocsd_index={index}: the task source has {len(tasks)} {split} tasks")
    task = tasks[index]
    if task_id(task) != str(row["ocsd_game"]):
        raise TaskRowError(f"{split}[{index}] of the task source is {task_id(task)!r}, the row names "
                           f"{row['ocsd_game']!r}: the data set was written from other task data")
    return str(row["ocsd_env"]), task


def write_task_rows(path: str | Path, env: str, tasks: Sequence[Any], *, split: str) -> Path:
    """Write the rows of a task source's ``split`` list as a parquet file verl's ``RLHFDataset`` reads."""
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([task_row(env, t, index=i, split=split) for i, t in enumerate(tasks)]).to_parquet(path)
    return path
