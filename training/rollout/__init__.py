"""The multi-turn rollout and what samples it.

:mod:`training.rollout.loop`
    The rollout loop: the policy acts through the interaction prompt in batched environments
    (:func:`~training.rollout.loop.rollout`, :class:`~training.rollout.loop.Trajectory`, ...).
:mod:`training.rollout.engines`
    Rollout engines (the ``rollout_engine`` setting): Hugging Face ``generate`` or a colocated vLLM engine.
"""
