"""Text formats that environment entries share: a template's history fields, model outputs, bracket commands.

Template fields
---------------
An environment's ``template_fields(shown, step_idx, current_obs, admissible_actions)`` returns the fields
of its interaction template that depend on the shown history (the common fields, such as
``{task_description}`` and ``{step_count}``, are filled by :func:`ocsd.replay.prompts.interaction_text`).
Two layouts exist:

* :func:`action_history_fields` (ALFWorld, WebShop): ``{action_history}``, for each shown pair, in
  order, a new line ``[Observation n: '<observation>', Action n: '<action>']`` with n the 1-based step
  number of the pair (empty when no pair is shown); ``{admissible_actions}``, each action in single
  quotes, joined by a newline and a space.
* :func:`memory_fields` (Search-QA): ``{memory_context}``, for each shown step, the action as executed
  (``<search>q</search>``) and, on the next line, the observation it returned wrapped as
  ``<information>...</information>`` (left as is when already wrapped); steps joined by a newline;
  empty at the first step. Such a template has no current-observation field: the observation returned
  by the last shown action is the current observation.

Model outputs
-------------
:class:`TaggedOutput` reads an output made of one ``<reason>...</reason>`` block followed by one action
block (or, with ``reason_required=False``, of one action block whatever reasoning surrounds it);
:class:`ParsedOutput` is what :meth:`ocsd.environments.EnvironmentSpec.parse_output` returns.
:func:`bracket_command` splits a ``verb[argument]`` command (WebShop, Search-QA) for the action rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

__all__ = ["ParsedOutput", "TaggedOutput", "action_history_fields", "bracket_command", "format_action_history",
           "format_admissible", "format_memory", "memory_fields"]

History = Sequence[tuple[str, str]]


def format_action_history(history: History, step_count: int) -> str:
    """``{action_history}``: one ``\\n[Observation n: '...', Action n: '...']`` line per shown pair;
    ``n`` counts from ``step_count - len(history) + 1``."""
    start = step_count - len(history)
    return "".join(
        f"\n[Observation {start + j + 1}: '{obs}', Action {start + j + 1}: '{act}']"
        for j, (obs, act) in enumerate(history)
    )


def format_admissible(actions: Iterable[str]) -> str:
    """``{admissible_actions}``: each action in single quotes, joined by ``"\\n "``."""
    return "\n ".join(f"'{a}'" for a in actions)


def format_memory(history: History, current_obs: str) -> str:
    """``{memory_context}`` from the shown pairs (o_j, a_j) and the current observation.

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


def action_history_fields(shown: History, step_idx: int, current_obs: str,
                          admissible_actions: Sequence[str]) -> dict[str, str]:
    """``{action_history}`` and ``{admissible_actions}`` (the ALFWorld and WebShop layout)."""
    return {"action_history": format_action_history(shown, step_idx),
            "admissible_actions": format_admissible(admissible_actions)}


def memory_fields(shown: History, step_idx: int, current_obs: str,
                  admissible_actions: Sequence[str]) -> dict[str, str]:
    """``{memory_context}`` (the Search-QA layout; admissible actions are not shown)."""
    return {"memory_context": format_memory(shown, current_obs)}


@dataclass(frozen=True)
class ParsedOutput:
    """A parsed model output.

    Attributes
    ----------
    action : str
        The action to execute, as the environment's :class:`TaggedOutput` reads it. Empty when no
        action block was found.
    well_formed : bool
        Exactly one ``<reason>...</reason>`` block, followed by exactly one non-empty action block, with
        no unmatched tag (an environment whose parser does not require the reason block: exactly one
        non-empty action block, with no unmatched action tag).
    kind : str
        The action's family (:meth:`ocsd.environments.EnvironmentSpec.action_family`), ``"other"`` for an
        action outside the grammar, ``"invalid"`` when no action was found.
    problem : str
        Why the output is not well formed ("" when it is).
    """

    action: str
    well_formed: bool
    kind: str
    problem: str = ""


_BRACKET = re.compile(r"^([A-Za-z]+)\[(.*)\]$", re.DOTALL)


def bracket_command(action: str) -> tuple[str, str] | None:
    """``verb[argument]`` -> (verb, stripped argument); None for another shape or an empty argument."""
    m = _BRACKET.match(action)
    if not m or not m.group(2).strip():
        return None
    return m.group(1), m.group(2).strip()


_REASON = re.compile(r"<reason>(.*?)</reason>", re.DOTALL)


def _blocks(text: str, tag: str) -> list[re.Match[str]]:
    return list(re.finditer(rf"<{tag}>(.*?)</{tag}>", text, re.DOTALL))


def _tag_balance_problem(text: str, tags: Iterable[str]) -> str:
    for tag in tags:
        opened, closed = text.count(f"<{tag}>"), text.count(f"</{tag}>")
        if opened != closed or opened != len(_blocks(text, tag)):
            return f"unmatched <{tag}> tags"
    return ""


@dataclass(frozen=True)
class TaggedOutput:
    """Output parser of the ``<reason>...</reason>`` then action-block format; never raises.

    The first complete action block is used when there are several (the output is then not well
    formed); its argument has whitespace collapsed and stripped.

    Attributes
    ----------
    action_tags : tuple of str
        Tags of an action block (ALFWorld and WebShop ``action``; Search-QA ``search`` and ``answer``,
        exactly one of which may appear).
    keep_tag : bool
        The action is the block itself, ``<tag>argument</tag>`` (Search-QA); else the argument.
    lower : bool
        Lower-case the action (ALFWorld's commands).
    reason_required : bool
        Whether the form needs exactly one ``<reason>`` block before the action (ALFWorld and WebShop); when
        False (Search-QA, as SDAR's projection, which checks only the action tags), the ``<reason>`` blocks are
        not checked.
    """

    action_tags: tuple[str, ...] = ("action",)
    keep_tag: bool = False
    lower: bool = False
    reason_required: bool = True

    def __post_init__(self) -> None:
        if not self.action_tags or not all(isinstance(t, str) and re.fullmatch(r"[a-z]+", t)
                                           for t in self.action_tags):
            raise ValueError(f"TaggedOutput.action_tags must be lower-case tag names, got {self.action_tags!r}")

    def __call__(self, text: str) -> tuple[str, tuple[str, ...]]:
        """The action of ``text`` ("" when there is none) and the problems of its form (empty when well formed)."""
        problems = []
        reasons = _REASON.findall(text)
        if self.reason_required and len(reasons) != 1:
            problems.append(f"{len(reasons)} <reason> blocks (need exactly 1)")
        found = sorted((m for tag in self.action_tags for m in _blocks(text, tag)), key=lambda m: m.start())
        balance = _tag_balance_problem(text, ("reason", *self.action_tags) if self.reason_required
                                       else self.action_tags)
        if balance:
            problems.append(balance)
        if not found:
            return "", (*problems, "no action block")
        if len(found) > 1:
            problems.append(f"{len(found)} action blocks (need exactly 1)")
        first = found[0]
        arg = re.sub(r"\s+", " ", first.group(1)).strip()
        if not arg:
            return "", (*problems, "empty action")
        reason_match = _REASON.search(text) if self.reason_required else None
        if reason_match is not None and reason_match.end() > first.start():
            problems.append("action block before the end of the <reason> block")
        if self.keep_tag:
            tag = first.group(0)[1:first.group(0).index(">")]
            return f"<{tag}>{arg}</{tag}>", tuple(problems)
        return (arg.lower() if self.lower else arg), tuple(problems)
