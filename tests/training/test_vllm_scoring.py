"""The vLLM prompt-log-prob scorer (:mod:`training.rollout.vllm_scoring`): requests and alignment on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

from ocsd.replay.scoring import ScoreItem, ScoringError, sequence_logprobs
from training.rollout.vllm_scoring import align_prompt_logprobs, build_vllm_requests, score_with_vllm


def random_items(rng: np.random.Generator, n: int, *, vocab: int = 49152, max_prompt: int = 80) -> list[ScoreItem]:
    """Steps with a shared prompt and 1-4 views with their own (possibly empty) evidence."""
    items = []
    for i in range(n):
        prompt = rng.integers(3, vocab, int(rng.integers(1, max_prompt))).tolist()
        response = rng.integers(3, vocab, int(rng.integers(1, 25))).tolist()
        contexts = {f"v{v}": prompt + rng.integers(3, vocab, int(rng.integers(0, 15))).tolist()
                    for v in range(int(rng.integers(1, 5)))}
        items.append(ScoreItem(contexts, response, key=("traj", i)))
    return items


class _Logprob:
    """vLLM's per-token record carries the value in ``.logprob``."""

    def __init__(self, logprob: float):
        self.logprob = logprob


def test_vllm_requests_and_alignment(tiny_model):
    rng = np.random.default_rng(11)
    items = random_items(rng, 3)
    items.append(ScoreItem({"student": [4, 5], "full": [4, 5, 6]}, [7, 8], given={"student": np.zeros(2)}))
    reqs = build_vllm_requests(items)
    assert [(r.item, r.view) for r in reqs] == [(i, v) for i, it in enumerate(items) for v in it.contexts if not (it.given and v in it.given)]
    for req in reqs:
        item = items[req.item]
        ctx = list(item.contexts[req.view])
        assert req.token_ids == ctx + list(item.response_ids) and req.context_len == len(ctx)
        # vLLM's layout: position 0 None, then {token: Logprob} per prompt position (plus top-k others).
        ref = sequence_logprobs(tiny_model, ctx, item.response_ids)
        prompt_logprobs = [None] + [{tok: _Logprob(-9.0), tok + 1: _Logprob(-1.0)} for tok in req.token_ids[1:]]
        for j, tok in enumerate(item.response_ids):
            prompt_logprobs[req.context_len + j][tok] = _Logprob(float(ref[j]))
        got = align_prompt_logprobs(prompt_logprobs, req.context_len, item.response_ids)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6)
    floats = [None, {3: -0.5}, {9: -0.25}]
    np.testing.assert_array_equal(align_prompt_logprobs(floats, 1, [3, 9]), np.array([-0.5, -0.25], np.float32))


def test_vllm_alignment_errors():
    with pytest.raises(ScoringError, match="expected 3"):
        align_prompt_logprobs([None, {1: -1.0}], 1, [1, 2])
    with pytest.raises(ScoringError, match="lack token 2"):
        align_prompt_logprobs([None, {1: -1.0}, {5: -1.0}], 1, [1, 2])


def test_score_with_vllm_needs_vllm():
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="needs vLLM"):
            score_with_vllm(object(), [ScoreItem({"full": [1]}, [2])])
    else:  # pragma: no cover - only where vLLM is installed
        pytest.skip("vLLM is installed; the end-to-end path needs a GPU engine")
