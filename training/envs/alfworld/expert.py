"""Expert demonstrations of ALFWorld games: the planner's walkthrough with a templated reason per step.

A supervised warm start (:mod:`training.sft`) needs responses in the interaction format,
``<reason>...</reason><action>...</action>``. The actions are the planner's walkthrough
(:func:`training.envs.alfworld.game.expert_walkthrough`); the reasons are short texts filled in from the
task and the plan by fixed templates (what is needed, where the agent goes and why), not written by a
model. The planner knows where every object is, so its first ``go to`` leads straight to the object;
the reason says the agent looks there. This is the ``walkthrough`` expert of ALFWorld's runtime; the ``search``
expert (:mod:`training.envs.alfworld.search`), which new warm starts use, looks for the objects instead.
"""

from __future__ import annotations

import re
from typing import Sequence

from training.envs.alfworld.game import GameSpec, expert_walkthrough

__all__ = ["demonstration", "expert_reasons", "item_class", "looked_at", "walkthrough_expert"]

_TAKE = re.compile(r"^take (.+) from (.+)$")
_PUT = re.compile(r"^(?:put (.+) (?:in/on|into|in|on) (.+)|move (.+) to (.+))$")
_TREAT = re.compile(r"^(heat|cool|clean) (.+) with (.+)$")
_GO = re.compile(r"^go to (.+)$")
_OPEN = re.compile(r"^open (.+)$")
_USE = re.compile(r"^(?:use|toggle) (.+)$")
PAST = {"heat": "heated", "cool": "cooled", "clean": "cleaned"}
"""The past tense of each treatment, in the reasons (shared by the experts)."""


def item_class(name: str) -> str:
    """An object's class as the game prints it, without its instance number (``"apple 2"`` -> ``"apple"``)."""
    return re.sub(r"\s+\d+$", "", name.strip())


def _put(action: str) -> tuple[str, str] | None:
    m = _PUT.match(action)
    if not m:
        return None
    return (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))


def _a(noun: str) -> str:
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


def looked_at(task: str) -> str:
    """The object a look task asks to examine (``"look at pen under the desklamp"`` -> ``"pen"``); "" otherwise."""
    m = re.search(r"(?:examine the|look at) (\S+) (?:with|under) the", task)
    return m.group(1) if m else ""


def _go_reason(place: str, holding: str | None, nxt: str, after: str, task: str) -> str:
    """Why the agent goes to ``place``, from what it holds and the next actions of the plan."""
    lead = nxt if not _OPEN.match(nxt) else after
    take, treat, use = _TAKE.match(lead), _TREAT.match(lead), _USE.match(lead)
    if holding is None and take:
        return f"The task needs {_a(item_class(take.group(1)))}. I will look for one at {place}, so I go there."
    if use:
        target = item_class(holding) if holding else looked_at(task) or "object"
        return (f"I need light to look at the {target}. There is {_a(item_class(use.group(1)))} at {place}, "
                f"so I go there.")
    if holding and treat:
        return (f"I have the {item_class(holding)}. It must be {PAST[treat.group(1)]} first, "
                f"so I go to {place}.")
    if holding and _put(lead):
        return f"I have the {item_class(holding)}. I go to {place} to put it there."
    return f"I go to {place} to continue the task."


def expert_reasons(task: str, actions: Sequence[str]) -> list[str]:
    """One templated reason per action of a winning plan of ``task``.

    Parameters
    ----------
    task : str
        The task text (``"put two cellphone in dresser"``).
    actions : sequence of str
        The plan's commands, in order.

    Returns
    -------
    list of str
        A reason of one or two short sentences per action.
    """
    reasons = []
    holding: str | None = None
    placed = 0
    two = task.startswith(("put two", "find two"))
    for k, action in enumerate(actions):
        nxt = actions[k + 1] if k + 1 < len(actions) else ""
        after = actions[k + 2] if k + 2 < len(actions) else ""
        go, opened, take, treat, use, put = (_GO.match(action), _OPEN.match(action), _TAKE.match(action),
                                            _TREAT.match(action), _USE.match(action), _put(action))
        if go:
            reason = _go_reason(go.group(1), holding, nxt, after, task)
        elif opened:
            reason = (f"{opened.group(1)} is closed. I open it to put the {item_class(holding)} inside."
                      if holding and _put(nxt) else f"{opened.group(1)} is closed. I open it to look inside.")
        elif take:
            holding = take.group(1)
            reason = f"I see {take.group(1)} at {take.group(2)}. The task needs it, so I take it."
        elif treat:
            reason = f"I {treat.group(1)} the {item_class(treat.group(2))} with {treat.group(3)}, as the task asks."
        elif put:
            holding, placed = None, placed + 1
            reason = (f"I put {put[0]} in/on {put[1]}. That is the first one; I still need another "
                      f"{item_class(put[0])}." if two and placed == 1 else
                      f"I put {put[0]} in/on {put[1]}, which completes the task.")
        elif use:
            target = item_class(holding) if holding else looked_at(task) or "object"
            reason = f"I turn on {use.group(1)} to look at the {target} in its light."
        else:
            reason = f"I {action} to continue the task."
        reasons.append(reason)
    return reasons


def demonstration(spec: GameSpec) -> list[tuple[str, str]]:
    """(action, reason) of every step of the planner's walkthrough of ``spec``.

    Raises
    ------
    training.envs.alfworld.engine.AlfworldDataError
        When the planner finds no walkthrough.
    """
    actions = expert_walkthrough(spec)
    return list(zip(actions, expert_reasons(spec.task, actions)))


def walkthrough_expert(spec: GameSpec, seed: int = 0) -> list[tuple[str, str]]:
    """The ``walkthrough`` expert of ALFWorld's runtime: :func:`demonstration` (the planner has no ties to break, so
    ``seed`` changes nothing)."""
    return demonstration(spec)
