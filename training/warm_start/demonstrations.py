"""Expert demonstrations for a supervised warm start, played through the policy's own rollout.

An expert of the environment's runtime answers each step of :func:`training.rollout.loop.rollout` instead of a
model, so every demonstration context is exactly the interaction prompt the policy acts on. The ``expert`` setting
names it where the runtime has several (ALFWorld: ``search``, :mod:`training.envs.alfworld.search`, which looks for
the objects and reacts to each observation; ``walkthrough``, the planner's precomputed plan); else it is the
runtime's ``demonstration``. An episode the expert does not win within ``max_steps`` (a search too long for the
step cap, a task it gives up on) is left out and counted. :func:`build_demonstrations` keeps them in
``run_dir/demonstrations/{train,valid}.parquet`` (token ids per step) with ``info.json`` (the settings that made
them, the expert among them, the games, the counts).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from training.config import ConfigError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DEMO_DIR", "DEMO_KEYS", "build_demonstrations", "check_expert", "demonstration_rows", "expert_episodes",
           "experts_of", "response_ids"]

DEMO_DIR = "demonstrations"
# the settings that decide the demonstrations (a change rebuilds them)
DEMO_KEYS = ("env", "expert", "data", "n_train_games", "n_val_games", "train_split", "val_split", "seed", "model",
             "max_steps", "history_length", "max_prompt_length")
GIVE_UP = ("look", "I look around.")
"""What answers the steps after an expert has nothing left to do (the episode runs to the step cap, is not won and
is left out)."""


def experts_of(runtime, env: str, name: str, seed: int):
    """``task -> expert`` for the demonstrations: the runtime's expert ``name`` (seeded with ``seed``) where it has
    several, else its ``demonstration``.

    Raises
    ------
    ConfigError
        Naming ``expert`` when the runtime has several experts and none is called ``name``, or ``env`` when it has
        none.
    """
    unknown = _unknown_expert(runtime, env, name)
    if unknown:
        raise ConfigError(unknown)
    if runtime.experts:
        expert = runtime.experts[name]
        return lambda task: expert(task, seed)
    if runtime.demonstration is None:
        raise ConfigError(f"env: {env!r} has no expert to demonstrate its tasks")
    return runtime.demonstration


def check_expert(env: str, name: str) -> None:
    """Check the ``expert`` setting against the experts of ``env``'s runtime (nothing to check when the runtime
    cannot be imported here: building the demonstrations reports that).

    Raises
    ------
    ConfigError
        Naming ``expert`` when the runtime has several experts and none is called ``name``.
    """
    from ocsd.environments import RuntimeNotImplemented, get_environment

    try:
        runtime = get_environment(env).load_runtime()
    except (ImportError, RuntimeNotImplemented):
        return
    unknown = _unknown_expert(runtime, env, name)
    if unknown:
        raise ConfigError(unknown)


def _unknown_expert(runtime, env: str, name: str) -> str | None:
    """The error of an ``expert`` setting the runtime does not have, where it names several; None otherwise."""
    if runtime.experts and name not in runtime.experts:
        return f"expert: {env} has no expert {name!r}; its experts: {', '.join(runtime.experts)}"
    return None


class _Scripted:
    """A precomputed play as an expert: its steps in order, whatever it is shown."""

    def __init__(self, play) -> None:
        self._steps = iter(list(play))

    def act(self, observation: str, admissible) -> tuple[str, str] | None:
        return next(self._steps, None)


def _reacting(expert):
    """An expert with ``act``: ``expert`` itself, or a precomputed play as one."""
    return expert if hasattr(expert, "act") else _Scripted(expert)


class _Watched:
    """A batched environment that keeps what each of its environments showed last (text, admissible commands)."""

    def __init__(self, env) -> None:
        self.env = env
        self.shown: list[tuple[str, list[str]]] = []

    def reset(self):
        observations = self.env.reset()
        self.shown = [(o.text, list(o.admissible)) for o in observations]
        return observations

    def step(self, actions: list[str]):
        results = self.env.step(actions)
        for i, (action, result) in enumerate(zip(actions, results)):
            if action:
                self.shown[i] = (result.obs, list(result.admissible))
        return results


def response_ids(tokenizer, action: str, reason: str) -> list[int]:
    """Token ids of the response ``<reason>reason</reason><action>action</action>`` and the stop token."""
    from training.rollout.loop import stop_ids

    text = f"<reason>{reason}</reason><action>{action}</action>"
    return list(tokenizer.encode(text, add_special_tokens=False)) + [stop_ids(tokenizer)[0]]


def expert_episodes(source, specs: Sequence, expert, tokenizer, renderer, *, env: str, max_steps: int,
                    history_length: int, max_prompt_length: int, workers: int = 0, chunk: int = 32,
                    progress: bool = True):
    """Play every task of ``specs`` with the expert answering through :func:`training.rollout.loop.rollout`.

    ``expert(task)`` gives a precomputed play ``[(action, reason), ...]`` or an expert whose ``act(observation,
    admissible) -> (action, reason) | None`` is called with each observation of the episode as the environment
    shows it (see :class:`training.envs.runtime.EnvironmentRuntime`). Once it has nothing left to do, the steps
    are answered with :data:`GIVE_UP` until the step cap. Returns the trajectories (one per task); a task whose
    demonstration does not win is still returned (``won`` False), and the caller decides.
    """
    from tqdm.auto import tqdm

    from training.rollout.loop import GenerationSettings, rollout

    trajs = []
    bar = tqdm(total=len(specs), desc="demonstrations", unit="game", disable=not progress)
    for start in range(0, len(specs), chunk):
        part = list(specs[start:start + chunk])
        experts = [_reacting(expert(spec)) for spec in part]
        envs = _Watched(source.make_env(part, max_steps=max_steps, workers=workers, seed=0))

        def respond(active: list[int], prompts: list[list[int]], experts=experts, envs=envs) -> list[list[int]]:
            return [response_ids(tokenizer, *(experts[i].act(*envs.shown[i]) or GIVE_UP)) for i in active]

        try:
            tasks = [{"uid": f"demo{start + i}", "group_uid": f"demo{start + i}"} for i in range(len(part))]
            trajs += rollout(None, tokenizer, renderer, envs, tasks, env_name=env, history_length=history_length,
                             max_prompt_length=max_prompt_length, settings=GenerationSettings(), progress=False,
                             respond=respond)
        finally:
            envs.env.close()
        bar.update(len(part))
    bar.close()
    return trajs


def demonstration_rows(trajs) -> "pd.DataFrame":
    """One row per step of the winning trajectories: game, task type, step, prompt and response ids."""
    import pandas as pd

    rows = [{"game": t.game, "task_type": t.task_type, "step": s.step_idx, "prompt_ids": list(s.prompt_ids),
             "response_ids": list(s.response_ids), "action": s.action, "history_shown": s.history_shown}
            for t in trajs if t.won for s in t.steps]
    return pd.DataFrame(rows, columns=["game", "task_type", "step", "prompt_ids", "response_ids", "action",
                                       "history_shown"])


def build_demonstrations(cfg, tokenizer, renderer) -> dict[str, "pd.DataFrame"]:
    """The training and validation demonstrations of ``cfg`` (a :class:`training.warm_start.sft.SFTConfig`): read from
    ``run_dir/demonstrations`` when they were built with the same settings, else played now (and saved there).

    Raises
    ------
    ConfigError
        When the environment's runtime has no expert (or none called ``expert``), or no demonstration wins.
    """
    import pandas as pd

    folder = Path(cfg.run_dir) / DEMO_DIR
    info = {key: getattr(cfg, key) for key in DEMO_KEYS}
    saved = folder / "info.json"
    if saved.is_file() and json.loads(saved.read_text()).get("settings") == info:
        return {split: pd.read_parquet(folder / f"{split}.parquet") for split in ("train", "valid")}
    from ocsd.environments import get_environment

    runtime = get_environment(cfg.env).load_runtime()
    expert = experts_of(runtime, cfg.env, cfg.expert, cfg.seed)
    source = runtime.task_source(cfg)
    tables, counts = {}, {}
    for split, specs in (("train", source.train[:cfg.n_train_games]), ("valid", source.valid[:cfg.n_val_games])):
        trajs = expert_episodes(source, specs, expert, tokenizer, renderer, env=cfg.env,
                                max_steps=cfg.max_steps, history_length=cfg.history_length,
                                max_prompt_length=cfg.max_prompt_length, workers=cfg.env_workers,
                                progress=cfg.progress)
        lost = [t.game for t in trajs if not t.won]
        if lost:
            print(f"warning: {len(lost)} of {len(trajs)} {split} demonstration(s) by the {cfg.expert} expert did not "
                  f"win within max_steps={cfg.max_steps} and are left out (first: {lost[0]})", file=sys.stderr)
        tables[split] = demonstration_rows(trajs)
        if tables[split].empty:
            raise ConfigError(f"no {split} demonstration won; nothing to learn from")
        counts[split] = {"games": len(trajs) - len(lost), "left_out": len(lost), "steps": len(tables[split]),
                         "response_tokens": int(tables[split].response_ids.map(len).sum())}
    folder.mkdir(parents=True, exist_ok=True)
    for split, table in tables.items():
        table.to_parquet(folder / f"{split}.parquet")
    saved.write_text(json.dumps({"settings": info, "games": source.describe(), "counts": counts}, indent=2) + "\n")
    return tables
