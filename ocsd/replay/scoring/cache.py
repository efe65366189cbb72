"""The prefix-cache engine (default on CPU): each step's common prefix is encoded once into a
key/value cache, then each view's continuation row runs on top of it::

    cache: [P_0 .. P_{p-1}, pad ...]          (prefixes right-padded to the batch's longest)
    row:   [pad ..., s_0 .. s_{m-1}, r_0 .. r_{n-2}, pad ...]

(``P`` prefix, ``s`` a view's suffix, ``r`` the response.) Suffixes are left-padded so the last
context token of every row sits in the same column; the logits of the ``Rmax`` columns from there on
predict ``r``. Position ids continue from ``p``. Entries without a prefix run as full rows with an
explicit 4-D mask; :func:`ocsd.replay.scoring.response_logprobs` uses that path, with gradients.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch

from ocsd.replay.scoring.checks import accepts_logits_to_keep
from ocsd.replay.scoring.planning import Entry, Row
from ocsd.replay.scoring.reference import token_logprobs

__all__ = ["differentiable_attention", "score_cache_batch"]

_PAD_ID = 0


def differentiable_attention(device):
    """The scaled-dot-product-attention kernels of a forward pass that will be differentiated.

    On CUDA with gradients enabled, cuDNN's attention is left out (flash, memory-efficient and math
    remain): with the explicit 4-D masks of padded rows its backward gave NaN gradients on an H100 in
    bfloat16 (torch 2.11, cuDNN 9.19; a Qwen2.5 supervised batch whose loss and every row alone were
    finite), while the memory-efficient and math kernels gave finite ones. Elsewhere torch's own choice.

    Parameters
    ----------
    device : torch.device
        The model's device.

    Returns
    -------
    contextlib.AbstractContextManager
        Entered around the model call.
    """
    if torch.device(device).type != "cuda" or not torch.is_grad_enabled():
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def _encode_prefixes(model, batch: list[Entry], device):
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
    kw = {"logits_to_keep": 1} if accepts_logits_to_keep(model) else {}
    with differentiable_attention(device):
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=DynamicCache(),
                    use_cache=True, **kw)
    cache = out.past_key_values
    kv = [(layer.keys, layer.values) for layer in cache.layers]
    return kv, mask


def _continue_rows(model, rows: list[Row], prefix_lens: list[int], kv, prefix_mask, device) -> torch.Tensor:
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
    with differentiable_attention(device):
        if accepts_logits_to_keep(model):
            logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=keep, **kw).logits
        else:
            logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, **kw).logits[:, keep]
    logits = logits.float()
    return token_logprobs(logits, targets)


def score_cache_batch(model, batch: list[Entry], device) -> list[tuple[Row, torch.Tensor]]:
    """Score one batch of :func:`~ocsd.replay.scoring.planning.cache_batches`.

    Parameters
    ----------
    model : transformers causal LM
    batch : list of Entry
        Entries that all have a prefix (encoded once into a key/value cache, then continued row slot
        by row slot) or none (full rows).
    device : torch.device
        The model's device.

    Returns
    -------
    list of (Row, torch.Tensor)
        Every row with its response log-probs, float32 of shape ``(len(row.response),)``, on ``device``;
        differentiable when called under ``torch.enable_grad``.
    """
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
