"""Interaction prompts, output parsers and chat rendering (paper appendix "Prompts").

Three layers, all text-in, text-out except the last:

1. :func:`interaction_text` fills an environment's interaction template (the paper's tables,
   transcribed verbatim in the environment registry :mod:`ocsd.environments`) from a task, the step
   count, the shown history, the current observation and the admissible actions. With
   ``replay=True`` it returns the wording that the replay-scoring tables use (the environment's
   ``replay_wording``: ALFWorld and WebShop read "choose an admissible action for **the** current
   step" where the interaction table reads "for current step"; Search-QA has no such sentence).
2. :func:`parse_output` reads a model output with the environment's parser: the action, whether the
   output was well formed, and the action's family. It never raises.
3. :class:`PromptRenderer` wraps a tokenizer and turns user-message text into chat-templated prompt
   ids (``enable_thinking=False`` where the template knows the switch, as for Qwen3).

Field formats (the paper gives the templates, not the field formats; these are this suite's)
-------------------------------------------------------------------------------------------
* ``{step_count}`` is k, the number of steps already taken (0-based index of the current step);
  ``{current_step}`` is k + 1.
* ``{history_length}`` is the number of (observation, action) pairs actually shown, which is at
  most k (fewer when the history window or prompt-length truncation dropped older pairs).
* The fields that show the history (ALFWorld and WebShop ``{action_history}`` and
  ``{admissible_actions}``, Search-QA ``{memory_context}``) come from the environment's
  ``template_fields``; :mod:`ocsd.environments.formats` describes their formats.

Tokenisation
------------
:meth:`PromptRenderer.render_ids` renders ``prefix + user_text + suffix`` where ``prefix`` and
``suffix`` are the chat template's text around the user message (found once by rendering a
sentinel message) and tokenises the three parts separately. Both boundaries sit next to a special
token or right after a newline, so the result equals the tokenisation of the whole chat string
(:meth:`PromptRenderer.canonical_ids`) for byte-level BPE tokenizers (GPT-2, Llama-3 and Qwen2
pre-tokenisers; checked in the tests). :meth:`PromptRenderer.render_segments` extends this to any
list of text segments, which is what makes replay views provably structure-matched (see
:mod:`ocsd.replay.views`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from typing import Any, Sequence

import numpy as np

from ocsd.environments import get_environment
from ocsd.environments.formats import ParsedOutput

__all__ = ["PromptRenderer", "Segment", "SegmentationError", "interaction_text", "parse_output"]

History = Sequence[tuple[str, str]]


def _window(history: History, history_length: int | None) -> list[tuple[str, str]]:
    pairs = [(str(o), str(a)) for o, a in history]
    if history_length is None:
        return pairs
    if history_length < 0:
        raise ValueError(f"history_length must be >= 0 or None, got {history_length}")
    return pairs[len(pairs) - history_length:] if history_length else []


def interaction_text(
    env: str,
    *,
    task: str,
    step_idx: int,
    history: History,
    current_obs: str,
    admissible_actions: Sequence[str] = (),
    history_length: int | None = None,
    replay: bool = False,
) -> str:
    """The user message of one interaction step (paper tables "Interaction Prompt on ...").

    Parameters
    ----------
    env : str
        A registered environment's name or alias (:func:`ocsd.environments.get_environment`).
    task : str
        Task description (``{task_description}``).
    step_idx : int
        k, the 0-based index of the current step (= ``{step_count}``).
    history : sequence of (observation, action)
        Prior pairs (o_j, a_j) in order, ending with the pair of step k - 1; at most ``step_idx``.
    current_obs : str
        o_k.
    admissible_actions : sequence of str
        Admissible actions (shown by templates that have the field, ignored by the others).
    history_length : int or None
        Show only the most recent ``history_length`` pairs of ``history``; ``None`` shows all.
    replay : bool
        Use the replay-scoring tables' wording (the environment's ``replay_wording``).

    Returns
    -------
    str
        The filled template, without leading or trailing whitespace added.
    """
    spec = get_environment(env)
    if step_idx < 0:
        raise ValueError(f"step_idx must be >= 0, got {step_idx}")
    if len(history) > step_idx:
        raise ValueError(f"history has {len(history)} pairs but step_idx is {step_idx}: at most step_idx pairs")
    shown = _window(history, history_length)
    fields: dict[str, Any] = {
        "task_description": task,
        "step_count": step_idx,
        "history_length": len(shown),
        "current_step": step_idx + 1,
        "current_observation": current_obs,
        **spec.template_fields(shown, step_idx, str(current_obs), admissible_actions),
    }
    text = spec.template.format(**fields)
    if replay and spec.replay_wording is not None:
        old, new = spec.replay_wording
        head, sep, tail = text.rpartition(old)
        text = head + new + tail if sep else text
    return text


def parse_output(env: str, text: object) -> ParsedOutput:
    """Extract the action from a model output and judge its form. Never raises on any ``text``.

    The environment's parser reads the output (:meth:`ocsd.environments.EnvironmentSpec.parse_output`);
    see :class:`ocsd.environments.formats.ParsedOutput` for what is returned.
    """
    return get_environment(env).parse_output(text)


# ----------------------------------------------------------------------------------------------
# Chat rendering
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Segment:
    """One separately tokenised piece of a rendered prompt.

    Attributes
    ----------
    kind : str
        ``chat`` (template text around the user message), ``prompt`` (interaction text),
        ``fixed`` (replay scaffold text), ``observation`` (an observation field, label included),
        ``schema`` (a future-action schema field, label included), or a custom kind.
    text : str
        The segment's text.
    ids : tuple of int
        Its token ids, shape (len,).
    """

    kind: str
    text: str
    ids: tuple[int, ...]


_SENTINEL = "\u2063OCSD-USER-CONTENT\u2063"
_PROBE = "Probe line one.\nProbe line two: [x] 'y' <reason> </reason>"


def _as_ids(encoded: Any) -> list[int]:
    if isinstance(encoded, dict) or hasattr(encoded, "keys"):
        encoded = encoded["input_ids"]
    if hasattr(encoded, "tolist"):
        encoded = encoded.tolist()
    if encoded and isinstance(encoded[0], list):
        encoded = encoded[0]
    return [int(i) for i in encoded]


class SegmentationError(ValueError):
    """A token of the whole-prompt tokenisation crosses a segment boundary (joint mode)."""


class PromptRenderer:
    """Chat-template rendering of user messages into prompt token ids.

    Parameters
    ----------
    tokenizer : transformers tokenizer
        A Hugging Face tokenizer (fast or slow).
    enable_thinking : bool, default False
        Passed to templates that reference ``enable_thinking`` (Qwen3); others do not receive it.
    chat_template_kwargs : dict, optional
        Extra keyword arguments for ``apply_chat_template``.
    use_chat_template : bool or None
        ``None`` (default): use the chat template when the tokenizer has one. ``False``: plain text
        preceded by the special tokens the tokenizer adds itself (e.g. BOS) for base models.
    segment_mode : {"joint", "separate"} or None
        How segmented prompts are tokenised. ``joint`` (default for fast tokenizers): the whole chat
        string is tokenised once, as a model would see it, and tokens are assigned to segments by
        their character offsets; a token crossing a segment boundary raises
        :class:`SegmentationError`. ``separate`` (default for slow tokenizers): every segment is
        tokenised on its own, which guarantees segment-wise identical ids for identical text under
        any tokenizer, at the price of a non-canonical split where a boundary sits inside a
        pre-token (e.g. after a blank line for GPT-2-style pre-tokenisers).
    cache_size : int
        Number of segment tokenisations kept in an LRU cache (``separate`` mode).

    Attributes
    ----------
    prefix_text, suffix_text : str
        Template text before and after the user message (suffix includes the generation prompt, and
        for Qwen3 with thinking disabled the empty ``<think>\\n\\n</think>\\n\\n`` block).
    thinking_disabled : bool
        True when ``enable_thinking=False`` was passed to a template that uses it.
    """

    def __init__(self, tokenizer: Any, *, enable_thinking: bool = False,
                 chat_template_kwargs: dict[str, Any] | None = None,
                 use_chat_template: bool | None = None, segment_mode: str | None = None,
                 cache_size: int = 4096) -> None:
        self.tokenizer = tokenizer
        template = getattr(tokenizer, "chat_template", None)
        if use_chat_template is None:
            use_chat_template = bool(template)
        if use_chat_template and not template:
            raise ValueError("use_chat_template=True but the tokenizer has no chat_template")
        self.use_chat_template = bool(use_chat_template)
        if segment_mode is None:
            segment_mode = "joint" if getattr(tokenizer, "is_fast", False) else "separate"
        if segment_mode not in ("joint", "separate"):
            raise ValueError(f"segment_mode must be 'joint' or 'separate', got {segment_mode!r}")
        if segment_mode == "joint" and not getattr(tokenizer, "is_fast", False):
            raise ValueError("segment_mode='joint' needs a fast tokenizer (character offsets)")
        self.segment_mode = segment_mode
        kwargs = dict(chat_template_kwargs or {})
        self.thinking_disabled = False
        if self.use_chat_template and isinstance(template, str) and "enable_thinking" in template:
            kwargs.setdefault("enable_thinking", enable_thinking)
            self.thinking_disabled = kwargs["enable_thinking"] is False
        self.chat_template_kwargs = kwargs
        self._encode_cached = lru_cache(maxsize=cache_size)(self._encode_uncached)
        if self.use_chat_template:
            rendered = self.chat_text(_SENTINEL)
            if rendered.count(_SENTINEL) != 1:
                raise ValueError("the chat template does not place the user message verbatim exactly once")
            self.prefix_text, self.suffix_text = rendered.split(_SENTINEL)
            if self.chat_text(_PROBE) != self.prefix_text + _PROBE + self.suffix_text:
                raise ValueError("the chat template changes the user message text; segment rendering "
                                 "needs a template that inserts it verbatim")
            self.prefix_ids = tuple(self.encode(self.prefix_text))
        else:
            self.prefix_text, self.suffix_text = "", ""
            self.prefix_ids = tuple(_as_ids(tokenizer("", add_special_tokens=True)))
        self.suffix_ids = tuple(self.encode(self.suffix_text))

    def chat_text(self, user_text: str) -> str:
        """The full chat string of one user message with the generation prompt."""
        if not self.use_chat_template:
            return user_text
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": user_text}], tokenize=False, add_generation_prompt=True,
            **self.chat_template_kwargs)

    def _encode_uncached(self, text: str) -> tuple[int, ...]:
        if not text:
            return ()
        return tuple(_as_ids(self.tokenizer(text, add_special_tokens=False)))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without added special tokens (special-token strings still match)."""
        return list(self._encode_cached(text))

    def render_segments(self, pieces: Sequence[tuple[str, str]]) -> tuple[Segment, ...]:
        """Tokenise the ``(kind, text)`` pieces of a user message between the chat prefix and suffix.

        Returns the segments, chat prefix and suffix included (kind ``chat``); the prompt ids are
        the concatenation of their ids. See ``segment_mode`` for how ids are assigned.

        Raises
        ------
        SegmentationError
            In ``joint`` mode, if a token crosses a segment boundary.
        """
        parts = self._parts(pieces)
        if self.segment_mode == "separate":
            return tuple(Segment(k, t, self.prefix_ids if i == 0 else self.suffix_ids if i == len(parts) - 1
                                 else self._encode_cached(t)) for i, (k, t) in enumerate(parts))
        return self._joint(parts)

    def render_segments_many(self, pieces_list: Sequence[Sequence[tuple[str, str]]]) -> list[tuple[Segment, ...]]:
        """:meth:`render_segments` of many prompts; in ``joint`` mode one batched tokenizer call.

        Returns the same segments as calling :meth:`render_segments` on each element; a
        :class:`SegmentationError` names the prompt's position in ``pieces_list``.
        """
        if self.segment_mode == "separate":
            return [self.render_segments(p) for p in pieces_list]
        all_parts = [self._parts(p) for p in pieces_list]
        if not all_parts:
            return []
        encoded = self.encode_many(["".join(t for _, t in parts) for parts in all_parts], offsets=True)
        out = []
        for i, (parts, (ids, offsets)) in enumerate(zip(all_parts, encoded)):
            try:
                out.append(self._group(parts, ids, offsets))
            except SegmentationError as err:
                raise SegmentationError(f"prompt {i}: {err}") from None
        return out

    def encode_many(self, texts: Sequence[str], *, offsets: bool = False, direct: bool = True) -> list:
        """Token ids of many texts without added special tokens, in one batched (parallel) call; with
        ``offsets``, ``(ids, character offsets)`` pairs.

        A fast tokenizer whose backend has no padding or truncation set is called directly (its
        ``encode_batch``: the same ids and offsets, without the per-text dictionaries Hugging Face's
        ``__call__`` builds); any other tokenizer, or any with ``direct=False``, through ``__call__``.
        """
        backend = getattr(self.tokenizer, "backend_tokenizer", None) if direct else None
        if backend is not None and backend.padding is None and backend.truncation is None:
            encodings = backend.encode_batch(list(texts), add_special_tokens=False)
            return [(e.ids, e.offsets) for e in encodings] if offsets else [e.ids for e in encodings]
        enc = self.tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=offsets)
        if offsets:
            return [(_as_ids(ids), offs) for ids, offs in zip(enc["input_ids"], enc["offset_mapping"])]
        return [_as_ids(ids) for ids in enc["input_ids"]]

    def _parts(self, pieces: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        return [("chat", self.prefix_text)] + [(str(k), str(t)) for k, t in pieces] + [("chat", self.suffix_text)]

    def _joint(self, parts: list[tuple[str, str]]) -> tuple[Segment, ...]:
        enc = self.tokenizer("".join(t for _, t in parts), add_special_tokens=False, return_offsets_mapping=True)
        offsets = enc["offset_mapping"]
        if offsets and isinstance(offsets[0][0], (list, tuple)):
            offsets = offsets[0]
        return self._group(parts, _as_ids(enc), offsets)

    def _group(self, parts: list[tuple[str, str]], ids: Sequence[int], offsets) -> tuple[Segment, ...]:
        """Assign tokens to the parts their first character falls in (vectorised over tokens)."""
        bounds = np.cumsum([0] + [len(t) for _, t in parts])
        offs = np.fromiter(chain.from_iterable(offsets), dtype=np.int64, count=2 * len(offsets)).reshape(-1, 2)
        part = np.minimum(np.searchsorted(bounds, offs[:, 0], side="right") - 1, len(parts) - 1)
        crossing = np.flatnonzero(offs[:, 1] > bounds[part + 1])
        if len(crossing):
            t = int(crossing[0])
            idx, (start, end) = int(part[t]), offs[t].tolist()
            text = "".join(x for _, x in parts)
            raise SegmentationError(
                f"token {ids[t]} spans characters {start}:{end} {text[start:end]!r} across the boundary "
                f"between a {parts[idx][0]!r} and a {parts[idx + 1][0]!r} segment; start segments after a "
                "newline and before a letter, or use segment_mode='separate'")
        arr = np.asarray(ids, dtype=np.int64)
        groups = [tuple(arr[part == j].tolist()) for j in range(len(parts))]
        if not self.use_chat_template:
            groups[0] = tuple(self.prefix_ids)
        return tuple(Segment(k, t, g) for (k, t), g in zip(parts, groups))

    def render_ids(self, user_text: str) -> list[int]:
        """Prompt ids of one user message: chat prefix, message, suffix with generation prompt.

        This is the rollout prompt; the Student view renders exactly these ids. In ``joint`` mode it
        equals :meth:`canonical_ids`.
        """
        if self.segment_mode == "joint":
            return self.canonical_ids(user_text)
        return list(self.prefix_ids) + self.encode(user_text) + list(self.suffix_ids)

    def render_ids_many(self, user_texts: Sequence[str]) -> list[list[int]]:
        """:meth:`render_ids` of many messages, tokenised in one batched (parallel) tokenizer call."""
        if not user_texts:
            return []
        if self.segment_mode == "joint":
            texts = [self.chat_text(t) if self.use_chat_template else t for t in user_texts]
            prefix = list(self.prefix_ids) if not self.use_chat_template else []
            return [prefix + list(ids) for ids in self.encode_many(texts)]
        encoded = self.encode_many(list(user_texts))
        return [list(self.prefix_ids) + (list(ids) if text else []) + list(self.suffix_ids)
                for text, ids in zip(user_texts, encoded)]

    def canonical_ids(self, user_text: str) -> list[int]:
        """Tokenisation of the whole chat string at once."""
        if not self.use_chat_template:
            return list(self.prefix_ids) + self.encode(user_text)
        return _as_ids(self.tokenizer(self.chat_text(user_text), add_special_tokens=False))

    def __repr__(self) -> str:
        name = getattr(self.tokenizer, "name_or_path", type(self.tokenizer).__name__)
        return (f"PromptRenderer({name!r}, chat_template={self.use_chat_template}, "
                f"segment_mode={self.segment_mode!r}, thinking_disabled={self.thinking_disabled})")
