"""verl's log-prob fallback in blocks of rows (``training.verl.logprobs``): the same numbers and gradients as verl's
per-row loop, and installed by the plugin in every process that imports verl."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

from training.verl.logprobs import blocked_logprobs, installed, verl_fallback  # noqa: E402


def _inputs(rng, shape, vocab, dtype):
    logits = torch.from_numpy(rng.normal(0.0, 3.0, size=(*shape, vocab))).to(dtype)
    labels = torch.from_numpy(rng.integers(0, vocab, size=shape))
    return logits, labels


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("shape", [(257,), (3, 41)])
def test_blocked_logprobs_equal_verls_loop_and_log_softmax(dtype, shape):
    """Against verl's own function and against ``log_softmax`` + gather in float64 (an independent reference),
    with blocks that do not divide the rows evenly."""
    logits, labels = _inputs(np.random.default_rng(len(shape) * 10 + dtype.itemsize), shape, 211, dtype)
    ours = blocked_logprobs(logits, labels, block_elements=211 * 10)
    theirs = verl_fallback()(logits, labels)
    assert ours.shape == labels.shape and ours.dtype == dtype
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0 if dtype != torch.float32 else 1e-6)
    reference = torch.log_softmax(logits.double(), -1).gather(-1, labels[..., None])[..., 0]
    tol = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 0.1}[dtype]
    torch.testing.assert_close(ours.double(), reference, rtol=0, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_blocked_logprobs_gradients_equal_verls_loop(dtype):
    logits, labels = _inputs(np.random.default_rng(7), (130,), 97, dtype)
    weights = torch.from_numpy(np.random.default_rng(8).normal(size=130)).to(dtype)
    grads = []
    for fn in (lambda x, y: blocked_logprobs(x, y, block_elements=97 * 16), verl_fallback()):
        x = logits.clone().requires_grad_(True)
        (fn(x, labels) * weights).sum().backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=1e-6 if dtype == torch.float32 else 0)


def test_empty_and_single_row_blocks():
    logits, labels = torch.zeros((0, 5)), torch.zeros((0,), dtype=torch.long)
    assert blocked_logprobs(logits, labels).shape == (0,)
    x = torch.tensor([[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]])
    got = blocked_logprobs(x, torch.tensor([2, 2]), block_elements=1)  # a block is at least one row
    torch.testing.assert_close(got, torch.log_softmax(x, -1)[:, 2])


def test_verls_logprobs_from_logits_uses_it_once_the_plugin_is_loaded():
    """verl's public entry point reaches the blocked computation (flash-attn is not installed here)."""
    from verl.utils.torch_functional import FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE, logprobs_from_logits

    from training.verl import plugin

    assert plugin.registered() and not FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE and installed()
    logits, labels = _inputs(np.random.default_rng(3), (64,), 50, torch.float32)
    torch.testing.assert_close(logprobs_from_logits(logits, labels), verl_fallback()(logits, labels), rtol=0,
                               atol=1e-6)
