"""Shared input of the veRL backend tests: a batch of real ALFWorld episodes, its rows as verl stores them, and
the single-device trainer's token advantages of the same batch.

:func:`episodes`: two tasks x two rollouts on generated games, answered with admissible actions (40% made
inadmissible, 30% replaced by text without the action format, so that steps are penalised and GRPO advantages are
not all zero). :func:`agent_rows`: each step as :class:`training.verl.agent_loop.EnvironmentAgentLoop` returns it,
keyed ``{uid}_{session}_{index}`` as verl keys it. :func:`single_device`: the advantages as
:meth:`training.trainer.Trainer.train_step` computes them (:func:`training.verl.parity.single_device_advantages`
with the tiny model).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from tests.rescoring.acting import AdmissibleEngine

MAX_PROMPT = 1024


def episodes(games_dir, tokenizer):
    """``(cfg, trajs, renderer)`` of the batch (see the module docstring)."""
    from ocsd.replay.prompts import PromptRenderer
    from training.config import make_config
    from training.envs.alfworld.tasks import GameSource
    from training.rollout.loop import GenerationSettings, rollout

    cfg = make_config(dict(data="generated", games_dir=str(games_dir), n_train_games=2, n_val_games=2,
                           max_steps=5, history_length=1, max_prompt_length=MAX_PROMPT, progress=False, rho=0.5,
                           seed=3))
    games = GameSource.from_config(cfg, valid=False).train
    specs = [g for g in games for _ in range(2)]
    tasks = [{"uid": f"s7_t{i // 2}_r{i % 2}", "group_uid": f"s7_t{i // 2}"} for i in range(len(specs))]
    renderer = PromptRenderer(tokenizer)
    env = GameSource.make_env(specs, max_steps=5)
    acting = AdmissibleEngine(p_invalid=0.4).responder(tokenizer, None, 11)
    rng = np.random.default_rng(12)
    malformed = tokenizer("I am not sure what to do.")["input_ids"] + [tokenizer.eos_token_id]

    def respond(active, prompts):  # some outputs without the action format: their steps are penalised
        return [malformed if rng.random() < 0.3 else ids for ids in acting(active, prompts)]

    trajs = rollout(None, tokenizer, renderer, env, tasks, env_name="alfworld", history_length=1,
                    max_prompt_length=MAX_PROMPT, settings=GenerationSettings(), progress=False, respond=respond)
    env.close()
    return cfg, trajs, renderer


def agent_rows(cfg, trajs, renderer, global_step: int = 0) -> list[tuple[str, object]]:
    """``(key, AgentLoopOutput)`` of every step, keyed as verl keys the agent loop's outputs, generated with the
    weights of ``global_step``."""
    from training.verl.agent_loop import step_outputs

    rows = []
    for traj in trajs:
        session = traj.uid.rsplit("_r", 1)[1]
        for i, out in enumerate(step_outputs(traj, env_name="alfworld", renderer=renderer, max_prompt_length=MAX_PROMPT,
                                             invalid_penalty=cfg.invalid_action_penalty,
                                             weight_steps=(global_step, global_step))):
            rows.append((f"{traj.group_uid}_{session}_{i}", out))
    return rows


def teacher_context(tokenizer):
    """The baselines' privileged prompt of a step, as the trainers build it."""
    from training.teachers import teacher_context as context

    return context(tokenizer, "alfworld", MAX_PROMPT)


@dataclass
class SingleDevice:
    """The single-device trainer's quantities of the batch, rows in (trajectory, step) order."""

    keys: list
    old: list  # old log-probs of each step's response
    mask: torch.Tensor
    stats: object
    inputs: object
    expected: torch.Tensor  # token advantages


def single_device(cfg, trajs, renderer, model, method: str, step: int) -> SingleDevice:
    """The token advantages of ``method`` at ``step``, as the single-device trainer computes them
    (:func:`training.verl.parity.single_device_advantages`)."""
    from ocsd.algorithm.methods import get_method
    from training.verl.parity import single_device_advantages

    ref = single_device_advantages(trajs, model, renderer, spec=get_method(method), cfg=cfg, step=step,
                                   teacher_context=teacher_context(renderer.tokenizer))
    mask = ref.stats.mask
    old = [ref.stats.old_logp[i, : int(mask[i].sum())].numpy() for i in range(len(ref.keys))]
    return SingleDevice(ref.keys, old, mask, ref.stats, ref.inputs, ref.advantages)
