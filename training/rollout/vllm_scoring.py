"""Replay scoring through vLLM: a ``vllm.LLM`` asked for prompt log-probs, one request per view.

The same :class:`ocsd.replay.scoring.ScoreItem` inputs and outputs as :class:`ocsd.replay.scoring.ReplayScorer`;
it lives beside the vLLM rollout engine because the core (``ocsd``) never imports vLLM. vLLM is imported only when
:func:`score_with_vllm` is called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ocsd.replay.scoring.planning import ScoreItem, ScoringError, validate_items

__all__ = ["VLLMRequest", "align_prompt_logprobs", "build_vllm_requests", "score_with_vllm"]


@dataclass(frozen=True)
class VLLMRequest:
    """One vLLM prompt: ``token_ids`` = context + response of ``view`` of item ``item``."""

    item: int
    view: str
    token_ids: list[int]
    context_len: int


def build_vllm_requests(items: Sequence[ScoreItem]) -> list[VLLMRequest]:
    """One request per (item, view) to score; views in ``given`` are skipped."""
    reqs = []
    for i, item in enumerate(items):
        given = item.given or {}
        response = [int(t) for t in item.response_ids]
        for view, ctx in item.contexts.items():
            if view in given:
                continue
            ctx = [int(t) for t in ctx]
            reqs.append(VLLMRequest(i, view, ctx + response, len(ctx)))
    return reqs


def align_prompt_logprobs(prompt_logprobs, context_len: int, response_ids: Sequence[int]) -> np.ndarray:
    """Pick the response tokens' log-probs out of vLLM's per-position ``prompt_logprobs``.

    ``prompt_logprobs[t]`` is ``None`` for ``t = 0`` and otherwise maps token id -> an object with a
    ``logprob`` attribute (or a float); the entry of the actual token ``response_ids[j]`` at
    position ``context_len + j`` is taken.
    """
    response = [int(t) for t in response_ids]
    if len(prompt_logprobs) != context_len + len(response):
        raise ScoringError(
            f"vLLM returned {len(prompt_logprobs)} prompt positions, expected {context_len + len(response)}"
        )
    out = np.empty(len(response), dtype=np.float32)
    for j, tok in enumerate(response):
        entry = prompt_logprobs[context_len + j]
        if entry is None or tok not in entry:
            raise ScoringError(f"vLLM prompt log-probs lack token {tok} at position {context_len + j}")
        value = entry[tok]
        out[j] = getattr(value, "logprob", value)
    return out


def score_with_vllm(llm, items: Sequence[ScoreItem], *, progress: bool = True) -> list[dict[str, np.ndarray]]:
    """Score items with a ``vllm.LLM`` through prompt log-probs (same output as ReplayScorer.score).

    vLLM's automatic prefix caching, when enabled on the engine, plays the role of the shared-prefix
    cache. Needs vLLM installed; raises ImportError otherwise.
    """
    items = list(items)
    validate_items(items, None)
    try:
        from vllm import SamplingParams
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("score_with_vllm needs vLLM (pip install vllm); use ReplayScorer otherwise") from err
    reqs = build_vllm_requests(items)
    params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0, detokenize=False)
    outputs = llm.generate([{"prompt_token_ids": r.token_ids} for r in reqs], params, use_tqdm=progress)
    scored: list[dict[str, np.ndarray]] = [{} for _ in items]
    for req, res in zip(reqs, outputs):
        scored[req.item][req.view] = align_prompt_logprobs(
            res.prompt_logprobs, req.context_len, items[req.item].response_ids
        )
    out = []
    for item, res in zip(items, scored):
        full = {v: res[v] for v in item.contexts if v in res}
        full.update({v: np.asarray(a, dtype=np.float32) for v, a in (item.given or {}).items()})
        out.append({v: full[v] for v in list(item.contexts) + [v for v in full if v not in item.contexts]})
    return out
