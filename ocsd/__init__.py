"""Observation-Calibrated Self-Distillation: the algorithm core.

Pure functions on tensors and plain records, free of trainer and environment code:

- :mod:`ocsd.signals`: observation residual, calibration signal, step NLL, step selection;
- :mod:`ocsd.advantages`: GRPO advantage, OCSD token advantage, the baselines' token terms;
- :mod:`ocsd.methods`: the method registry, the one dispatch path of the trainers;
- :mod:`ocsd.prompts`, :mod:`ocsd.schemas`, :mod:`ocsd.views`: interaction prompts, action schemas
  g(a) and replay views (Full, Observation-Ablated, swap, user-defined);
- :mod:`ocsd.scoring`, :mod:`ocsd.models`: the teacher-forced replay scorer and offline model loading;
- :mod:`ocsd.records`: the replay-score format, the one interface between training and diagnostics.
"""

__version__ = "0.1.0"
