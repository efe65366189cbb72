"""ocsd.algorithm.signals against direct formulas and brute-force loops on fresh random inputs."""

import math

import numpy as np
import pytest
import torch

from ocsd.algorithm.signals import calibration_signal, num_selected, observation_residual, select_steps, step_nll


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def test_residual_is_difference_of_supports(rng):
    student, full, ablated = (torch.from_numpy(-rng.gamma(2.0, 1.0, size=(7, 11))) for _ in range(3))
    e = observation_residual(full, ablated)
    delta_f, delta_a = full - student, ablated - student
    torch.testing.assert_close(e, delta_f - delta_a)
    np.testing.assert_allclose(e.numpy(), full.numpy() - ablated.numpy())


def test_calibration_signal_matches_sigmoid_identity(rng):
    e = torch.from_numpy(rng.normal(scale=5.0, size=1000))
    q = calibration_signal(e)
    # tanh(e/2) == 2 sigmoid(e) - 1, an independent evaluation
    np.testing.assert_allclose(q.numpy(), 2.0 / (1.0 + np.exp(-e.numpy())) - 1.0, atol=1e-12)
    assert q.abs().max() <= 1.0
    assert calibration_signal(torch.tensor([1e6, -1e6])).tolist() == [1.0, -1.0]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_signals_reject_non_finite(bad):
    x = torch.tensor([0.1, bad])
    with pytest.raises(ValueError, match="non-finite"):
        observation_residual(x, torch.zeros(2))
    with pytest.raises(ValueError, match="non-finite"):
        calibration_signal(x)


def test_residual_shape_mismatch():
    with pytest.raises(ValueError, match="differ"):
        observation_residual(torch.zeros(3), torch.zeros(4))


def test_step_nll_matches_loop(rng):
    lengths = rng.integers(1, 20, size=9)
    logp = torch.from_numpy(-rng.exponential(size=(9, 20)))
    mask = torch.arange(20)[None, :] < torch.from_numpy(lengths)[:, None]
    logp_padded = torch.where(mask, logp, torch.full_like(logp, float("nan")))  # padding ignored
    u = step_nll(logp_padded, mask)
    expected = [-logp[i, : lengths[i]].mean().item() for i in range(9)]
    np.testing.assert_allclose(u.numpy(), expected, rtol=1e-12)


def test_step_nll_empty_mask_is_error():
    with pytest.raises(ValueError, match=r"step\(s\) \[1\]"):
        step_nll(torch.zeros(2, 3), torch.tensor([[1, 0, 0], [0, 0, 0]]))


def _brute_top(nll, traj, rho):
    chosen = np.zeros(len(nll), dtype=bool)
    for t in set(traj.tolist()):
        idx = [i for i in range(len(nll)) if traj[i] == t]
        k = len(idx)
        n = int(np.ceil(round(rho * k, 9)))
        ranked = sorted(idx, key=lambda i: (-nll[i], i))
        chosen[ranked[:n]] = True
    return chosen


@pytest.mark.parametrize("rho", [0.05, 0.2, 0.5, 1 / 3, 0.99, 1.0])
def test_top_selection_matches_brute_force(rng, rho):
    for _ in range(20):
        n_traj = int(rng.integers(1, 8))
        steps = rng.integers(1, 30, size=n_traj)
        traj = np.repeat(np.arange(n_traj), steps)
        rng.shuffle(traj)  # steps of a trajectory need not be contiguous
        nll = np.round(rng.exponential(size=len(traj)), 1)  # rounding creates ties
        got = select_steps(torch.from_numpy(nll), torch.from_numpy(traj), rho).numpy()
        np.testing.assert_array_equal(got, _brute_top(nll, traj, rho))


def test_selection_counts_use_exact_ceiling():
    assert math.ceil(0.07 * 100) == 8  # the floating-point trap: 0.07 * 100 = 7.000000000000001
    assert num_selected(100, 0.07) == 7
    assert num_selected(15, 0.2) == 3
    assert num_selected(1, 0.2) == 1
    assert num_selected(50, 0.2) == 10
    assert num_selected(11, 0.2) == 3
    for k in range(1, 200):
        assert num_selected(k, 0.2) == math.ceil(k / 5)


def test_one_step_trajectories_and_ties():
    nll = torch.tensor([0.3, 0.3, 0.3, 0.3, 1.0])
    traj = torch.tensor([0, 0, 0, 0, 1])
    sel = select_steps(nll, traj, 0.5)
    assert sel.tolist() == [True, True, False, False, True]  # ties: earlier steps first


def test_random_selection_sizes_and_determinism(rng):
    traj = torch.from_numpy(np.repeat(np.arange(50), rng.integers(1, 40, size=50)))
    nll = torch.from_numpy(rng.normal(size=traj.numel()))
    a = select_steps(nll, traj, 0.2, mode="random", generator=7)
    b = select_steps(nll, traj, 0.2, mode="random", generator=np.random.default_rng(7))
    c = select_steps(nll, traj, 0.2, mode="random", generator=8)
    assert torch.equal(a, b) and not torch.equal(a, c)
    counts = np.bincount(traj.numpy())
    per_traj = np.bincount(traj.numpy(), weights=a.numpy())
    np.testing.assert_array_equal(per_traj, [num_selected(int(k), 0.2) for k in counts])
    # random selection does not follow NLL: over many draws each step is chosen about equally often
    hits = sum(select_steps(nll[:10], torch.zeros(10), 0.2, mode="random", generator=s).numpy() for s in range(4000))
    assert np.all(np.abs(hits / 4000 - 0.2) < 0.03)


def test_all_mode_and_errors():
    nll, traj = torch.rand(5, dtype=torch.float64), torch.zeros(5, dtype=torch.long)
    assert select_steps(nll, traj, 0.2, mode="all").all()
    for bad in (0, 0.0, -0.1, 1.5, float("nan"), True):
        with pytest.raises(ValueError, match="rho"):
            select_steps(nll, traj, bad)
    with pytest.raises(ValueError, match="mode"):
        select_steps(nll, traj, 0.2, mode="bottom")
    with pytest.raises(ValueError, match="generator"):
        select_steps(nll, traj, 0.2, mode="random")
    with pytest.raises(ValueError, match="non-finite"):
        select_steps(torch.tensor([0.1, float("nan")]), torch.zeros(2), 0.2)
    assert select_steps(torch.zeros(0), torch.zeros(0, dtype=torch.long), 0.2).numel() == 0
