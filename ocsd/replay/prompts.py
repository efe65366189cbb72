"""Interaction prompts, output parsers and chat rendering (paper appendix "Prompts").

Three layers, all text-in, text-out except the last:

1. :func:`interaction_text` fills the benchmark's interaction template (ALFWorld, WebShop,
   Search-QA; the paper's tables transcribed verbatim in :data:`TEMPLATES`) from a task, the step
   count, the shown history, the current observation and the admissible actions. With
   ``replay=True`` it returns the wording that the replay-scoring tables use (see below).
2. :func:`parse_output` reads a model output: the action, whether the output was well formed, and the
   action's family. It never raises.
3. :class:`PromptRenderer` wraps a tokenizer and turns user-message text into chat-templated prompt
   ids (``enable_thinking=False`` where the template knows the switch, as for Qwen3).

Field formats (the paper gives the templates, not the field formats; these are this suite's)
-------------------------------------------------------------------------------------------
* ``{step_count}`` is k, the number of steps already taken (0-based index of the current step);
  ``{current_step}`` is k + 1.
* ``{history_length}`` is the number of (observation, action) pairs actually shown, which is at
  most k (fewer when the history window or prompt-length truncation dropped older pairs).
* ALFWorld / WebShop ``{action_history}``: for each shown pair, in order, a new line
  ``[Observation n: '<observation>', Action n: '<action>']`` with n the 1-based step number of the
  pair; empty when no pair is shown.
* ``{admissible_actions}``: each action in single quotes, joined by a newline and a space.
* Search-QA ``{memory_context}``: for each shown step, the action as executed (``<search>q</search>``)
  and, on the next line, the observation it returned wrapped as ``<information>...</information>``
  (left as is when it is already wrapped); steps joined by a newline; empty at the first step. The
  Search-QA template has no current-observation field: the observation returned by the last shown
  action is the current observation.

Replay wording
--------------
The paper's replay-scoring tables (Full and Observation-Ablated, ALFWorld) reproduce the
interaction prompt but read "choose an admissible action for **the** current step" where the
interaction table reads "for current step". ``replay=True`` applies exactly this change; WebShop's
template has the same sentence and gets the same change, Search-QA's has no such sentence.

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

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable, Sequence

import numpy as np

from ocsd.replay.schemas import action_family, canonical_env

__all__ = [
    "DEFAULT_HISTORY_LENGTH",
    "ParsedOutput",
    "PromptRenderer",
    "REPLAY_WORDING",
    "Segment",
    "SegmentationError",
    "TEMPLATES",
    "format_action_history",
    "format_admissible",
    "format_memory",
    "interaction_text",
    "parse_output",
]

TEMPLATES: dict[str, str] = {
    "alfworld": (
        "You are an expert agent operating in the ALFRED Embodied Environment. "
        "Your task is to: {task_description}\n"
        "Prior to this step, you have already taken {step_count} step(s). Below are the most recent "
        "{history_length} observations and the corresponding actions you took: {action_history}\n"
        "You are now at step {current_step} and your current observation is: {current_observation}\n"
        "Your admissible actions of the current situation are: [{admissible_actions}].\n"
        "\n"
        "Now it's your turn to take an action.\n"
        "You should first reason step-by-step about the current situation. This reasoning process "
        "MUST be enclosed within <reason> </reason> tags.\n"
        "Once you've finished your reasoning, you should choose an admissible action for current "
        "step and present it within <action> </action> tags."
    ),
    "webshop": (
        "You are an expert autonomous agent operating in the WebShop e-commerce environment.\n"
        "Your task is to: {task_description}.\n"
        "Prior to this step, you have already taken {step_count} step(s). Below are the most recent "
        "{history_length} observations and the corresponding actions you took: {action_history}\n"
        "You are now at step {current_step} and your current observation is: {current_observation}.\n"
        "Your admissible actions of the current situation are: [{admissible_actions}].\n"
        "\n"
        "Now it's your turn to take one action for the current step.\n"
        "You should first reason step-by-step about the current situation, then think carefully which "
        "admissible action best advances the shopping goal. This reasoning process MUST be enclosed "
        "within <reason> </reason> tags.\n"
        "Once you've finished your reasoning, you should choose an admissible action for current "
        "step and present it within <action> </action> tags."
    ),
    "searchqa": (
        "You are an expert agent tasked with answering the given question step-by-step.\n"
        "Your question: {task_description}\n"
        "\n"
        "Prior to this step, you have already taken {step_count} step(s). Below is the interaction "
        "history where <search> </search> wrapped your past search queries and <information> "
        "</information> wrapped the corresponding search results returned by the external search "
        "engine. History:\n"
        "{memory_context}\n"
        "\n"
        "Now it's your turn to respond for the current step.\n"
        "You should first conduct reasoning process. This process MUST be enclosed within "
        "<reason> </reason> tags.\n"
        "After completing your reasoning, choose only one of the following actions (do not perform "
        "both):\n"
        "(1) If you find you lack some knowledge, you can call a search engine to get more external "
        "information using format: <search> your query </search>.\n"
        "(2) If you have enough knowledge to answer the question confidently, provide your final "
        "answer within <answer> </answer> tags, without detailed illustrations. For example, "
        "<answer>Beijing</answer>."
    ),
}
"""Interaction templates of the paper's tables, per canonical environment name."""

REPLAY_WORDING: dict[str, tuple[str, str]] = {
    "alfworld": ("an admissible action for current step", "an admissible action for the current step"),
    "webshop": ("an admissible action for current step", "an admissible action for the current step"),
}
"""(interaction wording, replay wording) substituted by ``interaction_text(..., replay=True)``."""

DEFAULT_HISTORY_LENGTH: dict[str, int | None] = {"alfworld": 2, "webshop": 2, "searchqa": None}
"""Default number of most recent (observation, action) pairs shown; ``None`` shows all
(Search-QA episodes have at most 4 steps)."""

History = Sequence[tuple[str, str]]


def _window(history: History, history_length: int | None) -> list[tuple[str, str]]:
    pairs = [(str(o), str(a)) for o, a in history]
    if history_length is None:
        return pairs
    if history_length < 0:
        raise ValueError(f"history_length must be >= 0 or None, got {history_length}")
    return pairs[len(pairs) - history_length:] if history_length else []


def format_action_history(history: History, step_count: int) -> str:
    """ALFWorld/WebShop ``{action_history}``: one ``\\n[Observation n: '...', Action n: '...']``
    line per shown pair; ``n`` counts from ``step_count - len(history) + 1``."""
    start = step_count - len(history)
    return "".join(
        f"\n[Observation {start + j + 1}: '{obs}', Action {start + j + 1}: '{act}']"
        for j, (obs, act) in enumerate(history)
    )


def format_admissible(actions: Iterable[str]) -> str:
    """``{admissible_actions}``: each action in single quotes, joined by ``"\\n "``."""
    return "\n ".join(f"'{a}'" for a in actions)


def format_memory(history: History, current_obs: str) -> str:
    """Search-QA ``{memory_context}`` from the shown pairs (o_j, a_j) and the current observation.

    Each step shows a_j and the observation that followed it (o_{j+1}: the next pair's observation,
    or ``current_obs`` for the last pair).
    """
    lines = []
    for j, (_, act) in enumerate(history):
        after = history[j + 1][0] if j + 1 < len(history) else current_obs
        info = after.strip()
        if not (info.startswith("<information>") and info.endswith("</information>")):
            info = f"<information>{info}</information>"
        lines.append(f"{act}\n{info}")
    return "\n".join(lines)


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
        ``alfworld``, ``webshop`` or ``searchqa`` (aliases as in :func:`ocsd.replay.schemas.canonical_env`).
    task : str
        Task description (``{task_description}``).
    step_idx : int
        k, the 0-based index of the current step (= ``{step_count}``).
    history : sequence of (observation, action)
        Prior pairs (o_j, a_j) in order, ending with the pair of step k - 1; at most ``step_idx``.
    current_obs : str
        o_k.
    admissible_actions : sequence of str
        Admissible actions (ALFWorld, WebShop; ignored by Search-QA).
    history_length : int or None
        Show only the most recent ``history_length`` pairs of ``history``; ``None`` shows all.
    replay : bool
        Use the replay-scoring tables' wording (:data:`REPLAY_WORDING`).

    Returns
    -------
    str
        The filled template, without leading or trailing whitespace added.
    """
    env = canonical_env(env)
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
    }
    if env == "searchqa":
        fields["memory_context"] = format_memory(shown, str(current_obs))
    else:
        fields["action_history"] = format_action_history(shown, step_idx)
        fields["admissible_actions"] = format_admissible(admissible_actions)
    text = TEMPLATES[env].format(**fields)
    if replay and env in REPLAY_WORDING:
        old, new = REPLAY_WORDING[env]
        head, sep, tail = text.rpartition(old)
        text = head + new + tail if sep else text
    return text


# ----------------------------------------------------------------------------------------------
# Output parsing
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ParsedOutput:
    """A parsed model output.

    Attributes
    ----------
    action : str
        The action to execute: ALFWorld, the text inside ``<action>`` with whitespace collapsed and
        lower-cased; WebShop, the same without lower-casing; Search-QA, ``<search>q</search>`` or
        ``<answer>x</answer>`` with the argument stripped. Empty when no action block was found.
    well_formed : bool
        Exactly one ``<reason>...</reason>`` block, followed by exactly one non-empty action block
        (Search-QA: exactly one ``<search>`` or ``<answer>`` block, not both), with no unmatched tag.
    kind : str
        The action's family (:func:`ocsd.replay.schemas.action_family`), ``"other"`` for an action outside
        the grammar, ``"invalid"`` when no action was found.
    problem : str
        Why the output is not well formed ("" when it is).
    """

    action: str
    well_formed: bool
    kind: str
    problem: str = ""


_REASON = re.compile(r"<reason>(.*?)</reason>", re.DOTALL)


def _blocks(text: str, tag: str) -> list[re.Match[str]]:
    return list(re.finditer(rf"<{tag}>(.*?)</{tag}>", text, re.DOTALL))


def _tag_balance_problem(text: str, tags: Iterable[str]) -> str:
    for tag in tags:
        opened, closed = text.count(f"<{tag}>"), text.count(f"</{tag}>")
        if opened != closed or opened != len(_blocks(text, tag)):
            return f"unmatched <{tag}> tags"
    return ""


def parse_output(env: str, text: object) -> ParsedOutput:
    """Extract the action from a model output and judge its form. Never raises on any ``text``.

    The first complete action block is used when there are several (the output is then not well
    formed). See :class:`ParsedOutput` for the rules.
    """
    env = canonical_env(env)
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    problems = []
    reasons = _REASON.findall(text)
    if len(reasons) != 1:
        problems.append(f"{len(reasons)} <reason> blocks (need exactly 1)")
    if env == "searchqa":
        tags = ("reason", "search", "answer")
        found = sorted(_blocks(text, "search") + _blocks(text, "answer"), key=lambda m: m.start())
    else:
        tags = ("reason", "action")
        found = _blocks(text, "action")
    balance = _tag_balance_problem(text, tags)
    if balance:
        problems.append(balance)
    if not found:
        problems.append("no action block")
        return ParsedOutput("", False, "invalid", "; ".join(problems))
    if len(found) > 1:
        problems.append(f"{len(found)} action blocks (need exactly 1)")
    first = found[0]
    arg = re.sub(r"\s+", " ", first.group(1)).strip()
    if not arg:
        problems.append("empty action")
        return ParsedOutput("", False, "invalid", "; ".join(problems))
    reason_match = _REASON.search(text)
    if reason_match is not None and reason_match.end() > first.start():
        problems.append("action block before the end of the <reason> block")
    if env == "searchqa":
        tag = first.group(0)[1:first.group(0).index(">")]
        action = f"<{tag}>{arg}</{tag}>"
    else:
        action = arg.lower() if env == "alfworld" else arg
    return ParsedOutput(action, not problems, action_family(env, action), "; ".join(problems))


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
        enc = self.tokenizer(["".join(t for _, t in parts) for parts in all_parts], add_special_tokens=False,
                             return_offsets_mapping=True)
        out = []
        for i, (parts, ids, offsets) in enumerate(zip(all_parts, enc["input_ids"], enc["offset_mapping"])):
            try:
                out.append(self._group(parts, ids, offsets))
            except SegmentationError as err:
                raise SegmentationError(f"prompt {i}: {err}") from None
        return out

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
        offs = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
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

    def canonical_ids(self, user_text: str) -> list[int]:
        """Tokenisation of the whole chat string at once."""
        if not self.use_chat_template:
            return list(self.prefix_ids) + self.encode(user_text)
        return _as_ids(self.tokenizer(self.chat_text(user_text), add_special_tokens=False))

    def __repr__(self) -> str:
        name = getattr(self.tokenizer, "name_or_path", type(self.tokenizer).__name__)
        return (f"PromptRenderer({name!r}, chat_template={self.use_chat_template}, "
                f"segment_mode={self.segment_mode!r}, thinking_disabled={self.thinking_disabled})")
