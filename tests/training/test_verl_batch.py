"""OCSD's token advantages on verl rows equal the single-device trainer's on the same batch.

A batch of real ALFWorld episodes (two tasks x two rollouts, answered with admissible actions, some made
inadmissible) goes both ways:

* single-device: :func:`training.pipeline.step_statistics`, the views rendered and scored by
  :class:`ocsd.replay.scoring.ReplayScorer` (:func:`training.replay.score_steps`), :func:`token_inputs`, the method's
  :func:`token_advantages`, as :meth:`training.trainer.Trainer.train_step` does;
* veRL: each step as the agent loop's output (:func:`training.verl.agent_loop.step_outputs`, with its pre-rendered
  view ids), shuffled as verl reorders rows, regrouped by ids, its views scored by plain forwards of the view
  ids and the response (as the actor's ``compute_log_prob`` does), through :func:`batch_advantages`.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

from tests.diagnostics.acting import AdmissibleEngine  # noqa: E402


@pytest.fixture(scope="module")
def batch(alfworld_games, smollm2_tokenizer):
    from ocsd.replay.prompts import PromptRenderer
    from training.config import make_config
    from training.envs.games import GameSource
    from training.rollout import GenerationSettings, rollout

    cfg = make_config(dict(data="generated", games_dir=str(alfworld_games), n_train_games=2, n_val_games=2,
                           max_steps=5, history_length=1, max_prompt_length=1024, progress=False, rho=0.5, seed=3))
    games = GameSource.from_config(cfg, valid=False).train
    specs = [g for g in games for _ in range(2)]
    tasks = [{"uid": f"s7_t{i // 2}_r{i % 2}", "group_uid": f"s7_t{i // 2}"} for i in range(len(specs))]
    renderer = PromptRenderer(smollm2_tokenizer)
    env = GameSource.make_env(specs, max_steps=5)
    acting = AdmissibleEngine(p_invalid=0.4).responder(smollm2_tokenizer, None, 11)
    rng = np.random.default_rng(12)
    malformed = smollm2_tokenizer("I am not sure what to do.")["input_ids"] + [smollm2_tokenizer.eos_token_id]

    def respond(active, prompts):  # some outputs without the action format: their steps are penalised
        return [malformed if rng.random() < 0.3 else ids for ids in acting(active, prompts)]

    trajs = rollout(None, smollm2_tokenizer, renderer, env, tasks, env_name="alfworld", history_length=1,
                    max_prompt_length=1024, settings=GenerationSettings(), progress=False, respond=respond)
    env.close()
    return cfg, trajs, renderer


@pytest.mark.parametrize("method", ["ocsd", "grpo", "ocsd_random_select", "ocsd_no_ablated", "sdar"])
def test_verl_rows_give_the_single_device_advantages(batch, tiny_model, method):
    from ocsd.algorithm.advantages import linear_decay
    from ocsd.algorithm.methods import get_method, token_advantages
    from ocsd.replay.scoring import ReplayScorer, sequence_logprobs
    from training.pipeline import step_keys, step_statistics, token_inputs
    from training.replay import score_steps
    from training.teachers import skill_prefix, teacher_prompt_ids
    from training.verl.agent_loop import step_outputs
    from training.verl.batch import StepRow, batch_advantages

    cfg, trajs, renderer = batch
    spec, step = get_method(method), 7
    keys = step_keys(trajs)
    old = [sequence_logprobs(tiny_model, trajs[t].steps[k].prompt_ids, trajs[t].steps[k].response_ids)
           for t, k in keys]
    width = max(len(x) for x in old)
    logp, mask = torch.zeros(len(old), width), torch.zeros(len(old), width, dtype=torch.bool)
    for i, x in enumerate(old):
        logp[i, : len(x)], mask[i, : len(x)] = torch.from_numpy(x), True

    # single-device
    stats = step_statistics(trajs, logp, mask, reward_mode=cfg.reward_mode, invalid_penalty=cfg.invalid_action_penalty,
                            selection=spec.selection, rho=cfg.rho, generator=np.random.default_rng([cfg.seed, step, 3]))
    scorer = ReplayScorer(tiny_model, progress=False)
    scores = score_steps(scorer, renderer, trajs, stats.selected_keys, list(spec.replay_views), stats.student_logp(),
                         env_name="alfworld", max_prompt_length=1024) if spec.replay_views else None
    from training.replay import ReplayScores

    def teacher_context(traj, s):  # the baselines' privileged prompt, as Trainer._teacher_logp builds it
        return teacher_prompt_ids(renderer.tokenizer, s.prompt_ids, skill_prefix("alfworld", traj.task_type), 1024)

    teacher_logp = None
    if spec.privileged_teacher:
        teacher_logp = torch.zeros_like(logp)
        for i, (t, k) in enumerate(keys):
            s = trajs[t].steps[k]
            teacher_logp[i, : len(old[i])] = torch.from_numpy(
                sequence_logprobs(tiny_model, teacher_context(trajs[t], s), s.response_ids))
    inputs = token_inputs(spec, stats, scores or ReplayScores(), teacher_logp)
    expected = token_advantages(spec, inputs, beta=cfg.beta,
                                rlsd_lambda=linear_decay(step, cfg.rlsd_lambda, cfg.rlsd_warmdown_steps),
                                rlsd_clip_eps=cfg.rlsd_clip_eps)

    # veRL: the agent loop's outputs, keyed as verl keys them, in a shuffled order
    rows = []
    for traj in trajs:
        session = traj.uid.rsplit("_r", 1)[1]
        for i, out in enumerate(step_outputs(traj, env_name="alfworld", renderer=renderer, max_prompt_length=1024,
                                             invalid_penalty=cfg.invalid_action_penalty)):
            rows.append(StepRow(f"{traj.group_uid}_{session}_{i}", out.prompt_ids, out.response_ids, out.extra_fields))
    order = np.random.default_rng(0).permutation(len(rows))
    rows = [rows[i] for i in order]
    by_pair = {(r.extra["ocsd_traj_uid"], r.extra["ocsd_step"]): r.key for r in rows}
    old_by_key = {by_pair[(trajs[t].uid, k)]: old[i] for i, (t, k) in enumerate(keys)}
    asked = []

    def score(requests):
        asked.extend(requests)
        return {(r.key, r.view): sequence_logprobs(tiny_model, r.context_ids, r.response_ids) for r in requests}

    got = batch_advantages(rows, old_by_key, spec=spec, cfg=cfg, step=step, score=score,
                           teacher_context=teacher_context)

    assert [t.uid for t in got.trajs] == [t.uid for t in trajs]
    assert torch.equal(got.stats.selected, stats.selected) and np.allclose(got.stats.advantages, stats.advantages)
    assert np.abs(stats.advantages).max() > 0  # penalised steps: GRPO advantages are not all zero
    views = [r for r in asked if r.view != "teacher"]
    assert {r.view for r in views} == set(spec.replay_views)
    assert len(views) == len(spec.replay_views) * int(stats.selected.sum())
    assert sum(r.view == "teacher" for r in asked) == (len(keys) if spec.privileged_teacher else 0)
    for i, (t, k) in enumerate(keys):
        adv = got.advantages[by_pair[(trajs[t].uid, k)]]
        assert adv.shape == (len(old[i]),)
        torch.testing.assert_close(adv, expected[i, : len(old[i])], atol=2e-4, rtol=1e-4)
    if spec.signal:  # the residual moved some advantages away from GRPO's
        assert not torch.allclose(expected[mask], inputs.adv[:, None].expand_as(expected)[mask])


def test_rows_that_do_not_make_whole_trajectories_are_refused(batch):
    from training.verl.agent_loop import step_outputs
    from training.verl.batch import RowError, StepRow, trajectories_of_rows

    cfg, trajs, renderer = batch
    traj = max(trajs, key=lambda t: len(t.steps))
    outs = step_outputs(traj, env_name="alfworld", renderer=renderer, max_prompt_length=1024, invalid_penalty=0.1)
    rows = [StepRow(f"k{i}", o.prompt_ids, o.response_ids, o.extra_fields) for i, o in enumerate(outs)]
    with pytest.raises(RowError, match=r"expected 0\.\.\d+"):
        trajectories_of_rows(rows[1:])
    with pytest.raises(RowError, match="step 0 in rows 'k0' and 'again'"):
        trajectories_of_rows(rows + [StepRow("again", rows[0].prompt_ids, rows[0].response_ids, rows[0].extra)])
    with pytest.raises(RowError, match="lack 'ocsd_traj_uid'"):
        trajectories_of_rows([StepRow("bare", [1], [2], {})])
