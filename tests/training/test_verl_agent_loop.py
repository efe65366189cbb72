"""The veRL agent loop against a server manager that answers like a rollout server, on the real ALFWorld engine.

The fake server manager answers each prompt with an admissible action read from the prompt (sometimes made
inadmissible), as verl's ``LLMServerClient.generate`` answers with a ``TokenOutput``. The loop's outputs are
compared with the single-device rollout of the same game answered by the same responses.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("verl")

from omegaconf import OmegaConf  # noqa: E402

from tests.rescoring.acting import AdmissibleEngine  # noqa: E402


class FakeServerManager:
    """``generate(request_id, prompt_ids=..., sampling_params=...)`` -> a verl ``TokenOutput``."""

    def __init__(self, tokenizer, seed: int = 0, versions=None):
        self.respond = AdmissibleEngine(p_invalid=0.3).responder(tokenizer, None, seed)
        self.calls, self.versions = [], list(versions or [])

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.calls.append((request_id, list(prompt_ids), dict(sampling_params)))
        await asyncio.sleep(0)
        extra = {}
        if self.versions:  # the weight version verl's LLMServerClient reports with each output
            step = self.versions[min(len(self.calls) - 1, len(self.versions) - 1)]
            extra = {"global_steps": step, "min_global_steps": step, "max_global_steps": step}
        return TokenOutput(token_ids=self.respond([0], [list(prompt_ids)])[0], extra_fields=extra)


def verl_config(games_dir, **ocsd):
    settings = dict(env="alfworld", data="generated", games_dir=str(games_dir), n_train_games=2, n_val_games=2,
                    max_steps=4, history_length=1, max_prompt_length=1024, progress=False)
    settings.update(ocsd)
    return OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 1024, "response_length": 64}},
                             "data": {}, "ocsd": settings})


def make_loop(config, tokenizer, server):
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap

    from training.verl.agent_loop import EnvironmentAgentLoop

    return EnvironmentAgentLoop(trainer_config=DictConfigWrap(config), server_manager=server, tokenizer=tokenizer,
                                processor=None, dataset_cls=None, data_config=DictConfigWrap(config.data))


def test_agent_loop_rows_match_the_single_device_rollout(alfworld_games, smollm2_tokenizer, no_user_data):
    from ocsd.replay.prompts import PromptRenderer
    from ocsd.replay.render import render_steps
    from training.config import make_config
    from training.envs.alfworld.tasks import GameSource
    from training.replay import step_record
    from training.rollout.loop import GenerationSettings, rollout
    from training.verl.tasks import task_of_row, task_row

    config = verl_config(alfworld_games)
    cfg = make_config(dict(config.ocsd))
    source = GameSource.from_config(cfg)
    game = source.valid[0]
    row = task_row("alfworld", game, index=0, split="valid")
    assert task_of_row(row, source) == ("alfworld", game) and row["ocsd_game"] == game.path

    server = FakeServerManager(smollm2_tokenizer, seed=5, versions=[4, 5])  # weights updated after the 1st reply
    loop = make_loop(config, smollm2_tokenizer, server)
    outputs = asyncio.run(loop.run({"temperature": 1.0, "top_p": 1.0}, **row, uid="g0", session_id=3))

    reference = FakeServerManager(smollm2_tokenizer, seed=5).respond
    env = GameSource.make_env([game], max_steps=4)
    renderer = PromptRenderer(smollm2_tokenizer)
    traj = rollout(None, smollm2_tokenizer, renderer, env, [{"uid": "g0_3", "group_uid": "g0"}], env_name="alfworld",
                   history_length=1, max_prompt_length=1024, settings=GenerationSettings(), progress=False,
                   respond=reference)[0]
    env.close()

    assert len(outputs) == len(traj.steps) >= 1 and len(server.calls) == len(traj.steps)
    assert all(call[2] == {"temperature": 1.0, "top_p": 1.0} for call in server.calls)
    rendered = dict(render_steps([step_record(traj, s, "alfworld") for s in traj.steps], ("full", "ablated"),
                                 renderer, 1024)[0])
    for k, (out, step) in enumerate(zip(outputs, traj.steps)):
        extra = out.extra_fields
        assert out.prompt_ids == step.prompt_ids and out.response_ids == step.response_ids
        assert out.response_mask == [1] * len(step.response_ids)
        assert (extra["ocsd_traj_uid"], extra["ocsd_group_uid"], extra["ocsd_step"]) == ("g0_3", "g0", k)
        assert extra["ocsd_action"] == step.action and extra["ocsd_obs_next"] == step.obs_next
        assert extra["ocsd_feedback_label"] == step.feedback_label and extra["ocsd_operator"] == step.operator
        assert extra["ocsd_penalty"] == (0.0 if step.well_formed else 0.1)
        assert extra["ocsd_view_ids"] == {name: rendered[k].contexts[name] for name in ("full", "ablated")}
        assert out.reward_score == (10.0 if traj.won else 0.0)
        assert (extra["min_global_steps"], extra["max_global_steps"]) == (4, 5 if len(traj.steps) > 1 else 4)
    # the Full view shows o_{k+1}, the Ablated one does not: their ids differ
    assert outputs[0].extra_fields["ocsd_view_ids"]["full"] != outputs[0].extra_fields["ocsd_view_ids"]["ablated"]
    assert {o.extra_fields["ocsd_feedback_label"] for o in outputs} <= {"valid", "invalid", "ambiguous"}


def test_weight_span_over_an_episode():
    from training.verl.agent_loop import weight_span

    assert weight_span([(3, 3), (None, None), (2, 4)], default=9) == (2, 4)
    assert weight_span([(None, None)], default=7) == (7, 7) and weight_span([], default=0) == (0, 0)


def test_agent_loop_refuses_rows_it_cannot_play(alfworld_games, smollm2_tokenizer, no_user_data):
    from training.config import ConfigError, make_config
    from training.envs.alfworld.tasks import GameSource
    from training.verl.tasks import TaskRowError, task_of_row, task_row

    config = verl_config(alfworld_games)
    source = GameSource.from_config(make_config(dict(config.ocsd)))
    row = task_row("alfworld", source.train[1], index=1, split="train")
    with pytest.raises(TaskRowError, match=r"train\[0\] of the task source is .* the row names"):
        task_of_row({**row, "ocsd_index": 0}, source)
    with pytest.raises(TaskRowError, match="ocsd_index=7: the task source has 2 train tasks"):
        task_of_row({**row, "ocsd_index": 7}, source)
    loop = make_loop(config, smollm2_tokenizer, FakeServerManager(smollm2_tokenizer))
    with pytest.raises(TaskRowError, match=r"lacks \['ocsd_env'"):
        asyncio.run(loop.run({}, prompt=[]))
    with pytest.raises(ConfigError, match="data-set row of environment 'webshop', but ocsd.env='alfworld'"):
        asyncio.run(loop.run({}, **{**row, "ocsd_env": "webshop"}))
    with pytest.raises(ConfigError, match="no top-level 'ocsd' section"):
        make_loop(OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 8, "response_length": 8}},
                                    "data": {}}), smollm2_tokenizer, None)
    with pytest.raises(ConfigError, match=r"unknown setting\(s\) \['bogus'\]"):
        make_loop(verl_config(alfworld_games, bogus=1), smollm2_tokenizer, None)


def test_agent_loop_plays_webshop(tmp_path, smollm2_tokenizer):
    """The same agent loop on another environment of the registry: WebShop's generated shop, one output per
    step with WebShop's labels and the episode's task score."""
    from training.config import make_config
    from training.verl.tasks import task_of_row, task_row

    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 2048, "response_length": 64}},
                               "data": {}, "ocsd": dict(env="webshop", data="generated", games_dir=str(tmp_path),
                                                        n_train_games=4, n_val_games=2, max_steps=4,
                                                        max_prompt_length=2048, progress=False)})
    from ocsd.environments import get_environment

    source = get_environment("webshop").load_runtime().task_source(make_config(dict(config.ocsd)))
    row = task_row("webshop", source.valid[1], index=1, split="valid")
    assert task_of_row(row, source)[1].game == source.valid[1].game
    outputs = asyncio.run(make_loop(config, smollm2_tokenizer, FakeServerManager(smollm2_tokenizer, seed=2)).run(
        {}, **row, uid="w", session_id=0))
    assert 1 <= len(outputs) <= 4
    assert [o.extra_fields["ocsd_step"] for o in outputs] == list(range(len(outputs)))
    assert {o.extra_fields["ocsd_operator"] for o in outputs} <= {"search", "click", "other"}
    assert all(o.extra_fields["ocsd_view_ids"] for o in outputs)
    assert outputs[-1].extra_fields["ocsd_score"] is None or 0.0 <= outputs[-1].extra_fields["ocsd_score"] <= 1.0


def test_episodes_played_side_by_side_equal_those_played_alone(alfworld_games, smollm2_tokenizer, no_user_data):
    """verl's agent-loop worker runs many episodes at once, each in a thread of one process; ALFWorld's game
    loading and feedback (TextWorld's grammar and PDDL parsers) are not thread-safe, so the loop serialises its
    environment calls. Eight episodes run together give the same rows as each run alone."""
    from training.config import make_config
    from training.envs.alfworld.tasks import GameSource
    from training.verl.tasks import task_row

    config = verl_config(alfworld_games, max_steps=6)
    source = GameSource.from_config(make_config(dict(config.ocsd)))
    rows = [task_row("alfworld", game, index=i, split="valid") for i, game in enumerate(source.valid)]
    episodes = [(rows[i % len(rows)], f"g{i % len(rows)}", i) for i in range(8)]

    def play(row, uid, session):  # one loop and server per episode: its responses depend on it alone
        loop = make_loop(config, smollm2_tokenizer, FakeServerManager(smollm2_tokenizer, seed=session))
        return loop.run({"temperature": 1.0, "top_p": 1.0}, **row, uid=uid, session_id=session)

    async def together():
        return await asyncio.gather(*(play(*e) for e in episodes))

    alone = [asyncio.run(play(*e)) for e in episodes]
    side_by_side = asyncio.run(together())
    for a, b in zip(alone, side_by_side):
        assert [(o.prompt_ids, o.response_ids, o.extra_fields["ocsd_obs_next"], o.extra_fields["ocsd_view_ids"])
                for o in a] == [(o.prompt_ids, o.response_ids, o.extra_fields["ocsd_obs_next"],
                                 o.extra_fields["ocsd_view_ids"]) for o in b]
