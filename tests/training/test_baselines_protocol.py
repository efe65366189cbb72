"""The baselines run SDAR's protocol: its settings, its teacher prompt, a teacher-dependent OPSD update."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ocsd.algorithm.advantages import linear_decay
from ocsd.algorithm.methods import get_method
from ocsd.replay.prompts import PromptRenderer
from training.config import make_config
from training.rollout.loop import StepSample, Trajectory
from training.teachers import SKILL_HEADER, skill_prefix, skill_text, teacher_prompt_ids
from training.trainer import Trainer
from training.update import LossSettings, UpdateBatch, loss_actor_config, policy_loss

USER = "You are in the middle of a room. Your task is to: put a mug in shelf.\nAdmissible actions: look"


def test_config_defaults_are_the_sdar_scripts_values():
    cfg = make_config({})
    # SDAR examples/rlsd_trainer/run_alfworld_qwen3.sh:56-58; examples/sdar_trainer/run_alfworld_qwen3.sh:7-8
    assert (cfg.rlsd_lambda, cfg.rlsd_warmdown_steps, cfg.rlsd_clip_eps) == (0.5, 100, 0.2)
    assert (cfg.sdar_coef, cfg.gate_beta) == (0.01, 5.0)
    lam = [linear_decay(step, cfg.rlsd_lambda, cfg.rlsd_warmdown_steps) for step in (0, 50, 99, 100, 150)]
    assert lam == pytest.approx([0.5, 0.25, 0.005, 0.0, 0.0])


def test_skill_prefix_layout():
    assert skill_prefix("alfworld", "pick") == f"[Privileged Skill Information]\n{skill_text('alfworld', 'pick')}\n\n"


def test_teacher_prompt_prepends_the_skill_to_the_chat_templated_prompt(smollm2_tokenizer):
    tok = smollm2_tokenizer
    renderer = PromptRenderer(tok)
    student = renderer.render_ids(USER)
    prefix = skill_prefix("alfworld", "pick")
    got = teacher_prompt_ids(tok, student, prefix)
    expected = tok.encode(SKILL_HEADER + skill_text("alfworld", "pick") + "\n\n" + renderer.chat_text(USER),
                          add_special_tokens=False)
    assert got == expected
    text = tok.decode(got, skip_special_tokens=False)
    assert text.startswith("[Privileged Skill Information]\n") and text.endswith(renderer.suffix_text)
    # the privileged text sits before the chat template's first token, not inside the user message
    assert text[len(prefix):] == renderer.chat_text(USER)
    assert text[len(prefix):].startswith("<|im_start|>")
    assert got[-len(student):] == student


def test_teacher_prompt_is_cut_from_the_left(smollm2_tokenizer):
    tok = smollm2_tokenizer
    student = PromptRenderer(tok).render_ids(USER)
    full = teacher_prompt_ids(tok, student, skill_prefix("alfworld", "heat"))
    assert len(full) > len(student)
    assert teacher_prompt_ids(tok, student, skill_prefix("alfworld", "heat"), len(student)) == full[-len(student):]
    assert teacher_prompt_ids(tok, student, skill_prefix("alfworld", "heat"), len(full)) == full


class _RecordingPolicy:
    scorer = None  # no replay view is scored here

    def __init__(self):
        self.pairs = None

    def logprobs(self, pairs, model=None):
        self.pairs = pairs
        width = max(len(r) for _, r in pairs)
        return torch.zeros(len(pairs), width), torch.ones(len(pairs), width, dtype=torch.bool)


def _trajectory(renderer, task_type, responses):
    traj = Trajectory(uid="u", group_uid="g", task="put a mug in shelf", task_type=task_type, game="game")
    for k, response in enumerate(responses):
        traj.steps.append(StepSample(step_idx=k, obs="o", admissible=["look"], history=[], history_shown=0,
                                     prompt_ids=renderer.render_ids(f"{USER} {k}"), response_ids=response,
                                     response_text="", action="look", well_formed=True))
    return traj


def test_trainer_scores_the_teacher_on_sdar_prompts(smollm2_tokenizer):
    tok = smollm2_tokenizer
    renderer = PromptRenderer(tok)
    trajs = [_trajectory(renderer, "pick", [[5, 6], [7]]), _trajectory(renderer, "cool", [[8, 9, 10]])]
    keys = [(0, 1), (1, 0), (0, 0)]
    fake = SimpleNamespace(cfg=SimpleNamespace(env="alfworld", max_prompt_length=2048), tokenizer=tok,
                           renderer=renderer, policy=_RecordingPolicy(), spec=SimpleNamespace(privileged_teacher=True))
    Trainer._scoring(fake, trajs, [], {})(SimpleNamespace(keys=keys))  # the teacher's part of a step's scoring
    expected = []
    for t, k in keys:
        step = trajs[t].steps[k]
        text = SKILL_HEADER + skill_text("alfworld", trajs[t].task_type) + "\n\n" + renderer.chat_text(f"{USER} {k}")
        expected.append((tok.encode(text, add_special_tokens=False), step.response_ids))
    assert fake.policy.pairs == expected


def _opsd_grad(teacher: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    cfg = make_config({})
    settings = LossSettings(clip_ratio=cfg.clip_ratio, kl_coef=0.0, loss_agg_mode=cfg.loss_agg_mode,
                            aux_coef=cfg.sdar_coef, gate_beta=cfg.gate_beta)
    old = torch.from_numpy(-np.random.default_rng(0).exponential(size=(2, 4))).float()
    mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    rows = UpdateBatch([[1], [2]], [[3, 4, 5], [6, 7, 8, 9]], old, advantages, mask, teacher_logp=teacher)
    logp = old.clone().requires_grad_(True)
    actor_config = loss_actor_config(settings)
    actor_config.global_batch_info.update(dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=2)
    loss, _ = policy_loss(get_method("opsd"), logp, rows, [0, 1], settings, actor_config)
    loss.backward()
    return logp.grad


def test_opsd_update_depends_on_the_teacher_not_on_the_advantage():
    old = torch.from_numpy(-np.random.default_rng(0).exponential(size=(2, 4))).float()
    adv = torch.ones(2, 4)
    grad_up = _opsd_grad(old + 1.0, adv)
    grad_down = _opsd_grad(old - 1.0, adv)
    assert not torch.allclose(grad_up, grad_down)
    # 0.01 x token-mean of -sigmoid(5 (T - s)) over the 7 response tokens
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.float32)
    torch.testing.assert_close(grad_up, -0.01 * torch.sigmoid(torch.tensor(5.0)) * mask / 7)
    # no policy-gradient term (SDAR examples/opsd_trainer/run_alfworld_qwen3.sh:61, pg_loss_coef=0)
    grad_neg = _opsd_grad(old + 1.0, -adv)
    torch.testing.assert_close(grad_neg, grad_up)
