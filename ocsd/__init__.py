"""Observation-Calibrated Self-Distillation: the algorithm core.

Pure functions on tensors and plain records. Submodules: :mod:`ocsd.signals` (residual,
calibration signal, step NLL, step selection), :mod:`ocsd.advantages` (GRPO, OCSD, baselines),
:mod:`ocsd.methods` (the method registry), :mod:`ocsd.records` (the replay-score format).
"""

__version__ = "0.1.0"
