"""Local-feedback labels of a step from its text (paper appendix "Local-Feedback Labels").

* ``feedback_label`` is ``invalid`` when the environment rejected the action (it was not admissible)
  or when the immediate feedback contains a no-effect/error template (:attr:`StepLabels.no_effect_templates`,
  matched case-insensitively as substrings); ``valid`` when the action was accepted and produced
  progress; ``ambiguous`` otherwise.
* ``progress_label`` is ``invalid`` under the same condition, ``progress`` when the accepted action made
  progress and ``no_progress`` otherwise.
* ``operator_of`` is the verb prefix of an action when it is one of :attr:`StepLabels.operators`, else
  ``other``.

Whether a step made progress is the engine's judgement (ALFWorld: the step reached a world state not
seen earlier in the episode, see :mod:`training.envs.alfworld.game`); these rules only read text.
The label values are those of the replay-score format (:data:`ocsd.records.FEEDBACK_LABELS`,
:data:`ocsd.records.PROGRESS_LABELS`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NO_EFFECT_TEMPLATES", "StepLabels"]

NO_EFFECT_TEMPLATES: tuple[str, ...] = (
    "nothing happens",
    "cannot",
    "not carrying",
    "no such",
    "invalid",
    "nothing to",
)
"""The paper's feedback fragments that mark a rejected or no-effect action (lower case)."""


@dataclass(frozen=True)
class StepLabels:
    """How an environment's steps are labelled from their text.

    Attributes
    ----------
    no_effect_templates : tuple of str
        Lower-case feedback fragments that make a step ``invalid``.
    operators : tuple of str
        Verbs written as a step's ``operator``; an action whose first word is not one of them is ``other``.
    """

    no_effect_templates: tuple[str, ...] = NO_EFFECT_TEMPLATES
    operators: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("no_effect_templates", "operators"):
            value = getattr(self, name)
            if not isinstance(value, tuple) or not all(isinstance(w, str) and w and w == w.lower() for w in value):
                raise ValueError(f"StepLabels.{name} must be a tuple of non-empty lower-case strings")

    def has_no_effect_template(self, feedback: str) -> bool:
        """True when ``feedback`` contains one of the no-effect templates (case-insensitive)."""
        text = str(feedback).lower()
        return any(t in text for t in self.no_effect_templates)

    def is_rejected(self, action_admissible: bool, feedback: str) -> bool:
        """The step is invalid: rejected by the environment or answered with a no-effect template."""
        return (not action_admissible) or self.has_no_effect_template(feedback)

    def feedback_label(self, action_admissible: bool, feedback: str, progressed: bool) -> str:
        """Local-feedback label of one step: ``valid``, ``invalid`` or ``ambiguous``.

        Parameters
        ----------
        action_admissible : bool
            The environment accepted the action (it was among the admissible commands).
        feedback : str
            The immediate observation o_{k+1} returned after the action.
        progressed : bool
            The engine reports progress for the step.
        """
        if self.is_rejected(action_admissible, feedback):
            return "invalid"
        return "valid" if progressed else "ambiguous"

    def progress_label(self, action_admissible: bool, feedback: str, progressed: bool) -> str:
        """Three-way label for the observation-swap test: ``progress``, ``no_progress`` or ``invalid``."""
        if self.is_rejected(action_admissible, feedback):
            return "invalid"
        return "progress" if progressed else "no_progress"

    def operator_of(self, action: str) -> str:
        """Verb prefix of an action (``"take apple 1 from desk 1"`` -> ``"take"``), else ``"other"``."""
        words = str(action).strip().lower().split()
        if not words:
            return "other"
        return words[0] if words[0] in self.operators else "other"
