"""Paper figures and tables drawn from run folders and diagnostics outputs.

One module per figure (``python -m figures.<name> --run DIR``); ``python -m figures --run DIR``
rebuilds every figure the run's data supports. Modules draw; every number comes from
:mod:`diagnostics` (the diagnosis report for Fig. 2, :mod:`diagnostics.runs` for the seed aggregates
and phase times) or straight from the run's ``metrics.jsonl``. :mod:`figures.drawing` holds the one
bar-chart helper and the one word-cloud drawer.
"""
