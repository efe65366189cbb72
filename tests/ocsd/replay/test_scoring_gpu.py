"""The replay scorer on a CUDA device: both scoring paths against the plain unbatched forward.

Skipped without CUDA. Run on a GPU machine with ``python -m pytest -m gpu tests/ocsd/replay/test_scoring_gpu.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ocsd.replay.scoring import ReplayScorer, response_logprobs, sequence_logprobs
from tests.ocsd.replay.test_scoring import TOL_FP32, random_items

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

TOL_BF16 = 0.1  # max abs difference in nats of bf16 scoring against a bf16 unbatched forward


def _errors(model, items, results) -> np.ndarray:
    return np.concatenate([np.abs(res[v] - sequence_logprobs(model, ctx, item.response_ids))
                           for item, res in zip(items, results) for v, ctx in item.contexts.items()])


@pytest.fixture(scope="module")
def cuda_model():
    from ocsd.replay.models import tiny_model

    return tiny_model(seed=0).to("cuda")


@pytest.mark.parametrize("packed", [True, False])
def test_fp32_matches_unbatched_on_cuda(cuda_model, packed):
    items = random_items(np.random.default_rng(20), 24, max_prompt=300)
    scorer = ReplayScorer(cuda_model, progress=False, min_prefix=1, packed=packed)
    assert scorer.device.type == "cuda"
    assert _errors(cuda_model, items, scorer.score(items)).max() < TOL_FP32


def test_packed_is_the_default_on_cuda(cuda_model):
    assert ReplayScorer(cuda_model, progress=False).packed is True


@pytest.mark.parametrize("packed", [True, False])
def test_bf16_close_to_bf16_unbatched_on_cuda(cuda_model, packed):
    from ocsd.replay.models import tiny_model

    model = tiny_model(seed=0).to("cuda", torch.bfloat16)
    items = random_items(np.random.default_rng(21), 24, max_prompt=300)
    err = _errors(model, items, ReplayScorer(model, progress=False, min_prefix=1, packed=packed).score(items))
    assert err.max() < TOL_BF16


def test_response_logprobs_gradients_are_finite_on_cuda():
    from ocsd.replay.models import tiny_model

    model = tiny_model(vocab_size=128, seed=2).to("cuda", torch.bfloat16)
    rng = np.random.default_rng(22)
    pairs = [(rng.integers(0, 128, int(rng.integers(2, 40))).tolist(), rng.integers(0, 128, int(rng.integers(1, 9))).tolist())
             for _ in range(12)]
    lps = response_logprobs(model, pairs, grad=True, token_budget=200)
    sum(lp.sum() for lp in lps).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
