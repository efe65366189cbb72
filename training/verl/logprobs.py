"""Token log-probs for verl's actor without flash-attn: the same numbers as verl's fallback, in blocks of rows.

verl computes the log-probs of its actor's forward passes (old log-probs, reference, the replay views, the update)
with ``verl.utils.torch_functional.logprobs_from_logits``. With flash-attn installed that is flash-attn's Triton
cross entropy; without it (the offline GPU stack has no flash-attn wheel) it falls back to ``logprobs_from_logits_v2``,
which loops over the first dimension of the logits to bound memory. verl's FSDP engine hands it the logits of a
whole micro-batch as ``(tokens, vocab)``, so that loop runs a ``logsumexp`` (or ``log_softmax``) per token: hundreds
of thousands of small kernels and their Python overhead per pass, and as many again in the backward pass.

:func:`blocked_logprobs` does the same arithmetic on blocks of rows: each row's ``logsumexp`` (float32/float64) or
``log_softmax`` (bfloat16 and float16, as verl does) is computed within its row alone, so the result is the loop's
up to the rounding of the reduction, while a block of ``block_elements`` logits bounds the extra memory as the loop
meant to. ``benchmarks/verl_logprobs.py`` times both.
:func:`install` puts it in place of verl's fallback, only where verl would use that fallback.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["BLOCK_ELEMENTS", "blocked_logprobs", "install", "installed", "verl_fallback"]

BLOCK_ELEMENTS = 1 << 27
"""Logits per block (512 MiB of float32): 883 rows of Qwen3's vocabulary of 151,936, 2,730 of SmolLM2's 49,152."""


def blocked_logprobs(logits: torch.Tensor, labels: torch.Tensor, block_elements: int = BLOCK_ELEMENTS) -> torch.Tensor:
    """Log-probability of each label under the logits, computed in blocks of rows.

    Parameters
    ----------
    logits : torch.Tensor
        Shape ``(..., vocab)``.
    labels : torch.Tensor
        Integer tensor of shape ``logits.shape[:-1]``.
    block_elements : int
        Largest number of logits a block holds (at least one row).

    Returns
    -------
    torch.Tensor
        Shape ``logits.shape[:-1]``, in the dtype of ``logits``: ``logits[label] - logsumexp(logits)`` for float32
        and float64, ``log_softmax(logits)[label]`` otherwise, the same as verl's ``logprobs_from_logits_v2``.
    """
    shape = logits.shape[:-1]
    flat = logits.reshape(-1, logits.shape[-1])
    flat_labels = labels.reshape(-1, 1)
    rows = max(1, int(block_elements) // max(1, flat.shape[-1]))
    out = []
    for start in range(0, flat.shape[0], rows):
        block, block_labels = flat[start:start + rows], flat_labels[start:start + rows]
        if flat.dtype in (torch.float32, torch.float64):
            out.append(block.gather(-1, block_labels).squeeze(-1) - torch.logsumexp(block, dim=-1))
        else:
            out.append(F.log_softmax(block, dim=-1).gather(-1, block_labels).squeeze(-1))
    if not out:
        return flat.new_empty(shape)
    return torch.cat(out).reshape(shape)


_VERL_FALLBACK = None


def verl_fallback():
    """verl's own ``logprobs_from_logits_v2`` (also after :func:`install`)."""
    from verl.utils import torch_functional

    return _VERL_FALLBACK or torch_functional.logprobs_from_logits_v2


def installed() -> bool:
    """Whether verl's fallback is :func:`blocked_logprobs`."""
    from verl.utils import torch_functional

    return torch_functional.logprobs_from_logits_v2 is blocked_logprobs


def install() -> bool:
    """Use :func:`blocked_logprobs` for verl's fallback, where verl would use the fallback.

    verl's ``logprobs_from_logits`` looks the fallback up by name at each call, so replacing it in
    ``verl.utils.torch_functional`` reaches every engine. Nothing changes where flash-attn's cross entropy (or
    Ascend's) is available. Returns whether it was installed.
    """
    global _VERL_FALLBACK
    from verl.utils import torch_functional

    if torch_functional.FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE or torch_functional.NPU_CROSS_ENTROPY_LOSS_AVAILABLE:
        return False
    if torch_functional.logprobs_from_logits_v2 is not blocked_logprobs:
        _VERL_FALLBACK = torch_functional.logprobs_from_logits_v2
    torch_functional.logprobs_from_logits_v2 = blocked_logprobs
    return True
