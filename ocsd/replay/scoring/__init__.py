"""Teacher-forced replay scoring: log-probs of a step's response under several contexts ("views").

For one step the views share the interaction prompt and differ in the evidence placed before the
response. :class:`ReplayScorer` computes the longest common prefix of a step's contexts once and
every view's suffix plus the response on top of it, so two views cost about one prompt plus two short
continuations. Steps are batched under a token budget, with explicit position ids and attention
masks, and log-probs are computed only at response positions. The numbers equal a plain unbatched
forward pass per sequence (:func:`sequence_logprobs`) up to float rounding. Two engines, same numbers:
packed (default on CUDA) and prefix cache (default on CPU). Scoring through a ``vllm.LLM``'s prompt log-probs
lives with the vLLM rollout engine, in :mod:`training.rollout.vllm_scoring` (the core never imports vLLM).

Modules:

- :mod:`~ocsd.replay.scoring.planning`: :class:`ScoreItem`, input validation, prefix planning,
  token-budget batching;
- :mod:`~ocsd.replay.scoring.checks`: model checks (device, ``logits_to_keep``, sliding window,
  length limit, output head);
- :mod:`~ocsd.replay.scoring.reference`: log-probs at targets and the unbatched reference;
- :mod:`~ocsd.replay.scoring.packed`: the packed prefix-tree engine;
- :mod:`~ocsd.replay.scoring.cache`: the prefix-cache engine;
- :mod:`~ocsd.replay.scoring.scorer`: :class:`ReplayScorer`, :func:`score_views`,
  :func:`response_logprobs`, :func:`padded_rows`.
"""

from ocsd.replay.scoring.planning import ScoreItem, ScoringError, default_token_budget
from ocsd.replay.scoring.reference import sequence_logprobs
from ocsd.replay.scoring.scorer import PendingScores, ReplayScorer, padded_rows, response_logprobs, score_views

__all__ = [
    "PendingScores",
    "ReplayScorer",
    "ScoreItem",
    "ScoringError",
    "default_token_budget",
    "padded_rows",
    "response_logprobs",
    "score_views",
    "sequence_logprobs",
]
