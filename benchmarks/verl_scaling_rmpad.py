"""verl's remove-padding path without flash-attn: padded rows against packed rows under PyTorch's sdpa attention.

verl's FSDP engine with ``use_remove_padding=true`` packs a micro-batch's rows into one row of ``total_nnz``
tokens and passes ``attention_mask=None`` with position ids that restart at every row
(``verl/workers/engine/fsdp/transformer_impl.py``, ``prepare_model_inputs``); without ``use_remove_padding`` it
pads the rows to the longest and passes their attention mask. Under sdpa, transformers turns the packed position
ids into a dense ``total_nnz x total_nnz`` block-diagonal causal mask (``transformers/masking_utils.py``,
``find_packed_sequence_indices`` and ``packed_sequence_mask_function``). This times a forward and backward pass
of both layouts on the same rows (a Qwen2.5-Coder-0.5B-shaped model with random weights, bfloat16, the token
log-probs of every position as verl computes them), checks that their log-probs agree, and prints JSON::

    python benchmarks/verl_scaling_rmpad.py [--tokens 16384] [--min-len 600] [--max-len 1600] [--repeats 5]

Needs CUDA. Its result decides ``use_remove_padding`` in ``training/verl/config/ocsd_trainer.yaml``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def qwen25_coder_05b_config():
    """The shape of Qwen2.5-Coder-0.5B-Instruct (its config.json), sdpa attention."""
    from transformers import Qwen2Config

    return Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                       num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                       rope_theta=1000000.0, tie_word_embeddings=True, attn_implementation="sdpa")


def row_lengths(tokens: int, low: int, high: int, seed: int = 0) -> list[int]:
    """Row lengths drawn uniformly from ``[low, high]`` until they hold about ``tokens`` tokens."""
    import random

    rng = random.Random(seed)
    lengths: list[int] = []
    while sum(lengths) + high <= tokens:
        lengths.append(rng.randint(low, high))
    return lengths


def token_logprobs(model, input_ids, attention_mask, position_ids):
    """Log-probability of each next token (float32), as verl's actor computes it from the logits."""
    import torch

    # use_cache=False as verl's engine calls the model (fsdp/transformer_impl.py, _forward_micro_batch): with a
    # cache, transformers does not look for packed rows in the position ids
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   use_cache=False).logits.float()
    labels = torch.roll(input_ids, shifts=-1, dims=-1)
    return torch.gather(logits.log_softmax(-1), -1, labels.unsqueeze(-1)).squeeze(-1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=16384, help="real tokens per micro-batch")
    p.add_argument("--min-len", type=int, default=600)
    p.add_argument("--max-len", type=int, default=1600)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM

    if not torch.cuda.is_available():
        print("verl_scaling_rmpad: needs a CUDA device", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(qwen25_coder_05b_config(), dtype=torch.bfloat16).cuda()
    lengths = row_lengths(args.tokens, args.min_len, args.max_len)
    rows = [torch.randint(0, 151936, (n,), device="cuda") for n in lengths]
    longest = max(lengths)
    padded = torch.zeros(len(rows), longest, dtype=torch.long, device="cuda")
    mask = torch.zeros_like(padded)
    for i, r in enumerate(rows):
        padded[i, :len(r)] = r
        mask[i, :len(r)] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    packed = torch.cat(rows).unsqueeze(0)
    packed_positions = torch.cat([torch.arange(n, device="cuda") for n in lengths]).unsqueeze(0)

    layouts = {"padded": (padded, mask, positions), "packed": (packed, None, packed_positions)}

    def timed(name):
        ids, am, pos = layouts[name]
        times = []
        for i in range(args.repeats + 1):
            torch.cuda.synchronize()
            start = time.perf_counter()
            lp = token_logprobs(model, ids, am, pos)
            lp.sum().backward()
            torch.cuda.synchronize()
            if i:  # the first call warms up
                times.append(time.perf_counter() - start)
            model.zero_grad(set_to_none=True)
        with torch.no_grad():
            lp = token_logprobs(model, ids, am, pos)
        peak = torch.cuda.max_memory_allocated() / 2**30
        torch.cuda.reset_peak_memory_stats()
        return lp, sorted(times)[len(times) // 2], peak

    result = {"card": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "transformers": __import__("transformers").__version__, "rows": len(lengths),
              "real_tokens": sum(lengths), "padded_tokens": len(rows) * longest}
    got = {}
    for name in layouts:
        torch.cuda.reset_peak_memory_stats()
        lp, median, peak = timed(name)
        got[name] = lp
        result[name] = {"forward_backward_s": round(median, 4), "peak_gib": round(peak, 2)}
    # the same rows' log-probs in both layouts (each row's last position predicts a token of the next row: skipped)
    diffs = []
    offset = 0
    for i, n in enumerate(lengths):
        a = got["padded"][i, :n - 1]
        b = got["packed"][0, offset:offset + n - 1]
        diffs.append((a - b).abs().max().item())
        offset += n
    result["max_abs_logprob_diff"] = max(diffs)
    result["packed_over_padded"] = round(result["packed"]["forward_backward_s"]
                                         / result["padded"]["forward_backward_s"], 3)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
