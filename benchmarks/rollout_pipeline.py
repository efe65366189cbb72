"""Pipelined against turn-by-turn rollouts, side by side on one GPU with one vLLM engine.

Turn by turn, every active episode's prompt is rendered, then all are generated in one call, then all
environments step, and the slowest of each phase sets the pace. Pipelined (``rollout_pipeline=true``), each
episode goes on its own: its response goes to its environment as soon as it ends, and its next prompt joins the
engine's running batch as soon as its observation is back. This script plays the same training step's tasks
(the same games and environment seeds) both ways with one engine and one set of environment workers, in
alternating order, and prints rollout new tokens per second and where the time went.

    python benchmarks/rollout_pipeline.py --games DIR [--model DIR] [--warm-start DIR] [--rounds 3] [--workers 12]

The first round warms up (engine graphs, environment workers, game loading) and is reported apart. Needs CUDA,
vLLM (``scripts/gpu_stack.sh``) and the ALFWorld engine; ``--engine hf --device cpu`` only tries the script
(``generate`` has no pipelined mode, so both columns are turn by turn). Writes ``rollout_pipeline.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rollout_engines import ROLLOUT_PARTS, add_rollout_settings, prepare  # noqa: E402

MODES = ("turns", "pipelined")


def policy_settings(args, model: str) -> dict:
    """The training settings of the benchmark's policy (``model``, ``--warm-start`` on top of it)."""
    return dict(
        run_name="bench_pipeline", run_dir=str(Path(args.out) / "run"), overwrite=True, model=model,
        warm_start=args.warm_start, device=args.device,
        dtype="bfloat16" if args.device.startswith("cuda") else "float32", data="generated", games_dir=args.games,
        n_train_games=args.train_games, n_val_games=1, batch_size=args.batch, group_size=args.group,
        max_steps=args.max_steps, max_response_length=args.response, history_length=2, env_workers=args.workers,
        generation_batch=args.batch * args.group, lora_rank=0, rollout_engine=args.engine,
        vllm_gpu_memory_utilization=args.gpu_memory, progress=False, seed=args.seed)


def build_policy(args, model: str):
    """The trainer's policy (model, rollout engine, task source) for the benchmark's settings."""
    from ocsd.environments import get_environment
    from training.config import make_config
    from training.policy import Policy

    cfg = make_config(policy_settings(args, model))
    games = get_environment(cfg.env).load_runtime().task_source(cfg)
    return Policy(cfg, games)


def play(policy, mode: str, step: int) -> dict:
    """One rollout of ``step``'s tasks in ``mode``: wall seconds, new tokens and the rollout's timings."""
    from training.rollout.engines import response_token_count
    from training.pipeline import step_tasks

    base = policy.cfg
    # generate (hf) has no pipelined mode, which the config refuses: both columns are turn by turn then
    policy.cfg = dataclasses.replace(base, rollout_pipeline=mode == "pipelined" and base.rollout_engine == "vllm")
    timings: dict[str, float] = {}
    try:
        start = time.perf_counter()
        trajs = policy.collect(step, step_tasks(policy, step), timings=timings)
        wall = time.perf_counter() - start
    finally:
        policy.cfg = base
    tokens = response_token_count(trajs)
    return {"mode": mode, "step": step, "rollout_s": wall, "new_tokens": tokens, "tokens_per_s": tokens / wall,
            "env_steps": sum(len(t.steps) for t in trajs), **timings}


def summarise(rows: list[dict]) -> dict:
    """Per mode, means over the measured rounds, and the pipelined / turns ratio of new tokens per second."""
    out = {}
    for mode in MODES:
        use = [r for r in rows if r["mode"] == mode]
        out[mode] = {k: float(np.mean([r.get(k, 0.0) for r in use]))
                     for k in ("rollout_s", "new_tokens", "tokens_per_s", "env_steps", *ROLLOUT_PARTS)}
    out["ratio"] = out["pipelined"]["tokens_per_s"] / out["turns"]["tokens_per_s"]
    return out


def table(summary: dict, warmup: list[dict]) -> str:
    lines = ["| per rollout | turn by turn | pipelined | pipelined / turns |", "|---|---:|---:|---:|"]

    def row(label, key, fmt="{:.2f}", ratio=False):
        a, b = summary["turns"][key], summary["pipelined"][key]
        lines.append(f"| {label} | {fmt.format(a)} | {fmt.format(b)} | {f'{b / a:.2f}' if ratio and a else ''} |")

    row("new tokens", "new_tokens", "{:,.0f}")
    row("interaction steps", "env_steps", "{:,.0f}")
    row("rollout (s)", "rollout_s", ratio=True)
    for part in ROLLOUT_PARTS:
        row(f"&nbsp;&nbsp;{part.split('_', 1)[1]} (s)", part)
    row("**rollout new tokens/s**", "tokens_per_s", "{:,.0f}", ratio=True)
    first = {r["mode"]: r["rollout_s"] for r in warmup}
    lines.append(f"| first round, warm-up (s) | {first.get('turns', 0):.2f} | {first.get('pipelined', 0):.2f} | |")
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    """The benchmark's flags, checked (exits 2 naming a bad one)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--games", required=True, help="folder of generated ALFWorld games (created when missing)")
    p.add_argument("--model", help="Hugging Face model folder or 'smollm2' (default: SmolLM2-135M architecture, "
                                   "random weights, whose responses all run to --response tokens)")
    p.add_argument("--warm-start", help="warm start on top of --model (e.g. training/warm_starts/smollm2-alfworld "
                                        "with --model smollm2: a policy that acts, with responses of varying length)")
    p.add_argument("--engine", default="vllm", help="rollout engine: vllm (hf only tries the script)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of both modes (the first is a warm-up)")
    add_rollout_settings(p, workers=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", default="rollout_pipeline_out")
    args = p.parse_args(argv)
    if args.rounds < 2:
        p.error(f"--rounds must be >= 2 (the first is a warm-up), got {args.rounds}")
    if args.workers < 1:
        p.error(f"--workers must be >= 1 (pipelined episodes need environment workers), got {args.workers}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    prepared = prepare(args, " (--device cpu --engine hf only tries the script)")
    if prepared is None:
        return 2
    out, model, card = prepared
    policy = build_policy(args, model)
    t0 = time.perf_counter()
    policy.engine  # noqa: B018  (built now: its start-up is not a rollout's time)
    start_s = time.perf_counter() - t0
    rows = []
    try:
        for r in range(args.rounds):
            order = MODES if r % 2 == 0 else MODES[::-1]
            for mode in order:
                rows.append({"round": r, **play(policy, mode, step=r + 1)})
                print(f"round {r} {mode}: {rows[-1]['rollout_s']:.2f} s, {rows[-1]['tokens_per_s']:,.0f} new tokens/s",
                      flush=True)
    finally:
        policy.close()
    summary = summarise([row for row in rows if row["round"] > 0])
    Path(out, "rollout_pipeline.json").write_text(json.dumps(
        {"card": card, "args": vars(args), "engine_start_s": start_s, "rows": rows, "summary": summary}, indent=1))
    print(f"\n{card}; {args.engine}; {args.batch} x {args.group} episodes of at most {args.max_steps} steps, "
          f"responses up to {args.response} tokens, {args.workers} environment workers; "
          f"{'random SmolLM2-135M weights' if not args.model else args.model}"
          f"{f' with warm start {args.warm_start}' if args.warm_start else ''}; engine start-up {start_s:.1f} s; "
          f"means of rounds 1-{args.rounds - 1}\n")
    print(table(summary, [row for row in rows if row["round"] == 0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
