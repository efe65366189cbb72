"""vLLM decoding of the rollout batch: where the engine runs, and how decoding time grows with the batch.

Answers two questions about ``rollout_engine=vllm`` before anything is built on the answers:

1. Is decoding a batch of the benchmark's size bound by GPU arithmetic or by the engine's per-step host work?
   If the time of a decoding step barely grows from 64 to 256 sequences, it is the per-step work.
2. Does vLLM's engine in a process of its own (``VLLM_ENABLE_V1_MULTIPROCESSING=1``: scheduling and output
   handling overlap the GPU) decode faster than the engine in the trainer's process (what
   :class:`training.rollout.engines.VLLMEngine` runs), and can weights still be pushed to it in memory?

Each mode runs in a fresh child process (the setting is read when the engine starts), on SmolLM2-135M's
architecture with random weights, with the same random prompts (``--prompt-len`` tokens, +-30%), every
response ``--new-tokens`` long. Prints one table, modes side by side, and writes ``vllm_decode.json``.

    python benchmarks/vllm_decode.py [--batches 64,128,256] [--modes inproc,mp] [--out DIR]

Needs CUDA and vLLM (``scripts/gpu_stack.sh``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODES = {"inproc": "0", "mp": "1"}  # VLLM_ENABLE_V1_MULTIPROCESSING


def _pack(weights: dict) -> dict:
    """``{name: (raw bytes, shape, dtype name)}``: tensors as plain data. vLLM's messages to an engine in its own
    process turn tensors nested in a dict into lists; bytes cross intact."""
    import torch

    return {k: (v.contiguous().view(torch.uint8).numpy().tobytes(), tuple(v.shape), str(v.dtype).split(".")[-1])
            for k, v in weights.items()}


def _push(worker, weights) -> None:
    """Run in vLLM's worker: load ``{name: tensor}``, or the same packed by :func:`_pack`, into the model
    (:func:`training.rollout.engines._load_weights`, what the trainer's engine runs)."""
    import torch

    from training.rollout.engines import _load_weights

    _load_weights(worker, {k: v if isinstance(v, torch.Tensor) else
                           torch.frombuffer(bytearray(v[0]), dtype=torch.uint8).view(getattr(torch, v[2])).reshape(v[1])
                           for k, v in weights.items()})


def prompts(n: int, length: int, seed: int) -> list[list[int]]:
    """``n`` random prompts of ``length`` tokens +-30% (the same for a given seed)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(int(length * 0.7), int(length * 1.3) + 1, size=n)
    return [rng.integers(100, 49000, size=int(s)).tolist() for s in sizes]


def child(args) -> dict:
    """One mode in this process: engine start, decoding speed per batch, weight push, sleep and wake."""
    import torch
    from vllm import LLM, SamplingParams, TokensPrompt

    from ocsd.replay.models import smollm2_architecture

    os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    model = smollm2_architecture(seed=0, dtype=torch.bfloat16)
    folder = tempfile.mkdtemp(prefix="vllm_decode_")
    model.config.save_pretrained(folder)
    t0 = time.perf_counter()
    llm = LLM(model=folder, load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16",
              max_model_len=int(args.prompt_len * 1.3) + args.new_tokens + 64, gpu_memory_utilization=args.gpu_memory,
              enable_sleep_mode=True, seed=0)
    out: dict = {"start_s": time.perf_counter() - t0}
    weights = {k: v.detach().cpu() for k, v in model.named_parameters()}
    in_process = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"

    def send(tensors: dict) -> None:  # tensors as they are into the trainer's process, as bytes to another
        llm.collective_rpc(_push, kwargs={"weights": tensors if in_process else _pack(tensors)})

    t0 = time.perf_counter()
    send(weights)
    out["push_s"] = time.perf_counter() - t0
    sample = SamplingParams(n=1, max_tokens=args.new_tokens, ignore_eos=True, detokenize=False, temperature=1.0,
                            top_p=1.0)

    def run(batch: list[list[int]], params) -> tuple[float, list]:
        t = time.perf_counter()
        res = llm.generate([TokensPrompt(prompt_token_ids=p) for p in batch], params, use_tqdm=False)
        return time.perf_counter() - t, res

    run(prompts(32, args.prompt_len, 99), sample)  # warm-up
    out["batches"] = {}
    for b in args.batches:
        times = [run(prompts(b, args.prompt_len, 1000 * b + r), sample)[0] for r in range(args.repeats)]
        best = min(times)
        out["batches"][b] = {"seconds": times, "new_tokens_per_s": b * args.new_tokens / best,
                             "ms_per_decode_step": 1000 * best / args.new_tokens}
        print(f"[{args.child}] batch {b}: {b * args.new_tokens / best:,.0f} new tokens/s", flush=True)
    greedy = SamplingParams(n=1, max_tokens=16, ignore_eos=True, detokenize=False, temperature=0.0)
    probe = prompts(8, 200, 7)
    before = [o.outputs[0].token_ids for o in run(probe, greedy)[1]]
    changed = {k: (v * 1.5 if v.ndim >= 2 else v) for k, v in weights.items()}
    send(changed)
    llm.reset_prefix_cache()
    after = [o.outputs[0].token_ids for o in run(probe, greedy)[1]]
    send(weights)
    llm.reset_prefix_cache()
    back = [o.outputs[0].token_ids for o in run(probe, greedy)[1]]
    out["push_changes_output"] = [list(a) for a in after] != [list(b) for b in before]
    out["push_back_restores"] = [list(a) for a in back] == [list(b) for b in before]
    t0 = time.perf_counter()
    llm.sleep(level=1)
    out["sleep_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    llm.wake_up()
    out["wake_s"] = time.perf_counter() - t0
    return out


def table(results: dict, batches: list[int]) -> str:
    """Modes side by side: new tokens/s and ms per decoding step for each batch, and the ratio to the first."""
    modes = list(results)
    lines = ["| | " + " | ".join(modes) + (f" | {modes[-1]} / {modes[0]}" if len(modes) > 1 else "") + " |",
             "|---" * (len(modes) + 1 + (len(modes) > 1)) + "|"]
    for b in batches:
        vals = [results[m]["batches"][str(b)]["new_tokens_per_s"] for m in modes]
        ms = [results[m]["batches"][str(b)]["ms_per_decode_step"] for m in modes]
        cells = [f"{v:,.0f} ({t:.2f} ms)" for v, t in zip(vals, ms)]
        lines.append(f"| batch {b}: new tokens/s (ms a step) | " + " | ".join(cells)
                     + (f" | {vals[-1] / vals[0]:.2f}" if len(modes) > 1 else "") + " |")
    for key in ("start_s", "push_s", "sleep_s", "wake_s", "push_changes_output", "push_back_restores"):
        cells = [f"{results[m][key]:.2f}" if isinstance(results[m][key], float) else str(results[m][key])
                 for m in modes]
        lines.append(f"| {key} | " + " | ".join(cells) + (" | |" if len(modes) > 1 else " |"))
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", default="64,128,256", help="comma-separated numbers of sequences")
    p.add_argument("--modes", default="inproc,mp", help=f"comma-separated, of {', '.join(MODES)}")
    p.add_argument("--prompt-len", type=int, default=1000)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--gpu-memory", type=float, default=0.3)
    p.add_argument("--out", default="benchmarks/results/vllm_decode")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.batches = [int(b) for b in args.batches.split(",")]
    if args.child:
        result = child(args)
        Path(args.out, f"{args.child}.json").write_text(json.dumps(result, indent=1))
        return 0
    modes = args.modes.split(",")
    bad = [m for m in modes if m not in MODES]
    if bad:
        p.error(f"--modes: unknown {', '.join(bad)}; choose from {', '.join(MODES)}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    results = {}
    for mode in modes:
        # spawn: a forked engine process deadlocks once torch has run CPU work in the parent (the model built
        # here); insecure serialization: the weight-push function crosses to the engine process pickled
        env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING=MODES[mode], VLLM_ALLOW_INSECURE_SERIALIZATION="1",
                   VLLM_WORKER_MULTIPROC_METHOD="spawn")
        cmd = [sys.executable, __file__, "--child", mode, *(argv if argv is not None else sys.argv[1:])]
        if subprocess.run(cmd, env=env).returncode != 0:
            print(f"mode {mode}: the child process failed (its output is above)", file=sys.stderr)
            continue
        results[mode] = json.loads(Path(args.out, f"{mode}.json").read_text())
    import torch

    card = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA"
    Path(args.out, "vllm_decode.json").write_text(json.dumps({"card": card, "args": vars(args), "results": results},
                                                             indent=1))
    if results:
        print(f"\n{card}; SmolLM2-135M architecture, random weights, prompts of {args.prompt_len} tokens +-30%, "
              f"{args.new_tokens} new tokens each\n")
        print(table(results, args.batches))
    return 0 if len(results) == len(modes) else 1


if __name__ == "__main__":
    sys.exit(main())
