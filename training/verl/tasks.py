"""The suite's tasks as rows of a verl data set, and back.

verl feeds its agent loops one data-set row per prompt (``RLHFDataset``: a parquet file, its columns handed to
the loop as keyword arguments). A row of ours names the agent loop (:data:`AGENT_NAME`), the environment and
the task: the task object of the environment's task source (ALFWorld's
:class:`training.envs.alfworld.GameSpec`, ...) as its class and its fields in JSON, so that any process rebuilds
the same task. The ``prompt`` column holds the task text as one user message (verl's data set reads it and checks
its length; the agent loop renders its own prompts).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Sequence

from ocsd.imports import import_reference

__all__ = ["AGENT_NAME", "TaskRowError", "task_row", "task_of_row", "write_task_rows"]

AGENT_NAME = "ocsd_env"
"""Name the agent loop is registered under (``agent_name`` of every row)."""


class TaskRowError(ValueError):
    """A data-set row that does not name a task of this suite."""


def task_row(env: str, task: Any, *, index: int, split: str) -> dict:
    """One verl data-set row for ``task`` of environment ``env``.

    Parameters
    ----------
    env : str
        Registry name of the environment.
    task : dataclass instance
        A task of the environment's task source (its class must be importable by its module path).
    index : int
        The row's index in its split (verl's ``extra_info.index``).
    split : str
        ``train`` or ``valid``.
    """
    if not dataclasses.is_dataclass(task) or isinstance(task, type):
        raise TaskRowError(f"task_row needs a dataclass task, got {type(task).__name__}")
    cls = type(task)
    text = str(getattr(task, "task", "") or getattr(task, "name", ""))
    return {"data_source": env, "agent_name": AGENT_NAME, "prompt": [{"role": "user", "content": text}],
            "ocsd_env": env, "ocsd_task_class": f"{cls.__module__}:{cls.__qualname__}",
            "ocsd_task": json.dumps(dataclasses.asdict(task), sort_keys=True),
            "extra_info": {"index": int(index), "split": split}}


def task_of_row(row: dict) -> tuple[str, Any]:
    """``(env, task)`` of a row written by :func:`task_row`.

    Raises
    ------
    TaskRowError
        Naming the missing column or the class that cannot be rebuilt.
    """
    missing = [k for k in ("ocsd_env", "ocsd_task_class", "ocsd_task") if k not in row]
    if missing:
        raise TaskRowError(f"data-set row lacks {missing}: write the data set with training.verl.tasks")
    try:
        cls = import_reference(str(row["ocsd_task_class"]), what="ocsd_task_class")
        return str(row["ocsd_env"]), cls(**json.loads(row["ocsd_task"]))
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        raise TaskRowError(f"ocsd_task_class={row['ocsd_task_class']!r}: cannot rebuild the task ({exc})") from None


def write_task_rows(path: str | Path, env: str, tasks: Sequence[Any], *, split: str) -> Path:
    """Write the rows of ``tasks`` as a parquet file verl's ``RLHFDataset`` reads; returns the path."""
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([task_row(env, t, index=i, split=split) for i, t in enumerate(tasks)]).to_parquet(path)
    return path
