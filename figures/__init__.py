"""Paper figures and tables drawn from run folders and diagnostics outputs.

One module per figure (``python -m figures.<name> --run DIR``); ``python -m figures --run DIR``
rebuilds every figure the run's data supports. Modules draw; statistics come from
:mod:`diagnostics` and from the run's ``metrics.jsonl``.
"""
