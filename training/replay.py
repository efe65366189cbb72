"""From trajectories to replay scores and to the replay-score records of a checkpoint.

The Student view's log-probs are the old-policy log-probs of the rollout prompt (already computed
for the update); the Full, Observation-Ablated and any further views are rendered with
:mod:`ocsd.replay.views` and scored with :class:`ocsd.replay.scoring.ReplayScorer`.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from ocsd.records import RECORDED_VIEWS
from ocsd.replay.prompts import PromptRenderer
from ocsd.replay.scoring import PendingScores, ReplayScorer, ScoreItem
from ocsd.replay.render import render_steps
from ocsd.replay.views import StepRecord
from training.rollout.loop import StepSample, Trajectory

StepKey = tuple[int, int]  # (trajectory index, step index)
PIPELINE_CHUNKS = 4  # pieces of the selected steps on CUDA: render one while the GPU scores the last


def step_record(traj: Trajectory, sample: StepSample, env_name: str, key: str = "",
                donor_obs: str | None = None) -> StepRecord:
    """The :class:`ocsd.replay.views.StepRecord` of one step: its prompt's history and its trajectory's future."""
    k = sample.step_idx
    return StepRecord(
        env=env_name, task=traj.task, step_idx=k, history=sample.shown_history, current_obs=sample.obs,
        admissible_actions=sample.admissible, response_ids=sample.response_ids,
        future_obs=[s.obs_next for s in traj.steps[k:]], future_actions=[s.action for s in traj.steps[k + 1:]],
        donor_obs=donor_obs, key=key or f"{traj.uid}:{k}")


@dataclass
class ReplayScores:
    """Per-step replay log-probs, keyed by (trajectory index, step index)."""

    logp: dict[StepKey, dict[str, np.ndarray]] = field(default_factory=dict)
    truncated: int = 0
    skipped: list[str] = field(default_factory=list)


def score_steps(
    scorer: ReplayScorer,
    renderer: PromptRenderer,
    trajs: Sequence[Trajectory],
    keys: Sequence[StepKey],
    views: Sequence[str],
    student_logp: dict[StepKey, np.ndarray],
    *,
    env_name: str,
    max_prompt_length: int,
    progress: bool = False,
    timings: dict[str, float] | None = None,
    chunks: int | None = None,
) -> ReplayScores:
    """Score the response tokens of the given steps under ``views`` (Student log-probs passed through).

    Steps whose views cannot fit ``max_prompt_length`` even without history are reported in
    ``skipped`` (and not scored); steps whose history had to be shortened are counted in ``truncated``.
    On CUDA the steps go in ``chunks`` pieces: the views of one piece are rendered (tokenised on the
    CPU) while the GPU scores the previous one. With ``timings`` given, the seconds spent rendering
    (``time/replay_render``) and submitting and waiting for the forward passes (``time/replay_forward``)
    are added to it; their sum is the wall time of the call.
    """
    timings = {} if timings is None else timings
    chunks = chunks if chunks is not None else (PIPELINE_CHUNKS if scorer.device.type == "cuda" else 1)
    out = ReplayScores()
    pending: list[tuple[list[StepKey], PendingScores]] = []
    render_s = forward_s = 0.0
    for part in np.array_split(np.arange(len(keys)), max(1, min(chunks, len(keys)))):
        start = time.perf_counter()
        part_keys = [keys[i] for i in part]
        records = [step_record(trajs[t], trajs[t].steps[k], env_name) for t, k in part_keys]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # skipped steps are returned and logged by the caller
            rendered, skipped = render_steps(records, list(views), renderer, max_prompt_length)
        out.skipped += [s.reason for s in skipped]
        items, item_keys = [], []
        for index, step in rendered:
            key = part_keys[index]
            out.truncated += int(step.truncated)
            items.append(ScoreItem(step.contexts, step.response_ids, key=records[index].key,
                                   given={"student": student_logp[key]}))
            item_keys.append(key)
        middle = time.perf_counter()
        pending.append((item_keys, scorer.submit(items, progress=progress)))
        render_s += middle - start
        forward_s += time.perf_counter() - middle
    start = time.perf_counter()
    for item_keys, scores in pending:
        for key, logps in zip(item_keys, scores.result()):
            out.logp[key] = logps
    forward_s += time.perf_counter() - start
    timings["time/replay_render"] = timings.get("time/replay_render", 0.0) + render_s
    timings["time/replay_forward"] = timings.get("time/replay_forward", 0.0) + forward_s
    return out


def token_pieces(tokenizer, ids: Sequence[int], cache: dict[int, str]) -> list[str]:
    """The ``token`` column of a response's token rows: each id decoded alone (``cache`` keeps the decodings)."""
    out = []
    for tid in ids:
        if tid not in cache:
            cache[tid] = tokenizer.decode([tid])
        out.append(cache[tid])
    return out


def replay_tables(
    trajs: Sequence[Trajectory],
    *,
    global_step: int,
    rewards: np.ndarray,
    advantages: np.ndarray,
    nll: dict[StepKey, float],
    selected: set[StepKey],
    scores: ReplayScores,
    tokenizer,
    views: Sequence[str] = RECORDED_VIEWS,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ``steps`` and ``tokens`` tables of docs/replay-format.md for one checkpoint.

    Step rows carry the optional context columns (:data:`ocsd.records.CONTEXT_COLUMNS`) that let the
    re-scoring diagnostics render a stored step again. Every step of every trajectory gets a step row; token rows exist for scored steps only. ``rewards``
    and ``advantages`` are per step, in (trajectory, step) row order.
    """
    step_rows: list[dict] = []
    token_cols: dict[str, list] = {c: [] for c in ("traj_uid", "step_idx", "token_idx", "token_id", "token")}
    token_cols.update({f"logp_{v}": [] for v in views})
    cache: dict[int, str] = {}
    n_steps = sum(len(traj.steps) for traj in trajs)
    if not len(rewards) == len(advantages) == n_steps:
        raise ValueError(f"rewards and advantages need one value per step ({n_steps}); got {len(rewards)} and "
                         f"{len(advantages)}")
    row = -1
    for t, traj in enumerate(trajs):
        for sample in traj.steps:
            key, row = (t, sample.step_idx), row + 1
            scored = key in scores.logp
            step_rows.append(dict(
                global_step=global_step, traj_uid=traj.uid, group_uid=traj.group_uid, task_type=traj.task_type,
                step_idx=sample.step_idx, num_steps=len(traj.steps), action=sample.action, operator=sample.operator,
                obs_next=sample.obs_next, feedback_label=sample.feedback_label,
                progress_label=sample.progress_label, reward=float(rewards[row]), advantage=float(advantages[row]),
                nll=float(nll[key]), selected=key in selected, scored=scored, n_tokens=len(sample.response_ids),
                task=traj.task, obs=sample.obs, admissible=list(sample.admissible),
                history_shown=sample.history_shown))
            if not scored:
                continue
            n = len(sample.response_ids)
            token_cols["traj_uid"] += [traj.uid] * n
            token_cols["step_idx"] += [sample.step_idx] * n
            token_cols["token_idx"] += list(range(n))
            token_cols["token_id"] += list(sample.response_ids)
            token_cols["token"] += token_pieces(tokenizer, sample.response_ids, cache)
            for v in views:
                token_cols[f"logp_{v}"].append(scores.logp[key][v])
    tokens = pd.DataFrame({k: (np.concatenate(v).astype(np.float32) if k.startswith("logp_") and v else v)
                           for k, v in token_cols.items()})
    if tokens.empty:
        tokens = pd.DataFrame({k: pd.Series(dtype="float32" if k.startswith("logp_") else object)
                               for k in token_cols})
    tokens.insert(0, "global_step", np.int64(global_step))
    return pd.DataFrame(step_rows), tokens


def only_views(scores: ReplayScores, views: Sequence[str]) -> ReplayScores:
    """Keep the steps that have every one of ``views`` (the others are written as unscored)."""
    kept = {k: v for k, v in scores.logp.items() if all(name in v for name in views)}
    return ReplayScores(logp=kept, truncated=scores.truncated, skipped=scores.skipped)
