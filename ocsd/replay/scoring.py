"""Teacher-forced replay scoring: log-probs of a step's response under several contexts ("views").

For one step the views share the interaction prompt and differ in the evidence placed before the
response. :class:`ReplayScorer` computes the longest common prefix of a step's contexts once and
every view's suffix plus the response on top of it, so two views cost about one prompt plus two short
continuations. Steps are batched under a token budget, with explicit position ids and attention
masks, and log-probs are computed only at response positions. The numbers equal a plain unbatched
forward pass per sequence (:func:`sequence_logprobs`) up to float rounding. Two ways, same numbers:

Packed (default on CUDA): one row per step, one forward per batch (``P`` prefix, ``s_j`` suffix of
view ``j``, ``r`` response)::

    ids:       [P_0 .. P_{p-1} | s_1 r[:-1] | s_2 r[:-1] | ... | pad]
    positions: [0 .. p-1       | p ..       | p ..       | ...]
    mask:      causal inside the prefix and inside each branch; every branch also sees the prefix

Branch ``j`` sees exactly its own context, so the logits at its response positions are those of
``P + s_j + r``. The output head runs on the response positions only.

Prefix cache (default on CPU): the prefixes are encoded into a key/value cache, then each view's
continuation row runs on top of it::

    cache: [P_0 .. P_{p-1}, pad ...]          (prefixes right-padded to the batch's longest)
    row:   [pad ..., s_0 .. s_{m-1}, r_0 .. r_{n-2}, pad ...]

Suffixes are left-padded so the last context token of every row sits in the same column; the
logits of the ``Rmax`` columns from there on predict ``r``. Position ids continue from ``p``.

The optional vLLM path (:func:`score_with_vllm`) asks a ``vllm.LLM`` for prompt log-probs; vLLM is
imported only when that function is called.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import torch

__all__ = [
    "PendingScores",
    "ReplayScorer",
    "ScoreItem",
    "ScoringError",
    "VLLMRequest",
    "align_prompt_logprobs",
    "build_vllm_requests",
    "default_token_budget",
    "response_logprobs",
    "score_views",
    "score_with_vllm",
    "sequence_logprobs",
]

DEFAULT_TOKEN_BUDGET = 8192  # CPU; on CUDA devices 65536 (see default_token_budget)


def default_token_budget(device) -> int:
    """Padded tokens per forward batch: 65,536 on CUDA (H100/H200), 8,192 elsewhere."""
    return 65536 if torch.device(device).type == "cuda" else DEFAULT_TOKEN_BUDGET

_PAD_ID = 0


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


# ----------------------------------------------------------------------------------------------
# reference


def sequence_logprobs(model, prompt_ids: Sequence[int], response_ids: Sequence[int]) -> np.ndarray:
    """Log-probs of ``response_ids`` after ``prompt_ids``: one plain, unbatched, unpadded forward.

    Returns
    -------
    numpy.ndarray
        float32, shape ``(len(response_ids),)``.
    """
    prompt, response = list(prompt_ids), list(response_ids)
    if not prompt or not response:
        raise ScoringError("sequence_logprobs needs a non-empty prompt and a non-empty response")
    device = _model_device(model)
    ids = torch.tensor([prompt + response], dtype=torch.long, device=device)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
        out = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, len(prompt) :, None])[:, 0]
    return out.cpu().numpy().astype(np.float32)


# ----------------------------------------------------------------------------------------------
# planning


@dataclass
class _Row:
    item: int
    view: str
    suffix: list[int]
    response: list[int]


@dataclass
class _Entry:
    item: int
    prefix: list[int]
    rows: list[_Row]

    def cost(self) -> int:
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


def _validate(items: Sequence[ScoreItem], max_length: int | None, limit_name: str = "maximum length") -> None:
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


def _plan(items: Sequence[ScoreItem], share_prefix: bool, min_prefix: int) -> list[_Entry]:
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
            entries.append(_Entry(i, prefix, [_Row(i, v, ctxs[v][plen:], response) for v in views]))
        else:
            entries.extend(_Entry(i, [], [_Row(i, v, ctxs[v], response)]) for v in views)
    return entries


def _batches(entries: list[_Entry], token_budget: int) -> list[list[_Entry]]:
    """Group entries of like shape (with/without prefix, similar lengths) under the token budget."""
    order = sorted(entries, key=lambda e: (bool(e.prefix), len(e.prefix), e.cost()), reverse=True)
    batches: list[list[_Entry]] = []
    cur: list[_Entry] = []
    for entry in order:
        trial = cur + [entry]
        if cur and (bool(cur[0].prefix) != bool(entry.prefix) or _padded_cost(trial) > token_budget):
            batches.append(cur)
            trial = [entry]
        cur = trial
    if cur:
        batches.append(cur)
    return batches


def _padded_cost(batch: list[_Entry]) -> int:
    lp = max(len(e.prefix) for e in batch)
    nrows = max(len(e.rows) for e in batch)
    total = len(batch) * lp
    for j in range(nrows):
        rows = [e.rows[j] for e in batch if len(e.rows) > j]
        smax = max(len(r.suffix) for r in rows)
        rmax = max(len(r.response) for r in rows)
        total += len(rows) * (smax + rmax - 1 + lp)
    return total


# ----------------------------------------------------------------------------------------------
# forward passes


def _model_device(model) -> torch.device:
    try:
        return next(model.parameters()).device
    except StopIteration:  # pragma: no cover - a model without parameters
        return torch.device("cpu")


def _accepts_logits_to_keep(model) -> bool:
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False


def _supports_prefix_cache(model) -> bool:
    """Full-attention decoders only: sliding-window layers would need their own cache handling."""
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    layer_types = getattr(cfg, "layer_types", None)
    if layer_types is not None:
        return all(t == "full_attention" for t in layer_types)
    if getattr(cfg, "use_sliding_window", True) is False:
        return True
    return getattr(cfg, "sliding_window", None) is None


def _max_length(model) -> int | None:
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return getattr(cfg, "max_position_embeddings", None)


def _sliding_window(model) -> int | None:
    """The window of a model with sliding-window layers, else None.

    The scorer passes explicit 4-D attention masks, which take the place of the model's own
    sliding-window masks; sequences up to the window length are unaffected, longer ones are refused.
    """
    if _supports_prefix_cache(model):
        return None
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    window = getattr(cfg, "sliding_window", None)
    return int(window) if window else None


def _length_limit(model, max_length: int | None) -> tuple[int | None, str]:
    """The longest allowed context + response, and what sets it (for error messages)."""
    limit = max_length if max_length is not None else _max_length(model)
    window = _sliding_window(model)
    if window is not None and (limit is None or window < limit):
        return window, "sliding window"
    return limit, "maximum length"


def _token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Log-softmax of ``logits`` (``[..., V]``) at ``targets`` (``[...]``)."""
    return logits.gather(-1, targets[..., None])[..., 0] - torch.logsumexp(logits, dim=-1)


def _encode_prefixes(model, batch: list[_Entry], device):
    """Right-padded prefix forward; returns per-layer (keys, values) and the prefix attention mask."""
    from transformers import DynamicCache

    lp = max(len(e.prefix) for e in batch)
    ids = torch.full((len(batch), lp), _PAD_ID, dtype=torch.long)
    mask = torch.zeros((len(batch), lp), dtype=torch.long)
    for b, e in enumerate(batch):
        ids[b, : len(e.prefix)] = torch.tensor(e.prefix)
        mask[b, : len(e.prefix)] = 1
    ids, mask = ids.to(device), mask.to(device)
    pos = torch.arange(lp, device=device).expand(len(batch), lp)
    kw = {"logits_to_keep": 1} if _accepts_logits_to_keep(model) else {}
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=DynamicCache(), use_cache=True, **kw)
    cache = out.past_key_values
    kv = [(layer.keys, layer.values) for layer in cache.layers]
    return kv, mask


def _continue_rows(model, rows: list[_Row], prefix_lens: list[int], kv, prefix_mask, device) -> torch.Tensor:
    """Forward the rows (on top of the cached prefixes when ``kv`` is given); log-probs ``[B, Rmax]``."""
    from transformers import DynamicCache

    smax = max(len(r.suffix) for r in rows)
    rmax = max(len(r.response) for r in rows)
    width = smax + rmax - 1
    nb = len(rows)
    ids = torch.full((nb, width), _PAD_ID, dtype=torch.long)
    mask = torch.zeros((nb, width), dtype=torch.long)
    pos = torch.zeros((nb, width), dtype=torch.long)
    targets = torch.zeros((nb, rmax), dtype=torch.long)
    for b, (row, plen) in enumerate(zip(rows, prefix_lens)):
        toks = row.suffix + row.response[:-1]
        start = smax - len(row.suffix)
        ids[b, start : start + len(toks)] = torch.tensor(toks)
        mask[b, start : start + len(toks)] = 1
        pos[b, start : start + len(toks)] = torch.arange(plen, plen + len(toks))
        pos[b, start + len(toks) :] = plen + len(toks)
        pos[b, :start] = plen
        targets[b, : len(row.response)] = torch.tensor(row.response)
    ids, mask, pos, targets = ids.to(device), mask.to(device), pos.to(device), targets.to(device)
    keep = torch.arange(smax - 1, smax - 1 + rmax, device=device)
    kw: dict[str, Any] = {}
    if kv is not None:
        kw["past_key_values"] = DynamicCache(ddp_cache_data=kv)
        kw["use_cache"] = True
        mask = torch.cat([prefix_mask, mask], dim=1)
    else:
        kw["use_cache"] = False
        # Left padding leaves the pad positions of a row without any key to attend to; SDPA's backward
        # on CUDA turns such fully masked rows into NaN gradients. A 4-D mask that lets every pad
        # position attend to itself (and nothing else) keeps all real positions' results unchanged.
        key_ok = mask.bool()
        causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
        mask = ((causal[None] & key_ok[:, None, :]) | torch.eye(width, dtype=torch.bool, device=device)[None])[:, None]
    if _accepts_logits_to_keep(model):
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=keep, **kw).logits
    else:
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, **kw).logits[:, keep]
    logits = logits.float()
    return _token_logprobs(logits, targets)


def _score_batch(model, batch: list[_Entry], device) -> list[tuple[_Row, torch.Tensor]]:
    out = []
    kv = prefix_mask = None
    if batch[0].prefix:
        kv, prefix_mask = _encode_prefixes(model, batch, device)
    nslots = max(len(e.rows) for e in batch)
    for j in range(nslots):
        sel = [b for b, e in enumerate(batch) if len(e.rows) > j]
        rows = [batch[b].rows[j] for b in sel]
        plens = [len(batch[b].prefix) for b in sel]
        kv_j = pm_j = None
        if kv is not None:
            if len(sel) == len(batch):
                kv_j, pm_j = kv, prefix_mask
            else:
                idx = torch.tensor(sel, device=device)
                kv_j = [(k[idx], v[idx]) for k, v in kv]
                pm_j = prefix_mask[idx]
        lp = _continue_rows(model, rows, plens, kv_j, pm_j, device)
        out.extend((row, lp[b, : len(row.response)]) for b, row in enumerate(rows))
    return out


def _head_parts(model):
    """``(decoder, lm_head)`` of a plain causal LM, or None when logits are not ``lm_head(hidden)``.

    Models that scale or soft-cap their logits (Gemma 2/3, Cohere, ...) return None and are scored
    through their full forward.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT wrapper
    cfg = base.config.get_text_config() if hasattr(base.config, "get_text_config") else base.config
    if any(getattr(cfg, a, None) not in (None, 1, 1.0) for a in ("final_logit_softcapping", "logit_scale")):
        return None
    get_decoder = getattr(base, "get_decoder", None)
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    decoder = get_decoder() if callable(get_decoder) else None
    if decoder is None or decoder is base or not isinstance(head, torch.nn.Linear):
        return None
    return decoder, head


def _packed_length(entry: _Entry) -> int:
    return len(entry.prefix) + sum(len(r.suffix) + len(r.response) - 1 for r in entry.rows)


def _packed_batches(entries: list[_Entry], token_budget: int) -> list[list[_Entry]]:
    """Entries sorted by packed length, grouped while ``rows x longest`` stays under the budget."""
    order = sorted(entries, key=_packed_length, reverse=True)
    batches: list[list[_Entry]] = []
    for entry in order:
        if batches and (len(batches[-1]) + 1) * _padded_width(_packed_length(batches[-1][0])) <= token_budget:
            batches[-1].append(entry)
        else:
            batches.append([entry])
    return batches


_HEAD_CHUNK = 8192  # response positions per lm_head call
_WIDTH_MULTIPLE = 64  # packed rows are padded to a multiple of this: recurring shapes across training steps
                      # let attention backends (cuDNN) reuse their execution plans


def _padded_width(length: int) -> int:
    return -(-length // _WIDTH_MULTIPLE) * _WIDTH_MULTIPLE


def _to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A host array on ``device``; to CUDA from pinned memory without blocking the host."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def _score_packed(model, batch: list[_Entry], device, parts) -> list[tuple[_Row, torch.Tensor]]:
    """One forward for the whole batch: each step's prefix and all its views' continuations in one row.

    Row layout: ``[P | s_1 r_1[:-1] | s_2 r_2[:-1] | ... | pad]``. Branch ``j`` restarts its position
    ids at ``len(P)`` and attends to ``P`` and to itself (a tree-shaped causal mask), so every branch
    sees exactly the tokens of its own context; the prefix is computed once, with no cache.
    """
    width = _padded_width(max(_packed_length(e) for e in batch))
    nb = len(batch)
    ids = np.zeros((nb, width), dtype=np.int64)
    pos = np.zeros((nb, width), dtype=np.int64)
    seg = np.full((nb, width), -1, dtype=np.int64)  # 0 prefix, j >= 1 branch j, -1 padding
    where: list[tuple[_Row, int, int]] = []  # row, batch index, column of its first prediction
    for b, e in enumerate(batch):
        p = len(e.prefix)
        ids[b, :p], pos[b, :p], seg[b, :p] = e.prefix, np.arange(p), 0
        col = p
        for j, row in enumerate(e.rows, start=1):
            toks = row.suffix + row.response[:-1]
            n = len(toks)
            ids[b, col:col + n], pos[b, col:col + n], seg[b, col:col + n] = toks, np.arange(p, p + n), j
            where.append((row, b, col + len(row.suffix) - 1))
            col += n
        pos[b, col:] = np.arange(width - col)  # padding: any positions
    ids_t, pos_t, seg_t = (_to_device(a, device) for a in (ids, pos, seg))
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
    sq, sk = seg_t[:, :, None], seg_t[:, None, :]
    mask = (causal[None] & ((sk == 0) | (sk == sq)))[:, None]  # padding attends to padding (no empty rows)
    # flat (batch, column) of every predicting position and its target token
    b_idx = np.concatenate([np.full(len(r.response), b) for r, b, _ in where])
    c_idx = np.concatenate([np.arange(c, c + len(r.response)) for r, _, c in where])
    targets = np.concatenate([np.asarray(r.response, dtype=np.int64) for r, _, _ in where])
    b_t, c_t, targets = (_to_device(a, device) for a in (b_idx, c_idx, targets))
    if parts is not None:
        decoder, head = parts
        hidden = decoder(input_ids=ids_t, attention_mask=mask, position_ids=pos_t, use_cache=False).last_hidden_state
        picked = hidden[b_t, c_t]
        chunks = []
        for start in range(0, len(picked), _HEAD_CHUNK):
            logits = head(picked[start:start + _HEAD_CHUNK]).float()
            chunks.append(_token_logprobs(logits, targets[start:start + _HEAD_CHUNK]))
        flat = torch.cat(chunks)
    else:
        logits = model(input_ids=ids_t, attention_mask=mask, position_ids=pos_t, use_cache=False).logits
        flat = _token_logprobs(logits[b_t, c_t].float(), targets)
    out, start = [], 0
    for row, _, _ in where:
        n = len(row.response)
        out.append((row, flat[start:start + n]))
        start += n
    return out


# ----------------------------------------------------------------------------------------------
# public scorers


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
        self.device = _model_device(model)
        token_budget = default_token_budget(self.device) if token_budget is None else int(token_budget)
        if token_budget < 1:
            raise ValueError(f"token_budget must be positive, got {token_budget}")
        self.token_budget = token_budget
        self.max_length, self._limit_name = _length_limit(model, max_length)
        self.progress = progress
        self.share_prefix = _supports_prefix_cache(model) if share_prefix is None else bool(share_prefix)
        if self.share_prefix and not _supports_prefix_cache(model):
            raise ValueError("share_prefix=True needs a full-attention model (no sliding-window layers)")
        self.min_prefix = int(min_prefix)
        full_attention = _supports_prefix_cache(model)
        self.packed = (full_attention and self.device.type == "cuda") if packed is None else bool(packed)
        if self.packed and not full_attention:
            raise ValueError("packed=True needs a full-attention model (no sliding-window layers)")
        self._parts = _head_parts(model) if self.packed else None

    def score(self, items: Sequence[ScoreItem], *, progress: bool | None = None) -> list[dict[str, np.ndarray]]:
        """Score every view of every item.

        Returns
        -------
        list of dict
            One dict per item, view name -> float32 array of shape ``(len(response_ids),)``; views in
            ``item.given`` are returned unchanged (as float32), the others are scored.
        """
        return self.submit(items, progress=progress).result()

    def submit(self, items: Sequence[ScoreItem], *, progress: bool | None = None) -> "PendingScores":
        """Queue the forward passes of :meth:`score` and return without waiting for the device.

        On CUDA the batches' inputs are copied from pinned memory without blocking, so the host is
        free (e.g. to render the next steps' views) while the GPU works; :meth:`PendingScores.result`
        waits and returns what :meth:`score` returns. Input errors are raised here.
        """
        items = list(items)
        _validate(items, self.max_length, self._limit_name)
        entries = _plan(items, self.share_prefix, self.min_prefix)
        if self.packed:
            batches = _packed_batches(entries, self.token_budget)
        else:
            batches = _batches(entries, self.token_budget)
        show = self.progress if progress is None else progress
        from tqdm.auto import tqdm

        scored: list[tuple[_Row, torch.Tensor]] = []
        with torch.inference_mode(), tqdm(total=len(entries), desc="replay scoring", unit="seq",
                                          disable=not show, leave=False) as bar:
            for batch in batches:
                if self.packed:
                    scored.extend(_score_packed(self.model, batch, self.device, self._parts))
                else:
                    scored.extend(_score_batch(self.model, batch, self.device))
                bar.update(len(batch))
        return PendingScores(items, scored)


class PendingScores:
    """Scores queued by :meth:`ReplayScorer.submit`; :meth:`result` waits for them."""

    def __init__(self, items: list[ScoreItem], scored: list[tuple[_Row, torch.Tensor]]):
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
    """Functional form: a ``vllm.LLM`` goes to :func:`score_with_vllm`, anything else to ReplayScorer."""
    if _is_vllm_engine(model):
        return score_with_vllm(model, items, progress=kwargs.get("progress", True))
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
    _validate(items, *_length_limit(model, max_length))
    device = _model_device(model)
    token_budget = default_token_budget(device) if token_budget is None else int(token_budget)
    entries = _plan(items, share_prefix=False, min_prefix=0)
    results: list[torch.Tensor | None] = [None] * len(items)
    from tqdm.auto import tqdm

    ctx = torch.enable_grad() if grad else torch.inference_mode()
    with ctx, tqdm(total=len(entries), desc="log-probs", unit="seq", disable=not progress, leave=False) as bar:
        for batch in _batches(entries, token_budget):
            for row, lp in _score_batch(model, batch, device):
                results[row.item] = lp
            bar.update(len(batch))
    if not padded:
        return results
    rmax = max((len(r) for _, r in pairs), default=0)
    out = torch.zeros((len(pairs), rmax), dtype=torch.float32, device=device)
    mask = torch.zeros((len(pairs), rmax), dtype=torch.bool, device=device)
    for i, lp in enumerate(results):
        out[i, : len(lp)] = lp
        mask[i, : len(lp)] = True
    return out, mask


# ----------------------------------------------------------------------------------------------
# vLLM (optional; prompt log-probs)


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


def _is_vllm_engine(model) -> bool:
    return type(model).__module__.split(".")[0] == "vllm"


def score_with_vllm(llm, items: Sequence[ScoreItem], *, progress: bool = True) -> list[dict[str, np.ndarray]]:
    """Score items with a ``vllm.LLM`` through prompt log-probs (same output as ReplayScorer.score).

    vLLM's automatic prefix caching, when enabled on the engine, plays the role of the shared-prefix
    cache. Needs vLLM installed; raises ImportError otherwise.
    """
    items = list(items)
    _validate(items, None)
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
