"""Statistics of training runs from their ``metrics.jsonl`` rows: seed aggregates and phase times.

* Seed aggregation (paper Table 1): each run contributes its last validation row (the last row
  with ``val/success_rate``); a quantity is summarised over the seeds of a configuration by its
  mean and sample standard deviation (ddof 1; undefined for a single seed).
* Phase times (paper Fig. 6): the seconds of each timing phase (``time/<phase>``) are averaged
  over the training steps that carry any of the phases, a phase a step did not run counting 0 s;
  each phase's share is its percent of the phase total.

Pure functions over lists of metrics rows (dicts); reading the files is :mod:`ocsd.records`' job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

__all__ = ["VAL_OVERALL", "VAL_PREFIX", "SeedStats", "seed_stats", "last_validation", "validation_stats",
           "PhaseTimes", "phase_times"]

VAL_OVERALL = "val/success_rate"
"""Metrics key of the overall validation success."""
VAL_PREFIX = "val/success/"
"""Prefix of the per-task-type validation success keys (``val/success/<type>``)."""


@dataclass(frozen=True)
class SeedStats:
    """One quantity over the seeds of a configuration.

    Attributes
    ----------
    values : tuple of float
        One value per seed, in run order.
    """

    values: tuple

    @property
    def n(self) -> int:
        """Number of seeds."""
        return len(self.values)

    @property
    def mean(self) -> float:
        """Mean over seeds (nan without seeds)."""
        return float(np.mean(self.values)) if self.values else math.nan

    @property
    def std(self) -> float:
        """Sample standard deviation over seeds, ddof 1 (nan for fewer than two seeds)."""
        return float(np.std(self.values, ddof=1)) if len(self.values) > 1 else math.nan


def seed_stats(values) -> SeedStats:
    """:class:`SeedStats` of ``values`` (one number per seed, converted to float)."""
    return SeedStats(tuple(float(v) for v in values))


def last_validation(rows: Sequence[Mapping]) -> dict | None:
    """The last metrics row with ``val/success_rate`` (None if there is none)."""
    found = [r for r in rows if r.get(VAL_OVERALL) is not None]
    return dict(found[-1]) if found else None


def validation_stats(rows: Sequence[Mapping]) -> dict[str, SeedStats]:
    """Validation success of one configuration over its seeds.

    Parameters
    ----------
    rows : sequence of dict
        One validation row per seed (:func:`last_validation` of each run).

    Returns
    -------
    dict
        Metrics key -> :class:`SeedStats` over the rows that carry it: every ``val/success/<type>``
        key of any row (sorted), then ``val/success_rate``.
    """
    keys = sorted({k for r in rows for k in r if k.startswith(VAL_PREFIX)}) + [VAL_OVERALL]
    return {k: seed_stats(r[k] for r in rows if r.get(k) is not None) for k in keys}


@dataclass(frozen=True)
class PhaseTimes:
    """Mean seconds per training step of each timing phase of one run.

    Attributes
    ----------
    seconds : dict
        Phase key -> mean seconds per step, in the order the phases were asked for.
    n_steps : int
        Training steps averaged over.
    """

    seconds: dict
    n_steps: int

    @property
    def total(self) -> float:
        """Sum of the phase means."""
        return sum(self.seconds.values())

    @property
    def percent(self) -> dict:
        """Phase key -> percent of :attr:`total` (nan for every phase when the total is 0)."""
        total = self.total
        return {k: 100 * v / total if total > 0 else math.nan for k, v in self.seconds.items()}


def phase_times(rows: Sequence[Mapping], phases: Sequence[str], *, skip_steps: int = 0) -> PhaseTimes | None:
    """Average the timing phases over a run's training steps.

    Parameters
    ----------
    rows : sequence of dict
        The run's metrics rows in file order.
    phases : sequence of str
        Phase keys (``time/rollout``, ...); the result keeps their order.
    skip_steps : int, default 0
        Leave out the first ``skip_steps`` timed rows (warm-up).

    Returns
    -------
    PhaseTimes or None
        Means over the rows that carry any of ``phases`` (after the first ``skip_steps``), a
        missing or null phase counting 0 s; None when no such row is left.

    Raises
    ------
    ValueError
        ``skip_steps`` is negative or ``phases`` is empty.
    """
    if skip_steps < 0:
        raise ValueError(f"skip_steps must be >= 0, got {skip_steps}")
    if not phases:
        raise ValueError("phases must name at least one time/<phase> key")
    timed = [r for r in rows if any(k in r for k in phases)][skip_steps:]
    if not timed:
        return None
    return PhaseTimes({k: float(np.mean([float(r.get(k) or 0.0) for r in timed])) for k in phases}, len(timed))
