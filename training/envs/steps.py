"""What every batched environment hands the rollout: the first observation of an episode and the outcome
of each action.

Every environment of the registry (ALFWorld, Search-QA, WebShop) answers ``reset()`` with one
:class:`Observation` per environment and ``step(actions)`` with one :class:`StepResult` each, so that
:func:`training.rollout.loop.rollout`, the trainer, collection and evaluation never look at which engine
produced them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Observation", "StepResult"]


@dataclass(frozen=True)
class Observation:
    """What an agent sees after ``reset``.

    Attributes
    ----------
    task : str
        Task text shown in the interaction prompt (ALFWorld's goal, the question, the instruction).
    task_type : str
        Group that success is reported by: ALFWorld's task type, Search-QA's data set, WebShop's
        product category.
    text : str
        The first observation o_0.
    admissible : list of str
        Admissible actions (empty for an environment without a list, such as Search-QA).
    game : str
        Identifier of the task (game file, question id, session id).
    split : str
        Split the task comes from.
    """

    task: str
    task_type: str
    text: str
    admissible: list[str]
    game: str
    split: str = ""


@dataclass(frozen=True)
class StepResult:
    """Outcome of one action.

    ``reward`` is 1.0 on the winning step else 0.0 (the invalid-action penalty is the trainer's).
    ``admissible`` are the next step's commands. ``active`` is False for an environment that was
    already done before this call; such a result carries no observation and must not be recorded.
    ``score`` is the environment's own task score in [0, 1] when the episode ends with one (WebShop's
    purchase reward, Search-QA's exact match), else None; success is ``won``.
    """

    action: str
    obs: str
    reward: float
    done: bool
    won: bool
    admissible: list[str]
    feedback_label: str
    progress_label: str
    operator: str
    action_admissible: bool
    step: int
    truncated: bool = False
    active: bool = True
    score: float | None = None

    @classmethod
    def inactive(cls, action: str, *, operator: str, step: int, won: bool = False) -> "StepResult":
        """The result of an action sent to an environment whose episode is already done: no observation,
        nothing recorded (``active=False``)."""
        return cls(action=action, obs="", reward=0.0, done=True, won=won, admissible=[], feedback_label="ambiguous",
                   progress_label="no_progress", operator=operator, action_admissible=False, step=step, active=False)

