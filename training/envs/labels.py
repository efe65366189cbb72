"""Local-feedback labels and action operators shared by every environment.

The rules follow the paper's appendix "Local-Feedback Labels" and shared/CONTRACT.md:

* ``feedback_label`` is ``invalid`` when the environment rejected the action (it was not
  admissible) or when the immediate feedback contains a no-effect/error template
  (:data:`NO_EFFECT_TEMPLATES`, matched case-insensitively as substrings); ``valid`` when the
  action was accepted and produced progress; ``ambiguous`` otherwise.
* ``progress_label`` is ``invalid`` under the same condition, ``progress`` when the accepted
  action made progress and ``no_progress`` otherwise. What counts as progress is the
  environment's business (ALFWorld: the step reached a world state not seen earlier in the
  episode, see :mod:`training.envs.alfworld_game`).
* ``operator_of`` is the verb prefix of an action when it is one of :data:`OPERATORS`, else
  ``other``.
"""

from __future__ import annotations

NO_EFFECT_TEMPLATES: tuple[str, ...] = (
    "nothing happens",
    "cannot",
    "not carrying",
    "no such",
    "invalid",
    "nothing to",
)
"""Feedback fragments that mark a rejected or no-effect action (lower case)."""

OPERATORS: tuple[str, ...] = (
    "go", "take", "put", "move", "open", "close", "toggle", "use",
    "heat", "cool", "clean", "examine", "inventory", "look", "slice",
)
"""Operators of CONTRACT.md; an action whose first word is not one of them is ``other``."""

FEEDBACK_LABELS: tuple[str, ...] = ("valid", "invalid", "ambiguous")
PROGRESS_LABELS: tuple[str, ...] = ("progress", "no_progress", "invalid")


def operator_of(action: str) -> str:
    """Verb prefix of an action (``"take apple 1 from desk 1"`` -> ``"take"``).

    Parameters
    ----------
    action : str
        Executed action text.

    Returns
    -------
    str
        The lower-cased first word when it is in :data:`OPERATORS`, else ``"other"``.
    """
    words = str(action).strip().lower().split()
    if not words:
        return "other"
    return words[0] if words[0] in OPERATORS else "other"


def has_no_effect_template(feedback: str) -> bool:
    """True when ``feedback`` contains one of :data:`NO_EFFECT_TEMPLATES` (case-insensitive)."""
    text = str(feedback).lower()
    return any(t in text for t in NO_EFFECT_TEMPLATES)


def is_rejected(action_admissible: bool, feedback: str) -> bool:
    """The step is invalid: rejected by the environment or answered with a no-effect template."""
    return (not action_admissible) or has_no_effect_template(feedback)


def feedback_label(action_admissible: bool, feedback: str, progressed: bool) -> str:
    """Local-feedback label of one step: ``valid``, ``invalid`` or ``ambiguous``.

    Parameters
    ----------
    action_admissible : bool
        The environment accepted the action (it was among the admissible commands).
    feedback : str
        The immediate observation o_{k+1} returned after the action.
    progressed : bool
        The environment reports progress for the step (environment-specific rule).
    """
    if is_rejected(action_admissible, feedback):
        return "invalid"
    return "valid" if progressed else "ambiguous"


def progress_label(action_admissible: bool, feedback: str, progressed: bool) -> str:
    """Three-way label for the observation-swap test: ``progress``, ``no_progress``, ``invalid``."""
    if is_rejected(action_admissible, feedback):
        return "invalid"
    return "progress" if progressed else "no_progress"
