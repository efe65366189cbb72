"""Statistics of training runs from their ``metrics.jsonl`` rows: seed aggregates and phase times.

* Seed aggregation (paper Table 1): each run contributes its last validation row (the last row
  with ``val/success_rate``), or an evaluation result turned into one (:func:`evaluation_row`); a
  quantity is summarised over the seeds of a configuration by its
  mean and sample standard deviation (ddof 1; undefined for a single seed).
* Phase times (paper Fig. 6): the seconds of each timing phase (``time/<phase>``) are averaged
  over the training steps that carry any of the phases, a phase a step did not run counting 0 s;
  each phase's share is its percent of the phase total.
* Evaluation with repeats (``python -m training.evaluate --repeats k``): mean success and a percentile
  bootstrap interval over tasks, each task counted by its mean over its repeats, so the interval
  reflects which tasks were drawn, not only the sampling noise of one episode.

Pure functions over lists of metrics rows (dicts); reading the files is :mod:`ocsd.records`' job.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

__all__ = ["VAL_OVERALL", "VAL_PREFIX", "SeedStats", "seed_stats", "last_validation", "evaluation_row",
           "validation_stats", "PhaseTimes", "phase_times", "TaskBootstrap", "task_bootstrap", "task_means",
           "paired_task_difference"]

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


def evaluation_row(result: Mapping, metrics: Sequence[str] = ()) -> dict:
    """A ``python -m training.evaluate --json`` result as a validation row.

    ``success_rate`` becomes ``val/success_rate``, ``per_type[t]["success_rate"]`` ``val/success/<t>``, and each
    numeric top-level key named in ``metrics`` (the environment's evaluation metrics: ``score`` of WebShop,
    ``em_id`` ... of Search-QA) ``val/<key>``.

    Raises
    ------
    ValueError
        The result has no ``success_rate``.
    """
    if not isinstance(result.get("success_rate"), (int, float)):
        raise ValueError("an evaluation result needs a numeric 'success_rate' (python -m training.evaluate --json)")
    row = {VAL_OVERALL: float(result["success_rate"])}
    for kind, per in (result.get("per_type") or {}).items():
        if isinstance(per, Mapping) and isinstance(per.get("success_rate"), (int, float)):
            row[f"{VAL_PREFIX}{kind}"] = float(per["success_rate"])
    for name in metrics:
        value = result.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and f"val/{name}" not in row:
            row[f"val/{name}"] = float(value)
    return row


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
        key of any row (sorted), then ``val/success_rate``, then the other numeric ``val/`` keys (sorted:
        ``val/score`` of WebShop, ``val/em_id`` ... of Search-QA).
    """
    keys = sorted({k for r in rows for k in r if k.startswith(VAL_PREFIX)}) + [VAL_OVERALL]
    keys += sorted({k for r in rows for k, v in r.items() if k.startswith("val/") and k not in keys
                    and isinstance(v, (int, float)) and not isinstance(v, bool)})
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

    def overhead_percent(self, key: str) -> float:
        """Phase ``key`` as percent of all the other phases: the extra cost of a phase that a method adds to a
        shared pipeline (the paper's 1.40% for OCSD's replay scoring; nan when the other phases take 0 s)."""
        rest = self.total - self.seconds[key]
        return 100 * self.seconds[key] / rest if rest > 0 else math.nan


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


@dataclass(frozen=True)
class TaskBootstrap:
    """Mean success over tasks with a percentile bootstrap interval.

    Attributes
    ----------
    mean : float
        Mean over tasks of each task's mean over its repeats.
    low, high : float
        The interval's ends: the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the
        resampled means.
    n_tasks, repeats : int
        Shape of the outcomes.
    level : float
        Coverage of the interval.
    n_boot : int
        Resamples drawn.
    """

    mean: float
    low: float
    high: float
    n_tasks: int
    repeats: int
    level: float
    n_boot: int


def task_bootstrap(outcomes, *, n_boot: int = 10_000, level: float = 0.95, rng=0) -> TaskBootstrap:
    """Mean of per-task outcomes and its bootstrap interval, resampling whole tasks.

    Parameters
    ----------
    outcomes : array-like, shape (n_tasks, repeats) or (n_tasks,)
        One row per task, one column per repeat (1.0 success, 0.0 failure; any finite numbers work).
    n_boot : int, default 10000
        Resamples; resample ``b`` draws ``n_tasks`` task indices uniformly with replacement (row ``b``
        of ``rng.integers(0, n_tasks, size=(n_boot, n_tasks))``) and averages their task means.
    level : float, default 0.95
        Coverage of the interval, in (0, 1).
    rng : numpy.random.Generator or int, default 0
        The generator, or a seed for a new one (the global random state is never touched).

    Returns
    -------
    TaskBootstrap
        With nan mean and ends, and a warning, when there are no tasks or no repeats.

    Raises
    ------
    ValueError
        ``outcomes`` is not one- or two-dimensional or holds a non-finite value, ``n_boot < 1`` or
        ``level`` is outside (0, 1).
    """
    x = np.asarray(outcomes, dtype=float)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2:
        raise ValueError(f"outcomes must have shape (n_tasks, repeats), got {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("outcomes must be finite")
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot must be an integer >= 1, got {n_boot!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    n_tasks, repeats = x.shape
    if n_tasks == 0 or repeats == 0:
        warnings.warn("task_bootstrap: no tasks or no repeats; the mean and interval are nan", stacklevel=2)
        return TaskBootstrap(math.nan, math.nan, math.nan, n_tasks, repeats, level, n_boot)
    per_task = x.mean(axis=1)
    picks = np.random.default_rng(rng).integers(0, n_tasks, size=(n_boot, n_tasks))
    low, high = np.quantile(per_task[picks].mean(axis=1), [(1 - level) / 2, (1 + level) / 2])
    return TaskBootstrap(float(per_task.mean()), float(low), float(high), n_tasks, repeats, level, n_boot)


def task_means(result: Mapping, task_type: str | None = None) -> dict[str, float]:
    """Each task's mean success over its repeats, from a ``python -m training.evaluate --json`` result's
    ``episodes`` (one entry per task: ``task``, ``task_type``, ``won`` per repeat); only ``task_type``'s tasks
    when given.

    Raises
    ------
    ValueError
        The result has no ``episodes``, or a task appears twice.
    """
    episodes = result.get("episodes")
    if not isinstance(episodes, list):
        raise ValueError("an evaluation result has no per-task 'episodes' (made before they were written?)")
    out = {}
    for entry in episodes:
        if task_type is None or entry["task_type"] == task_type:
            if entry["task"] in out:
                raise ValueError(f"task {entry['task']!r} appears twice in an evaluation result")
            out[entry["task"]] = float(np.mean(entry["won"]))
    return out


def paired_task_difference(a: Mapping | Sequence[Mapping], b: Mapping | Sequence[Mapping], *,
                           task_type: str | None = None, n_boot: int = 10_000, level: float = 0.95,
                           rng=0) -> TaskBootstrap:
    """Success of evaluation ``a`` minus evaluation ``b`` on the same tasks, with a bootstrap interval that
    resamples whole tasks (each task's mean over its repeats, :func:`task_means`, differenced,
    :func:`task_bootstrap`), so that which tasks were drawn counts once for both sides.

    With several seeds, ``a`` and ``b`` are sequences of evaluations paired in order (``a[i]`` and ``b[i]``
    of seed ``i``): each task's difference is the mean over the seeds of its seed's differences, and the tasks
    are resampled as before, so that the interval counts both the seeds' spread and which tasks were drawn.

    Parameters
    ----------
    a, b : mapping or sequence of mappings
        ``python -m training.evaluate --json`` results with ``episodes``; sequences of equal length for seeds.
    task_type : str, optional
        Only the tasks of this type.

    Raises
    ------
    ValueError
        A result without ``episodes``, a task repeated, the results on different task sets, or sequences of
        different lengths.
    """
    a, b = ([x] if isinstance(x, Mapping) else list(x) for x in (a, b))
    if not a or len(a) != len(b):
        raise ValueError(f"paired seeds need as many evaluations on each side, got {len(a)} and {len(b)}")
    means = [(task_means(x, task_type), task_means(y, task_type)) for x, y in zip(a, b)]
    tasks = sorted(means[0][0])
    for seed, (mean_a, mean_b) in enumerate(means):
        for side in (mean_a, mean_b):
            if set(side) != set(tasks):
                only = sorted(set(side) ^ set(tasks))
                where = f" (pair {seed + 1})" if len(means) > 1 else ""
                raise ValueError(f"the evaluations cover different tasks{where} ({len(only)} in one only, "
                                 f"e.g. {only[:2]})")
    diffs = [float(np.mean([mean_a[t] - mean_b[t] for mean_a, mean_b in means])) for t in tasks]
    return task_bootstrap(diffs, n_boot=n_boot, level=level, rng=rng)
