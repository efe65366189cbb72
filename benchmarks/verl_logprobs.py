"""verl's token log-probs without flash-attn: its per-row fallback against the same computation in blocks of rows.

verl's FSDP engine passes a micro-batch's logits to ``logprobs_from_logits`` as ``(tokens, vocab)``; without
flash-attn that calls ``logprobs_from_logits_v2``, which loops over the rows, one token at a time.
``training.verl.logprobs.blocked_logprobs`` (installed by the suite's verl plugin) does the same arithmetic on blocks
of rows. Both are timed side by side on the same random logits, the forward alone (old log-probs, reference,
replay views) and forward + backward (the actor update), and checked equal. The last line is
``speedup: <fallback/blocked>x`` of forward + backward.

    python benchmarks/verl_logprobs.py                                  # CPU, 4,096 tokens, SmolLM2's vocabulary
    python benchmarks/verl_logprobs.py --device cuda --tokens 32768 --dtype bf16

Where verl is not installed, the fallback's loop is timed as this script writes it (one ``logsumexp``, or
``log_softmax`` and ``gather``, per row, stacked), and the table says so.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training.verl.logprobs import blocked_logprobs  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def per_row_loop(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """One row at a time, as verl 0.9.1's ``logprobs_from_logits_v2`` computes (for machines without verl)."""
    if logits.dtype in (torch.float32, torch.float64):
        picked = logits.gather(-1, labels[..., None])[..., 0]
        return picked - torch.stack([torch.logsumexp(row, dim=-1) for row in logits])
    return torch.stack([torch.log_softmax(row, dim=-1).gather(-1, label[None])[0] for row, label in zip(logits, labels)])


def fallback():
    """verl's fallback where verl is installed, else :func:`per_row_loop`; and its label."""
    try:
        from training.verl.logprobs import verl_fallback

        return verl_fallback(), "verl's fallback"
    except ImportError:
        return per_row_loop, "per-row loop (verl not installed)"


def timed(fn, logits, labels, weights, backward: bool, device: torch.device) -> tuple[float, torch.Tensor]:
    """Seconds of one call of ``fn`` (with the backward of a weighted sum when ``backward``) and its output."""
    x = logits.detach().clone().requires_grad_(backward)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn(x, labels)
    if backward:
        (out * weights).sum().backward()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, (x.grad if backward else out).detach()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=4096, help="rows of the logits (tokens of a micro-batch)")
    p.add_argument("--vocab", type=int, default=49152, help="columns (SmolLM2's vocabulary by default)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--repeats", type=int, default=3, help="timed calls of each (the fastest is reported)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    rng = np.random.default_rng(args.seed)
    logits = torch.from_numpy(rng.normal(0, 3, size=(args.tokens, args.vocab)).astype(np.float32)).to(device, dtype)
    labels = torch.from_numpy(rng.integers(0, args.vocab, size=args.tokens)).to(device)
    weights = torch.from_numpy(rng.normal(size=args.tokens).astype(np.float32)).to(device, dtype)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    loop, loop_name = fallback()
    print(f"{name}; logits {args.tokens} x {args.vocab} {args.dtype}; fastest of {args.repeats}")
    print(f"| pass | {loop_name} (s) | blocked (s) | ratio | largest difference |")
    print("|---|---:|---:|---:|---:|")
    ratio = float("nan")
    for label, backward in (("forward", False), ("forward + backward", True)):
        best, outs = {}, {}
        for key, fn in (("fallback", loop), ("blocked", blocked_logprobs)):
            runs = [timed(fn, logits, labels, weights, backward, device) for _ in range(max(1, args.repeats))]
            best[key], outs[key] = min(t for t, _ in runs), runs[0][1]
        diff = (outs["fallback"].float() - outs["blocked"].float()).abs().max().item()
        ratio = best["fallback"] / best["blocked"]
        print(f"| {label} | {best['fallback']:.3f} | {best['blocked']:.3f} | {ratio:.1f} | {diff:.2e} |")
    print(f"speedup: {ratio:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
