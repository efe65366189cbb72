"""Steps per second of an ALFWorld batch, side by side: in-process with TextWorld's own text generation,
in-process with :func:`training.envs.alfworld.engine.fast_text_generation` without its query cache and
whole, and worker processes.

    python -m benchmarks.alfworld_env [--data DIR] [--batch 16] [--steps 20] [--workers 2]

Games come from ``--data`` (default ``$ALFWORLD_DATA``), else 4 generated ones in a temporary
folder. Each environment takes random admissible actions (seeded) for ``--steps`` steps; the four
modes play the same episodes.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from training.envs.alfworld import AlfworldBatchEnv, AlfworldDataError, generate_game, load_games
from training.envs.alfworld.engine import textworld_own_text_generation


def _run(specs, workers: int, steps: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    env = AlfworldBatchEnv(specs, max_steps=1000, num_workers=workers, seed=seed)
    t1 = time.perf_counter()
    obs = env.reset()
    t2 = time.perf_counter()
    adm = [o.admissible for o in obs]
    n = 0
    for _ in range(steps):
        res = env.step([a[int(rng.integers(len(a)))] for a in adm])
        adm = [r.admissible or ["look"] for r in res]
        n += sum(r.active for r in res)
    t3 = time.perf_counter()
    env.close()
    return {"start_s": t1 - t0, "reset_s": t2 - t1, "steps_per_s": n / (t3 - t2)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--split", default=None)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        games = load_games(args.data, split=args.split)
        source = "data folder"
    except AlfworldDataError:
        tmp = tempfile.mkdtemp(prefix="alfbench")
        games = [generate_game(tmp, seed=args.seed, index=i) for i in range(4)]
        source = "generated"
    specs = [games[i % len(games)] for i in range(args.batch)]
    with textworld_own_text_generation():
        own = _run(specs, 0, args.steps, args.seed)
    local = _run(specs, 0, args.steps, args.seed)
    with textworld_own_text_generation(keep=("templates", "contexts")):
        no_queries = _run(specs, 0, args.steps, args.seed)
    remote = _run(specs, args.workers, args.steps, args.seed)
    print(f"ALFWorld batch of {args.batch} envs ({source} games), {args.steps} random admissible steps")
    print(f"{'mode':<34}{'start s':>10}{'reset s':>10}{'steps/s':>10}")
    for name, r in (("in-process, TextWorld's own text", own), ("in-process, no query cache", no_queries),
                    ("in-process", local),
                    (f"{args.workers} workers", remote)):
        print(f"{name:<34}{r['start_s']:>10.2f}{r['reset_s']:>10.2f}{r['steps_per_s']:>10.1f}")
    print(f"fast text generation: {local['steps_per_s'] / own['steps_per_s']:.1f}x the steps/s, "
          f"{own['start_s'] / local['start_s']:.1f}x faster start; the query cache alone: "
          f"{local['steps_per_s'] / no_queries['steps_per_s']:.1f}x the steps/s")
    print(f"ratio workers/in-process: steps/s x{remote['steps_per_s'] / local['steps_per_s']:.2f}, "
          f"reset x{local['reset_s'] / remote['reset_s']:.2f} faster")


if __name__ == "__main__":
    main()
