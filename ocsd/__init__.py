"""Observation-Calibrated Self-Distillation: the algorithm and everything a replay needs.

Three layers, each its own sub-package, plus the environment registry and the command-line conventions:

- :mod:`ocsd.algorithm`: pure tensor functions (residual, calibration signal, step selection, advantages,
  the baselines' token terms) and the method registry;
- :mod:`ocsd.replay`: prompts, action schemas, replay views, the scorer and its engines, model loading;
- :mod:`ocsd.records`: the replay-score format, the one interface between training and diagnostics;
- :mod:`ocsd.environments`: the environment registry (templates, parsers, action schemas, lexicons, feedback
  labels, step caps, evaluation protocols), free of engine code;
- :mod:`ocsd.cli`: the conventions every ``python -m`` command shares (exit codes, ``--json``, tables).

Nothing here imports verl, vLLM or an environment engine.
"""

__version__ = "0.1.0"
