"""The replay-score format, version 1 (``docs/replay-format.md``).

Every trainer writes these files at every checkpoint and every diagnostic reads only them::

    <run>/run.json                              written once at start
    <run>/metrics.jsonl                         one JSON object per training step
    <run>/global_step_<N>/replay/steps.parquet  one row per interaction step
    <run>/global_step_<N>/replay/tokens.parquet one row per generated token of a scored step
    <run>/global_step_<N>/replay/meta.json      written last; its absence marks the checkpoint incomplete

Modules:

- :mod:`ocsd.records.schema`: layout, columns and their types, labels, ``meta.json`` keys, errors;
- :mod:`ocsd.records.validation`: checks of one checkpoint (:func:`validate_replay`);
- :mod:`ocsd.records.checkpoint`: writing one checkpoint atomically, listing a run's, reading them;
- :mod:`ocsd.records.run`: the run folder (:class:`RunWriter`, ``run.json``, ``metrics.jsonl``);
- :mod:`ocsd.records.lock`: one writer per run folder (:class:`RunLock` on ``<run>/.lock``);
- ``python -m ocsd.records validate PATH``: checks a checkpoint, its ``replay/`` folder, or a run folder.
"""

from ocsd.records import checkpoint, lock, run, schema
from ocsd.records.checkpoint import *  # noqa: F401,F403  (the package exports each module's __all__)
from ocsd.records.lock import *  # noqa: F401,F403
from ocsd.records.run import *  # noqa: F401,F403
from ocsd.records.schema import *  # noqa: F401,F403
from ocsd.records.validation import validate_replay

__all__ = [*schema.__all__, *checkpoint.__all__, *lock.__all__, *run.__all__, "validate_replay"]
