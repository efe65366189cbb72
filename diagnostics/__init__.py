"""Statistics of the paper's diagnosis section and of training runs; figures draw what they return.

Replay diagnostics read only the replay-score format (:mod:`diagnostics.load`): feedback AUROC
(:mod:`~diagnostics.auroc`), its robustness (:mod:`~diagnostics.robustness`), the D ratio per role
(:mod:`~diagnostics.dratio`), tail-enriched words (:mod:`~diagnostics.tails`) and all of them in one
report (:mod:`~diagnostics.report`), each a ``python -m diagnostics.<name>`` command with the options
of :mod:`diagnostics.options`. :mod:`diagnostics.runs` aggregates ``metrics.jsonl`` rows (seed means
and standard deviations, timing-phase shares).
"""
