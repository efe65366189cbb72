"""The batch pipeline shared by training steps and collections (training.pipeline), on made-up batches."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ocsd.algorithm.signals import select_steps, step_nll
from ocsd.records import META_KEYS
from training.config import make_config
from training.pipeline import batch_statistics, replay_meta
from training.replay import ReplayScores
from training.rollout.loop import StepSample, Trajectory


class StubPolicy:
    """Log-probs from a seeded generator; its config has no ``rho``, so selection must take it as an argument."""

    def __init__(self, seed: int = 0, reward_mode: str = "trajectory"):
        self.cfg = SimpleNamespace(seed=seed, invalid_action_penalty=0.1, reward_mode=reward_mode)

    def rng(self, step: int, purpose: int) -> np.random.Generator:
        return np.random.default_rng([self.cfg.seed, step, purpose])

    def logprobs(self, pairs):
        width = max(len(r) for _, r in pairs)
        mask = torch.tensor([[t < len(r) for t in range(width)] for _, r in pairs])
        lp = -torch.from_numpy(np.random.default_rng(7).exponential(size=(len(pairs), width))).float()
        return torch.where(mask, lp, torch.zeros_like(lp)), mask


def _batch(groups: int = 2, group_size: int = 3) -> list[Trajectory]:
    rng = np.random.default_rng(1)
    trajs = []
    for i in range(groups * group_size):
        traj = Trajectory(uid=f"s1_t{i // group_size}_r{i % group_size}", group_uid=f"s1_t{i // group_size}",
                          task="task", task_type="pick", game="game", won=bool(rng.random() < 0.5))
        for k in range(int(rng.integers(1, 6))):
            traj.steps.append(StepSample(
                step_idx=k, obs="o", admissible=[], history=[], history_shown=0, prompt_ids=[1, 2],
                response_ids=rng.integers(3, 50, int(rng.integers(1, 5))).tolist(), response_text="", action="a",
                well_formed=bool(rng.random() < 0.8)))
        trajs.append(traj)
    return trajs


@pytest.mark.parametrize("selection, rho", [("top", 0.5), ("top", 0.2), ("random", 0.4), ("all", 0.3)])
def test_batch_statistics_selects_with_the_given_rho(selection, rho):
    policy, trajs, timings = StubPolicy(), _batch(), {}
    stats = batch_statistics(policy, trajs, 4, selection=selection, rho=rho, timings=timings)
    assert set(timings) == {"time/advantage", "time/old_logprob"}
    assert stats.keys == [(t, s.step_idx) for t, traj in enumerate(trajs) for s in traj.steps]
    returns = [float(t.won) - 0.1 * t.n_malformed for t in trajs]
    np.testing.assert_allclose(stats.returns, returns)
    np.testing.assert_allclose(stats.rewards, np.array(returns)[stats.traj_of_row])
    per_traj = stats.advantages[np.unique(stats.traj_of_row, return_index=True)[1]]
    np.testing.assert_array_equal(stats.advantages, per_traj[stats.traj_of_row])  # one advantage per trajectory
    for g in range(2):  # GRPO advantages are centred within each group of trajectories
        assert per_traj[3 * g: 3 * g + 3].sum() == pytest.approx(0.0, abs=1e-9)
    old, mask = policy.logprobs(stats.pairs)
    expected = select_steps(step_nll(old.double(), mask), torch.from_numpy(stats.traj_of_row), rho, mode=selection,
                            generator=policy.rng(4, 3))
    assert torch.equal(stats.selected, expected)
    for t, traj in enumerate(trajs):
        chosen = sum(1 for key in stats.selected_keys if key[0] == t)
        assert chosen == (len(traj.steps) if selection == "all" else math.ceil(round(rho * len(traj.steps), 9)))
    student = stats.student_logp()
    assert all(len(student[(t, s.step_idx)]) == len(s.response_ids) for t, traj in enumerate(trajs) for s in traj.steps)


def test_replay_meta_has_the_format_keys_then_the_extra_ones():
    cfg = make_config(dict(model="tiny", run_name="r", rho=0.3, beta=0.25))
    scores = ReplayScores(truncated=2, skipped=["too long"])
    meta = replay_meta(cfg, global_step=5, model="tiny", method="ocsd", views=("student", "full", "ablated"),
                       selection="top", scores=scores, seed=0)
    assert set(META_KEYS) - {"schema_version"} <= set(meta)
    assert (meta["global_step"], meta["run"], meta["rho"], meta["beta"], meta["views"]) == (
        5, "r", 0.3, 0.25, ["student", "full", "ablated"])
    assert (meta["truncated_steps"], meta["skipped_steps"], list(meta)[-1]) == (2, 1, "seed")
    with pytest.raises(ValueError, match=r"extra meta key\(s\) \['rho'\]"):
        replay_meta(cfg, global_step=5, model="tiny", method="ocsd", views=["student"], selection="top",
                    scores=scores, rho=0.9)


def test_sdar_reward_mode_gives_each_step_its_own_reward_and_advantage():
    trajs = _batch()
    stats = batch_statistics(StubPolicy(reward_mode="sdar"), trajs, 4, selection="top", rho=0.5, timings={})
    invalid = np.array([not trajs[t].steps[k].well_formed for t, k in stats.keys])
    won = np.array([trajs[t].won for t, _ in stats.keys])
    np.testing.assert_allclose(stats.rewards, 10.0 * won - 0.1 * invalid)
    np.testing.assert_allclose(stats.returns, [10.0 * t.won - 0.1 * t.n_malformed for t in trajs])
    group = stats.traj_of_row // 3
    for g in range(2):  # centred over the step samples of each group, not over its trajectories
        assert stats.advantages[group == g].sum() == pytest.approx(0.0, abs=1e-9)
    mixed = [t for t in range(len(trajs)) if 0 < invalid[stats.traj_of_row == t].sum() < len(trajs[t].steps)]
    assert mixed  # the made-up batch has trajectories with valid and invalid steps
    for t in mixed:  # the penalty lowers the invalid step's advantage only
        rows = stats.traj_of_row == t
        assert stats.advantages[rows & invalid].max() < stats.advantages[rows & ~invalid].min()


def test_record_tables_write_each_steps_own_reward_and_advantage():
    from training.pipeline import record_tables

    trajs = _batch()
    stats = batch_statistics(StubPolicy(reward_mode="sdar"), trajs, 4, selection="top", rho=0.5, timings={})
    steps, _ = record_tables(trajs, stats, ReplayScores(), ("student",), global_step=4, tokenizer=None)
    np.testing.assert_array_equal(steps["reward"].to_numpy(), stats.rewards)
    np.testing.assert_array_equal(steps["advantage"].to_numpy(), stats.advantages)
    assert steps.groupby("traj_uid")["advantage"].nunique().max() > 1  # differs within a trajectory


@pytest.mark.parametrize("seed", range(6))
def test_flat_group_share_counts_the_groups_grpo_gives_no_advantage(seed):
    """Against a loop over the groups, on fresh batches of both reward modes: a group is flat when its rows all
    scored alike, but a group of one GRPO sample only when it scored 0 (verl gives a lone sample its reward)."""
    from training.pipeline import flat_group_share

    rng = np.random.default_rng(seed)
    trajs = _batch(groups=int(rng.integers(1, 7)), group_size=int(rng.integers(1, 5)))
    for traj in trajs:  # outcomes and well-formed steps that often agree within a group, as late in training
        traj.won = bool(rng.random() < 0.9)
        for step in traj.steps:
            step.well_formed = bool(rng.random() < 0.95)
    group_uids = [t.group_uid for t in trajs]
    for mode in ("sdar", "trajectory"):
        stats = batch_statistics(StubPolicy(reward_mode=mode), trajs, 4, selection="top", rho=0.5, timings={})
        flat = []
        for g in sorted(set(group_uids)):
            rows = [i for i, t in enumerate(stats.traj_of_row) if group_uids[t] == g]
            samples = len(rows) if mode == "sdar" else len({stats.traj_of_row[i] for i in rows})
            alike = len({float(stats.rewards[i]) for i in rows}) == 1
            flat.append(alike and (samples > 1 or float(stats.rewards[rows[0]]) == 0.0))
            assert flat[-1] == bool(np.all(np.abs(stats.advantages[rows]) < 1e-6))
        assert flat_group_share(stats.advantages, stats.traj_of_row, group_uids) == pytest.approx(np.mean(flat))
    assert flat_group_share(np.zeros(0), np.zeros(0, dtype=np.int64), []) == 0.0
