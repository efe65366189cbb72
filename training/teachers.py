"""Privileged teacher contexts of the baselines (OPSD, GRPO+OPSD, RLSD, SDAR).

The teacher prompt is built the way the SDAR repository (ZJU-REAL/SDAR) builds it for all four
baselines (``verl/trainer/ppo/rlsd_ray_trainer.py:39-160``, ``build_teacher_batch``, called from
``_compute_teacher_log_probs`` at lines 422-439, which ``skillsd_ray_trainer.py:43`` inherits for
OPSD, GRPO+OPSD and SDAR, all three run by ``verl/trainer/main_sdar.py:167-169``):

1. the student's rollout prompt ids, already chat-templated, are decoded to text with the special
   tokens kept (``rlsd_ray_trainer.py:89``);
2. the prefix ``"[Privileged Skill Information]\\n" + skill + "\\n\\n"`` is put in front of that text,
   before the chat template's first token (``rlsd_ray_trainer.py:111-112``);
3. the result is tokenised again without added special tokens (``rlsd_ray_trainer.py:115``) and,
   when longer than the prompt budget ``data.max_prompt_length`` (line 431), cut from the left to
   its last ``max_prompt_length`` ids (``rlsd_ray_trainer.py:118-119``).

The response ids are the student's, unchanged. The skill text itself is this suite's own, per
environment and task type (the ``skills`` of each environment's registry entry, e.g.
:data:`ocsd.environments.alfworld.ALFWORLD_SKILLS`): short, general procedures an expert would
follow, never the answer to a particular game.
"""

from __future__ import annotations

from typing import Any, Sequence

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


def skill_prefix(env: str, task_type: str) -> str:
    """Text put in front of the chat-templated prompt: header, skill text, a blank line.

    SDAR ``verl/trainer/ppo/rlsd_ray_trainer.py:111``.
    """
    return f"{SKILL_HEADER}{skill_text(env, task_type)}\n\n"


def teacher_context(tokenizer: Any, env: str, max_prompt_length: int | None = None):
    """``context(traj, step) -> prompt ids`` of the privileged teacher for one step of a trajectory of ``env``:
    :func:`teacher_prompt_ids` of the step's rollout prompt with the trajectory's task type's :func:`skill_prefix`
    (what every trainer scores the teacher under)."""

    def context(traj, step) -> list[int]:
        return teacher_prompt_ids(tokenizer, step.prompt_ids, skill_prefix(env, traj.task_type), max_prompt_length)

    return context


def teacher_prompt_ids(tokenizer: Any, prompt_ids: Sequence[int], prefix: str,
                       max_prompt_length: int | None = None) -> list[int]:
    """Prompt ids of the privileged teacher for one step.

    Parameters
    ----------
    tokenizer
        The policy's Hugging Face tokenizer (``decode`` and ``encode``).
    prompt_ids : sequence of int
        The student's rollout prompt ids, chat template included, without padding.
    prefix : str
        The privileged text (:func:`skill_prefix`).
    max_prompt_length : int or None
        Keep only the last this many ids (SDAR's left truncation); None keeps all.

    Returns
    -------
    list of int
        ``encode(prefix + decode(prompt_ids))``, special tokens kept by the decode and none added by
        the encode, left-truncated to ``max_prompt_length``.
    """
    text = tokenizer.decode(list(prompt_ids), skip_special_tokens=False)
    ids = list(tokenizer.encode(prefix + text, add_special_tokens=False))
    if max_prompt_length is not None and len(ids) > max_prompt_length:
        ids = ids[len(ids) - max_prompt_length:]
    return ids
