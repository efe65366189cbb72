"""Log-probs of target tokens: :func:`token_logprobs`, the last step of every engine, and
:func:`sequence_logprobs`, the plain unbatched forward every engine is tested against.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ocsd.replay.scoring.checks import model_device
from ocsd.replay.scoring.planning import ScoringError

__all__ = ["sequence_logprobs", "token_logprobs"]


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Log-softmax of ``logits`` (``[..., V]``) at ``targets`` (``[...]``)."""
    return logits.gather(-1, targets[..., None])[..., 0] - torch.logsumexp(logits, dim=-1)


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
    device = model_device(model)
    ids = torch.tensor([prompt + response], dtype=torch.long, device=device)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
        out = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, len(prompt) :, None])[:, 0]
    return out.cpu().numpy().astype(np.float32)
