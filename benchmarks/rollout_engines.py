"""Rollout engines side by side on one GPU: Hugging Face ``generate`` against colocated vLLM.

For each engine, in one process on one machine, the same OCSD training run (same config, seed and games):
rollout new tokens per second (generation, environments and rendering together, and generation alone),
where rollout time goes (``time/rollout_generate``, ``time/rollout_env``, ``time/rollout_render``,
``time/rollout_sync``), the OCSD step time and the replay-scoring share of a step. The first step of each
engine is a warm-up and is reported apart; the table averages the others.

    python benchmarks/rollout_engines.py --games DIR [--model DIR] [--engines hf,vllm] [--steps 3]

``--model`` defaults to SmolLM2-135M's architecture with random weights (the timing of the real model;
every response runs to ``--response`` tokens, the worst case). Needs CUDA, vLLM (``scripts/gpu_stack.sh``)
and the ALFWorld engine. Writes ``rollout_engines.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROLLOUT_PARTS = ("time/rollout_generate", "time/rollout_env", "time/rollout_render", "time/rollout_sync")


def random_model(folder: Path) -> str:
    """SmolLM2-135M's architecture with random weights, saved with SmolLM2's tokenizer."""
    from ocsd.replay.models import load_tokenizer, smollm2_architecture

    if not (folder / "config.json").is_file():
        smollm2_architecture(seed=0).save_pretrained(folder)
        load_tokenizer("smollm2").save_pretrained(folder)
    return str(folder)


def add_rollout_settings(p: argparse.ArgumentParser, *, workers: int) -> None:
    """The rollout settings the benchmarks share (the issue's measuring setting by default): tasks, rollouts,
    episode length, response length, environment workers, training games and vLLM's share of GPU memory."""
    p.add_argument("--batch", type=int, default=16, help="tasks per step")
    p.add_argument("--group", type=int, default=8, help="rollouts per task")
    p.add_argument("--max-steps", type=int, default=15, help="interaction steps per episode")
    p.add_argument("--response", type=int, default=256, help="max new tokens per response")
    p.add_argument("--workers", type=int, default=workers, help="environment worker processes")
    p.add_argument("--train-games", type=int, default=24)
    p.add_argument("--gpu-memory", type=float, default=0.3, help="vllm_gpu_memory_utilization")


def prepare(args, hint: str = "") -> tuple[Path, str, str] | None:
    """The output folder (created), the model folder (``--model`` or a random SmolLM2 saved there) and the
    card's name; None, after saying so, when ``--device`` is CUDA and there is none."""
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"error: needs a CUDA device{hint}", file=sys.stderr)
        return None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = args.model or random_model(out / "smollm2_random")
    return out, model, torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "CPU"


def run_engine(engine: str, args, model: str) -> dict:
    """Train ``args.steps`` OCSD steps with ``engine``; returns the metrics rows and the start-up time."""
    from ocsd.records import read_metrics
    from training.config import make_config
    from training.trainer import Trainer

    cfg = make_config(dict(
        run_name=f"bench_{engine}", run_dir=str(Path(args.out) / engine), overwrite=True, model=model,
        device=args.device, dtype="bfloat16", data="generated", games_dir=args.games, n_train_games=args.train_games,
        n_val_games=1, batch_size=args.batch, group_size=args.group, max_steps=args.max_steps,
        max_response_length=args.response, history_length=2, total_steps=args.steps, save_freq=10**6,
        test_freq=0, save_weights=False, write_replay=False, env_workers=args.workers, generation_batch=args.batch
        * args.group, micro_batch_tokens=32768, lora_rank=0, kl_coef=0.01, rollout_engine=engine,
        vllm_gpu_memory_utilization=args.gpu_memory, progress=False, method="ocsd"))
    t0 = time.perf_counter()
    trainer = Trainer(cfg)
    start = time.perf_counter() - t0
    trainer.fit()
    return {"start_s": start, "rows": read_metrics(cfg.run_dir)}


def summarise(rows: list[dict]) -> dict:
    """Means over the steps after the first (the first too when there is only one)."""
    use = rows[1:] or rows
    mean = {k: float(np.mean([r[k] for r in use])) for k in use[0] if isinstance(use[0][k], (int, float))}
    mean["rollout_tokens_per_s"] = mean["rollout/new_tokens"] / mean["time/rollout"]
    mean["generate_tokens_per_s"] = mean["rollout/new_tokens"] / mean["time/rollout_generate"]
    mean["replay_share"] = mean["time/replay_scoring"] / mean["time/step"]
    mean["steps_averaged"] = len(use)
    return mean


def table(results: dict) -> str:
    engines = list(results)
    lines = ["| per OCSD step | " + " | ".join(engines) + " |", "|---|" + "---|" * len(engines)]

    def row(label, fn):
        lines.append(f"| {label} | " + " | ".join(fn(results[e]) for e in engines) + " |")

    row("engine start-up (s, once)", lambda r: f"{r['start_s']:.1f}")
    row("new tokens per rollout", lambda r: f"{r['mean']['rollout/new_tokens']:.0f}")
    row("rollout (s)", lambda r: f"{r['mean']['time/rollout']:.2f}")
    for part in ROLLOUT_PARTS:
        row(f"  {part.split('_', 1)[1]} (s)", lambda r, p=part: f"{r['mean'].get(p, 0.0):.2f}")
    row("**rollout new tokens/s**", lambda r: f"**{r['mean']['rollout_tokens_per_s']:.0f}**")
    row("generation alone, new tokens/s", lambda r: f"{r['mean']['generate_tokens_per_s']:.0f}")
    row("old log-probs (s)", lambda r: f"{r['mean']['time/old_logprob']:.2f}")
    row("reference log-probs (s)", lambda r: f"{r['mean']['time/ref_logprob']:.2f}")
    row("replay scoring (s)", lambda r: f"{r['mean']['time/replay_scoring']:.3f}")
    row("PPO update (s)", lambda r: f"{r['mean']['time/update']:.2f}")
    row("**step (s)**", lambda r: f"**{r['mean']['time/step']:.2f}**")
    row("**replay scoring share of the step**", lambda r: f"**{100 * r['mean']['replay_share']:.2f}%**")
    row("first step (warm-up, s)", lambda r: f"{r['rows'][0]['time/step']:.2f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--games", required=True, help="folder of generated ALFWorld games (created when missing)")
    p.add_argument("--model", help="Hugging Face model folder (default: SmolLM2-135M architecture, random weights)")
    p.add_argument("--engines", default="hf,vllm")
    p.add_argument("--steps", type=int, default=3, help="training steps per engine (the first is a warm-up)")
    add_rollout_settings(p, workers=8)
    p.add_argument("--out", default="rollout_engines_out")
    p.add_argument("--device", default="cuda", help="cuda (cpu only to try the script with --engines hf)")
    p.add_argument("--with", dest="earlier", help="rollout_engines.json of an earlier call on the same machine "
                                                  "(e.g. the other engine, when one call cannot hold both)")
    args = p.parse_args(argv)
    prepared = prepare(args)
    if prepared is None:
        return 2
    out, model, card = prepared
    results = {}
    if args.earlier:
        earlier = json.loads(Path(args.earlier).read_text())
        if earlier["card"] != card:
            print(f"error: --with {args.earlier} was measured on {earlier['card']}, this machine has {card}",
                  file=sys.stderr)
            return 2
        results.update(earlier["results"])
    for engine in args.engines.split(","):
        got = run_engine(engine, args, model)
        got["mean"] = summarise(got["rows"])
        results[engine] = got
        print(f"{engine}: step {got['mean']['time/step']:.2f} s, rollout {got['mean']['rollout_tokens_per_s']:.0f} "
              f"new tokens/s", flush=True)
    print(f"\n{card}; {args.batch} x {args.group} episodes of {args.max_steps} steps, responses up to "
          f"{args.response} tokens, {args.workers} environment workers, bf16; "
          f"{'random SmolLM2-135M weights' if not args.model else args.model}\n")
    print(table(results))
    if {"hf", "vllm"} <= set(results):
        speed = results["vllm"]["mean"]["rollout_tokens_per_s"] / results["hf"]["mean"]["rollout_tokens_per_s"]
        print(f"\nrollout new tokens/s, vllm / hf: {speed:.1f}x (goal >= 10x); replay scoring share with vllm: "
              f"{100 * results['vllm']['mean']['replay_share']:.2f}% (paper: 1.40%)")
    (out / "rollout_engines.json").write_text(json.dumps(
        {"card": card, "args": vars(args), "results": results}, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
