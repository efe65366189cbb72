"""OCSD on a verl batch: verl's training rows back into the suite's trajectories, and the method's token
advantages computed by the same functions as the single-device trainer.

verl stores every output of :class:`training.verl.agent_loop.EnvironmentAgentLoop` as one row under its own key
and reorders rows freely (balancing, mini-batching). :func:`trajectories_of_rows` regroups them by their ids
(``ocsd_traj_uid``, ``ocsd_group_uid``, ``ocsd_step``), never by order, into
:class:`training.rollout.loop.Trajectory` objects, and says which key holds which (trajectory, step).
:func:`batch_advantages` then runs the single-device trainer's step pipeline,
:func:`training.pipeline.step_advantages` (rewards, GRPO advantages, step NLL, selection, token advantages), with
verl's old log-probs and a ``score`` that asks for the Full and Observation-Ablated log-probs of the selected steps
(in verl: the actor's ``compute_log_prob`` on rows built from the pre-rendered view ids and the original response
ids), and returns :func:`ocsd.algorithm.methods.token_advantages` per key (and, for methods with a privileged
teacher, the teacher's log-probs of each response token per key, which the distilling methods' loss reads).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np
import torch

from ocsd.algorithm.methods import MethodSpec, TokenInputs
from training.config import TrainConfig
from training.pipeline import BatchStatistics, Scoring, step_advantages, step_keys
from training.replay import ReplayScores, StepKey
from training.rollout.loop import StepSample, Trajectory

__all__ = ["BatchAdvantages", "RowError", "StepRow", "ViewRequest", "batch_advantages", "row_scoring",
           "trajectories_of_rows"]

VIEWS = ("full", "ablated")


class RowError(ValueError):
    """verl rows that do not make whole trajectories (a step missing, repeated, or without its ids)."""


@dataclass(frozen=True)
class StepRow:
    """One verl training row of an interaction step.

    Attributes
    ----------
    key : str
        The row's key in verl's store.
    prompt_ids, response_ids : list of int
    extra : dict
        The agent loop's ``extra_fields`` (``ocsd_traj_uid``, ``ocsd_step``, ...).
    """

    key: str
    prompt_ids: list[int]
    response_ids: list[int]
    extra: Mapping


@dataclass(frozen=True)
class ViewRequest:
    """One replay-scoring row: a selected step's response under one view's prompt."""

    key: str
    view: str
    context_ids: list[int]
    response_ids: list[int]


def _field(row: StepRow, name: str):
    if name not in row.extra:
        raise RowError(f"row {row.key!r}: extra_fields lack {name!r} (rows of training.verl.agent_loop)")
    return row.extra[name]


def trajectories_of_rows(rows: Sequence[StepRow]) -> tuple[list[Trajectory], dict[str, StepKey]]:
    """The trajectories the rows belong to, and the (trajectory, step) key of each row.

    Trajectories are ordered by (group, trajectory) id, steps by ``ocsd_step``; the result does not depend on
    the order of ``rows``.

    Raises
    ------
    RowError
        A row without the agent loop's fields, or a trajectory whose steps are not exactly 0 ... n-1 with n
        its ``ocsd_n_steps``.
    """
    by_traj: dict[str, dict[int, StepRow]] = {}
    for row in rows:
        steps = by_traj.setdefault(str(_field(row, "ocsd_traj_uid")), {})
        k = int(_field(row, "ocsd_step"))
        if k in steps:
            raise RowError(f"trajectory {_field(row, 'ocsd_traj_uid')!r}: step {k} in rows {steps[k].key!r} and "
                           f"{row.key!r}")
        steps[k] = row
    order = sorted(by_traj, key=lambda uid: (str(_field(next(iter(by_traj[uid].values())), "ocsd_group_uid")), uid))
    trajs, where = [], {}
    for t, uid in enumerate(order):
        steps = by_traj[uid]
        first = steps[min(steps)]
        n = int(_field(first, "ocsd_n_steps"))
        if sorted(steps) != list(range(n)):
            raise RowError(f"trajectory {uid!r}: rows hold steps {sorted(steps)}, expected 0..{n - 1}")
        traj = Trajectory(uid=uid, group_uid=str(_field(first, "ocsd_group_uid")), task=str(_field(first, "ocsd_task")),
                          task_type=str(_field(first, "ocsd_task_type")), game=str(_field(first, "ocsd_game")),
                          won=bool(_field(first, "ocsd_won")), done=True, score=first.extra.get("ocsd_score"))
        for k in range(n):
            row = steps[k]
            history = [(s.obs, s.action) for s in traj.steps]
            traj.steps.append(StepSample(
                step_idx=k, obs=str(_field(row, "ocsd_obs")), admissible=list(_field(row, "ocsd_admissible")),
                history=history, history_shown=int(_field(row, "ocsd_history_shown")),
                prompt_ids=list(row.prompt_ids), response_ids=list(row.response_ids), response_text="",
                action=str(_field(row, "ocsd_action")), well_formed=bool(_field(row, "ocsd_well_formed")),
                obs_next=str(_field(row, "ocsd_obs_next")), feedback_label=str(_field(row, "ocsd_feedback_label")),
                progress_label=str(_field(row, "ocsd_progress_label")), operator=str(_field(row, "ocsd_operator"))))
            where[row.key] = (t, k)
        trajs.append(traj)
    return trajs, where


def _padded(rows: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max((len(r) for r in rows), default=0)
    logp, mask = torch.zeros(len(rows), width, dtype=torch.float32), torch.zeros(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        logp[i, : len(r)] = torch.as_tensor(np.asarray(r, dtype=np.float32))
        mask[i, : len(r)] = True
    return logp, mask


@dataclass
class BatchAdvantages:
    """What :func:`batch_advantages` computed for one verl batch.

    Attributes
    ----------
    advantages : dict of str to torch.Tensor
        Token advantages of each row key, one per response token.
    trajs : list of Trajectory
    where : dict of str to (int, int)
        Row key -> (trajectory, step).
    stats : training.pipeline.BatchStatistics
    scores : training.replay.ReplayScores
        Full and Ablated log-probs of the scored steps (for the records and metrics).
    inputs : ocsd.algorithm.methods.TokenInputs
        What the advantage rule read, rows in (trajectory, step) order.
    token_adv : torch.Tensor
        The token advantages in the same padded layout.
    teacher : dict of str to torch.Tensor
        The privileged teacher's log-probs of each response token, by row key (methods with a privileged teacher;
        empty otherwise): what the distilling methods' loss reads in verl's actor.
    """

    advantages: dict[str, torch.Tensor]
    trajs: list[Trajectory]
    where: dict[str, StepKey]
    stats: BatchStatistics
    scores: ReplayScores
    inputs: TokenInputs
    token_adv: torch.Tensor
    teacher: dict[str, torch.Tensor] = field(default_factory=dict)


def batch_advantages(rows: Sequence[StepRow], old_logp: Mapping[str, np.ndarray], *, spec: MethodSpec,
                     cfg: TrainConfig, step: int,
                     score: Callable[[list[ViewRequest]], Mapping[tuple[str, str], np.ndarray]],
                     teacher_context: Callable[[Trajectory, StepSample], list[int]] | None = None,
                     views: Sequence[str] | None = None) -> BatchAdvantages:
    """The method's token advantages of every row, as the single-device trainer computes them.

    Parameters
    ----------
    rows : sequence of StepRow
        The batch, in any order.
    old_logp : mapping of str to array
        Old-policy log-probs of each row's response (verl's ``old_log_probs``), by row key.
    spec : MethodSpec
        The method (its selection mode, whether it scores views, its advantage rule).
    cfg : TrainConfig
        ``reward_mode``, ``invalid_action_penalty``, ``rho``, ``beta``, ``seed`` and the RLSD settings.
    step : int
        Training step (seeds the random selection as the single-device trainer does).
    score : callable
        ``score(requests) -> {(key, view): log-probs}`` of the response tokens under each request's view.
        Called once, with the selected steps whose views were rendered (``ocsd_view_ids`` not None) under
        ``views``, and every step under view ``teacher`` when the method has a privileged teacher.
    teacher_context : callable, optional
        ``teacher_context(traj, step) -> prompt ids`` of the privileged teacher (the baselines'
        :func:`training.teachers.teacher_prompt_ids`); required by methods with a privileged teacher.
    views : sequence of str, optional
        Replay views to score among ``full`` and ``ablated`` (default: the method's ``replay_views``; both at a
        checkpoint step, whose records hold both).

    Raises
    ------
    RowError
        Rows that do not make whole trajectories, or a row without old log-probs.
    ValueError
        A method with a privileged teacher and no ``teacher_context``.
    """
    if spec.privileged_teacher and teacher_context is None:
        raise ValueError(f"method {spec.name!r} needs the privileged teacher's prompts: pass teacher_context")
    trajs, where = trajectories_of_rows(rows)
    keys = step_keys(trajs)
    key_of = {tk: key for key, tk in where.items()}
    missing = [key_of[tk] for tk in keys if key_of[tk] not in old_logp]
    if missing:
        raise RowError(f"old log-probs missing for rows {missing[:3]}")
    views = [v for v in (spec.replay_views if views is None else views) if v in VIEWS]
    scoring = row_scoring(rows, trajs, where, views, score, teacher_context if spec.privileged_teacher else None)
    result = step_advantages(trajs, spec=spec, cfg=cfg, step=step, score=scoring,
                             old_logprobs=lambda pairs: _padded([old_logp[key_of[tk]] for tk in keys]))
    mask, adv = result.stats.mask, result.token_adv
    advantages = {key_of[tk]: adv[i, : int(mask[i].sum())].clone() for i, tk in enumerate(keys)}
    teacher = {} if result.teacher_logp is None else {
        key_of[tk]: result.teacher_logp[i, : int(mask[i].sum())].clone() for i, tk in enumerate(keys)}
    return BatchAdvantages(advantages, trajs, where, result.stats, result.scores, result.inputs, adv, teacher)


def row_scoring(rows: Sequence[StepRow], trajs: Sequence[Trajectory], where: Mapping[str, StepKey],
                views: Sequence[str], score: Callable[[list[ViewRequest]], Mapping[tuple[str, str], np.ndarray]],
                teacher_context: Callable[[Trajectory, StepSample], list[int]] | None) -> Scoring:
    """The ``score`` of :func:`training.pipeline.step_advantages` on verl rows: one call of ``score`` with a
    :class:`ViewRequest` per view of ``views`` of each selected step whose views the agent loop rendered
    (``ocsd_view_ids``; the others are counted as skipped) and, with ``teacher_context``, one per step under the
    privileged teacher's prompt."""
    key_of = {tk: key for key, tk in where.items()}
    by_key = {row.key: row for row in rows}

    def scoring(stats: BatchStatistics) -> tuple[ReplayScores, torch.Tensor | None]:
        scores, requests = ReplayScores(), []
        if views:
            for tk in stats.selected_keys:
                row = by_key[key_of[tk]]
                rendered = row.extra.get("ocsd_view_ids")
                if not rendered:
                    scores.skipped.append(row.key)
                    continue
                requests += [ViewRequest(row.key, name, list(rendered[name]), list(row.response_ids)) for name in views]
        if teacher_context is not None:
            requests += [ViewRequest(key_of[(t, k)], "teacher", list(teacher_context(trajs[t], trajs[t].steps[k])),
                                     list(trajs[t].steps[k].response_ids)) for t, k in stats.keys]
        got = score(requests) if requests else {}
        student = stats.student_logp()
        for request in requests:
            if request.view in VIEWS:
                tk = where[request.key]
                scores.logp.setdefault(tk, {"student": student[tk]})[request.view] = np.asarray(
                    got[(request.key, request.view)], dtype=np.float32)
        return scores, _teacher_logp(stats, got, key_of) if teacher_context is not None else None

    return scoring


def _teacher_logp(stats: BatchStatistics, got: Mapping[tuple[str, str], np.ndarray],
                  key_of: Mapping[StepKey, str]) -> torch.Tensor:
    """The teacher's log-probs of every step from the scored ``teacher`` rows, padded as the old log-probs."""
    logp = stats.old_logp
    teacher_logp = torch.zeros_like(logp)
    for i, tk in enumerate(stats.keys):
        values = np.asarray(got[(key_of[tk], "teacher")], dtype=np.float32)[: logp.shape[1]]
        teacher_logp[i, : len(values)] = torch.from_numpy(values)
    return teacher_logp
