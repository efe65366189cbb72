"""Rendering replay views on the CPU: the batched tokenisation through the fast tokenizer's backend against
Hugging Face's tokenizer call, on the Full and Observation-Ablated views of real ALFWorld steps.

Rendering is the CPU part of replay scoring (``time/replay_render`` in ``metrics.jsonl``). The steps come
from episodes on generated games (the expert's actions in a third of the episodes, ordinary actions in the
others, 200 extra response tokens each, so that responses have a rollout's length); ``--steps`` of them are
drawn as the selected steps. Prints the seconds of each way (best of ``--repeats``), their ratio and the
whole ``render_steps`` call, and checks that both ways give the same ids and offsets.

    python benchmarks/render_views.py [--episodes 32] [--steps 384] [--games DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VIEWS = ("full", "ablated")
ACTIONS = ("look", "go to cabinet 1", "open drawer 2", "take apple 1 from countertop 1", "inventory")


def episodes(games: str, n: int, tokenizer, renderer, rng: np.random.Generator):
    """``n`` episodes of at most 15 steps on generated games, answered without a model."""
    from training.config import make_config
    from training.warm_start.demonstrations import response_ids
    from training.envs.alfworld import AlfworldBatchEnv, expert_walkthrough
    from training.envs.alfworld.tasks import GameSource
    from training.rollout.loop import GenerationSettings, rollout

    cfg = make_config(dict(data="generated", games_dir=games, n_train_games=24, n_val_games=1, seed=0,
                           progress=False))
    source = GameSource.from_config(cfg)
    specs = [source.train[i % len(source.train)] for i in range(n)]
    plans = [expert_walkthrough(s) for s in specs]
    taken = [0] * n

    def respond(active, prompts):
        out = []
        for i in active:
            k = taken[i]
            taken[i] += 1
            action = plans[i][k] if i % 3 == 0 and k < len(plans[i]) else str(rng.choice(ACTIONS))
            ids = response_ids(tokenizer, action, "I think about the next step.")
            out.append(ids[:-1] + rng.integers(100, 40000, 200).tolist() + ids[-1:])
        return out

    with AlfworldBatchEnv(specs, max_steps=15, num_workers=0, seed=0) as env:
        return rollout(None, tokenizer, renderer, env, [{"uid": f"t{i}", "group_uid": f"g{i // 8}"} for i in range(n)],
                       env_name="alfworld", history_length=2, max_prompt_length=2048, settings=GenerationSettings(),
                       progress=False, respond=respond)


def best(fn, repeats: int) -> float:
    """The shortest of ``repeats`` timed calls of ``fn``."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=32)
    p.add_argument("--steps", type=int, default=384, help="selected steps to render (at most all of them)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--games", help="folder of generated ALFWorld games (default: a temporary one)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    for flag, value in (("--episodes", args.episodes), ("--steps", args.steps), ("--repeats", args.repeats)):
        if value < 1:
            p.error(f"{flag} must be >= 1, got {value}")
    from ocsd.replay.models import load_tokenizer
    from ocsd.replay.prompts import PromptRenderer
    from ocsd.replay.render import render_steps
    from ocsd.replay.views import get_view
    from training.replay import step_record

    rng = np.random.default_rng(args.seed)
    tokenizer = load_tokenizer("smollm2")
    renderer = PromptRenderer(tokenizer)
    with tempfile.TemporaryDirectory() as tmp:
        trajs = episodes(args.games or tmp, args.episodes, tokenizer, renderer, rng)
    keys = [(t, k) for t, traj in enumerate(trajs) for k in range(len(traj.steps))]
    chosen = sorted(rng.choice(len(keys), min(args.steps, len(keys)), replace=False))
    records = [step_record(trajs[t], trajs[t].steps[k], "alfworld") for t, k in (keys[i] for i in chosen)]
    texts = ["".join(t for _, t in renderer._parts(get_view(v).pieces(r))) for r in records for v in VIEWS]
    direct = renderer.encode_many(texts, offsets=True)
    called = renderer.encode_many(texts, offsets=True, direct=False)
    same = all(list(a) == list(c) and [tuple(o) for o in b] == [tuple(o) for o in d]
               for (a, b), (c, d) in zip(direct, called))
    t_called = best(lambda: renderer.encode_many(texts, offsets=True, direct=False), args.repeats)
    t_direct = best(lambda: renderer.encode_many(texts, offsets=True), args.repeats)
    t_render = best(lambda: render_steps(records, list(VIEWS), renderer, 2048), args.repeats)
    tokens = sum(len(ids) for ids, _ in direct)
    print(f"{len(records)} steps x {len(VIEWS)} views, {tokens:,} prompt tokens; SmolLM2's tokenizer; best of "
          f"{args.repeats}; same ids and offsets both ways: {same}\n")
    print("| seconds | tokenizer call | backend directly | call / backend |")
    print("|---|---:|---:|---:|")
    print(f"| batched tokenisation of the views | {t_called:.3f} | {t_direct:.3f} | {t_called / t_direct:.2f} |")
    print(f"\nrender_steps (views built, tokenised, grouped into segments): {t_render:.3f} s")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
