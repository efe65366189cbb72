"""The algorithm: pure tensor functions and the method registry.

Free of trainer, environment and file code; imports torch and numpy only.

- :mod:`ocsd.algorithm.signals`: observation residual, calibration signal, step NLL, step selection;
- :mod:`ocsd.algorithm.advantages`: GRPO advantage, OCSD token advantage, the baselines' token terms;
- :mod:`ocsd.algorithm.methods`: the method registry, the one dispatch path of every trainer;
- :mod:`ocsd.algorithm.protocol`: the paper's rho and beta, the defaults of every config and command.
"""
