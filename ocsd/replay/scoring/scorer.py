"""The public scorers: :class:`ReplayScorer` (validate, plan, batch, run an engine),
:class:`PendingScores`, :func:`score_views` and :func:`response_logprobs`.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ocsd.replay.scoring.cache import score_cache_batch
from ocsd.replay.scoring.checks import head_parts, length_limit, model_device, supports_prefix_cache
from ocsd.replay.scoring.packed import score_packed_batch
from ocsd.replay.scoring.planning import (
    Row,
    ScoreItem,
    cache_batches,
    default_token_budget,
    packed_batches,
    plan_entries,
    validate_items,
)

__all__ = ["PendingScores", "ReplayScorer", "padded_rows", "response_logprobs", "score_views"]


class ReplayScorer:
    """Batched, prefix-sharing teacher-forced scorer.

    Parameters
    ----------
    model : transformers causal LM
        Scored as is; with ``device``/``dtype`` given, ``model.to(...)`` is applied (in place).
    device, dtype : optional
        Where and in which precision to score; default: the model's own.
    token_budget : int, optional
        Upper bound on the padded tokens (prefixes counted once, each continuation row counted with
        its prefix's cache length) per forward batch; default :func:`default_token_budget`. A batch
        always holds at least one step.
    max_length : int, optional
        Longest allowed context + response; default ``config.max_position_embeddings``. For models
        with sliding-window layers it is at most the window (the scorer's explicit attention masks
        replace the model's windowed ones).
    progress : bool
        Show a tqdm bar over steps.
    share_prefix : bool, optional
        Encode each step's common context prefix once (default: on for full-attention models).
    min_prefix : int
        Shorter common prefixes are not worth a separate pass; views are then scored as full rows.
    packed : bool, optional
        Score each step in one row: its common prefix followed by every view's continuation, with a
        tree-shaped attention mask and per-branch position ids, one forward per batch and the output
        head applied to response positions only. ``False``: encode the prefixes into a key/value
        cache and continue each view on top of it. Default: packed for full-attention models on CUDA
        (faster there: fewer, larger kernels), the cache on CPU (where the dense tree mask costs more
        attention than it saves); ``benchmarks/scoring.py`` times both.
    """

    def __init__(
        self,
        model,
        *,
        device=None,
        dtype=None,
        token_budget: int | None = None,
        max_length: int | None = None,
        progress: bool = True,
        share_prefix: bool | None = None,
        min_prefix: int = 8,
        packed: bool | None = None,
    ):
        from ocsd.replay.models import resolve_dtype

        dtype = resolve_dtype(dtype)
        if device is not None or dtype is not None:
            model = model.to(device=device, dtype=dtype)
        self.model = model
        self.device = model_device(model)
        token_budget = default_token_budget(self.device) if token_budget is None else int(token_budget)
        if token_budget < 1:
            raise ValueError(f"token_budget must be positive, got {token_budget}")
        self.token_budget = token_budget
        self.max_length, self._limit_name = length_limit(model, max_length)
        self.progress = progress
        self.share_prefix = supports_prefix_cache(model) if share_prefix is None else bool(share_prefix)
        if self.share_prefix and not supports_prefix_cache(model):
            raise ValueError("share_prefix=True needs a full-attention model (no sliding-window layers)")
        self.min_prefix = int(min_prefix)
        full_attention = supports_prefix_cache(model)
        self.packed = (full_attention and self.device.type == "cuda") if packed is None else bool(packed)
        if self.packed and not full_attention:
            raise ValueError("packed=True needs a full-attention model (no sliding-window layers)")
        self._parts = head_parts(model) if self.packed else None

    def score(self, items: Sequence[ScoreItem], *, progress: bool | None = None,
              desc: str = "replay scoring") -> list[dict[str, np.ndarray]]:
        """Score every view of every item (``desc`` labels the progress bar).

        Returns
        -------
        list of dict
            One dict per item, view name -> float32 array of shape ``(len(response_ids),)``; views in
            ``item.given`` are returned unchanged (as float32), the others are scored.
        """
        return self.submit(items, progress=progress, desc=desc).result()

    def submit(self, items: Sequence[ScoreItem], *, progress: bool | None = None,
               desc: str = "replay scoring") -> "PendingScores":
        """Queue the forward passes of :meth:`score` and return without waiting for the device.

        On CUDA the batches' inputs are copied from pinned memory without blocking, so the host is
        free (e.g. to render the next steps' views) while the GPU works; :meth:`PendingScores.result`
        waits and returns what :meth:`score` returns. Input errors are raised here.
        """
        items = list(items)
        validate_items(items, self.max_length, self._limit_name)
        entries = plan_entries(items, self.share_prefix, self.min_prefix)
        if self.packed:
            batches = packed_batches(entries, self.token_budget)
        else:
            batches = cache_batches(entries, self.token_budget)
        show = self.progress if progress is None else progress
        from tqdm.auto import tqdm

        scored: list[tuple[Row, torch.Tensor]] = []
        with torch.inference_mode(), tqdm(total=len(entries), desc=desc, unit="seq",
                                          disable=not show, leave=False) as bar:
            for batch in batches:
                if self.packed:
                    scored.extend(score_packed_batch(self.model, batch, self.device, self._parts))
                else:
                    scored.extend(score_cache_batch(self.model, batch, self.device))
                bar.update(len(batch))
        return PendingScores(items, scored)


class PendingScores:
    """Scores queued by :meth:`ReplayScorer.submit`; :meth:`result` waits for them."""

    def __init__(self, items: list[ScoreItem], scored: list[tuple[Row, torch.Tensor]]):
        self._items, self._scored = items, scored

    def result(self) -> list[dict[str, np.ndarray]]:
        """One dict per item, as :meth:`ReplayScorer.score` returns (one device-to-host copy)."""
        results: list[dict[str, np.ndarray]] = [{} for _ in self._items]
        if self._scored:
            with torch.inference_mode():
                flat = torch.cat([lp.float() for _, lp in self._scored]).cpu().numpy()
            start = 0
            for row, lp in self._scored:
                results[row.item][row.view] = flat[start:start + len(lp)]
                start += len(lp)
        out = []
        for item, res in zip(self._items, results):
            full = {}
            for view in list(item.contexts) + [v for v in (item.given or {}) if v not in item.contexts]:
                if item.given and view in item.given:
                    full[view] = np.asarray(item.given[view], dtype=np.float32)
                else:
                    full[view] = res[view]
            out.append(full)
        return out


def score_views(model, items: Sequence[ScoreItem], **kwargs) -> list[dict[str, np.ndarray]]:
    """Functional form of :meth:`ReplayScorer.score` (for a ``vllm.LLM``:
    :func:`training.rollout.vllm_scoring.score_with_vllm`)."""
    progress = kwargs.pop("progress", True)
    return ReplayScorer(model, progress=progress, **kwargs).score(items)


def response_logprobs(
    model,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    grad: bool = False,
    token_budget: int | None = None,
    padded: bool = False,
    max_length: int | None = None,
    progress: bool = False,
):
    """Log-probs of each pair's response after its prompt, many pairs batched (one view each).

    Parameters
    ----------
    model : transformers causal LM
    pairs : sequence of (prompt_ids, response_ids)
    grad : bool
        False: computed under ``torch.inference_mode``. True: differentiable with respect to the
        model's parameters (for a PPO update); every batch's graph is kept until the caller's
        ``backward``, so pass one micro-batch at a time.
    token_budget : int, optional
        Padded tokens per forward batch; default :func:`default_token_budget`.
    padded : bool
        Return ``(logprobs [N, Rmax] float32, mask [N, Rmax] bool)`` instead of a list.
    max_length : int, optional
        Longest allowed prompt + response; default ``config.max_position_embeddings``.

    Returns
    -------
    list of torch.Tensor or (torch.Tensor, torch.Tensor)
        float32 tensors on the model's device, ``i``-th of shape ``(len(pairs[i][1]),)``, in input order.
    """
    items = [ScoreItem({"_": p}, r, key=i) for i, (p, r) in enumerate(pairs)]
    validate_items(items, *length_limit(model, max_length))
    device = model_device(model)
    token_budget = default_token_budget(device) if token_budget is None else int(token_budget)
    entries = plan_entries(items, share_prefix=False, min_prefix=0)
    results: list[torch.Tensor | None] = [None] * len(items)
    from tqdm.auto import tqdm

    ctx = torch.enable_grad() if grad else torch.inference_mode()
    with ctx, tqdm(total=len(entries), desc="log-probs", unit="seq", disable=not progress, leave=False) as bar:
        for batch in cache_batches(entries, token_budget):
            for row, lp in score_cache_batch(model, batch, device):
                results[row.item] = lp
            bar.update(len(batch))
    return padded_rows(results, device) if padded else results


def padded_rows(rows: Sequence[torch.Tensor], device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of several lengths as a zero-padded float32 ``(S, T)`` tensor on ``device`` and its mask (True where
    a row has a value); the rows' graph is kept (a differentiable row stays differentiable)."""
    width = max((len(r) for r in rows), default=0)
    out = torch.zeros((len(rows), width), dtype=torch.float32, device=device)
    mask = torch.zeros((len(rows), width), dtype=torch.bool, device=device)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
        mask[i, : len(row)] = True
    return out, mask
