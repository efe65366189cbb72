"""The packed prefix-tree engine (default on CUDA): one row per step, one forward per batch
(``P`` prefix, ``s_j`` suffix of view ``j``, ``r`` response)::

    ids:       [P_0 .. P_{p-1} | s_1 r[:-1] | s_2 r[:-1] | ... | pad]
    positions: [0 .. p-1       | p ..       | p ..       | ...]
    mask:      causal inside the prefix and inside each branch; every branch also sees the prefix

Branch ``j`` sees exactly its own context, so the logits at its response positions are those of
``P + s_j + r``. The output head runs on the response positions only.
"""
from __future__ import annotations

import numpy as np
import torch

from ocsd.replay.scoring.planning import Entry, Row, packed_length, padded_width
from ocsd.replay.scoring.reference import token_logprobs

__all__ = ["score_packed_batch"]

_HEAD_CHUNK = 8192  # response positions per lm_head call


def _to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A host array on ``device``; to CUDA from pinned memory without blocking the host."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def score_packed_batch(model, batch: list[Entry], device, parts) -> list[tuple[Row, torch.Tensor]]:
    """One forward for the whole batch: each step's prefix and all its views' continuations in one row.

    Row layout: ``[P | s_1 r_1[:-1] | s_2 r_2[:-1] | ... | pad]``. Branch ``j`` restarts its position
    ids at ``len(P)`` and attends to ``P`` and to itself (a tree-shaped causal mask), so every branch
    sees exactly the tokens of its own context; the prefix is computed once, with no cache.

    Parameters
    ----------
    model : transformers causal LM
    batch : list of Entry
        A batch of :func:`~ocsd.replay.scoring.planning.packed_batches`.
    device : torch.device
        The model's device.
    parts : tuple or None
        ``(decoder, lm_head)`` from :func:`~ocsd.replay.scoring.checks.head_parts`: the head then runs
        on response positions only. None: the model's full forward.

    Returns
    -------
    list of (Row, torch.Tensor)
        Every row with its response log-probs, float32 of shape ``(len(row.response),)``, on ``device``.
    """
    width = padded_width(max(packed_length(e) for e in batch))
    nb = len(batch)
    ids = np.zeros((nb, width), dtype=np.int64)
    pos = np.zeros((nb, width), dtype=np.int64)
    seg = np.full((nb, width), -1, dtype=np.int64)  # 0 prefix, j >= 1 branch j, -1 padding
    where: list[tuple[Row, int, int]] = []  # row, batch index, column of its first prediction
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
            chunks.append(token_logprobs(logits, targets[start:start + _HEAD_CHUNK]))
        flat = torch.cat(chunks)
    else:
        logits = model(input_ids=ids_t, attention_mask=mask, position_ids=pos_t, use_cache=False).logits
        flat = token_logprobs(logits[b_t, c_t].float(), targets)
    out, start = [], 0
    for row, _, _ in where:
        n = len(row.response)
        out.append((row, flat[start:start + n]))
        start += n
    return out
