"""The pipelined rollout (each environment on its own: response to the environment at once, next prompt to the
stream at once) plays every episode exactly as the turn-by-turn rollout does."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("alfworld", reason="alfworld==0.4.2 is not installed (pip install -e .[envs])")

from training.warm_start.demonstrations import response_ids  # noqa: E402
from training.envs.alfworld import AlfworldBatchEnv, expert_walkthrough  # noqa: E402
from training.rollout.loop import ROLLOUT_TIMINGS, BatchStream, GenerationSettings, rollout  # noqa: E402


@pytest.fixture(scope="module")
def specs(alfworld_games):
    from training.config import make_config
    from training.envs.alfworld.tasks import GameSource

    cfg = make_config(dict(data="generated", games_dir=str(alfworld_games), n_train_games=2, n_val_games=2, seed=0,
                           progress=False))
    source = GameSource.from_config(cfg)
    games = list(source.train) + list(source.valid)
    return [games[i % len(games)] for i in range(8)]


def _responder(tokenizer, specs):
    """Environment ``i``'s k-th answer, whatever order it is asked in: the expert's k-th action for even ``i``
    (a win within the step cap), a malformed answer or an invalid action for odd ``i``."""
    plans = [expert_walkthrough(s) for s in specs]
    taken = [0] * len(specs)

    def respond(active, prompts):
        out = []
        for i in active:
            k = taken[i]
            taken[i] += 1
            if i % 2 == 0:
                out.append(response_ids(tokenizer, plans[i][k] if k < len(plans[i]) else "look", "plan"))
            else:
                out.append(tokenizer.encode("no tags at all", add_special_tokens=False) if k % 3 == 0
                           else response_ids(tokenizer, "jump over the fridge", "bad"))
        return out

    return respond


class OneAtATime(BatchStream):
    """A stream whose ``poll`` finishes one waiting prompt, picked by a seeded generator: responses come back
    in an order unlike the order of submission, as from an engine that runs many requests at once."""

    def __init__(self, respond, seed: int) -> None:
        super().__init__(respond)
        self.rng = np.random.default_rng(seed)
        self.polls = 0

    def poll(self):
        self.polls += 1
        if not self._queue:
            return []
        key, prompt = self._queue.pop(int(self.rng.integers(len(self._queue))))
        return [(key, self.respond([key], [prompt])[0])]


def _play(tokenizer, specs, *, workers, stream=None, max_steps=8):
    from ocsd.replay.prompts import PromptRenderer

    respond = _responder(tokenizer, specs)
    timings: dict[str, float] = {}
    with AlfworldBatchEnv(specs, max_steps=max_steps, num_workers=workers, seed=1) as env:
        trajs = rollout(None, tokenizer, PromptRenderer(tokenizer), env,
                        [{"uid": f"t{i}", "group_uid": f"g{i // 2}"} for i in range(len(specs))], env_name="alfworld",
                        history_length=2, max_prompt_length=2048, settings=GenerationSettings(), progress=False,
                        respond=respond, stream=None if stream is None else stream(respond), timings=timings)
    return trajs, timings


def _fields(trajs):
    return [(t.uid, t.group_uid, t.game, t.won, t.done, t.score,
             [(s.step_idx, s.obs, s.admissible, s.history, s.history_shown, s.prompt_ids, s.response_ids,
               s.response_text, s.action, s.well_formed, s.obs_next, s.feedback_label, s.progress_label, s.operator)
              for s in t.steps]) for t in trajs]


@pytest.mark.parametrize("workers, make", [
    (0, BatchStream),
    (2, BatchStream),
    (3, lambda respond: OneAtATime(respond, seed=0)),
    (0, lambda respond: OneAtATime(respond, seed=1)),
])
def test_pipelined_rollout_plays_the_turn_by_turn_episodes(smollm2_tokenizer, specs, workers, make):
    want, _ = _play(smollm2_tokenizer, specs, workers=0)
    assert any(t.won for t in want) and not all(t.won for t in want)
    assert len({len(t.steps) for t in want}) > 1  # episodes of different lengths
    got, timings = _play(smollm2_tokenizer, specs, workers=workers, stream=make)
    assert _fields(got) == _fields(want)
    assert set(ROLLOUT_TIMINGS) <= set(timings) and all(v >= 0 for v in timings.values())


def test_streams_without_environment_support_play_turn_by_turn(smollm2_tokenizer, specs):
    """An environment without ``submit`` (one that only steps whole batches) plays turn by turn with the
    responder, and the stream is left unused."""
    from ocsd.replay.prompts import PromptRenderer

    class WholeBatches:
        def __init__(self, env):
            self.env = env

        def reset(self):
            return self.env.reset()

        def step(self, actions):
            return self.env.step(actions)

    want, _ = _play(smollm2_tokenizer, specs, workers=0)
    respond = _responder(smollm2_tokenizer, specs)
    stream = OneAtATime(respond, seed=0)
    with AlfworldBatchEnv(specs, max_steps=8, num_workers=0, seed=1) as env:
        got = rollout(None, smollm2_tokenizer, PromptRenderer(smollm2_tokenizer), WholeBatches(env),
                      [{"uid": f"t{i}", "group_uid": f"g{i // 2}"} for i in range(len(specs))], env_name="alfworld",
                      history_length=2, max_prompt_length=2048, settings=GenerationSettings(), progress=False,
                      respond=respond, stream=stream)
    assert _fields(got) == _fields(want) and stream.polls == 0


def test_a_failed_rollout_leaves_nothing_in_the_stream(smollm2_tokenizer, specs):
    """An error in the middle of a pipelined rollout (here the responder's) propagates, and the stream
    is closed: no prompt of the failed rollout is left to answer."""
    calls = []

    def respond(active, prompts):
        calls.append(len(active))
        if len(calls) == 3:
            raise RuntimeError("engine failed")
        return [response_ids(smollm2_tokenizer, "look", "r") for _ in active]

    stream = OneAtATime(respond, seed=2)
    from ocsd.replay.prompts import PromptRenderer

    with AlfworldBatchEnv(specs, max_steps=4, num_workers=2, seed=1) as env:
        with pytest.raises(RuntimeError, match="engine failed"):
            rollout(None, smollm2_tokenizer, PromptRenderer(smollm2_tokenizer), env,
                    [{"uid": f"t{i}", "group_uid": "g"} for i in range(len(specs))], env_name="alfworld",
                    history_length=2, max_prompt_length=2048, settings=GenerationSettings(), progress=False,
                    stream=stream)
    assert stream.pending() == 0
