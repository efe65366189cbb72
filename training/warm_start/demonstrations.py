"""Expert demonstrations for a supervised warm start, played through the policy's own rollout.

An environment runtime's ``demonstration(task) -> [(action, reason), ...]`` (ALFWorld:
:func:`training.envs.alfworld.expert.demonstration`) answers each step of :func:`training.rollout.loop.rollout`
instead of a model, so every demonstration context is exactly the interaction prompt the policy acts on.
:func:`build_demonstrations` keeps them in ``run_dir/demonstrations/{train,valid}.parquet`` (token ids per
step) with ``info.json`` (the settings that made them, the games, the counts).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from training.config import ConfigError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DEMO_DIR", "DEMO_KEYS", "build_demonstrations", "demonstration_rows", "expert_episodes", "response_ids"]

DEMO_DIR = "demonstrations"
# the settings that decide the demonstrations (a change rebuilds them)
DEMO_KEYS = ("env", "data", "n_train_games", "n_val_games", "train_split", "val_split", "seed", "model",
             "max_steps", "history_length", "max_prompt_length")


def response_ids(tokenizer, action: str, reason: str) -> list[int]:
    """Token ids of the response ``<reason>reason</reason><action>action</action>`` and the stop token."""
    from training.rollout.loop import stop_ids

    text = f"<reason>{reason}</reason><action>{action}</action>"
    return list(tokenizer.encode(text, add_special_tokens=False)) + [stop_ids(tokenizer)[0]]


def expert_episodes(source, specs: Sequence, demonstration, tokenizer, renderer, *, env: str, max_steps: int,
                    history_length: int, max_prompt_length: int, workers: int = 0, chunk: int = 32,
                    progress: bool = True):
    """Play every task of ``specs`` with the expert answering through :func:`training.rollout.loop.rollout`.

    Returns the trajectories (one per task); a task whose demonstration does not win is still returned
    (``won`` False), and the caller decides.
    """
    from tqdm.auto import tqdm

    from training.rollout.loop import GenerationSettings, rollout

    trajs = []
    bar = tqdm(total=len(specs), desc="demonstrations", unit="game", disable=not progress)
    for start in range(0, len(specs), chunk):
        part = list(specs[start:start + chunk])
        plays = [demonstration(spec) for spec in part]
        answers = [[response_ids(tokenizer, a, r) for a, r in play] for play in plays]
        taken = [0] * len(part)

        def respond(active: list[int], prompts: list[list[int]]) -> list[list[int]]:
            out = []
            for i in active:
                k = taken[i]
                taken[i] += 1
                # a play that ran out without a win answers "look" until the step cap; it is not kept
                out.append(answers[i][k] if k < len(answers[i]) else response_ids(tokenizer, "look", "I look around."))
            return out

        envs = source.make_env(part, max_steps=max_steps, workers=workers, seed=0)
        try:
            tasks = [{"uid": f"demo{start + i}", "group_uid": f"demo{start + i}"} for i in range(len(part))]
            trajs += rollout(None, tokenizer, renderer, envs, tasks, env_name=env, history_length=history_length,
                             max_prompt_length=max_prompt_length, settings=GenerationSettings(), progress=False,
                             respond=respond)
        finally:
            envs.close()
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
        When the environment's runtime has no expert, or no demonstration wins.
    """
    import pandas as pd

    folder = Path(cfg.run_dir) / DEMO_DIR
    info = {key: getattr(cfg, key) for key in DEMO_KEYS}
    saved = folder / "info.json"
    if saved.is_file() and json.loads(saved.read_text()).get("settings") == info:
        return {split: pd.read_parquet(folder / f"{split}.parquet") for split in ("train", "valid")}
    from ocsd.environments import get_environment

    runtime = get_environment(cfg.env).load_runtime()
    if runtime.demonstration is None:
        raise ConfigError(f"env: {cfg.env!r} has no expert to demonstrate its tasks")
    source = runtime.task_source(cfg)
    tables, counts = {}, {}
    for split, specs in (("train", source.train[:cfg.n_train_games]), ("valid", source.valid[:cfg.n_val_games])):
        trajs = expert_episodes(source, specs, runtime.demonstration, tokenizer, renderer, env=cfg.env,
                                max_steps=cfg.max_steps, history_length=cfg.history_length,
                                max_prompt_length=cfg.max_prompt_length, workers=cfg.env_workers,
                                progress=cfg.progress)
        lost = [t.game for t in trajs if not t.won]
        if lost:
            print(f"warning: {len(lost)} {split} demonstration(s) did not win and are left out "
                  f"(first: {lost[0]})", file=sys.stderr)
        tables[split] = demonstration_rows(trajs)
        if tables[split].empty:
            raise ConfigError(f"no {split} demonstration won; nothing to learn from")
        counts[split] = {"games": len(trajs) - len(lost), "steps": len(tables[split]),
                         "response_tokens": int(tables[split].response_ids.map(len).sum())}
    folder.mkdir(parents=True, exist_ok=True)
    for split, table in tables.items():
        table.to_parquet(folder / f"{split}.parquet")
    saved.write_text(json.dumps({"settings": info, "games": source.describe(), "counts": counts}, indent=2) + "\n")
    return tables
