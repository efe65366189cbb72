"""Model checks: what the engines need to know about a model before a forward pass.

The device the model sits on, whether its ``forward`` takes ``logits_to_keep``, whether every layer
attends to the full context (prefix sharing and packing need that) or the window of its sliding-window
layers, the longest sequence it may score, and its decoder and plain output head (for heads applied to
response positions only).
"""
from __future__ import annotations

import inspect

import torch

__all__ = [
    "accepts_logits_to_keep",
    "head_parts",
    "length_limit",
    "model_device",
    "supports_prefix_cache",
]


def model_device(model) -> torch.device:
    """The device of the model's parameters (CPU for a model without any)."""
    try:
        return next(model.parameters()).device
    except StopIteration:  # pragma: no cover - a model without parameters
        return torch.device("cpu")


def accepts_logits_to_keep(model) -> bool:
    """Whether ``model.forward`` takes ``logits_to_keep`` (then only the kept positions' logits are computed)."""
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False


def _text_config(model):
    """The config of the text decoder (multimodal configs nest it)."""
    return model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config


def supports_prefix_cache(model) -> bool:
    """Full-attention decoders only: sliding-window layers would need their own cache handling."""
    cfg = _text_config(model)
    layer_types = getattr(cfg, "layer_types", None)
    if layer_types is not None:
        return all(t == "full_attention" for t in layer_types)
    if getattr(cfg, "use_sliding_window", True) is False:
        return True
    return getattr(cfg, "sliding_window", None) is None


def _max_length(model) -> int | None:
    return getattr(_text_config(model), "max_position_embeddings", None)


def _sliding_window(model) -> int | None:
    """The window of a model with sliding-window layers, else None.

    The scorer passes explicit 4-D attention masks, which take the place of the model's own
    sliding-window masks; sequences up to the window length are unaffected, longer ones are refused.
    """
    if supports_prefix_cache(model):
        return None
    window = getattr(_text_config(model), "sliding_window", None)
    return int(window) if window else None


def length_limit(model, max_length: int | None) -> tuple[int | None, str]:
    """The longest allowed context + response, and what sets it (for error messages)."""
    limit = max_length if max_length is not None else _max_length(model)
    window = _sliding_window(model)
    if window is not None and (limit is None or window < limit):
        return window, "sliding window"
    return limit, "maximum length"


def head_parts(model):
    """``(decoder, lm_head)`` of a plain causal LM, or None when logits are not ``lm_head(hidden)``.

    Models that scale or soft-cap their logits (Gemma 2/3, Cohere, ...) return None and are scored
    through their full forward.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT wrapper
    cfg = _text_config(base)
    if any(getattr(cfg, a, None) not in (None, 1, 1.0) for a in ("final_logit_softcapping", "logit_scale")):
        return None
    get_decoder = getattr(base, "get_decoder", None)
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    decoder = get_decoder() if callable(get_decoder) else None
    if decoder is None or decoder is base or not isinstance(head, torch.nn.Linear):
        return None
    return decoder, head
