"""Privileged teacher contexts of the baselines (OPSD, GRPO+OPSD, RLSD, SDAR).

The SDAR repository builds the teacher prompt by prepending privileged "skill" text to the student
prompt under the header ``[Privileged Skill Information]``. Its skill files are not distributed
with the package, so this suite writes its own, per environment and task type (the ``skills`` of each
environment's registry entry, e.g. :data:`ocsd.environments.alfworld.ALFWORLD_SKILLS`): short, general
procedures an expert would follow, never the answer to a particular game. The teacher view is the
interaction prompt with this prefix at the start of the user message; the response ids are the
student's, unchanged.
"""

from __future__ import annotations

from ocsd.environments import get_environment

SKILL_HEADER = "[Privileged Skill Information]\n"


def skill_text(env: str, task_type: str) -> str:
    """The privileged skill text for an environment's task type.

    Raises
    ------
    ValueError
        If the environment is unknown or has no skill text written.
    """
    spec = get_environment(env)
    if spec.skills is None:
        raise ValueError(f"no privileged skills written for environment {spec.name!r}")
    return spec.skills(task_type)


def teacher_text(env: str, task_type: str, interaction: str) -> str:
    """User message of the privileged teacher: skill header and text, a blank line, the interaction prompt."""
    return f"{SKILL_HEADER}{skill_text(env, task_type)}\n\n{interaction}"
