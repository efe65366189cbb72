"""Replay-scoring benchmark: naive per-view full forwards against ReplayScorer.

Each step has an interaction prompt (``--prompt-len`` tokens) shared by ``--views`` views, a
view-specific evidence block (``--evidence-len``) and a response (``--response-len``). The student
log-probs come from the old-log-prob pass and are passed in, as in training; the views scored are
the teacher views (Full, Observation-Ablated, ...). Three ways are timed on the same items:

* naive: every view a separate plain forward of its whole sequence (``sequence_logprobs``),
* batched: full sequences batched under the token budget, no prefix sharing,
* cache: ReplayScorer(packed=False): common prefix encoded once into a key/value cache, every view
  continued on top of it,
* scorer: ReplayScorer (default, packed): each step's prefix and all its views' continuations in one
  row under a tree-shaped attention mask, one forward per batch.

Results are checked against the naive numbers. The last line is ``speedup: <naive/scorer>x``.

Examples::

    PYTHONPATH=. python benchmarks/scoring.py                       # CPU, SmolLM2-135M, 4 steps
    PYTHONPATH=. python benchmarks/scoring.py --device cuda --dtype bf16 --random-weights --steps 128
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ocsd.replay.models import load_model, smollm2_architecture  # noqa: E402
from ocsd.replay.scoring import ReplayScorer, ScoreItem, default_token_budget, sequence_logprobs  # noqa: E402


def make_items(args, vocab: int, rng: np.random.Generator) -> list[ScoreItem]:
    """Random token steps at the requested lengths (each length varied by +-10%)."""

    def n(length: int) -> int:
        return max(1, int(rng.integers(int(length * 0.9), int(length * 1.1) + 1)))

    items = []
    for i in range(args.steps):
        prompt = rng.integers(3, vocab, n(args.prompt_len)).tolist()
        response = rng.integers(3, vocab, n(args.response_len)).tolist()
        contexts = {f"view{v}": prompt + rng.integers(3, vocab, n(args.evidence_len)).tolist() for v in range(args.views)}
        student = np.zeros(len(response), dtype=np.float32)  # given from the old-log-prob pass
        items.append(ScoreItem(contexts, response, key=i, given={"student": student}))
    return items


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, repeats: int):
    best, out = float("inf"), None
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        out = fn()
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2", help="'smollm2' or a local Hugging Face folder")
    ap.add_argument("--random-weights", action="store_true", help="SmolLM2-135M architecture, random weights")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", help="float32 | bf16 | fp16")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--views", type=int, default=2, help="teacher views scored per step")
    ap.add_argument("--prompt-len", type=int, default=1500)
    ap.add_argument("--evidence-len", type=int, default=100)
    ap.add_argument("--response-len", type=int, default=150)
    ap.add_argument("--token-budget", type=int, default=None, help="default 8192 on CPU, 65536 on CUDA")
    ap.add_argument("--repeats", type=int, default=1, help="timed repeats (best is reported)")
    ap.add_argument("--skip-batched", action="store_true", help="skip the batched full-sequence baseline")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    torch.set_grad_enabled(False)
    device = torch.device(args.device)
    if args.random_weights:
        model = smollm2_architecture(seed=args.seed, device=device, dtype=args.dtype)
        name = "SmolLM2-135M architecture, random weights"
    else:
        model = load_model(args.model, device=device, dtype=args.dtype)
        name = args.model
    budget = args.token_budget or default_token_budget(device)
    rng = np.random.default_rng(args.seed)
    items = make_items(args, model.config.vocab_size, rng)
    n_tokens = sum(len(c) + len(it.response_ids) for it in items for c in it.contexts.values())
    gpu = f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""
    print(f"model: {name}; device {device}{gpu}; dtype {args.dtype}; torch {torch.__version__}")
    print(
        f"steps {args.steps} x views {args.views}; prompt ~{args.prompt_len}, evidence ~{args.evidence_len}, "
        f"response ~{args.response_len}; {n_tokens} sequence tokens; token budget {budget}"
    )

    scorer = ReplayScorer(model, token_budget=budget, progress=False)
    cache = ReplayScorer(model, token_budget=budget, progress=False, packed=False)
    flat = ReplayScorer(model, token_budget=budget, progress=False, share_prefix=False)

    def naive():
        return [{v: sequence_logprobs(model, c, it.response_ids) for v, c in it.contexts.items()} for it in items]

    warm = items[:1]  # warm-up (kernels, allocator)
    scorer.score(warm)
    naive_warm = [sequence_logprobs(model, c, warm[0].response_ids) for c in warm[0].contexts.values()]
    del naive_warm

    t_naive, ref = timed(naive, device, args.repeats)
    t_fast, got = timed(lambda: scorer.score(items), device, args.repeats)
    cache.score(warm)
    t_cache, got_cache = timed(lambda: cache.score(items), device, args.repeats)
    rows = [("naive (one forward per view)", t_naive), ("prefix cache + continuations", t_cache),
            ("scorer (packed prefix tree)", t_fast)]
    if not args.skip_batched:
        flat.score(warm)
        t_flat, got_flat = timed(lambda: flat.score(items), device, args.repeats)
        rows.insert(1, ("batched full sequences", t_flat))

    diff = max(float(np.abs(r[v] - g[v]).max()) for r, g in zip(ref, got) for v in r)
    diff_cache = max(float(np.abs(r[v] - g[v]).max()) for r, g in zip(ref, got_cache) for v in r)
    mean = float(np.mean([np.abs(r[v] - g[v]).mean() for r, g in zip(ref, got) for v in r]))
    given_ok = all(np.array_equal(g["student"], it.given["student"]) for g, it in zip(got, items))
    for label, t in rows:
        print(f"{label:32s} {t:8.3f} s   {n_tokens / t:12,.0f} tokens/s")
    print(f"max |scorer - naive| = {diff:.2e} (mean {mean:.2e}), max |cache - naive| = {diff_cache:.2e}; "
          f"given student log-probs returned unchanged: {given_ok}")
    print(f"speedup over prefix cache + continuations: {t_cache / t_fast:.2f}x")
    if not args.skip_batched:
        print(f"speedup over batched full sequences: {t_flat / t_fast:.2f}x")
    print(f"speedup: {t_naive / t_fast:.2f}x")


if __name__ == "__main__":
    main()
