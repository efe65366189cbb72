"""One batch from tasks to replay records: the pipeline a training step and a collection share.

1. :func:`rollout_batch`: B tasks x G rollouts (``time/rollout``);
2. :func:`step_advantages`, the step pipeline of every trainer (the single-device trainer, the veRL backend's
   :func:`training.verl.batch.batch_advantages` and the parity check's
   :func:`training.verl.parity.single_device_advantages`), each passing in how it computes log-probs and scores
   view rows: old-policy log-probs (``time/old_logprob``), step rewards and GRPO advantages under the config's
   ``reward_mode`` (:func:`ocsd.algorithm.advantages.protocol_advantages`), step NLL and the step selection of
   paper Algorithm 1 (:func:`step_statistics`), replay scores of the selected steps and the privileged teacher's
   log-probs, then the method's token advantages (``time/advantage``). A collection stops after the statistics
   (:func:`collect_batch`, :func:`batch_statistics`) and scores the selected steps (:func:`score_selected`);
   forward-pass scoring (``time/replay_scoring``, split into ``time/replay_render`` and ``time/replay_forward``)
   is :func:`score_views` and :func:`forward_scoring`;
3. :func:`record_tables` and :func:`replay_meta`: the ``steps`` and ``tokens`` tables and the
   ``meta.json`` of a checkpoint in the replay-score format (written with :func:`ocsd.records.write_replay`).

The random generators of a step are fixed by purpose (:meth:`training.policy.Policy.rng`), so a
training step and a collection at the same step and seed draw the same tasks, rollouts and selection.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from ocsd.algorithm.advantages import linear_decay, protocol_advantages
from ocsd.algorithm.methods import MethodSpec, TokenInputs, token_advantages, token_signal
from ocsd.algorithm.signals import calibration_signal, select_steps, step_nll
from training.config import TrainConfig
from training.envs.runtime import success_metrics
from training.policy import Policy, timed
from training.replay import ReplayScores, StepKey, only_views, replay_tables, score_steps
from training.rollout.engines import response_token_count
from training.rollout.loop import StepSample, Trajectory

Pairs = list[tuple[list[int], list[int]]]
LogProbs = Callable[[Pairs], tuple[torch.Tensor, torch.Tensor]]
"""``logprobs(pairs) -> (logp, mask)``: padded float32 log-probs (S, T) on the CPU of each (prompt ids, response ids)
pair's response, and their mask."""
Scoring = Callable[["BatchStatistics"], tuple[ReplayScores, "torch.Tensor | None"]]
"""``score(stats) -> (scores, teacher_logp)``: replay scores of the selected steps of a batch, and for methods with a
privileged teacher the teacher's log-probs of every step (rows as ``stats``, padded as ``stats.old_logp``), else
None."""
SELECTION = 3
"""The purpose of the selection's generator (:meth:`training.policy.Policy.rng`): ``[seed, step, 3]``."""


@dataclass
class BatchStatistics:
    """Per-step quantities of one batch, rows in (trajectory, step) order."""

    keys: list[StepKey]
    pairs: list[tuple[list[int], list[int]]]
    traj_of_row: np.ndarray
    rewards: np.ndarray  # (S,) reward of each step sample under the reward mode
    advantages: np.ndarray  # (S,) GRPO advantage of each step (equal within a trajectory in mode "trajectory")
    returns: np.ndarray  # (N,) per trajectory: success reward minus the penalties of all its steps
    old_logp: torch.Tensor  # (S, T)
    mask: torch.Tensor  # (S, T)
    nll: torch.Tensor  # (S,)
    selected: torch.Tensor  # (S,) bool

    @property
    def selected_keys(self) -> list[StepKey]:
        """The (trajectory, step) keys of the selected steps, in row order."""
        return [key for key, s in zip(self.keys, self.selected.tolist()) if s]

    def student_logp(self) -> dict[StepKey, np.ndarray]:
        """Old-policy log-probs of each step's response, unpadded: the Student view."""
        return {key: self.old_logp[i, : int(self.mask[i].sum())].numpy() for i, key in enumerate(self.keys)}

    def nll_by_key(self) -> dict[StepKey, float]:
        """Step NLL ``u`` of each step."""
        return {key: float(v) for key, v in zip(self.keys, self.nll.tolist())}


def batch_statistics(policy: Policy, trajs: list[Trajectory], step: int, *, selection: str, rho: float,
                     timings: dict[str, float]) -> BatchStatistics:
    """Step rewards and GRPO advantages under ``policy.cfg.reward_mode`` (with the invalid-action
    penalty), old-policy log-probs (``time/old_logprob``), step NLL and the step selection.

    Parameters
    ----------
    policy : Policy
    trajs : list of Trajectory
        The batch; rollouts of one task share a ``group_uid``.
    step : int
        Training step (seeds the selection of ``selection="random"``).
    selection : {"top", "random", "all"}
        Step-selection mode (:func:`ocsd.algorithm.signals.select_steps`).
    rho : float
        Selection ratio in (0, 1], as validated by :class:`training.config.TrainConfig`.
    timings : dict
        Seconds per phase, added to.
    """
    return statistics(trajs, policy.logprobs, reward_mode=policy.cfg.reward_mode,
                      invalid_penalty=policy.cfg.invalid_action_penalty, selection=selection, rho=rho,
                      generator=policy.rng(step, SELECTION), timings=timings)


def statistics(trajs: Sequence[Trajectory], logprobs: LogProbs, *, reward_mode: str, invalid_penalty: float,
               selection: str, rho: float, generator, timings: dict[str, float] | None = None) -> BatchStatistics:
    """Old-policy log-probs of every step by ``logprobs`` (``time/old_logprob``), then :func:`step_statistics`
    (``time/advantage``)."""
    keys = step_keys(trajs)
    with timed(timings, "time/old_logprob"):
        old_logp, mask = logprobs([(trajs[t].steps[k].prompt_ids, trajs[t].steps[k].response_ids) for t, k in keys])
    with timed(timings, "time/advantage"):
        return step_statistics(trajs, old_logp, mask, reward_mode=reward_mode, invalid_penalty=invalid_penalty,
                               selection=selection, rho=rho, generator=generator)


def step_keys(trajs: Sequence[Trajectory]) -> list[StepKey]:
    """The (trajectory, step) key of every step, in (trajectory, step) order: the rows of a batch."""
    return [(t, s.step_idx) for t, traj in enumerate(trajs) for s in traj.steps]


def step_statistics(trajs: Sequence[Trajectory], old_logp: torch.Tensor, mask: torch.Tensor, *, reward_mode: str,
                    invalid_penalty: float, selection: str, rho: float, generator) -> BatchStatistics:
    """:class:`BatchStatistics` of a batch from its old-policy log-probs, whichever trainer computed them.

    Step rewards and GRPO advantages under ``reward_mode`` (:func:`ocsd.algorithm.advantages.protocol_advantages`,
    groups by ``group_uid``), step NLL and the selection of paper Algorithm 1.

    Parameters
    ----------
    trajs : sequence of Trajectory
    old_logp, mask : torch.Tensor
        (S, T) log-probs of each step's response and its mask, rows in :func:`step_keys` order.
    reward_mode : str
        ``sdar`` or ``trajectory`` (:data:`training.config.REWARD_MODES`).
    invalid_penalty : float
        Penalty of a step whose output has no well-formed action.
    selection, rho
        As :func:`batch_statistics`.
    generator : numpy.random.Generator or torch.Generator
        Randomness of ``selection="random"``.
    """
    keys = step_keys(trajs)
    if old_logp.shape[0] != len(keys):
        raise ValueError(f"old_logp has {old_logp.shape[0]} rows for {len(keys)} steps")
    pairs = [(trajs[t].steps[k].prompt_ids, trajs[t].steps[k].response_ids) for t, k in keys]
    traj_of_row = np.array([t for t, _ in keys], dtype=np.int64)
    group_ids: dict[str, int] = {}
    groups = torch.tensor([group_ids.setdefault(tr.group_uid, len(group_ids)) for tr in trajs])
    protocol = protocol_advantages(
        torch.tensor([tr.won for tr in trajs], dtype=torch.bool),
        torch.tensor([not trajs[t].steps[k].well_formed for t, k in keys], dtype=torch.bool),
        torch.from_numpy(traj_of_row), groups, mode=reward_mode, invalid_penalty=invalid_penalty)
    nll = step_nll(old_logp.double(), mask)
    selected = select_steps(nll, torch.from_numpy(traj_of_row), rho, mode=selection, generator=generator)
    return BatchStatistics(keys, pairs, traj_of_row, protocol.rewards.numpy(), protocol.advantages.numpy(),
                           protocol.returns.numpy(), old_logp, mask, nll, selected)


def token_inputs(spec: MethodSpec, stats: BatchStatistics, scores: ReplayScores,
                 teacher_logp: torch.Tensor | None = None) -> TokenInputs:
    """The per-token inputs of ``spec``'s advantages: GRPO step advantages, the Student (old-policy), Full and
    Ablated log-probs of the scored steps, the selection and the teacher's log-probs (baselines).

    A selected step that could not be scored (its views exceed the prompt length) keeps the plain GRPO
    advantage when the method uses the residual signal.
    """
    old_logp, width = stats.old_logp, stats.old_logp.shape[1]
    views = {name: torch.zeros_like(old_logp) for name in ("full", "ablated")}
    scored = torch.zeros(len(stats.keys), dtype=torch.bool)
    for i, key in enumerate(stats.keys):
        got = scores.logp.get(key)
        if got is None:
            continue
        scored[i] = True
        for name in views:
            if name in got:
                views[name][i, : len(got[name])] = torch.from_numpy(got[name][:width])
    return TokenInputs(adv=torch.from_numpy(stats.advantages).float(), mask=stats.mask,
                       selected=stats.selected & scored if spec.signal else stats.selected, logp_student=old_logp,
                       logp_full=views["full"], logp_ablated=views["ablated"], logp_teacher=teacher_logp)


def method_advantages(spec: MethodSpec, inputs: TokenInputs, cfg: TrainConfig, step: int) -> torch.Tensor:
    """:func:`ocsd.algorithm.methods.token_advantages` of ``spec`` at training ``step`` with the config's ``beta``
    and RLSD settings (lambda decayed linearly over ``rlsd_warmdown_steps``), whichever trainer calls it."""
    return token_advantages(spec, inputs, beta=cfg.beta,
                            rlsd_lambda=linear_decay(step, cfg.rlsd_lambda, cfg.rlsd_warmdown_steps),
                            rlsd_clip_eps=cfg.rlsd_clip_eps)


@dataclass
class StepAdvantages:
    """What :func:`step_advantages` computed for one batch, rows in (trajectory, step) order.

    Attributes
    ----------
    stats : BatchStatistics
        Old log-probs, rewards, GRPO advantages, step NLL and the selection.
    scores : training.replay.ReplayScores
        The replay scores of the selected steps.
    teacher_logp : torch.Tensor or None
        The privileged teacher's log-probs of every step (methods with one).
    inputs : ocsd.algorithm.methods.TokenInputs
        What the advantage rule read.
    token_adv : torch.Tensor
        (steps, tokens) token advantages, zero past each response.
    """

    stats: BatchStatistics
    scores: ReplayScores
    teacher_logp: torch.Tensor | None
    inputs: TokenInputs
    token_adv: torch.Tensor


def step_advantages(trajs: Sequence[Trajectory], *, spec: MethodSpec, cfg: TrainConfig, step: int,
                    old_logprobs: LogProbs, score: Scoring, timings: dict[str, float] | None = None) -> StepAdvantages:
    """The step pipeline of one batch, as every trainer runs it (paper Algorithm 1):

    1. old-policy log-probs of every step's response by ``old_logprobs`` (``time/old_logprob``);
    2. step rewards and GRPO advantages under ``cfg.reward_mode``, step NLL and the selection of ``spec``
       with ``cfg.rho`` (:func:`step_statistics`; the random selection draws from ``[cfg.seed, step, 3]``, the
       generator of :meth:`training.policy.Policy.rng`) (``time/advantage``);
    3. ``score(stats)``: the replay scores of the selected steps and the privileged teacher's log-probs;
    4. the method's token advantages (:func:`token_inputs`, :func:`method_advantages`) (``time/advantage``).

    Parameters
    ----------
    trajs : sequence of Trajectory
        The batch; rollouts of one task share a ``group_uid``.
    spec : MethodSpec
    cfg : TrainConfig
        ``reward_mode``, ``invalid_action_penalty``, ``rho``, ``seed``, ``beta`` and the RLSD settings.
    step : int
        Training step.
    old_logprobs : callable
        How this trainer computes log-probs (:data:`LogProbs`): the old policy's of the steps' responses.
    score : callable
        How this trainer scores view rows (:data:`Scoring`): :func:`forward_scoring`, or verl's actor on the
        agent loop's pre-rendered rows.
    timings : dict, optional
        Seconds per phase, added to.
    """
    generator = np.random.default_rng([cfg.seed, step, SELECTION])
    stats = statistics(trajs, old_logprobs, reward_mode=cfg.reward_mode, invalid_penalty=cfg.invalid_action_penalty,
                       selection=spec.selection, rho=cfg.rho, generator=generator, timings=timings)
    scores, teacher_logp = score(stats)
    check_scored(spec, stats, scores, step)
    with timed(timings, "time/advantage"):
        inputs = token_inputs(spec, stats, scores, teacher_logp)
        token_adv = method_advantages(spec, inputs, cfg, step)
    return StepAdvantages(stats, scores, teacher_logp, inputs, token_adv)


class UnscoredStepsError(ValueError):
    """No selected step of a batch could be scored under the replay views: a method with a replay signal would
    train as GRPO. The message names the limit and the first reason."""


def check_scored(spec: MethodSpec, stats: BatchStatistics, scores: ReplayScores, step: int) -> None:
    """Stop when a method with a replay signal got no scored step in a batch that selected some; warn (stderr) when
    some selected steps could not be scored (they get no modulation).

    Raises
    ------
    UnscoredStepsError
        Naming the step, the count and the first reason.
    """
    if spec.signal is None or not scores.skipped:
        return
    selected = len(stats.selected_keys)
    if selected and not scores.logp:
        raise UnscoredStepsError(f"step {step}: none of the {selected} selected steps could be rendered under every "
                                 f"replay view ({scores.skipped[0]}); {spec.name} would train as GRPO. Raise "
                                 f"max_prompt_length or shorten history_length")
    warnings.warn(f"step {step}: {len(scores.skipped)} of {selected} selected steps could not be rendered under "
                  f"every replay view and get no modulation ({scores.skipped[0]})", stacklevel=2)


def score_views(scorer, renderer, trajs: Sequence[Trajectory], stats: BatchStatistics, views: Sequence, *,
                env_name: str, max_prompt_length: int, timings: dict[str, float] | None = None,
                progress: bool = False) -> ReplayScores:
    """Replay scores of the selected steps under ``views`` (names or view objects; the Student view is passed through
    from the old-policy log-probs): each rendered by ``renderer`` and scored by ``scorer``
    (:class:`ocsd.replay.scoring.ReplayScorer`), timed as ``time/replay_scoring``. No views: nothing is scored."""
    with timed(timings, "time/replay_scoring"):
        if not views:
            return ReplayScores()
        return score_steps(scorer, renderer, trajs, stats.selected_keys, list(views), stats.student_logp(),
                           env_name=env_name, max_prompt_length=max_prompt_length, progress=progress, timings=timings)


def forward_scoring(trajs: Sequence[Trajectory], views: Sequence, *, scorer, renderer, logprobs: LogProbs,
                    teacher_context: Callable[[Trajectory, StepSample], list[int]] | None, env_name: str,
                    max_prompt_length: int, timings: dict[str, float] | None = None) -> Scoring:
    """The ``score`` of :func:`step_advantages` where the old policy's own forward passes score (the single-device
    trainer, the parity check): the selected steps' ``views`` by :func:`score_views`, and with ``teacher_context``
    (methods with a privileged teacher; None otherwise) the teacher's prompt of every step, whose response
    ``logprobs`` scores (``time/teacher_logprob``)."""
    def score(stats: BatchStatistics) -> tuple[ReplayScores, torch.Tensor | None]:
        scores = score_views(scorer, renderer, trajs, stats, views, env_name=env_name,
                             max_prompt_length=max_prompt_length, timings=timings)
        teacher_logp = None
        if teacher_context is not None:
            with timed(timings, "time/teacher_logprob"):
                teacher_logp = logprobs([(teacher_context(trajs[t], trajs[t].steps[k]), trajs[t].steps[k].response_ids)
                                         for t, k in stats.keys])[0]
        return scores, teacher_logp

    return score


def step_tasks(policy: Policy, step: int) -> list:
    """The environments of one step: ``batch_size`` training tasks drawn by the step's generator, each
    repeated ``group_size`` times (a function of the config and the step only)."""
    cfg = policy.cfg
    specs = policy.games.sample_train(policy.rng(step, 0), cfg.batch_size)
    return [s for s in specs for _ in range(cfg.group_size)]


def rollout_batch(policy: Policy, step: int, *, timings: dict[str, float], desc: str = "rollout") -> list[Trajectory]:
    """Roll out the step's tasks (:func:`step_tasks`), timed as ``time/rollout``."""
    with timed(timings, "time/rollout"):
        return policy.collect(step, step_tasks(policy, step), desc=desc, timings=timings)


def collect_batch(policy: Policy, step: int, *, selection: str, rho: float, timings: dict[str, float],
                  desc: str = "rollout") -> tuple[list[Trajectory], BatchStatistics]:
    """Roll out the step's tasks (:func:`rollout_batch`) and compute the batch's :class:`BatchStatistics` (see
    :func:`batch_statistics`)."""
    trajs = rollout_batch(policy, step, timings=timings, desc=desc)
    return trajs, batch_statistics(policy, trajs, step, selection=selection, rho=rho, timings=timings)


def score_selected(policy: Policy, trajs: Sequence[Trajectory], stats: BatchStatistics, views: Sequence,
                   timings: dict[str, float], *, progress: bool = False) -> ReplayScores:
    """Replay scores of the selected steps under ``views`` with the policy's scorer and renderer
    (:func:`score_views`)."""
    cfg = policy.cfg
    return score_views(policy.scorer, policy.renderer, trajs, stats, views, env_name=cfg.env,
                       max_prompt_length=cfg.max_prompt_length, timings=timings, progress=progress)


def record_tables(trajs: Sequence[Trajectory], stats: BatchStatistics, scores: ReplayScores, views: Sequence[str],
                  *, global_step: int, tokenizer) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ``steps`` and ``tokens`` tables of a checkpoint: every step of the batch, with token rows
    for the selected steps that have every one of ``views`` (the others are written as unscored).

    ``reward`` and ``advantage`` are the step's own (:attr:`BatchStatistics.rewards` and
    :attr:`BatchStatistics.advantages`), which differ within a trajectory under ``reward_mode=sdar``.
    """
    return replay_tables(trajs, global_step=global_step, rewards=stats.rewards, advantages=stats.advantages,
                         nll=stats.nll_by_key(), selected=set(stats.selected_keys), scores=only_views(scores, views),
                         tokenizer=tokenizer, views=views)


def replay_meta(cfg: TrainConfig, *, global_step: int, model: str, method: str, views: Sequence[str],
                selection: str, scores: ReplayScores, **extra) -> dict:
    """The ``meta.json`` of a checkpoint: the keys of :data:`ocsd.records.META_KEYS` (``schema_version``
    is added when written), the selection mode, the steps whose history was shortened
    (``truncated_steps``) or that could not be rendered (``skipped_steps``), then ``extra``.

    Raises
    ------
    ValueError
        If a key of ``extra`` is one of these.
    """
    meta = {"global_step": global_step, "run": cfg.run_name, "model": model, "env": cfg.env, "method": method,
            "rho": cfg.rho, "beta": cfg.beta, "views": list(views), "selection": selection,
            "truncated_steps": scores.truncated, "skipped_steps": len(scores.skipped)}
    taken = sorted(set(extra) & set(meta))
    if taken:
        raise ValueError(f"extra meta key(s) {taken} would replace the checkpoint's own")
    return {**meta, **extra}


def flat_group_share(advantages: np.ndarray, traj_of_row: np.ndarray, group_uids: Sequence[str],
                     atol: float = 1e-6) -> float:
    """The share of groups that GRPO gives no advantage: every row's ``|A| < atol``.

    A group's rows all scoring alike (every episode won, and no invalid step under ``reward_mode=sdar``) makes
    ``A = (r - mean) / (std + eps)`` zero up to rounding; OCSD, which scales ``A``, then changes nothing either.

    Parameters
    ----------
    advantages : numpy.ndarray
        (rows,) each step sample's GRPO advantage (:attr:`BatchStatistics.advantages`).
    traj_of_row : numpy.ndarray
        (rows,) the trajectory of each row, an index into ``group_uids``.
    group_uids : sequence of str
        Each trajectory's group.
    atol : float, default 1e-6
        The largest ``|A|`` counted as none (rounding leaves about ``1e-15 / eps = 1e-9``).

    Returns
    -------
    float
        Groups without advantage over the groups that have a row (0 when none has).
    """
    names, traj_group = np.unique(np.asarray(group_uids, dtype=str), return_inverse=True)
    group_of_row = traj_group[np.asarray(traj_of_row, dtype=np.int64)]
    largest = np.full(len(names), -1.0)
    np.maximum.at(largest, group_of_row, np.abs(np.asarray(advantages, dtype=np.float64)))
    present = largest >= 0
    return float((largest[present] < atol).mean()) if present.any() else 0.0


def step_metrics(spec: MethodSpec, step: int, trajs: Sequence[Trajectory], stats: BatchStatistics,
                 inputs: TokenInputs, token_adv: torch.Tensor, scores: ReplayScores) -> dict:
    """The ``metrics.jsonl`` row of a training step, but its timings and update metrics.

    Success overall and per task type, episode length and step shares (the environment's
    :func:`training.envs.runtime.success_metrics`), the mean return, new tokens, advantages per trajectory, step
    and token, the share of groups without advantage (``adv/flat_groups``, :func:`flat_group_share`), the selected
    share and the scored, truncated and skipped steps, and for methods with a signal the mean of the signal the
    update used (``calib/residual_mean``) and of its bounded ``q``.
    """
    episodes = success_metrics(list(trajs))
    adv_step, selected = stats.advantages, stats.selected
    # a trajectory's advantage: the mean over its steps (all equal under reward_mode=trajectory)
    adv_traj = np.bincount(stats.traj_of_row, adv_step, len(trajs)) / np.bincount(stats.traj_of_row,
                                                                                    minlength=len(trajs))
    row = {"step": step, "reward_mean": float(stats.returns.mean()), "success_rate": episodes["success_rate"],
           "episode_length": episodes["mean_steps"], "rollout/new_tokens": response_token_count(trajs),
           "well_formed_rate": episodes["well_formed_rate"], "invalid_action_rate": episodes["invalid_action_rate"],
           "adv/traj_mean": float(adv_traj.mean()), "adv/traj_abs_mean": float(np.abs(adv_traj).mean()),
           "adv/step_mean": float(adv_step.mean()), "adv/step_abs_mean": float(np.abs(adv_step).mean()),
           "adv/token_mean": float(token_adv[inputs.mask].mean()),
           "adv/flat_groups": flat_group_share(stats.advantages, stats.traj_of_row, [t.group_uid for t in trajs]),
           "calib/selected_fraction": float(selected.float().mean()),
           "calib/scored_steps": len(scores.logp), "calib/truncated_steps": scores.truncated,
           "calib/skipped_steps": len(scores.skipped)}
    row.update({f"success/{kind}": per["success_rate"] for kind, per in episodes["per_type"].items()})
    task_scores = [t.score for t in trajs if t.score is not None]
    if task_scores:  # environments with a task score (WebShop)
        row["score_mean"] = float(np.mean(task_scores))
    if spec.signal and len(scores.logp):
        e = token_signal(spec, inputs)[inputs.selected.unsqueeze(1) & inputs.mask]  # the update's signal
        q = calibration_signal(e)
        row.update({"calib/residual_mean": float(e.mean()), "calib/q_mean": float(q.mean()),
                    "calib/q_abs_mean": float(q.abs().mean())})
    return row
