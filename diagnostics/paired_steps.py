"""Two runs compared step by step on a training metric, pooled over pairs of runs, with a block-bootstrap interval.

Two runs of one seed (OCSD and GRPO from the same warm start, or a run and its rerun) draw the same tasks at each
training step, so the difference of their training success at step ``t`` leaves out how hard step ``t``'s tasks
were. Consecutive steps of a run are not independent (each policy carries over into the next step), so resampling
single steps would make the interval too narrow. The interval here comes from a circular block bootstrap (Politis
and Romano, 1992): a pair's differences, in step order, are resampled in blocks of ``block`` consecutive steps
(wrapping from the last step to the first), ``ceil(n / block)`` blocks with uniform starts, cut to the pair's ``n``
steps. Several pairs (the two methods at further seeds) are resampled independently, and the pooled difference is
the mean over all pairs' steps. The interval covers the training noise of these runs; whether a rerun or a new
seed would repeat the difference is a question for more pairs (compare a run with its rerun the same way).

Command::

    python -m diagnostics.paired_steps --pair RUN_A RUN_B [--pair RUN_A2 RUN_B2 ...] [--metric success_rate]
        [--block 4] [--steps FIRST-LAST] [--n-boot 10000] [--ci 0.95] [--seed 0] [--json]

``--json`` adds ``metric``, ``runs`` (the folders as given) and ``labels`` (their names: :func:`pair_labels`) to
:func:`paired_steps`' result; ``python -m figures.paired_steps`` draws it.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from diagnostics.bootstrap import as_generator, percentile_ci
from diagnostics.options import add_resampling_options, check_ci
from ocsd.cli import UsageError, emit, entry_point, format_table, positive_int
from ocsd.records.run import read_metrics

__all__ = ["circular_block_indices", "block_bootstrap_means", "StepPair", "step_pair", "paired_steps", "table",
           "pair_labels", "main"]


def circular_block_indices(n: int, block: int, *, n_boot: int, rng=None) -> np.ndarray:
    """Indices of ``n_boot`` circular block resamples of a series of length ``n``, shape ``(n_boot, n)``.

    Each resample is ``ceil(n / block)`` blocks ``(s, s + 1, ..., s + block - 1) mod n`` with starts ``s`` drawn
    uniformly from ``0..n-1``, concatenated and cut to ``n``. With ``block = 1`` this is the ordinary bootstrap.

    Raises
    ------
    ValueError
        ``n`` or ``n_boot`` below 1, or ``block`` outside ``1..n``.
    """
    if n < 1 or n_boot < 1:
        raise ValueError(f"n and n_boot must be >= 1, got {n} and {n_boot}")
    if not 1 <= block <= n:
        raise ValueError(f"block must be in 1..{n} (the series' length), got {block}")
    k = -(-n // block)
    starts = as_generator(rng).integers(0, n, size=(n_boot, k))
    return ((starts[:, :, None] + np.arange(block)) % n).reshape(n_boot, k * block)[:, :n]


def block_bootstrap_means(series: Sequence[np.ndarray], block: int, *, n_boot: int, rng=None) -> np.ndarray:
    """Pooled mean of circular block resamples of several series, each resampled on its own, shape ``(n_boot,)``.

    A resample draws every series' values by :func:`circular_block_indices` (the series in order, from one
    generator) and averages all drawn values together, so each series weighs by its length, as in the pooled mean.
    """
    rng = as_generator(rng)
    total = np.zeros(n_boot)
    for values in series:
        values = np.asarray(values, dtype=float)
        total += values[circular_block_indices(values.size, block, n_boot=n_boot, rng=rng)].sum(axis=1)
    return total / sum(np.asarray(v).size for v in series)


@dataclass(frozen=True)
class StepPair:
    """The steps two runs share and their metric at each.

    Attributes
    ----------
    steps : numpy.ndarray
        Training steps, ascending, at which both runs have a finite value of the metric.
    a, b : numpy.ndarray
        The two runs' values at those steps.
    """

    steps: np.ndarray
    a: np.ndarray
    b: np.ndarray

    @property
    def difference(self) -> np.ndarray:
        """``a - b`` step by step."""
        return self.a - self.b


def _by_step(rows: Sequence[Mapping], metric: str) -> dict[int, float]:
    """The metric of each step (a step written twice keeps its last row); steps without a finite number left out."""
    out = {}
    for row in rows:
        value = row.get(metric)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[int(row["step"])] = float(value)
        else:
            out.pop(int(row["step"]), None)
    return out


def step_pair(rows_a: Sequence[Mapping], rows_b: Sequence[Mapping], metric: str, *,
              first: int | None = None, last: int | None = None) -> StepPair:
    """The steps in ``[first, last]`` (either bound optional) at which both runs' metrics rows hold a finite
    ``metric``, with the two values.

    Raises
    ------
    ValueError
        A side has no finite ``metric`` at all (the message says which: ``first run`` or ``second run``).
    """
    sides = []
    for name, rows in (("first run", rows_a), ("second run", rows_b)):
        values = _by_step(rows, metric)
        if not values:
            raise ValueError(f"the {name} has no finite {metric!r} in its metrics rows")
        sides.append(values)
    steps = sorted(s for s in set(sides[0]) & set(sides[1])
                   if (first is None or s >= first) and (last is None or s <= last))
    return StepPair(np.array(steps, dtype=np.int64), np.array([sides[0][s] for s in steps]),
                    np.array([sides[1][s] for s in steps]))


def paired_steps(pairs: Sequence[StepPair], *, block: int = 4, n_boot: int = 10_000, ci: float = 0.95,
                 seed=0) -> dict:
    """Mean step-by-step difference ``a - b`` of each pair and pooled over the pairs, with circular block-bootstrap
    intervals.

    Parameters
    ----------
    pairs : sequence of StepPair
        One pair of runs each (:func:`step_pair`); every pair needs at least ``block`` shared steps.
    block : int, default 4
        Consecutive steps resampled together.
    n_boot : int, default 10000
    ci : float, default 0.95
    seed : int, Generator or None
        The pairs' intervals and the pooled one draw from their own generators, spawned from this seed in that order.

    Returns
    -------
    dict
        ``{"block", "n_boot", "ci", "pairs": [{"first", "last", "n", "a", "b", "difference", "ci_low",
        "ci_high"}], "pooled": {"n", "difference", "ci_low", "ci_high"}}``; ``a`` and ``b`` are the two sides'
        means over the pair's shared steps.

    Raises
    ------
    ValueError
        No pairs, a pair with fewer shared steps than ``block``, or ``ci`` outside (0, 1).
    """
    if not pairs:
        raise ValueError("no pairs of runs given")
    if not 0 < ci < 1:
        raise ValueError(f"ci must be in (0, 1), got {ci}")
    for i, pair in enumerate(pairs, 1):
        if pair.steps.size < block:
            raise ValueError(f"pair {i} shares {pair.steps.size} step(s), fewer than the block of {block}")
    rngs = np.random.SeedSequence(int(as_generator(seed).integers(0, 2**63 - 1))).spawn(len(pairs) + 1)

    def interval(series, rng_seed) -> tuple[float, float]:
        means = block_bootstrap_means(series, block, n_boot=n_boot, rng=np.random.default_rng(rng_seed))
        low, high = percentile_ci(means, ci=ci)
        return float(low), float(high)

    out = {"block": int(block), "n_boot": int(n_boot), "ci": float(ci), "pairs": []}
    for pair, rng_seed in zip(pairs, rngs):
        low, high = interval([pair.difference], rng_seed)
        out["pairs"].append({"first": int(pair.steps[0]), "last": int(pair.steps[-1]), "n": int(pair.steps.size),
                             "a": float(pair.a.mean()), "b": float(pair.b.mean()),
                             "difference": float(pair.difference.mean()), "ci_low": low, "ci_high": high})
    pooled = np.concatenate([p.difference for p in pairs])
    low, high = interval([p.difference for p in pairs], rngs[-1])
    out["pooled"] = {"n": int(pooled.size), "difference": float(pooled.mean()), "ci_low": low, "ci_high": high}
    return out


def table(result: dict, labels: Sequence[tuple[str, str]], metric: str) -> str:
    """Plain-text rendering of :func:`paired_steps`' result, one line a pair (``labels``: the runs' names) and the
    pooled line."""
    pct = f"{result['ci']:.0%}"
    rows = [[f"{la} - {lb}", f"{p['first']}-{p['last']}", p["n"], p["a"], p["b"], p["difference"], p["ci_low"],
             p["ci_high"]] for (la, lb), p in zip(labels, result["pairs"])]
    pooled = result["pooled"]
    if len(result["pairs"]) > 1:
        rows.append(["pooled", "", pooled["n"], "", "", pooled["difference"], pooled["ci_low"], pooled["ci_high"]])
    title = (f"{metric}, paired by training step: A - B, {pct} intervals from {result['n_boot']} circular "
             f"block resamples (blocks of {result['block']} steps, within each pair)")
    return format_table(["A - B", "steps", "n", "A", "B", "A - B", f"{pct} low", f"{pct} high"], rows, title=title)


def _step_range(text: str) -> tuple[int, int]:
    """``FIRST-LAST`` of ``--steps``."""
    parts = text.split("-")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts) or int(parts[0]) > int(parts[1]):
        raise argparse.ArgumentTypeError(f"--steps takes FIRST-LAST with 0 <= FIRST <= LAST, got {text!r}")
    return int(parts[0]), int(parts[1])


def _read_run(path: str) -> list[dict]:
    """The metrics rows of one ``--pair`` folder."""
    if not Path(path).is_dir():
        raise UsageError(f"--pair {path}: not a run folder")
    rows = read_metrics(path)
    if not rows:
        raise UsageError(f"--pair {path}: no metrics.jsonl rows")
    return rows


def pair_labels(a: str, b: str) -> tuple[str, str]:
    """The two runs' folder names, with their parent folders where the names are the same (a run and its rerun)."""
    pa, pb = Path(a).resolve(), Path(b).resolve()
    if pa.name != pb.name:
        return pa.name, pb.name
    return f"{pa.parent.name}/{pa.name}", f"{pb.parent.name}/{pb.name}"


def _main(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m diagnostics.paired_steps", description=__doc__.split("\n")[0])
    parser.add_argument("--pair", nargs=2, action="append", default=[], metavar=("RUN_A", "RUN_B"), required=True,
                        help="two run folders of one seed (difference A - B); repeat for further seeds, pooled")
    parser.add_argument("--metric", default="success_rate",
                        help="metrics.jsonl field compared (default success_rate: the training batch's won share)")
    parser.add_argument("--block", type=positive_int("--block"), default=4,
                        help="consecutive steps resampled together (default 4)")
    parser.add_argument("--steps", type=_step_range, default=None, metavar="FIRST-LAST",
                        help="only these training steps (default: every step both runs of a pair have)")
    add_resampling_options(parser, n_boot=10_000, resamples="circular block resamples")
    args = parser.parse_args(argv)
    check_ci(args)
    first, last = args.steps or (None, None)
    pairs, labels = [], []
    for a, b in args.pair:
        try:
            pair = step_pair(_read_run(a), _read_run(b), args.metric, first=first, last=last)
        except ValueError as err:
            raise UsageError(f"--pair {a} {b}: {err}") from None
        if pair.steps.size < args.block:
            raise UsageError(f"--pair {a} {b}: {pair.steps.size} shared step(s) with a finite {args.metric!r}"
                             f"{' in --steps' if args.steps else ''}, fewer than --block {args.block}")
        pairs.append(pair)
        labels.append(pair_labels(a, b))
    result = paired_steps(pairs, block=args.block, n_boot=args.n_boot, ci=args.ci, seed=args.seed)
    result["metric"] = args.metric
    result["runs"] = [list(p) for p in args.pair]
    result["labels"] = [list(label) for label in labels]
    emit(args.json, result, table(result, labels, args.metric))
    return 0


main = entry_point(_main, "diagnostics.paired_steps")


if __name__ == "__main__":
    sys.exit(main())
