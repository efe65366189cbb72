"""ocsd.algorithm.advantages against direct formula evaluation and verl's own estimator."""

import numpy as np
import pytest
import torch

from ocsd.algorithm.advantages import (
    gated_distill_loss_matrix,
    grpo_advantage,
    linear_decay,
    ocsd_token_advantage,
    protocol_advantages,
    rlsd_token_advantage,
)


@pytest.fixture
def rng():
    return np.random.default_rng(2024)


def _grpo_reference(rewards, groups, eps=1e-6, norm=True):
    out = np.empty_like(rewards)
    for g in np.unique(groups):
        idx = groups == g
        r = rewards[idx]
        mean, std = (r.mean(), r.std(ddof=1)) if len(r) > 1 else (0.0, 1.0)
        out[idx] = (r - mean) / (std + eps) if norm else r - mean
    return out


@pytest.mark.parametrize("norm", [True, False])
def test_grpo_matches_formula(rng, norm):
    for _ in range(20):
        groups = rng.integers(0, 6, size=40)
        rewards = rng.choice([0.0, 1.0, -0.1, 0.9], size=40)
        got = grpo_advantage(torch.from_numpy(rewards), torch.from_numpy(groups), norm_by_std=norm)
        np.testing.assert_allclose(got.numpy(), _grpo_reference(rewards, groups, norm=norm), rtol=1e-10, atol=1e-12)


def test_grpo_matches_verl(rng):
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos", reason="verl extra not installed")
    for norm in (True, False):
        groups = rng.integers(0, 8, size=64)
        rewards = torch.from_numpy(rng.choice([0.0, 1.0, 0.5], size=64)).float()
        lengths = torch.from_numpy(rng.integers(1, 12, size=64))
        mask = (torch.arange(12)[None, :] < lengths[:, None]).float()
        token_rewards = torch.zeros(64, 12)
        token_rewards[torch.arange(64), lengths - 1] = rewards  # outcome reward on the last token
        verl_adv, _ = core_algos.compute_grpo_outcome_advantage(
            token_rewards, mask, np.array([f"g{g}" for g in groups], dtype=object), norm_adv_by_std_in_grpo=norm)
        ours = grpo_advantage(rewards, torch.from_numpy(groups), norm_by_std=norm)
        torch.testing.assert_close(verl_adv, ours[:, None] * mask, rtol=1e-5, atol=1e-6)


def _random_episodes(rng, n_groups=4, group_size=3):
    won = torch.from_numpy(rng.random(n_groups * group_size) < 0.4)
    lengths = rng.integers(1, 6, size=n_groups * group_size)
    traj = torch.from_numpy(np.repeat(np.arange(len(lengths)), lengths))
    invalid = torch.from_numpy(rng.random(len(traj)) < 0.3)
    groups = torch.from_numpy(np.arange(len(lengths)) // group_size)
    return won, invalid, traj, groups


def test_sdar_protocol_matches_verl_on_step_samples(rng):
    # verl-agent's protocol: each step sample's last token holds its episode's 10 * won, the step's own
    # penalty is subtracted there, and the group is the task's uid over all its step samples
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos", reason="verl extra not installed")
    for _ in range(5):
        won, invalid, traj, groups = _random_episodes(rng)
        lengths = torch.from_numpy(rng.integers(1, 9, size=len(traj)))
        mask = (torch.arange(9)[None, :] < lengths[:, None]).float()
        token_rewards = torch.zeros(len(traj), 9)
        token_rewards[torch.arange(len(traj)), lengths - 1] = 10.0 * won[traj].float()
        token_rewards[torch.arange(len(traj)), lengths - 1] -= 0.1 * invalid.float()
        uid = np.array([f"task{g}" for g in groups[traj].tolist()], dtype=object)
        verl_adv, _ = core_algos.compute_grpo_outcome_advantage(token_rewards, mask, uid)
        ours = protocol_advantages(won, invalid, traj, groups, mode="sdar", invalid_penalty=0.1)
        # verl sums float32 rewards of about 10: agreement to float32 precision of that scale
        torch.testing.assert_close(verl_adv, ours.advantages.float()[:, None] * mask, rtol=1e-4, atol=1e-4)


def test_trajectory_protocol_is_grpo_over_trajectories(rng):
    won, invalid, traj, groups = _random_episodes(rng)
    got = protocol_advantages(won, invalid, traj, groups, mode="trajectory", invalid_penalty=0.1)
    returns = won.double() - 0.1 * torch.bincount(traj, invalid.double(), minlength=len(won))
    torch.testing.assert_close(got.returns, returns)
    torch.testing.assert_close(got.advantages, grpo_advantage(returns, groups)[traj])
    torch.testing.assert_close(got.rewards, returns[traj])


def test_protocol_advantages_rejects_bad_input():
    won, invalid, traj, groups = torch.tensor([True]), torch.tensor([False]), torch.tensor([0]), torch.tensor([0])
    with pytest.raises(ValueError, match="reward mode must be one of"):
        protocol_advantages(won, invalid, traj, groups, mode="episode")
    with pytest.raises(ValueError, match="invalid_penalty must be >= 0"):
        protocol_advantages(won, invalid, traj, groups, invalid_penalty=-0.1)
    with pytest.raises(ValueError, match="must be"):
        protocol_advantages(won, invalid, traj, torch.tensor([0, 0]))


def test_grpo_zero_variance_and_singletons():
    adv = grpo_advantage(torch.tensor([1.0, 1.0, 1.0, 0.7]), torch.tensor([0, 0, 0, 1]))
    assert adv.tolist()[:3] == [0.0, 0.0, 0.0]
    assert adv[3].item() == pytest.approx(0.7 / (1 + 1e-6))  # a group of one: mean 0, std 1 (verl)
    with pytest.raises(ValueError, match="non-finite"):
        grpo_advantage(torch.tensor([1.0, float("nan")]), torch.tensor([0, 0]))


def _ocsd_reference(adv, q, selected, beta, sign_align):
    out = np.empty_like(q)
    for s in range(q.shape[0]):
        for t in range(q.shape[1]):
            a = adv[s]
            if selected[s]:
                d = np.sign(a) if sign_align else 1.0
                out[s, t] = a * (1 + beta * d * q[s, t])
            else:
                out[s, t] = a
    return out


@pytest.mark.parametrize("sign_align", [True, False])
def test_ocsd_advantage_matches_formula(rng, sign_align):
    for _ in range(10):
        adv = rng.normal(size=12)
        adv[rng.integers(12)] = 0.0
        q = np.tanh(rng.normal(scale=3, size=(12, 9)) / 2)
        selected = rng.random(12) < 0.3
        beta = float(rng.random())
        got = ocsd_token_advantage(torch.from_numpy(adv), torch.from_numpy(q), torch.from_numpy(selected), beta,
                                   sign_align=sign_align)
        np.testing.assert_allclose(got.numpy(), _ocsd_reference(adv, q, selected, beta, sign_align), rtol=1e-12)


def test_ocsd_advantage_keeps_sign_and_beta_zero_is_grpo(rng):
    adv = torch.from_numpy(rng.normal(size=200))
    q = torch.from_numpy(rng.uniform(-1, 1, size=(200, 30)))
    selected = torch.from_numpy(rng.random(200) < 0.5)
    for beta in (0.0, 0.3, 1.0):
        out = ocsd_token_advantage(adv, q, selected, beta)
        assert torch.all(out * adv[:, None] >= 0)
    torch.testing.assert_close(ocsd_token_advantage(adv, q, selected, 0.0), adv[:, None].expand(200, 30))


def test_ocsd_advantage_ignores_q_on_unselected_and_rejects_bad_input():
    adv = torch.tensor([1.0, -2.0])
    q = torch.tensor([[0.5, float("nan")], [0.5, 0.5]])
    out = ocsd_token_advantage(adv, q, torch.tensor([False, True]), 0.5)
    assert out.tolist() == [[1.0, 1.0], [-1.5, -1.5]]  # -2 (1 + 0.5 * (-1) * 0.5)
    for beta in (-0.1, 1.01, float("nan")):
        with pytest.raises(ValueError, match="beta"):
            ocsd_token_advantage(adv, q, torch.tensor([False, True]), beta)
    with pytest.raises(ValueError, match="non-finite"):
        ocsd_token_advantage(adv, q, torch.tensor([True, True]), 0.5)
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        ocsd_token_advantage(adv, torch.full((2, 2), 1.5), torch.tensor([True, True]), 0.5)


def test_rlsd_matches_formula(rng):
    adv = rng.normal(size=6)
    teacher, student = -rng.exponential(size=(6, 8)), -rng.exponential(size=(6, 8))
    mask = rng.random((6, 8)) < 0.8
    lam, eps = 0.35, 0.2
    got = rlsd_token_advantage(torch.from_numpy(adv), torch.from_numpy(teacher), torch.from_numpy(student),
                               torch.from_numpy(mask), lam, eps).numpy()
    w = np.clip(np.exp(np.sign(adv)[:, None] * (teacher - student)), 1 - eps, 1 + eps)
    expected = np.where(mask, adv[:, None] * ((1 - lam) + lam * w), 0.0)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert linear_decay(0, 0.5, 50) == 0.5 and linear_decay(25, 0.5, 50) == 0.25
    assert linear_decay(50, 0.5, 50) == 0.0 and linear_decay(99, 0.5, -1) == 0.5


def test_gated_distill_value_and_gradient(rng):
    student = torch.from_numpy(-rng.exponential(size=(4, 5))).requires_grad_(True)
    teacher = torch.from_numpy(-rng.exponential(size=(4, 5))).requires_grad_(True)
    beta_g = 5.0
    loss = gated_distill_loss_matrix(student, teacher, beta_g)
    s, t = student.detach().numpy(), teacher.detach().numpy()
    gate = 1 / (1 + np.exp(-beta_g * (t - s)))
    np.testing.assert_allclose(loss.detach().numpy(), gate * (t - s), rtol=1e-12)
    loss.sum().backward()
    np.testing.assert_allclose(student.grad.numpy(), -gate, rtol=1e-12)  # the gate is a constant
    assert teacher.grad is None or torch.all(teacher.grad == 0)  # the teacher is a constant
    ungated = gated_distill_loss_matrix(student, teacher, 0.0)
    np.testing.assert_allclose(ungated.detach().numpy(), 0.5 * (t - s), rtol=1e-12)
