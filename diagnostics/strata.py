"""Feedback AUROC within strata of a step property: what the pooled AUROC of Fig. 2c mixes.

The pooled AUROC compares every valid step with every invalid one. When a property of the step moves the
signals and differs between the classes, the pooled value measures that property as much as the feedback.
This command splits the labelled steps by one property and reports, for each signal (Ablated support
delta_A, Full support delta_F, residual e):

- the AUROC within each stratum;
- the **within-strata AUROC**: the probability that a valid step outranks an invalid step *of the same
  stratum* (ties count one half), i.e. the pooled Mann-Whitney count over same-stratum pairs only,

.. math::

    \\mathrm{AUROC}_\\text{within} = \\frac{\\sum_s \\sum_{i \\in P_s} \\sum_{j \\in N_s}
        \\left([S_i > S_j] + \\tfrac12 [S_i = S_j]\\right)}{\\sum_s |P_s|\\,|N_s|},

  which is the strata's AUROCs averaged with weights ``|P_s| |N_s|``; strata with one class only add no pair;
- beside them the pooled (raw) AUROC of the same steps.

Intervals: percentile intervals of trajectory-cluster bootstrap resamples (whole trajectories drawn with
replacement, every estimate evaluated on the same resamples), as for :mod:`diagnostics.auroc`.

Properties (``--by``), read from the checkpoints' ``steps.parquet``, including the steps outside the selection:

``evidence_words``
    words of the observations the Full view shows after the step's action: o_{k+1}, and o_{k+2} when the
    trajectory has a next step (:func:`ocsd.replay.views.evidence_pieces`). Strata are quantile bins
    (``--bins``, default 5) of the labelled steps; bins whose quantile edges coincide merge (the output says so),
    and steps that all share one length make one stratum, whose within-strata AUROC is the pooled one.
``next_action``
    what the trajectory does next: ``repeat`` (a_{k+1} = a_k), ``same family`` (another action of a_k's command
    family, :func:`ocsd.replay.schemas.action_family`), ``other family``, or ``none`` (the last step: the Full view
    shows o_{k+1} alone).

Command::

    python -m diagnostics.strata --run DIR [--by evidence_words|next_action] [--bins 5] [--out DIR] [--json]

``--out`` writes ``strata_<by>.json``; ``python -m figures.panels OUT/strata_<by>.json`` draws it.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from diagnostics.bootstrap import as_generator, iter_cluster_counts, percentile_ci
from diagnostics.load import SIGNALS, DiagData, DiagnosticsError
from diagnostics.options import command_parser, load_args
from diagnostics.stats import AurocEngine, DegenerateInputWarning
from ocsd.cli import emit, entry_point, format_table, output_folder, positive_int, write_json
from ocsd.records import CHECKPOINT_COLUMN
from ocsd.replay.schemas import action_family

__all__ = ["PROPERTIES", "NEXT_ACTIONS", "bins_note", "evidence_words", "next_action", "within_strata_auroc",
           "strata_labels", "strata_auroc", "table", "main"]

NEXT_ACTIONS = ("repeat", "same family", "other family", "none")
"""The strata of ``next_action``, in table order."""


def _words(text: pd.Series) -> np.ndarray:
    return text.fillna("").astype(str).str.split().str.len().to_numpy(np.int64)


def _next_step(steps: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """Each step's next step in its trajectory (``action``, ``obs_next``; NaN where there is none), aligned with
    ``steps``, and whether it exists (the row of ``step_idx + 1`` of the same checkpoint and trajectory)."""
    key = [c for c in (CHECKPOINT_COLUMN, "global_step") if c in steps.columns][:1] + ["traj_uid"]
    ordered = steps.sort_values([*key, "step_idx"], kind="stable")
    shifted = ordered.groupby(key, observed=True, sort=False)[["action", "obs_next", "step_idx"]].shift(-1)
    exists = (shifted["step_idx"] == ordered["step_idx"] + 1).to_numpy()
    shifted = shifted.reindex(steps.index)
    return shifted, pd.Series(exists, index=ordered.index).reindex(steps.index).to_numpy(bool)


def evidence_words(steps: pd.DataFrame, env: str = "alfworld") -> pd.DataFrame:
    """Words of o_{k+1} and, where the trajectory goes on, of o_{k+2}: what the Full view shows of the future
    (column ``evidence_words``, aligned with ``steps``)."""
    nxt, exists = _next_step(steps)
    words = _words(steps["obs_next"]) + np.where(exists, _words(nxt["obs_next"]), 0)
    return pd.DataFrame({"evidence_words": words}, index=steps.index)


def next_action(steps: pd.DataFrame, env: str = "alfworld") -> pd.DataFrame:
    """What the trajectory does after each step (column ``next_action``, one of :data:`NEXT_ACTIONS`)."""
    nxt, exists = _next_step(steps)
    same = exists & (nxt["action"].to_numpy(object) == steps["action"].to_numpy(object))
    family = np.array([action_family(env, a) for a in steps["action"]], dtype=object)
    next_family = np.array([action_family(env, a) if ok else None for a, ok in zip(nxt["action"], exists)],
                           dtype=object)
    kind = np.select([~exists, same, exists & (next_family == family)], ["none", "repeat", "same family"],
                     "other family")
    return pd.DataFrame({"next_action": kind}, index=steps.index)


PROPERTIES: dict[str, Callable[..., pd.DataFrame]] = {"evidence_words": evidence_words, "next_action": next_action}
"""The step properties ``--by`` accepts."""


class _StratumEngines:
    """AUROC of ``k`` signals within each stratum, and the within-strata AUROC, under cluster weights."""

    def __init__(self, y: np.ndarray, scores: np.ndarray, strata: np.ndarray, clusters: np.ndarray, n_strata: int):
        self.n_clusters = int(clusters.max()) + 1 if clusters.size else 0
        self.parts = []  # (engine, positives per cluster, negatives per cluster) of each stratum; None: no pairs
        for s in range(n_strata):
            m = strata == s
            if not (y[m].any() and (~y[m]).any()):
                self.parts.append(None)
                continue
            pos = np.bincount(clusters[m & y], minlength=self.n_clusters).astype(np.float64)
            neg = np.bincount(clusters[m & ~y], minlength=self.n_clusters).astype(np.float64)
            self.parts.append((AurocEngine(y[m], scores[m], clusters[m], n_clusters=self.n_clusters), pos, neg))
        self.k = scores.shape[1]

    def evaluate(self, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-stratum AUROCs (B, n_strata, k) and within-strata AUROCs (B, k) for weights (B, n_clusters)."""
        b = weights.shape[0]
        per = np.full((b, len(self.parts), self.k), np.nan)
        num, den = np.zeros((b, self.k)), np.zeros((b, 1))
        for s, part in enumerate(self.parts):
            if part is None:
                continue
            engine, pos, neg = part
            value = engine.evaluate(weights, warn=False).reshape(b, self.k)
            pairs = (weights @ pos) * (weights @ neg)  # weighted valid x invalid pairs of the stratum
            per[:, s] = value
            ok = pairs > 0
            num[ok] += value[ok] * pairs[ok, None]
            den[ok] += pairs[ok, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            return per, np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def within_strata_auroc(y_true, y_score, strata, *, cluster_weights=None, clusters=None) -> np.ndarray:
    """Within-strata AUROC: valid-over-invalid pairs counted inside each stratum only (ties one half).

    Parameters
    ----------
    y_true : array-like of shape (n,)
        Binary labels (1 = positive, here ``valid``).
    y_score : array-like of shape (n,) or (n, k)
        Scores; ``k`` signals are evaluated together.
    strata : array-like of shape (n,)
        Stratum of each observation (any labels).
    cluster_weights : array-like of shape (n_clusters,), optional
        Multiplicity of each cluster (a bootstrap resample); needs ``clusters``. Default: every observation once.
    clusters : array-like of int, shape (n,), optional
        Cluster index of each observation in ``[0, n_clusters)``.

    Returns
    -------
    float or numpy.ndarray of shape (k,)
        nan where no stratum holds both classes.
    """
    y = np.asarray(y_true).astype(bool)
    scores = np.asarray(y_score, dtype=np.float64)
    single = scores.ndim == 1
    scores = scores[:, None] if single else scores
    codes = pd.factorize(pd.Series(np.asarray(strata, dtype=object)))[0]
    if cluster_weights is None:
        clusters, weights = np.arange(y.size), np.ones((1, y.size))
    else:
        if clusters is None:
            raise ValueError("cluster_weights needs clusters")
        clusters, weights = np.asarray(clusters, dtype=np.int64), np.asarray(cluster_weights, np.float64)[None, :]
    engines = _StratumEngines(y, scores, codes, clusters, int(codes.max()) + 1 if codes.size else 0)
    if engines.n_clusters and weights.shape[1] < engines.n_clusters:
        raise ValueError(f"cluster_weights has {weights.shape[1]} entries for {engines.n_clusters} clusters")
    value = engines.evaluate(weights[:, :engines.n_clusters])[1][0]
    return float(value[0]) if single else value


def _means(scores: np.ndarray, mask: np.ndarray) -> dict:
    """Mean step score of each signal over the masked steps (nan without any)."""
    return {sig: float(scores[mask, j].mean()) if mask.any() else float("nan") for j, sig in enumerate(SIGNALS)}


def _interval(point: float, reps: np.ndarray, ci: float) -> dict:
    """The point AUROC and the percentile interval of its defined resamples (a small stratum may lose a class)."""
    low, high = percentile_ci(reps, ci=ci)
    return {"auroc": float(point), "ci_low": float(low), "ci_high": float(high)}


def strata_labels(values: pd.Series, by: str, *, bins: int = 5) -> tuple[pd.Series, list[str]]:
    """Stratum names of the steps and their table order: quantile bins (``bins``) of a numeric property (named
    by their ranges), or the categories of ``next_action``.

    Quantile edges that coincide (many steps of one value) merge their bins, so there may be fewer strata than
    ``bins``; when every step has the same value there is one stratum, named by that value.
    """
    if by == "next_action":
        return values.astype(str), [n for n in NEXT_ACTIONS if n in set(values)]
    x = values.to_numpy(np.float64)
    if x.size == 0:
        return pd.Series([], index=values.index, dtype=object), []
    if x.min() == x.max():  # one value: quantile edges all coincide, and one stratum holds every step
        name = f"{int(x[0])}" if float(x[0]).is_integer() else f"{x[0]:g}"
        return pd.Series([name] * x.size, index=values.index), [name]
    codes, edges = pd.qcut(x, bins, labels=False, retbins=True, duplicates="drop")
    lows = np.floor(edges[:-1]).astype(int)
    lows[1:] += 1  # (a, b] bins of integers: from a + 1 to b
    names = [f"{lo}-{int(hi)}" if lo < int(hi) else f"{int(hi)}" for lo, hi in zip(lows, edges[1:])]
    return pd.Series([names[c] for c in codes], index=values.index), names


def strata_auroc(data: DiagData, by: str, *, bins: int = 5, n_boot: int = 1000, ci: float = 0.95,
                 seed=0) -> dict:
    """AUROC of each signal within the strata of a step property, the within-strata AUROC and the pooled one.

    Parameters
    ----------
    data : DiagData
        Steps loaded with the property (``load(..., properties=PROPERTIES[by])``).
    by : {"evidence_words", "next_action"}
    bins : int, default 5
        Quantile bins of a numeric property.
    n_boot, ci, seed
        Trajectory-cluster bootstrap.

    Returns
    -------
    dict
        ``{"by", "n_steps", "n_valid", "n_invalid", "n_trajectories", "n_boot", "ci",
        "strata": [{"stratum", "n_steps", "n_valid", "signals": {signal: {"auroc", "ci_low", "ci_high"}},
        "mean": {"valid"|"invalid": {signal: mean step score}}}, ...],
        "n_steps_within": steps of the strata with both classes,
        "bins": {"requested", "used", "distinct_values"} (a numeric property only: coinciding quantile edges merge
        bins; one distinct value gives one stratum, whose within-strata AUROC is the pooled one),
        "within": {signal: {...}}, "pooled": {signal: {...}},
        "delta": {"within"|"pooled": {"delta", "ci_low", "ci_high"}}}``
        (Delta AUROC = residual - full, paired over the resamples); AUROCs are nan where a stratum (or every
        stratum) lacks a class.
    """
    if by not in PROPERTIES:
        raise DiagnosticsError(f"--by must be one of {', '.join(PROPERTIES)}, got {by!r}")
    if by not in data.steps.columns:
        raise DiagnosticsError(f"the steps carry no {by!r} column: load them with properties=PROPERTIES[{by!r}]")
    lab = data.labelled()
    y = lab["y"].to_numpy(bool)
    names, order = strata_labels(lab[by], by, bins=bins)
    codes = np.array([order.index(n) for n in names], dtype=np.int64)
    clusters = pd.factorize(lab["cluster"])[0].astype(np.int64)
    scores = np.column_stack([lab[f"S_{name}"].to_numpy() for name in SIGNALS])
    out = {"by": by, "n_steps": int(y.size), "n_valid": int(y.sum()), "n_invalid": int((~y).sum()),
           "n_trajectories": int(clusters.max()) + 1 if clusters.size else 0, "n_boot": int(n_boot), "ci": ci}
    if by != "next_action":
        out["bins"] = {"requested": int(bins), "used": len(order), "distinct_values": int(lab[by].nunique())}
    if not (y.any() and (~y).any()):
        warnings.warn(f"AUROC needs valid and invalid steps; got {int(y.sum())} valid and {int((~y).sum())} "
                      f"invalid: returning nan", DegenerateInputWarning, stacklevel=2)
    strata_engines = _StratumEngines(y, scores, codes, clusters, len(order))
    pooled_engine = _StratumEngines(y, scores, np.zeros_like(codes), clusters, 1)
    ones = np.ones((1, strata_engines.n_clusters))
    per_point, within_point = strata_engines.evaluate(ones)
    pooled_point = pooled_engine.evaluate(ones)[1]
    per_reps, within_reps, pooled_reps = [], [], []
    for counts in iter_cluster_counts(strata_engines.n_clusters, n_boot=n_boot, seed=as_generator(seed)):
        per, within = strata_engines.evaluate(counts)
        per_reps.append(per)
        within_reps.append(within)
        pooled_reps.append(pooled_engine.evaluate(counts)[1])
    per_reps, within_reps, pooled_reps = (np.concatenate(r) for r in (per_reps, within_reps, pooled_reps))
    out["strata"] = [{"stratum": name, "n_steps": int((codes == s).sum()), "n_valid": int(y[codes == s].sum()),
                      "signals": {sig: _interval(per_point[0, s, j], per_reps[:, s, j], ci)
                                  for j, sig in enumerate(SIGNALS)},
                      "mean": {"valid": _means(scores, (codes == s) & y), "invalid": _means(scores, (codes == s) & ~y)}}
                     for s, name in enumerate(order)]
    paired = [s for s, part in enumerate(strata_engines.parts) if part is not None]
    out["n_steps_within"] = int(np.isin(codes, paired).sum())  # steps of strata that hold both classes
    out["within"] = {sig: _interval(within_point[0, j], within_reps[:, j], ci) for j, sig in enumerate(SIGNALS)}
    out["pooled"] = {sig: _interval(pooled_point[0, j], pooled_reps[:, j], ci) for j, sig in enumerate(SIGNALS)}
    res, full = SIGNALS.index("residual"), SIGNALS.index("full")
    out["delta"] = {name: _difference(point[0], reps, res, full, ci) for name, point, reps in
                    (("within", within_point, within_reps), ("pooled", pooled_point, pooled_reps))}
    return out


def _difference(point: np.ndarray, reps: np.ndarray, a: int, b: int, ci: float) -> dict:
    """Signal ``a`` minus signal ``b`` with the percentile interval of the paired resamples."""
    low, high = percentile_ci(reps[:, a] - reps[:, b], ci=ci)
    return {"delta": float(point[a] - point[b]), "ci_low": float(low), "ci_high": float(high)}


def _cell(v: dict) -> str:
    if not np.isfinite(v["auroc"]):
        return "n/a"
    return f"{v['auroc']:.3f} [{v['ci_low']:.3f}, {v['ci_high']:.3f}]"


def table(result: dict) -> str:
    """Plain-text rendering of :func:`strata_auroc`'s result."""
    unit = " (words)" if result["by"] == "evidence_words" else ""
    rows = [[f"{s['stratum']}{unit}", s["n_steps"], f"{s['n_valid'] / s['n_steps']:.2f}" if s["n_steps"] else "-",
             *[_cell(s["signals"][sig]) for sig in SIGNALS]] for s in result["strata"]]
    rows.append(["within strata", result["n_steps_within"], "-", *[_cell(result["within"][sig]) for sig in SIGNALS]])
    rows.append(["pooled (raw)", result["n_steps"], f"{result['n_valid'] / max(result['n_steps'], 1):.2f}",
                 *[_cell(result["pooled"][sig]) for sig in SIGNALS]])
    title = (f"Feedback AUROC by {result['by']}: {result['n_steps']} labelled steps ({result['n_valid']} valid, "
             f"{result['n_invalid']} invalid) in {result['n_trajectories']} trajectories, {result['n_boot']} "
             f"cluster resamples, {result['ci']:.0%} intervals")
    text = format_table(["stratum", "steps", "valid", "Ablated (delta_A)", "Full (delta_F)", "Residual (e)"], rows,
                        title=title)
    deltas = "; ".join(f"{name} {d['delta']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"
                       for name, d in result["delta"].items())
    return f"{text.rstrip()}\nDelta AUROC (residual - full): {deltas}\n{bins_note(result)}"


def bins_note(result: dict) -> str:
    """A line saying why a numeric property has fewer strata than ``--bins`` asked for ('' when it has as many)."""
    bins = result.get("bins")
    if not bins or bins["used"] >= bins["requested"]:
        return ""
    if bins["distinct_values"] <= 1:
        return (f"note: every labelled step has {result['by']} = {result['strata'][0]['stratum']}: one stratum "
                f"instead of --bins {bins['requested']}; the within-strata AUROC is the pooled one\n"
                if result["strata"] else "")
    return (f"note: {bins['used']} strata instead of --bins {bins['requested']}: the labelled steps have "
            f"{bins['distinct_values']} distinct {result['by']} values, and quantile edges that coincide merge "
            f"their bins\n")


def _main(argv: Sequence[str] | None) -> int:
    parser = command_parser("diagnostics.strata", __doc__.split("\n")[0])
    parser.add_argument("--by", choices=tuple(PROPERTIES), default="evidence_words",
                        help="the step property that defines the strata (default evidence_words)")
    parser.add_argument("--bins", type=positive_int("--bins"), default=5,
                        help="quantile bins of a numeric property (default 5)")
    parser.add_argument("--out", type=output_folder, default=None,
                        help="also write strata_<by>.json into this folder (python -m figures.panels draws it)")
    args = parser.parse_args(argv)
    data = load_args(args, properties=PROPERTIES[args.by])
    result = strata_auroc(data, args.by, bins=args.bins, n_boot=args.n_boot, ci=args.ci, seed=args.seed)
    text = table(result)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"strata_{args.by}.json"
        write_json(path, {**result, "source": ", ".join(args.run or args.ckpt)})
        text += f"wrote {path}\npicture: python -m figures.panels {path}\n"
    emit(args.json, result, text)
    return 0


main = entry_point(_main, "diagnostics.strata")


if __name__ == "__main__":
    sys.exit(main())
