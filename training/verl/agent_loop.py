"""A verl agent loop that plays one episode of any registered environment and returns one output per step.

verl's v1 trainer hands every data-set row (:mod:`training.verl.tasks`) to the agent loop registered under its
``agent_name``, once per rollout of the group (``session_id``), and stores each
:class:`~verl.experimental.agent_loop.AgentLoopOutput` the loop returns as one training row, keyed
``{uid}_{session_id}_{index}``. :class:`EnvironmentAgentLoop` plays the row's task with the suite's own
environment, prompts and parser: :func:`training.rollout.loop.rollout` runs the episode in a worker thread and asks
verl's rollout server (``server_manager.generate``) for each response, so the prompts, the history fitting, the
output parsing and the feedback labels are exactly the single-device trainer's. Each interaction step becomes one
output:

* ``prompt_ids``: the interaction prompt the policy saw; ``response_ids``: what it generated (all of it trained on,
  ``response_mask`` all ones);
* ``reward_score``: the episode's outcome, 10 when won (SDAR, ``agent_system/environments/env_package/*/envs.py``);
  the invalid-action penalty of the step is in ``extra_fields`` and is the trainer's to apply, as SDAR's
  ``verl/trainer/ppo/ray_trainer.py:200-217`` does;
* ``extra_fields``: the step's identity (``ocsd_traj_uid``, ``ocsd_group_uid``, ``ocsd_step``), what the records
  need (task, observations o_k and o_{k+1}, admissible actions, shown history, action, labels, operator) and the
  pre-rendered prompt ids of the Full and Observation-Ablated replay views (``ocsd_view_ids``; None for a step
  whose views exceed the prompt length even without history), and the oldest and newest weight version the
  episode's responses came from (``min_global_steps``, ``max_global_steps``, which verl's store tags each row
  with). Rows are matched by these ids, never by order.

The OCSD settings (environment, task data, history length, prompt length, step cap, ...) come from the verl
config's top-level ``ocsd:`` section, read as a :class:`training.config.TrainConfig`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Sequence
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from ocsd.environments import get_environment
from ocsd.replay.prompts import PromptRenderer
from ocsd.replay.render import render_steps
from training.config import ConfigError, TrainConfig
from training.replay import step_record
from training.rollout.loop import GenerationSettings, Trajectory, rollout
from training.verl.tasks import AGENT_NAME, task_of_row

__all__ = ["EnvironmentAgentLoop", "REPLAY_VIEWS", "SUCCESS_REWARD", "ocsd_settings", "step_outputs", "task_source",
           "weight_span"]

SUCCESS_REWARD = 10.0
"""Reward of a won episode (SDAR: "win for 10, lose for 0", env_package/webshop/envs.py:47-50)."""
REPLAY_VIEWS = ("full", "ablated")
"""Views pre-rendered for every step."""

_LOCK = threading.Lock()
_SETTINGS: dict[str, TrainConfig] = {}
_SOURCES: dict[str, Any] = {}
_ENV_LOCK = threading.RLock()
"""Held by every environment call of a process: an agent-loop worker plays its episodes in threads of one process,
and TextWorld's grammar and PDDL parsers (ALFWorld's game loading and feedback) are not thread-safe."""


class _Serialized:
    """An environment whose method calls hold :data:`_ENV_LOCK` (responses are awaited outside it)."""

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name: str):
        value = getattr(self._env, name)
        if not callable(value):
            return value

        def locked(*args, **kwargs):
            with _ENV_LOCK:
                return value(*args, **kwargs)

        return locked


def ocsd_settings(trainer_config) -> TrainConfig:
    """The :class:`training.config.TrainConfig` of a verl config's top-level ``ocsd:`` section.

    Raises
    ------
    training.config.ConfigError
        The section is missing, or names a setting the suite does not have.
    """
    from omegaconf import OmegaConf

    section = trainer_config.get("ocsd") if hasattr(trainer_config, "get") else None
    if section is None:
        raise ConfigError("the verl config has no top-level 'ocsd' section (env, data, history_length, ...)")
    values = OmegaConf.to_container(section, resolve=True) if OmegaConf.is_config(section) else dict(section)
    known = set(TrainConfig.__dataclass_fields__)
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"ocsd: unknown setting(s) {unknown}; see training/config.py")
    return TrainConfig(**values)


def task_source(cfg: TrainConfig):
    """The task source of ``cfg``'s environment, one per process and settings (it may hold a server)."""
    key = repr(sorted(cfg.to_dict().items()))
    with _LOCK:
        if key not in _SOURCES:
            _SOURCES[key] = get_environment(cfg.env).load_runtime().task_source(cfg)
        return _SOURCES[key]


def weight_span(versions: Sequence[tuple[Any, Any]], default: int) -> tuple[int, int]:
    """The oldest and newest weight version over an episode's responses (each ``(min_global_steps,
    max_global_steps)`` of verl's rollout server output); ``default`` (the row's global step) where the server
    reported none."""
    lows = [int(lo) for lo, _ in versions if lo is not None]
    highs = [int(hi) for _, hi in versions if hi is not None]
    return (min(lows) if lows else int(default), max(highs) if highs else int(default))


def step_outputs(traj: Trajectory, *, env_name: str, renderer: PromptRenderer, max_prompt_length: int,
                 invalid_penalty: float, timings: dict[str, float] | None = None,
                 weight_steps: tuple[int | None, int | None] = (None, None)) -> list[AgentLoopOutput]:
    """One :class:`AgentLoopOutput` per interaction step of a finished trajectory, in step order.

    Parameters
    ----------
    traj : training.rollout.loop.Trajectory
    env_name : str
        Registry name of the environment (for the replay views).
    renderer : PromptRenderer
        Renders the replay views (the same chat template as the interaction prompts).
    max_prompt_length : int
        Longest view prompt; longer views are rendered with shortened history, as the trainer does.
    invalid_penalty : float
        The invalid-action penalty of a step whose output has no well-formed action (``ocsd_penalty``).
    timings : dict, optional
        The episode's seconds (:data:`training.rollout.loop.ROLLOUT_TIMINGS`), put in the last output's metrics.
    weight_steps : (int, int), optional
        The oldest and newest weight version (global step) the episode's responses were generated with
        (``min_global_steps``, ``max_global_steps`` in every output's ``extra_fields``; verl's store tags each row
        with them and its metrics read them).
    """
    records = [step_record(traj, s, env_name) for s in traj.steps]
    rendered, _ = render_steps(records, REPLAY_VIEWS, renderer, max_prompt_length) if records else ([], [])
    views = {i: {name: list(ids) for name, ids in r.contexts.items()} for i, r in rendered}
    reward = SUCCESS_REWARD if traj.won else 0.0
    outputs = []
    for k, s in enumerate(traj.steps):
        extra = {
            "ocsd_traj_uid": traj.uid, "ocsd_group_uid": traj.group_uid, "ocsd_step": k,
            "ocsd_n_steps": len(traj.steps), "ocsd_task": traj.task, "ocsd_task_type": traj.task_type,
            "ocsd_game": traj.game, "ocsd_obs": s.obs, "ocsd_obs_next": s.obs_next,
            "ocsd_admissible": list(s.admissible), "ocsd_history_shown": s.history_shown, "ocsd_action": s.action,
            "ocsd_well_formed": bool(s.well_formed), "ocsd_feedback_label": s.feedback_label,
            "ocsd_progress_label": s.progress_label, "ocsd_operator": s.operator, "ocsd_won": bool(traj.won),
            "ocsd_score": traj.score, "ocsd_penalty": 0.0 if s.well_formed else float(invalid_penalty),
            "ocsd_view_ids": views.get(k), "reward_extra_info": {},
            "min_global_steps": weight_steps[0], "max_global_steps": weight_steps[1],
        }
        metrics = AgentLoopMetrics()
        if timings and k == len(traj.steps) - 1:
            metrics = AgentLoopMetrics(generate_sequences=timings.get("time/rollout_generate", 0.0),
                                       tool_calls=timings.get("time/rollout_env", 0.0))
        outputs.append(AgentLoopOutput(prompt_ids=list(s.prompt_ids), response_ids=list(s.response_ids),
                                       response_mask=[1] * len(s.response_ids), reward_score=reward, num_turns=2,
                                       metrics=metrics, extra_fields=extra))
    return outputs


@register(AGENT_NAME)
class EnvironmentAgentLoop(AgentLoopBase):
    """Plays one episode of a data-set row's task through verl's rollout server (see the module docstring).

    Keyword arguments of :meth:`run` are the row's columns (:func:`training.verl.tasks.task_row`) and verl's
    ``uid`` (the group) and ``session_id`` (the rollout of the group).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        key = repr(self.config.get("ocsd"))  # one TrainConfig per distinct ocsd section (an id could be reused)
        with _LOCK:
            if key not in _SETTINGS:
                _SETTINGS[key] = ocsd_settings(self.config)
        self.settings = _SETTINGS[key]
        self.renderer = PromptRenderer(self.tokenizer)
        self.response_length = int(self.rollout_config.response_length)

    async def _generate(self, prompt_ids: list[int], sampling_params: dict[str, Any],
                        versions: list[tuple[Any, Any]]) -> list[int]:
        out = await self.server_manager.generate(request_id=uuid4().hex, prompt_ids=list(prompt_ids),
                                                 sampling_params=dict(sampling_params))
        extra = getattr(out, "extra_fields", None) or {}
        versions.append((extra.get("min_global_steps"), extra.get("max_global_steps")))
        return list(out.token_ids)[: self.response_length]

    def _play(self, task, env_name: str, tasks: list[dict], sampling_params: dict, loop, seed: int,
              timings: dict[str, float], versions: list) -> Trajectory:
        """The episode, in a worker thread: responses are awaited on the agent loop's event loop."""
        cfg = self.settings

        def respond(active: Sequence[int], prompts: Sequence[list[int]]) -> list[list[int]]:
            futures = [asyncio.run_coroutine_threadsafe(self._generate(p, sampling_params, versions), loop)
                       for p in prompts]
            return [f.result() for f in futures]

        with _ENV_LOCK:
            env = _Serialized(task_source(cfg).make_env([task], max_steps=cfg.max_steps, workers=0, seed=seed))
        try:
            return rollout(None, self.tokenizer, self.renderer, env, tasks, env_name=env_name,
                           history_length=cfg.history_length, max_prompt_length=cfg.max_prompt_length,
                           settings=GenerationSettings(max_new_tokens=self.response_length), progress=False,
                           respond=respond, timings=timings)[0]
        finally:
            env.close()

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> list[AgentLoopOutput]:
        if "ocsd_env" in kwargs and get_environment(str(kwargs["ocsd_env"])).name != get_environment(
                self.settings.env).name:
            raise ConfigError(f"data-set row of environment {kwargs['ocsd_env']!r}, but ocsd.env={self.settings.env!r}")
        source = await asyncio.get_running_loop().run_in_executor(None, task_source, self.settings)
        env_name, task = task_of_row(kwargs, source)
        uid = str(kwargs.get("uid") or uuid4().hex)
        session = int(kwargs.get("session_id", 0))
        seed = int(kwargs.get("global_steps", 0) or 0)
        tasks = [{"uid": f"{uid}_{session}", "group_uid": uid}]
        loop, timings, versions = asyncio.get_running_loop(), {}, []
        start = time.perf_counter()
        traj = await loop.run_in_executor(None, self._play, task, env_name, tasks, sampling_params, loop, seed,
                                          timings, versions)
        timings["time/episode"] = time.perf_counter() - start
        return step_outputs(traj, env_name=env_name, renderer=self.renderer,
                            max_prompt_length=self.settings.max_prompt_length,
                            invalid_penalty=self.settings.invalid_action_penalty, timings=timings,
                            weight_steps=weight_span(versions, seed))
