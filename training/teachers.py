"""Privileged teacher contexts of the baselines (OPSD, GRPO+OPSD, RLSD, SDAR).

The SDAR repository builds the teacher prompt by prepending privileged "skill" text to the student
prompt under the header ``[Privileged Skill Information]``. Its skill files are not distributed
with the package, so this suite writes its own, per environment and task type: short, general
procedures an expert would follow, never the answer to a particular game. The teacher view is the
interaction prompt with this prefix at the start of the user message; the response ids are the
student's, unchanged.
"""

from __future__ import annotations

SKILL_HEADER = "[Privileged Skill Information]\n"

_ALFWORLD_COMMON = (
    "- Objects are found on or in receptacles: go to a receptacle, open it if it is closed, and look at what it "
    "holds before taking anything.\n"
    "- You can carry one object at a time; take it with 'take <object> from <receptacle>' and place it with "
    "'move <object> to <receptacle>'.\n"
    "- Search the likely places first (countertops, cabinets, drawers, shelves, tables) and do not revisit a "
    "receptacle you have already searched.\n"
    "- Only admissible actions change the world; anything else answers 'Nothing happens.'"
)

ALFWORLD_SKILLS = {
    "pick": "Find the object, take it, go to the target receptacle and move it there.",
    "look": "Find the object and take it, then find a desklamp or floorlamp and use it while holding the object.",
    "clean": "Find the object and take it, go to a sinkbasin and clean it there, then move it to the target.",
    "heat": "Find the object and take it, go to the microwave and heat it there, then move it to the target.",
    "cool": "Find the object and take it, go to the fridge and cool it there, then move it to the target.",
    "pick2": "Two objects are needed: find, take and place the first one, then find the second and place it too.",
}


def skill_text(env: str, task_type: str) -> str:
    """The privileged skill text for an environment's task type."""
    if env != "alfworld":
        raise ValueError(f"no privileged skills written for environment {env!r}")
    specific = ALFWORLD_SKILLS.get(task_type, "")
    return f"Procedure for this task: {specific}\nGeneral rules:\n{_ALFWORLD_COMMON}" if specific else _ALFWORLD_COMMON


def teacher_text(env: str, task_type: str, interaction: str) -> str:
    """User message of the privileged teacher: skill header and text, a blank line, the interaction prompt."""
    return f"{SKILL_HEADER}{skill_text(env, task_type)}\n\n{interaction}"
