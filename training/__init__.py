"""Training runs: environments, rollouts and trainers.

:mod:`training.config`
    The run config (frozen dataclasses, loaded from YAML and ``key=value`` overrides); below everything that reads it.
:mod:`training.train`, :mod:`training.sft`, :mod:`training.collect`, :mod:`training.evaluate`, :mod:`training.sweep`
    The commands (``python -m training.<command>``).
:mod:`training.trainer`, :mod:`training.pipeline`, :mod:`training.update`, :mod:`training.replay`,
:mod:`training.teachers`, :mod:`training.policy`
    The single-device trainer; :func:`training.pipeline.step_advantages` is the step pipeline every trainer runs.
:mod:`training.rollout`
    The multi-turn rollout loop and its engines (Hugging Face ``generate``, vLLM).
:mod:`training.warm_start`
    Supervised warm starts: resolving them, expert demonstrations, the SFT run.
:mod:`training.envs`
    The environment engines, one subpackage each (ALFWorld, WebShop, Search-QA).
:mod:`training.verl`
    The veRL backend.
"""
