"""Replay scoring of trajectories (training.replay.score_steps) against the scorer called on each step."""

from __future__ import annotations

import numpy as np

from ocsd.replay.prompts import PromptRenderer
from ocsd.replay.render import render_views
from ocsd.replay.scoring import ReplayScorer, sequence_logprobs
from training.replay import score_steps, step_record
from training.rollout.loop import StepSample, Trajectory


def _trajectories(rng: np.random.Generator, n: int, steps: int) -> list[Trajectory]:
    trajs = []
    for t in range(n):
        traj = Trajectory(uid=f"u{t}", group_uid="g", task="put a clean mug in coffeemachine.",
                          task_type="pick_clean_then_place_in_recep", game="game")
        history: list[tuple[str, str]] = []
        for k in range(steps):
            obs = f"You see {int(rng.integers(1, 9))} things, a mug {k} and a sink {t}. " * int(rng.integers(1, 6))
            action = f"go to sinkbasin {int(rng.integers(1, 3))}"
            traj.steps.append(StepSample(
                step_idx=k, obs=obs, admissible=["look", action], history=list(history), history_shown=min(k, 2),
                prompt_ids=[1, 2], response_ids=rng.integers(3, 4000, int(rng.integers(1, 12))).tolist(),
                response_text="", action=action, well_formed=True, obs_next=f"Nothing happens {t}.{k}."))
            history.append((obs, action))
        trajs.append(traj)
    return trajs


def test_score_steps_in_chunks_matches_each_step_scored_alone(tiny_model, smollm2_tokenizer):
    renderer = PromptRenderer(smollm2_tokenizer)
    trajs = _trajectories(np.random.default_rng(0), 3, 4)
    keys = [(t, k) for t in range(3) for k in range(4)]
    student = {key: np.full(len(trajs[key[0]].steps[key[1]].response_ids), -1.5, np.float32) for key in keys}
    scorer = ReplayScorer(tiny_model, progress=False)
    limit = 400
    results = []
    for chunks in (1, 3, 50):
        timings: dict[str, float] = {}
        results.append(score_steps(scorer, renderer, trajs, keys, ["ablated", "full"], student, env_name="alfworld",
                                   max_prompt_length=limit, timings=timings, chunks=chunks))
        assert set(timings) == {"time/replay_render", "time/replay_forward"} and min(timings.values()) > 0
    first = results[0]
    assert first.truncated > 0 and len(first.logp) + len(first.skipped) == len(keys)
    for other in results[1:]:
        assert other.truncated == first.truncated and other.skipped == first.skipped
        assert other.logp.keys() == first.logp.keys()
        for key in first.logp:
            for view in ("student", "full", "ablated"):
                # other batch compositions: float rounding only
                np.testing.assert_allclose(other.logp[key][view], first.logp[key][view], rtol=0, atol=1e-5)
    for key, logps in first.logp.items():
        t, k = key
        np.testing.assert_array_equal(logps["student"], student[key])
        step = render_views(step_record(trajs[t], trajs[t].steps[k], "alfworld"), ["ablated", "full"], renderer, limit)
        for view in ("full", "ablated"):
            ref = sequence_logprobs(tiny_model, step.contexts[view], step.response_ids)
            assert np.abs(logps[view] - ref).max() < 1e-4
