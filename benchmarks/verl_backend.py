"""The veRL backend beside the single-device trainer on the same GPU(s), same OCSD settings, one after the other.

Both train OCSD from the same initial weights (SmolLM2-135M-Instruct with the shipped ALFWorld warm start, full
fine-tuning, lr 1e-6, KL 0.01, vLLM rollouts) on the same generated games with the same batch (``--batch`` tasks x
``--group`` rollouts, at most ``--max-steps`` interaction steps, ``--response``-token responses), saving a
checkpoint with replay scores at every step:

* ``verl``: ``python -m training.verl.main`` (FSDP actor and reference, vLLM rollout server, the agent loop, Ray),
  with ``ocsd.keep_batch=true`` so that ``python -m training.verl.parity`` can compare its batches afterwards;
* ``single``: ``python -m training.train --config training/configs/alfworld_paper.yaml rollout_engine=vllm``.

Each runs as its own process; its output goes to ``OUT/<backend>.log``. The table gives the seconds of each phase
per step, averaged over the steps after the first (the first pays compilation and warm-up), the whole process's
wall time (start-up included), steps per second and the replay-scoring share of a step. Writes
``verl_backend.json`` into ``--out``.

    python benchmarks/verl_backend.py --games DIR [--steps 4] [--gpus 1] [--backends verl,single] [--out DIR]
        [--fp32-actor] [--verl-arg OVERRIDE ...]

Needs CUDA, verl and vLLM (``bash scripts/gpu_stack.sh download DIR --verl``, then ``install``) and the ALFWorld
engine.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PHASES = (("rollout", "time/rollout"), ("old log-probs", "time/old_logprob"),
          ("reference log-probs", "time/ref_logprob"), ("replay scoring", "time/replay_scoring"),
          ("advantages", "time/advantage"), ("actor update", "time/update"),
          ("weights to the rollout engine", "time/sync"), ("checkpoint", "time/save_checkpoint"),
          ("**step**", "time/step"))
"""Rows of the table: label and ``metrics.jsonl`` key (the single-device trainer times the weight push inside its
rollout, as ``time/rollout_sync``)."""


FP32_ACTOR = tuple(f"+actor_rollout_ref.{role}.fsdp_config.mixed_precision={{param_dtype: fp32}}"
                   for role in ("actor", "ref"))
"""verl overrides that compute the actor and reference in float32 (verl's FSDP default is bfloat16 parameters), so
that ``training.verl.parity --dtype float32`` compares the same precision on both sides."""


def run_settings(args) -> dict[str, object]:
    """The training settings of every verl-against-single-device benchmark (``TrainConfig`` keys), from the options
    :func:`add_run_options` adds: both backends of a comparison run exactly these."""
    return {"method": "ocsd", "data": "generated", "games_dir": str(Path(args.games).resolve()),
            "n_train_games": args.train_games, "n_val_games": 2, "batch_size": args.batch, "group_size": args.group,
            "max_steps": args.max_steps, "history_length": 2, "max_response_length": args.response,
            "temperature": 1.0, "total_steps": args.steps, "test_freq": 0, "seed": args.seed, "lora_rank": 0,
            "lr": 1e-6, "kl_coef": 0.01, "rho": 0.2, "beta": 0.5, "progress": False,
            "micro_batch_tokens": args.micro_batch_tokens, "scoring_token_budget": args.scoring_tokens}


def shared_settings(args) -> dict[str, object]:
    """The OCSD settings both backends run with (``TrainConfig`` keys): :func:`run_settings` with the SmolLM2
    warm start and a checkpoint at every step (their batches are what ``training.verl.parity`` compares)."""
    return {**run_settings(args), "model": "smollm2",
            "warm_start": str(ROOT / "training/warm_starts/smollm2-alfworld"), "save_freq": 1}


def command(backend: str, args, run_dir: Path) -> list[str]:
    """The training command of ``backend``."""
    settings = {**shared_settings(args), "run_dir": str(run_dir), "run_name": f"ocsd_{backend}"}
    if backend == "verl":
        return [sys.executable, "-m", "training.verl.main", "ocsd=alfworld", "ocsd.keep_batch=true",
                *(f"ocsd.{k}={v}" for k, v in settings.items()), f"trainer.n_gpus_per_node={args.gpus}",
                f"actor_rollout_ref.rollout.gpu_memory_utilization={args.gpu_memory}",
                f"actor_rollout_ref.rollout.agent.num_workers={args.workers}",
                *(FP32_ACTOR if args.fp32_actor else ()), *args.verl_arg]
    return [sys.executable, "-m", "training.train", "--config", str(ROOT / "training/configs/alfworld_paper.yaml"),
            *(f"{k}={v}" for k, v in settings.items()), "overwrite=true", "rollout_engine=vllm", "device=cuda",
            f"vllm_gpu_memory_utilization={args.gpu_memory}", f"env_workers={args.workers}",
            "save_weights=true", "save_merged=true"]


def run_backend(backend: str, args, out: Path) -> dict:
    """Train with ``backend``; its metrics rows, the process's wall time and exit status."""
    from ocsd.records import read_metrics

    run_dir = out / backend
    start = time.perf_counter()
    with open(out / f"{backend}.log", "w") as log:
        status = subprocess.run(command(backend, args, run_dir), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    rows = read_metrics(run_dir) if (run_dir / "metrics.jsonl").is_file() else []
    return {"returncode": status.returncode, "wall_s": wall, "rows": rows}


def failure_cause(log: Path, limit: int = 300) -> str:
    """The root cause of a failed run from its log: the first line naming an exception (``...Error: why``) after a
    traceback began (the last such line when no traceback did), cut to ``limit`` characters; ``""`` if none.

    verl's workers fail in Ray actors and vLLM's engine re-raises its worker's error as "initialization failed. See
    root cause above", so the last lines of the log do not say why; this line does, in the failed run's message,
    where a caller (``results/paper_scale_on_gpu.sh`` retries vLLM's start-up collisions) can read it.
    """
    exception = re.compile(r"\b[A-Za-z_.]*(?:Error|Exception): .*")
    last, traced = "", False
    lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
    for line in lines:
        traced = traced or "Traceback (most recent call last)" in line
        match = exception.search(line)
        if match:
            if traced:
                return match.group(0)[:limit]
            last = match.group(0)
    return last[:limit]


def failure_message(label: str, returncode: int, steps: int, log: Path) -> str:
    """The line a benchmark prints for a failed run: its exit status, steps done, root cause (:func:`failure_cause`)
    and log."""
    cause = failure_cause(log)
    return f"{label}: failed (exit {returncode}, {steps} steps{': ' + cause if cause else ''}); see {log}"


def summarise(rows: list[dict]) -> dict:
    """Means over the steps after the first (the first too when there is only one)."""
    use = rows[1:] or rows
    mean = {k: float(np.mean([r.get(k, 0.0) for r in use])) for k in use[0]
            if isinstance(use[0][k], (int, float)) and not isinstance(use[0][k], bool)}
    mean.setdefault("time/sync", mean.get("time/rollout_sync", 0.0))
    mean["steps_per_s"] = 1.0 / mean["time/step"]
    mean["replay_share"] = mean.get("time/replay_scoring", 0.0) / mean["time/step"]
    mean["rollout_tokens_per_s"] = mean["rollout/new_tokens"] / mean["time/rollout"]
    mean["steps_averaged"] = len(use)
    return mean


def table(results: dict) -> str:
    """The markdown table of :func:`main`, with the ratio of the first two backends."""
    names = list(results)
    ratio = len(names) == 2
    header = "| seconds per OCSD step | " + " | ".join(names) + (f" | {names[0]} / {names[1]} |" if ratio else " |")
    lines = [header, "|---|" + "---:|" * (len(names) + ratio)]

    def row(label, fn, fmt="{:.2f}"):
        values = [fn(results[n]) for n in names]
        cells = [fmt.format(v) for v in values]
        if ratio:
            cells.append(f"{values[0] / values[1]:.2f}" if values[1] else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    row("new tokens per rollout", lambda r: r["mean"]["rollout/new_tokens"], "{:.0f}")
    for label, key in PHASES:
        row(label, lambda r, k=key: r["mean"].get(k, 0.0))
    row("rollout new tokens/s", lambda r: r["mean"]["rollout_tokens_per_s"], "{:.0f}")
    row("steps/s", lambda r: r["mean"]["steps_per_s"], "{:.4f}")
    row("replay scoring share of the step (%)", lambda r: 100 * r["mean"]["replay_share"])
    row("first step (s)", lambda r: r["rows"][0]["time/step"])
    row("whole process, start-up included (s)", lambda r: r["wall_s"], "{:.0f}")
    return "\n".join(lines)


def add_run_options(p: argparse.ArgumentParser) -> None:
    """The options every verl-against-single-device benchmark shares: the games, the step's shape, the
    environment workers, vLLM's memory share and extra Hydra overrides."""
    p.add_argument("--games", required=True, help="folder of generated ALFWorld games")
    p.add_argument("--steps", type=int, default=4, help="training steps per run (the first is a warm-up)")
    p.add_argument("--batch", type=int, default=16, help="tasks per step")
    p.add_argument("--group", type=int, default=8, help="rollouts per task")
    p.add_argument("--max-steps", type=int, default=12, help="interaction steps per episode")
    p.add_argument("--response", type=int, default=64, help="max new tokens per response")
    p.add_argument("--train-games", type=int, default=96)
    p.add_argument("--workers", type=int, default=8, help="environment workers (verl: agent-loop workers)")
    p.add_argument("--gpu-memory", type=float, default=0.3, help="share of GPU memory of the vLLM engine")
    p.add_argument("--verl-arg", action="append", default=[], metavar="OVERRIDE",
                   help="a Hydra override added to every verl command (repeatable)")
    # verl's old-log-prob pass (use_remove_padding false: training/verl/config/ocsd_trainer.yaml) computes the
    # entropy in float32 over the padded micro-batch, rows x its longest row: a budget of 65,536 real tokens (the
    # paper configs') became 115k positions on ALFWorld steps, 21 GiB a tensor with SmolLM2's 49k-token vocabulary,
    # and ran out of memory on an H200 shared with two training runs
    p.add_argument("--micro-batch-tokens", type=int, default=8192,
                   help="tokens per update micro-batch of both backends (TrainConfig.micro_batch_tokens)")
    p.add_argument("--scoring-tokens", type=int, default=16384,
                   help="tokens per forward-only batch of both backends: old and reference log-probs, replay "
                        "scoring (TrainConfig.scoring_token_budget)")


def build_parser() -> argparse.ArgumentParser:
    """The command line of :func:`main`."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_run_options(p)
    p.add_argument("--backends", default="verl,single")
    p.add_argument("--gpus", type=int, default=1, help="GPUs of the verl run (the single-device trainer uses one)")
    p.add_argument("--fp32-actor", action="store_true",
                   help="verl's actor and reference in float32 (its FSDP default is bfloat16 parameters)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="verl_backend_out")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("error: needs a CUDA device", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    card = f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    results, failed = {}, []
    for backend in args.backends.split(","):
        got = run_backend(backend, args, out)
        if got["returncode"] != 0 or not got["rows"]:
            print(failure_message(backend, got["returncode"], len(got["rows"]), out / f"{backend}.log"), flush=True)
            failed.append(backend)
            continue
        got["mean"] = summarise(got["rows"])
        results[backend] = got
        print(f"{backend}: {len(got['rows'])} steps, {got['mean']['time/step']:.2f} s a step after the first, "
              f"{got['wall_s']:.0f} s in all", flush=True)
    if results:
        print(f"\n{card}; OCSD, {args.batch} x {args.group} episodes of at most {args.max_steps} steps, responses up "
              f"to {args.response} tokens, SmolLM2-135M-Instruct warm start, full fine-tuning, bf16, vLLM rollouts\n")
        print(table(results))
    (out / "verl_backend.json").write_text(json.dumps({"card": card, "args": vars(args), "results": results},
                                                      indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
