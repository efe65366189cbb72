"""The method registry: every method dispatches through one path with the right ingredients."""

import re

import numpy as np
import pytest
import torch

from ocsd.algorithm.methods import METHODS, MethodSpec, TokenInputs, auxiliary_loss_matrix, get_method, register_method, \
    token_advantages

NAMES = ["grpo", "ocsd", "ocsd_no_ablated", "ocsd_random_select", "ocsd_all_steps", "ocsd_no_sign", "opsd",
         "grpo_opsd", "rlsd", "sdar"]


def _inputs(rng, s=10, t=7):
    lengths = torch.from_numpy(rng.integers(1, t + 1, size=s))
    mask = torch.arange(t)[None, :] < lengths[:, None]
    lp = lambda: torch.from_numpy(-rng.exponential(size=(s, t)))  # noqa: E731
    return TokenInputs(adv=torch.from_numpy(rng.normal(size=s)), mask=mask,
                       selected=torch.from_numpy(rng.random(s) < 0.4), logp_student=lp(), logp_full=lp(),
                       logp_ablated=lp(), logp_teacher=lp())


def test_registry_has_every_method():
    assert list(METHODS) == NAMES
    with pytest.raises(ValueError, match="unknown method 'ppo'; known: grpo, ocsd"):
        get_method("ppo")
    with pytest.raises(ValueError, match="already registered"):
        register_method(MethodSpec("ocsd"))


@pytest.mark.parametrize("name", NAMES)
def test_every_method_dispatches(name):
    rng = np.random.default_rng(0)
    spec, inputs = get_method(name), _inputs(rng)
    adv = token_advantages(spec, inputs, beta=0.5, rlsd_lambda=0.3)
    assert adv.shape == inputs.mask.shape and torch.all(adv[~inputs.mask] == 0)
    aux = auxiliary_loss_matrix(spec, inputs.logp_student, inputs.logp_teacher)
    assert (aux is not None) == (spec.aux_loss is not None)


def test_ocsd_uses_residual_and_no_ablated_uses_full_support():
    rng = np.random.default_rng(1)
    inputs = _inputs(rng)
    beta = 0.5
    sel = inputs.selected[:, None] & inputs.mask
    a = inputs.adv[:, None].expand_as(inputs.mask)
    for name, signal in (("ocsd", inputs.logp_full - inputs.logp_ablated),
                         ("ocsd_no_ablated", inputs.logp_full - inputs.logp_student)):
        q = torch.tanh(signal / 2)
        expected = torch.where(sel, a * (1 + beta * torch.sign(a) * q), a)
        expected = torch.where(inputs.mask, expected, torch.zeros_like(expected))
        torch.testing.assert_close(token_advantages(get_method(name), inputs, beta=beta), expected)
    q = torch.tanh((inputs.logp_full - inputs.logp_ablated) / 2)
    no_sign = torch.where(inputs.mask, torch.where(sel, a * (1 + beta * q), a), torch.zeros_like(a))
    torch.testing.assert_close(token_advantages(get_method("ocsd_no_sign"), inputs, beta=beta), no_sign)


def test_ocsd_beta_zero_equals_grpo():
    inputs = _inputs(np.random.default_rng(2))
    torch.testing.assert_close(token_advantages(get_method("ocsd"), inputs, beta=0.0),
                               token_advantages(get_method("grpo"), inputs))


def test_replay_views_and_flags():
    assert get_method("ocsd").replay_views == ("full", "ablated")
    assert get_method("ocsd_no_ablated").replay_views == ("full",)
    assert get_method("grpo").replay_views == ()
    assert not get_method("opsd").policy_gradient
    assert get_method("sdar").gate_beta is None and get_method("grpo_opsd").gate_beta == 0.0
    assert get_method("opsd").gate_beta is None  # SDAR's opsd_trainer scripts: gate_beta=5.0, the config's
    assert {n for n in NAMES if get_method(n).privileged_teacher} == {"opsd", "grpo_opsd", "rlsd", "sdar"}
    assert get_method("ocsd_random_select").selection == "random"
    assert get_method("ocsd_all_steps").selection == "all"


def test_auxiliary_loss_weights():
    # every SDAR script weighs the distillation term by its sdar_coef (0.01), the config's
    assert all(get_method(n).aux_coef is None for n in NAMES)


@pytest.mark.parametrize("name, policy_gradient, gate_beta", [
    ("opsd", False, None),  # SDAR examples/opsd_trainer/run_alfworld_qwen3.sh:8, 61
    ("grpo_opsd", True, 0.0),  # SDAR examples/grpo_opsd_trainer/run_alfworld_qwen3.sh:8
    ("sdar", True, None),  # SDAR examples/sdar_trainer/run_alfworld_qwen3.sh:8
])
def test_distilling_baselines_match_sdar_scripts(name, policy_gradient, gate_beta):
    spec = get_method(name)
    assert (spec.policy_gradient, spec.aux_loss, spec.gate_beta, spec.aux_coef, spec.advantage) == \
        (policy_gradient, "gated_distill", gate_beta, None, "grpo")
    assert spec.privileged_teacher


def _aux_grad(spec, student, teacher, gate_beta=5.0):
    s = student.clone().requires_grad_(True)
    auxiliary_loss_matrix(spec, s, teacher, gate_beta=gate_beta).sum().backward()
    return s.grad


def test_opsd_gradient_depends_on_the_teacher():
    rng = np.random.default_rng(4)
    student = torch.from_numpy(-rng.exponential(size=(3, 5)))
    teacher_a, teacher_b = student + 1.0, student - 1.0
    opsd = get_method("opsd")
    grad_a, grad_b = _aux_grad(opsd, student, teacher_a), _aux_grad(opsd, student, teacher_b)
    assert not torch.allclose(grad_a, grad_b)
    # d/ds [sg(g) (sg(T) - s)] = -g with g = sigmoid(5 (T - s)): more pull where the teacher is ahead
    torch.testing.assert_close(grad_a, -torch.sigmoid(torch.full_like(student, 5.0)))
    torch.testing.assert_close(grad_b, -torch.sigmoid(torch.full_like(student, -5.0)))
    # GRPO+OPSD keeps SDAR's constant gate of 1/2: there the teacher drops out of the gradient
    grpo_opsd = get_method("grpo_opsd")
    torch.testing.assert_close(_aux_grad(grpo_opsd, student, teacher_a), torch.full_like(student, -0.5))
    torch.testing.assert_close(_aux_grad(grpo_opsd, student, teacher_b), torch.full_like(student, -0.5))


@pytest.mark.parametrize("fields, message", [
    (dict(aux_coef=0.5), "aux_coef=0.5 is set but the method has no aux_loss"),
    (dict(gate_beta=1.0), "gate_beta=1.0 is set but the method has no aux_loss"),
    (dict(aux_loss="gated_distill", aux_coef=-1.0), "aux_coef=-1.0 must be a finite number >= 0"),
    (dict(aux_loss="gated_distill", aux_coef=float("nan")), "aux_coef=nan must be a finite number >= 0"),
    (dict(aux_loss="gated_distill", gate_beta=True), "gate_beta=True must be a finite number >= 0"),
    (dict(selection="best"), "selection='best'"),
    (dict(aux_loss="kl"), "aux_loss='kl'"),
])
def test_register_method_rejects_bad_specs(fields, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        register_method(MethodSpec("new_method", **fields))
    assert "new_method" not in METHODS


def test_missing_inputs_are_named():
    inputs = _inputs(np.random.default_rng(3))
    inputs.logp_ablated = None
    with pytest.raises(ValueError, match="logp_ablated"):
        token_advantages(get_method("ocsd"), inputs)
