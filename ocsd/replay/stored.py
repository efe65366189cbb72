"""Step records from stored replay tables: render a recorded step again under any view.

A checkpoint's ``steps.parquet`` holds every step of every trajectory; with the context columns
(:data:`ocsd.records.CONTEXT_COLUMNS`: ``task``, ``obs``, ``admissible``, ``history_shown``) it holds
everything a view needs. For step k of a trajectory with rows 0..K-1:

* history: ``(obs_j, action_j)`` for the ``history_shown`` rows j just before k (the pairs the rollout
  prompt showed);
* current observation o_k: row k's ``obs``; admissible actions: row k's ``admissible``;
* future: o_{k+1}, o_{k+2}, ... are the ``obs_next`` of rows k, k+1, ...; a_{k+1}, ... the ``action``
  of rows k+1, ...;
* response ids: the step's ``token_id`` rows of ``tokens.parquet`` in ``token_idx`` order.

:func:`stored_records` builds them, so that re-scoring a stored step under the Full and
Observation-Ablated views gives the prompts the trainer scored.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from ocsd.records import CONTEXT_COLUMNS, RecordError
from ocsd.replay.views import StepRecord

__all__ = ["missing_context", "stored_records"]


def missing_context(steps: pd.DataFrame) -> list[str]:
    """The context columns (:data:`ocsd.records.CONTEXT_COLUMNS`) that ``steps`` lacks."""
    return [c for c in CONTEXT_COLUMNS if c not in steps.columns]


def _response_ids(tokens: pd.DataFrame) -> dict[tuple[str, int], list[int]]:
    ordered = tokens.sort_values(["traj_uid", "step_idx", "token_idx"], kind="stable")
    out: dict[tuple[str, int], list[int]] = {}
    for (uid, k), ids in ordered.groupby(["traj_uid", "step_idx"], sort=False)["token_id"]:
        out[(str(uid), int(k))] = [int(i) for i in ids.to_numpy()]
    return out


def stored_records(steps: pd.DataFrame, tokens: pd.DataFrame, env: str, *,
                   keys: Iterable[tuple[str, int]] | None = None, where: str = "steps.parquet"
                   ) -> dict[tuple[str, int], StepRecord]:
    """The :class:`~ocsd.replay.views.StepRecord` of stored steps of one checkpoint.

    Parameters
    ----------
    steps : pandas.DataFrame
        The checkpoint's ``steps`` table (every step of its trajectories, with the context columns).
    tokens : pandas.DataFrame
        Its ``tokens`` table (``traj_uid``, ``step_idx``, ``token_idx``, ``token_id``).
    env : str
        The checkpoint's environment (``meta.json``'s ``env``).
    keys : iterable of (traj_uid, step_idx), optional
        The steps wanted (default: every scored step). Each needs token rows.
    where : str
        Names the file in error messages.

    Returns
    -------
    dict
        ``(traj_uid, step_idx) -> StepRecord``, the record's ``key`` being ``"traj_uid:step_idx"``.

    Raises
    ------
    ocsd.records.RecordError
        If the context columns are missing (the message names them), a trajectory's rows are not
        0..K-1, or a wanted step has no token rows.
    """
    missing = missing_context(steps)
    if missing:
        raise RecordError(f"{where}: missing the context column(s) {missing} that re-scoring needs; checkpoints "
                          f"written before they existed cannot be rendered again: collect the checkpoint again "
                          f"with python -m training.collect")
    ids = _response_ids(tokens)
    if keys is None:
        keys = sorted(ids)
    wanted = [(str(u), int(k)) for u, k in keys]
    by_traj = {str(uid): rows.sort_values("step_idx") for uid, rows in
               steps[steps["traj_uid"].isin({u for u, _ in wanted})].groupby("traj_uid", sort=False)}
    out: dict[tuple[str, int], StepRecord] = {}
    for uid, k in wanted:
        rows = by_traj.get(uid)
        if rows is None:
            raise RecordError(f"{where}: no step rows of trajectory {uid!r}")
        order = rows["step_idx"].to_numpy(np.int64)
        if not np.array_equal(order, np.arange(len(order))):
            raise RecordError(f"{where}: trajectory {uid!r} has step_idx {order.tolist()[:8]}, expected 0..K-1")
        if (uid, k) not in ids:
            raise RecordError(f"{where}: step {uid}:{k} has no token rows (it was not scored)")
        if not 0 <= k < len(order):
            raise RecordError(f"{where}: trajectory {uid!r} has no step {k}")
        out[(uid, k)] = _record(rows, k, env, ids[(uid, k)], key=f"{uid}:{k}")
    return out


def _future_obs(values: Sequence) -> list[str]:
    """``obs_next`` values up to the first missing one."""
    out = []
    for value in values:
        if value is None or (isinstance(value, float) and np.isnan(value)):
            break
        out.append(str(value))
    return out


def _record(rows: pd.DataFrame, k: int, env: str, response_ids: list[int], *, key: str) -> StepRecord:
    obs, actions = rows["obs"].tolist(), rows["action"].tolist()
    shown = int(rows["history_shown"].iloc[k])
    if not 0 <= shown <= k:
        raise RecordError(f"step {key}: history_shown={shown} outside [0, {k}]")
    return StepRecord(
        env=env, task=str(rows["task"].iloc[k]), step_idx=k,
        history=list(zip(obs[k - shown:k], actions[k - shown:k])), current_obs=str(obs[k]),
        admissible_actions=list(rows["admissible"].iloc[k]), response_ids=response_ids,
        future_obs=_future_obs(rows["obs_next"].tolist()[k:]), future_actions=[str(a) for a in actions[k + 1:]],
        key=key)
