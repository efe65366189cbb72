"""The main job's two CPU levers for a LoRA policy, side by side on the same inputs: sampling and scoring through
the adapters against a merged copy (``merged_inference``), and the update's forward and backward passes in
micro-batches of 4,096 against 1,024 tokens (``micro_batch_tokens``).

    python -m benchmarks.lora_cpu [--config training/configs/demo.yaml] [--rows 8] [--prompt 410] [--rounds 3]

The policy is the config's (the demo's: SmolLM2-135M with its warm start and LoRA rank 8, float32 on a CPU
without bfloat16). Inputs are random token ids: ``--rows`` prompts of ``--prompt`` tokens, sampled for the config's
``max_response_length`` tokens each (at least that many: no stop token ends them), scored as whole sequences, and
updated with 64 response tokens each. Each measurement is repeated ``--rounds`` times; the table shows the mean
of the rounds after the first (which pays the process's first touches of memory) and the first round alone. The
cases run in the order of the table, so a case finds the memory of those before it already touched: compare the
later rounds.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import torch


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _timed(fn, rounds: int) -> tuple[list[float], list[int]]:
    times, faults = [], []
    for _ in range(rounds):
        f0, t0 = _faults(), time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        faults.append(_faults() - f0)
    return times, faults


def _row(name: str, times: list[float], faults: list[int]) -> dict:
    rest = times[1:] or times
    return {"case": name, "first_s": times[0], "mean_s": float(np.mean(rest)), "first_faults": faults[0],
            "later_faults": int(np.mean(faults[1:] or faults))}


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="training/configs/demo.yaml")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=410)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)

    from ocsd.replay.scoring import response_logprobs
    from training.config import load_config
    from training.policy import load_policy
    from training.rollout.engines import merged_copy
    from training.rollout.loop import GenerationSettings, generate

    cfg = load_config(args.config)
    tokenizer, model = load_policy(cfg)
    merged = merged_copy(model)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(100, len(tokenizer) - 100, (args.prompt,), generator=gen).tolist()
               for _ in range(args.rows)]
    responses = [torch.randint(100, len(tokenizer) - 100, (64,), generator=gen).tolist() for _ in range(args.rows)]
    pairs = list(zip(prompts, responses))
    settings = GenerationSettings(max_new_tokens=cfg.max_response_length, temperature=cfg.temperature,
                                  batch=args.rows)
    print(f"{cfg.model}, LoRA rank {cfg.lora_rank}, {next(model.parameters()).dtype}, {torch.get_num_threads()} "
          f"threads; {args.rows} rows of {args.prompt} prompt tokens")

    def sample(m):
        torch.manual_seed(0)
        generate(m, tokenizer, prompts, settings, logprobs=[])

    def update(budget: int):
        per = max(1, budget // (args.prompt + 64))  # rows a micro-batch of ``budget`` tokens holds
        model.train()
        for i in range(0, args.rows, per):
            logp, _ = response_logprobs(model, pairs[i:i + per], grad=True, padded=True, token_budget=budget)
            logp.sum().backward()
        model.zero_grad(set_to_none=True)
        model.eval()

    rows = []
    for name, fn in [("sample, through the adapters", lambda: sample(model)),
                     ("sample, merged copy", lambda: sample(merged)),
                     ("score, through the adapters", lambda: response_logprobs(model, pairs, token_budget=8192)),
                     ("score, merged copy", lambda: response_logprobs(merged, pairs, token_budget=8192)),
                     ("update, micro-batches of 4,096 tokens", lambda: update(4096)),
                     ("update, micro-batches of 1,024 tokens", lambda: update(1024))]:
        rows.append(_row(name, *_timed(fn, args.rounds)))
        r = rows[-1]
        print(f"  {name}: first {r['first_s']:.2f} s ({r['first_faults']} page faults), "
              f"then {r['mean_s']:.2f} s ({r['later_faults']} page faults)", flush=True)
    print("\n| case | first round (s) | later rounds (s) | page faults, first / later |\n|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['case']} | {r['first_s']:.2f} | {r['mean_s']:.2f} | {r['first_faults']:,} / "
              f"{r['later_faults']:,} |")
    for a, b, what in [(0, 1, "sampling"), (2, 3, "scoring"), (4, 5, "update")]:
        print(f"{what}: {rows[a]['case'].split(', ')[1]} / {rows[b]['case'].split(', ')[1]} = "
              f"{rows[a]['mean_s'] / rows[b]['mean_s']:.2f}x later, "
              f"{rows[a]['first_s'] / rows[b]['first_s']:.2f}x first")
    return rows


if __name__ == "__main__":
    main()
