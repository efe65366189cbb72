"""Batch planning: what is scored (:class:`ScoreItem`), its validation, each step's shared prefix,
and the grouping of steps into forward batches under a token budget.

A step's views are planned as one :class:`Entry`: the longest common prefix of its contexts (when
worth sharing) and one :class:`Row` per view to score (suffix after the prefix, then the response).
:func:`cache_batches` groups entries for the prefix-cache engine (and for single-view log-probs),
:func:`packed_batches` for the packed engine, whose rows are padded to a multiple of
:data:`WIDTH_MULTIPLE`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

__all__ = [
    "DEFAULT_TOKEN_BUDGET",
    "WIDTH_MULTIPLE",
    "Entry",
    "Row",
    "ScoreItem",
    "ScoringError",
    "cache_batches",
    "default_token_budget",
    "packed_batches",
    "packed_length",
    "padded_width",
    "plan_entries",
    "validate_items",
]


DEFAULT_TOKEN_BUDGET = 8192  # CPU; on CUDA devices 65536 (see default_token_budget)
WIDTH_MULTIPLE = 64  # packed rows are padded to a multiple of this: recurring shapes across training steps
                     # let attention backends (cuDNN) reuse their execution plans


def default_token_budget(device) -> int:
    """Padded tokens per forward batch: 65,536 on CUDA (H100/H200), 8,192 elsewhere."""
    return 65536 if torch.device(device).type == "cuda" else DEFAULT_TOKEN_BUDGET


class ScoringError(ValueError):
    """Bad scoring input; the message names the item (index and key) and the view."""


@dataclass(frozen=True)
class ScoreItem:
    """One step to score.

    Parameters
    ----------
    contexts : mapping of str to sequence of int
        View name -> context token ids, ending exactly where the response begins.
    response_ids : sequence of int
        The response tokens scored under every view (length ``n >= 1``).
    key : object, optional
        Identifies the step in error messages (e.g. ``(trajectory, step_idx)``).
    given : mapping of str to array, optional
        Log-probs already known for some views (e.g. ``{"student": old_logprobs}``), each of length
        ``n``. They are returned unchanged (as float32) and their views are not scored.
    """

    contexts: Mapping[str, Sequence[int]]
    response_ids: Sequence[int]
    key: object = None
    given: Mapping[str, Any] | None = field(default=None)

    @classmethod
    def from_views(cls, views: Mapping[str, tuple[Sequence[int], Sequence[int]]], *, key=None, given=None):
        """Build from ``{view: (context_ids, response_ids)}``; every view must carry the same response."""
        names = list(views)
        if not names:
            raise ScoringError(f"item key={key!r}: no views")
        ref = list(views[names[0]][1])
        for name in names[1:]:
            if list(views[name][1]) != ref:
                raise ScoringError(
                    f"item key={key!r}: view {name!r} has other response ids than view {names[0]!r}; "
                    "all views of a step must score the same tokens"
                )
        return cls({n: list(views[n][0]) for n in names}, ref, key=key, given=given)


@dataclass
class Row:
    """One view of one step to score: its context after the shared prefix, then the response."""

    item: int
    view: str
    suffix: list[int]
    response: list[int]


@dataclass
class Entry:
    """One step's shared prefix (empty when not shared) and its rows, scored together."""

    item: int
    prefix: list[int]
    rows: list[Row]

    def cost(self) -> int:
        """Tokens of the prefix and of every row's suffix and response."""
        return len(self.prefix) + sum(len(r.suffix) + len(r.response) for r in self.rows)


def _common_prefix_len(seqs: list[list[int]]) -> int:
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for i in range(n):
        tok = first[i]
        if any(s[i] != tok for s in seqs[1:]):
            return i
    return n


def _describe(index: int, key) -> str:
    return f"item {index}" + (f" (key={key!r})" if key is not None else "")


def validate_items(items: Sequence[ScoreItem], max_length: int | None, limit_name: str = "maximum length") -> None:
    """Check every item before any forward pass.

    Parameters
    ----------
    items : sequence of ScoreItem
    max_length : int or None
        Longest allowed context + response of any view; None for no limit.
    limit_name : str
        What sets ``max_length``, for the error message (``"maximum length"``, ``"sliding window"``).

    Raises
    ------
    ScoringError
        On the first bad item: not a ScoreItem, an empty response, no views, an empty or too long
        context, or given log-probs of another length than the response; the message names the
        item (index and key) and the view.
    """
    for i, item in enumerate(items):
        where = _describe(i, item.key)
        if not isinstance(item, ScoreItem):
            raise ScoringError(f"{where}: expected a ScoreItem, got {type(item).__name__}")
        n = len(item.response_ids)
        if n == 0:
            raise ScoringError(f"{where}: empty response; there are no tokens to score")
        if not item.contexts and not item.given:
            raise ScoringError(f"{where}: no views")
        for view, ctx in item.contexts.items():
            if len(ctx) == 0:
                raise ScoringError(f"{where}, view {view!r}: empty context; the first response token needs a context")
            if max_length is not None and len(ctx) + n > max_length:
                raise ScoringError(
                    f"{where}, view {view!r}: context {len(ctx)} + response {n} = {len(ctx) + n} tokens exceeds "
                    f"the model's {limit_name} {max_length}"
                )
        for view, arr in (item.given or {}).items():
            if len(arr) != n:
                raise ScoringError(
                    f"{where}: given log-probs of view {view!r} have length {len(arr)}, the response has {n}; "
                    "all views of a step must score the same tokens"
                )


def plan_entries(items: Sequence[ScoreItem], share_prefix: bool, min_prefix: int) -> list[Entry]:
    """The entries to score; views in ``given`` are left out.

    With ``share_prefix``, a step with several views to score becomes one entry whose prefix is the
    longest common prefix of its contexts (short of each context's last token) when that is at
    least ``min_prefix`` tokens; otherwise every view becomes its own prefix-less entry.
    """
    entries = []
    for i, item in enumerate(items):
        given = item.given or {}
        views = [v for v in item.contexts if v not in given]
        if not views:
            continue
        response = [int(t) for t in item.response_ids]
        ctxs = {v: [int(t) for t in item.contexts[v]] for v in views}
        plen = 0
        if share_prefix and len(views) > 1:
            seqs = list(ctxs.values())
            plen = min(_common_prefix_len(seqs), min(len(s) for s in seqs) - 1)
            plen = plen if plen >= min_prefix else 0
        if plen:
            prefix = ctxs[views[0]][:plen]
            entries.append(Entry(i, prefix, [Row(i, v, ctxs[v][plen:], response) for v in views]))
        else:
            entries.extend(Entry(i, [], [Row(i, v, ctxs[v], response)]) for v in views)
    return entries


def cache_batches(entries: list[Entry], token_budget: int) -> list[list[Entry]]:
    """Group entries of like shape (with/without prefix, similar lengths) under the token budget."""
    order = sorted(entries, key=lambda e: (bool(e.prefix), len(e.prefix), e.cost()), reverse=True)
    batches: list[list[Entry]] = []
    cur: list[Entry] = []
    for entry in order:
        trial = cur + [entry]
        if cur and (bool(cur[0].prefix) != bool(entry.prefix) or _padded_cost(trial) > token_budget):
            batches.append(cur)
            trial = [entry]
        cur = trial
    if cur:
        batches.append(cur)
    return batches


def _padded_cost(batch: list[Entry]) -> int:
    lp = max(len(e.prefix) for e in batch)
    nrows = max(len(e.rows) for e in batch)
    total = len(batch) * lp
    for j in range(nrows):
        rows = [e.rows[j] for e in batch if len(e.rows) > j]
        smax = max(len(r.suffix) for r in rows)
        rmax = max(len(r.response) for r in rows)
        total += len(rows) * (smax + rmax - 1 + lp)
    return total


def packed_length(entry: Entry) -> int:
    """Tokens of an entry's packed row: the prefix, then each view's suffix and response less its last token."""
    return len(entry.prefix) + sum(len(r.suffix) + len(r.response) - 1 for r in entry.rows)


def packed_batches(entries: list[Entry], token_budget: int) -> list[list[Entry]]:
    """Entries sorted by packed length, grouped while ``rows x longest`` stays under the budget."""
    order = sorted(entries, key=packed_length, reverse=True)
    batches: list[list[Entry]] = []
    for entry in order:
        if batches and (len(batches[-1]) + 1) * padded_width(packed_length(batches[-1][0])) <= token_budget:
            batches[-1].append(entry)
        else:
            batches.append([entry])
    return batches


def padded_width(length: int) -> int:
    """``length`` rounded up to a multiple of :data:`WIDTH_MULTIPLE`."""
    return -(-length // WIDTH_MULTIPLE) * WIDTH_MULTIPLE
