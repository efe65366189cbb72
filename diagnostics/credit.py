"""What OCSD's token weights give valid and invalid steps: the feedback AUROC read through the training rule.

OCSD replaces the GRPO advantage ``A`` of a token ``t`` of a selected step by ``A (1 + beta sgn(A) q_t)`` with
``q_t = tanh(e_t / 2)`` (paper Eq. ocsd_advantage). Against GRPO it adds ``beta |A| q_t`` to the token's
advantage whatever the sign of ``A``: a positive ``q`` pushes the token up more in a trajectory that beat its
group and down less in one that fell behind. For each labelled step ``s`` of the selection::

    q_s    = mean_t tanh(e_t / 2)                 the step's calibration signal
    |q|_s  = mean_t |tanh(e_t / 2)|               its size: OCSD moves the step's token advantages by beta |q_t|
    push_s = beta |A_s| q_s   (0 if not selected)  OCSD's token advantage minus GRPO's, mean over the step

and, per feedback label, the means of ``q_s``, ``|q|_s`` and ``push_s``, the share of steps with ``q_s > 0`` and of
steps with ``A_s != 0`` (flat groups get no push), and the difference invalid - valid of the means, with percentile
intervals from trajectory-cluster resamples (all on the same resamples). The feedback AUROC
(:mod:`diagnostics.auroc`) ranks the same steps by the mean of ``e``: a residual that tracks feedback (AUROC
above 0.5) gives valid steps the larger ``q``; whether OCSD then pushes invalid actions down or up against GRPO
also depends on how often, and how strongly, invalid steps carry an advantage, which the push weighs in. A GRPO
run's records hold the same selection and advantages: there the numbers say what OCSD's rule would have given that
run's batches.

The size is sparse where the two views agree on most tokens: ``share_large`` is the share of a label's tokens with
``|q_t| >= --large`` (0.3: at beta 0.5 an advantage moved by 15% or more), so that a small mean ``|q|`` can be told
from a few tokens moved far.

With ``--part action`` the means run over the tokens that write the step's action (the content of its action tags,
:func:`diagnostics.words.block_tokens`), with ``--part rest`` over the others (reasoning and format): the policy
gradient moves each token by its own advantage, so the push on an invalid action's own tokens is what makes that
action more or less likely.

Command::

    python -m diagnostics.credit --run DIR [--beta 0.5] [--part step|action|rest] [--large 0.3]
        [--steps selected|all] [--n-boot 1000] [--seed 0] [--json]
"""

from __future__ import annotations

import math
import sys
import warnings
from typing import Sequence

import numpy as np
import pandas as pd

from diagnostics.bootstrap import iter_cluster_counts, percentile_ci
from diagnostics.load import DiagData, DiagnosticsError
from diagnostics.options import command_parser, load_args
from diagnostics.stats import DegenerateInputWarning
from diagnostics.words import block_tokens
from ocsd.algorithm.protocol import PAPER_BETA
from ocsd.cli import emit, entry_point, format_table
from ocsd.environments import get_environment

__all__ = ["LABELS", "PARTS", "training_columns", "action_tags", "part_mask", "step_credit", "credit", "main"]

LABELS = ("valid", "invalid")
"""The feedback labels compared (``ambiguous`` steps are left out, as in the AUROC)."""
PARTS = ("step", "action", "rest")
"""The tokens a step's means run over: all of them, those of its action, or the others (reasoning and format)."""
LARGE_Q = 0.3
"""Default threshold of a large ``|q|`` (at beta 0.5 it changes the token's advantage by 15% or more)."""
_RATIOS = {"q": ("q", "one"), "abs_q": ("abs_q", "one"), "push": ("push", "one"), "share_large": ("n_large", "n_part")}
"""Each statistic as the ratio of two per-step columns summed: step means, and the share of tokens over tokens."""


def training_columns(steps: pd.DataFrame, env: str) -> pd.DataFrame:
    """The per-step columns the credit needs, for :func:`diagnostics.load.load`'s ``properties``: the step's
    GRPO ``advantage`` and whether OCSD's rule applied to it (``selected``)."""
    missing = [c for c in ("advantage", "selected") if c not in steps.columns]
    if missing:
        raise DiagnosticsError(f"steps.parquet has no {', '.join(missing)} column(s) (replay-score format v1)")
    return pd.DataFrame({"advantage": steps["advantage"].to_numpy(np.float64),
                         "selected": steps["selected"].to_numpy(bool)}, index=steps.index)


def _check_beta(beta) -> None:
    if not (isinstance(beta, (int, float)) and math.isfinite(beta) and 0 <= beta <= 1):
        raise DiagnosticsError(f"--beta must be in [0, 1], got {beta}")


def _check_large(large) -> None:
    if not (isinstance(large, (int, float)) and math.isfinite(large) and 0 < large <= 1):
        raise DiagnosticsError(f"--large must be in (0, 1], got {large}")


def action_tags(env: str) -> tuple[str, ...]:
    """The tags that hold an action in the outputs of ``env`` (its output parser's ``action_tags``: ``("action",)``
    for ALFWorld and WebShop, ``("search", "answer")`` for Search-QA); ``("action",)`` for an unknown name."""
    try:
        parser = get_environment(env).output_parser
    except ValueError:
        return ("action",)
    return tuple(getattr(parser, "action_tags", ("action",)))


def part_mask(data: DiagData, part: str) -> np.ndarray:
    """Which token rows of ``data`` belong to ``part``: ``step`` (all), ``action`` (those that write the content of
    an action block, :func:`diagnostics.words.block_tokens` with :func:`action_tags`) or ``rest`` (the others)."""
    if part not in PARTS:
        raise DiagnosticsError(f"--part must be one of {', '.join(PARTS)}, got {part!r}")
    if part == "step":
        return np.ones(len(data.tokens), dtype=bool)
    inside = block_tokens(data.tokens["token"].tolist(), data.tokens["step"].to_numpy(), action_tags(data.env))
    return inside if part == "action" else ~inside


def step_credit(data: DiagData, *, beta: float = PAPER_BETA, part: str = "step",
                large: float = LARGE_Q) -> pd.DataFrame:
    """Each labelled step's ``q_s``, ``|q|_s`` and ``push_s`` (module docstring) over the tokens of ``part``, with
    its label, cluster and advantage.

    Parameters
    ----------
    data : DiagData
        Steps loaded with ``properties=training_columns``.
    beta : float, default PAPER_BETA
        OCSD's modulation strength, in [0, 1] (the paper's 0.5: appendix, training details).
    part : {"step", "action", "rest"}, default "step"
        The step's tokens to average over (:func:`part_mask`); a step without tokens in it is left out.
    large : float, default LARGE_Q
        ``n_large`` counts the tokens with ``|q| >= large``.

    Returns
    -------
    pandas.DataFrame
        ``feedback_label, cluster, advantage, selected, n_part, n_large, q, abs_q, push``, one row per valid or
        invalid step with tokens in ``part``.
    """
    _check_beta(beta)
    _check_large(large)
    if "advantage" not in data.steps.columns:
        raise DiagnosticsError("the steps carry no advantage: load them with properties=training_columns")
    keep = part_mask(data, part)
    q_tok = np.tanh(data.tokens["residual"].to_numpy(np.float64)[keep] / 2)
    size = np.abs(q_tok)
    step = data.tokens["step"].to_numpy()[keep]
    n_part = np.bincount(step, minlength=len(data.steps))
    with np.errstate(invalid="ignore", divide="ignore"):
        q = np.bincount(step, weights=q_tok, minlength=len(data.steps)) / n_part
        abs_q = np.bincount(step, weights=size, minlength=len(data.steps)) / n_part
    n_large = np.bincount(step, weights=size >= large, minlength=len(data.steps))
    table = data.steps[["feedback_label", "cluster", "advantage", "selected"]].assign(n_part=n_part, n_large=n_large,
                                                                                      q=q, abs_q=abs_q)
    table["push"] = beta * table["advantage"].abs() * table["q"] * table["selected"].astype(np.float64)
    rows = table["feedback_label"].isin(LABELS).to_numpy() & (n_part > 0)
    return table[rows].reset_index(drop=True)


def _cluster_sums(table: pd.DataFrame, n_clusters: int) -> dict:
    """Per label and cluster, the sum of each column :data:`_RATIOS` names (``one``: the number of steps)."""
    cluster = table["cluster"].to_numpy()
    columns = {c for pair in _RATIOS.values() for c in pair}
    out = {}
    for label in LABELS:
        rows = (table["feedback_label"] == label).to_numpy()
        out[label] = {c: np.bincount(cluster[rows], weights=table[c].to_numpy(np.float64)[rows], minlength=n_clusters)
                      for c in columns}
    return out


def credit(data: DiagData, *, beta: float = PAPER_BETA, part: str = "step", large: float = LARGE_Q, n_boot: int = 1000,
           ci: float = 0.95, seed=0) -> dict:
    """Means of ``q``, ``|q|`` and OCSD's push per feedback label, the share of tokens with a large ``|q|``, and
    their differences invalid - valid, with intervals.

    Parameters
    ----------
    data : DiagData
        Steps loaded with ``properties=training_columns``.
    beta : float, default PAPER_BETA
    part : {"step", "action", "rest"}, default "step"
        The tokens of each step the means run over (:func:`part_mask`).
    large : float, default LARGE_Q
        ``share_large``: the share of the label's tokens (in ``part``) with ``|q| >= large``.
    n_boot : int, default 1000
        Trajectory-cluster resamples.
    ci : float, default 0.95
    seed : int, Generator or None

    Returns
    -------
    dict
        ``{"beta", "part", "n_steps", "n_left_out", "n_trajectories", "n_boot", "ci", "labels": {LABEL: {"n",
        "share_q_positive", "share_advantage_nonzero", "q": {"estimate", "ci_low", "ci_high"}, "abs_q": {...},
        "push": {...}, "share_large": {...}}}, "difference": {"q": {...}, "abs_q": {...}, "push": {...},
        "share_large": {...}}, "large"}``; ``n_left_out``: the valid and invalid steps without tokens in ``part``; a
        label without steps has nan means (with a warning).
    """
    table = step_credit(data, beta=beta, part=part, large=large)
    if table.empty:
        raise DiagnosticsError(f"no valid or invalid steps with tokens in the part {part!r} in the selection")
    codes, clusters = pd.factorize(table["cluster"])
    table = table.assign(cluster=codes, one=1.0)
    n_clusters = len(clusters)
    sums = _cluster_sums(table, n_clusters)
    labels = {}
    for label in LABELS:
        rows = table[table["feedback_label"] == label]
        if rows.empty:
            warnings.warn(f"no {label} steps in the selection: their means are nan", DegenerateInputWarning,
                          stacklevel=2)
        labels[label] = {"n": int(len(rows)),
                         "share_q_positive": float((rows["q"] > 0).mean()) if len(rows) else math.nan,
                         "share_advantage_nonzero": float((rows["advantage"] != 0).mean()) if len(rows) else math.nan}
    reps = {(label, stat): [] for label in LABELS for stat in _RATIOS}
    for counts in iter_cluster_counts(n_clusters, n_boot=n_boot, seed=seed):
        for label in LABELS:
            n = {den: counts @ sums[label][den] for den in {den for _, den in _RATIOS.values()}}  # each sum once
            for stat, (num, den) in _RATIOS.items():
                mean = counts @ sums[label][num] / np.maximum(n[den], 1)
                reps[label, stat].append(np.where(n[den] > 0, mean, np.nan))
    reps = {key: np.concatenate(value) for key, value in reps.items()}
    difference = {}
    for stat, (num, den) in _RATIOS.items():
        points = {label: sums[label][num].sum() / sums[label][den].sum() if sums[label][den].sum() else math.nan
                  for label in LABELS}
        for label in LABELS:
            low, high = percentile_ci(reps[label, stat], ci=ci)
            labels[label][stat] = {"estimate": float(points[label]), "ci_low": float(low), "ci_high": float(high)}
        low, high = percentile_ci(reps["invalid", stat] - reps["valid", stat], ci=ci)
        difference[stat] = {"estimate": float(points["invalid"] - points["valid"]), "ci_low": float(low),
                            "ci_high": float(high)}
    n_labelled = int(data.steps["feedback_label"].isin(LABELS).sum())
    return {"beta": float(beta), "part": part, "n_steps": int(len(table)), "n_left_out": n_labelled - len(table),
            "n_trajectories": int(n_clusters),
            "n_boot": int(n_boot), "ci": float(ci), "large": float(large), "labels": labels, "difference": difference}


def table(result: dict) -> str:
    """Plain-text rendering of :func:`credit`'s result (the push in thousandths)."""
    ci = result["ci"]
    rows = []
    for name, part in [*result["labels"].items(), ("invalid - valid", result["difference"])]:
        q, abs_q, push = part["q"], part["abs_q"], part["push"]
        rows.append([name, part.get("n", ""), part.get("share_advantage_nonzero", ""),
                     part.get("share_q_positive", ""), q["estimate"], q["ci_low"], q["ci_high"], abs_q["estimate"],
                     part["share_large"]["estimate"], 1e3 * push["estimate"], 1e3 * push["ci_low"],
                     1e3 * push["ci_high"]])
    part = result.get("part", "step")
    over = "" if part == "step" else (f", over the tokens of the {part}; {result['n_left_out']} steps without any "
                                      f"left out")
    title = (f"OCSD's token weights on valid and invalid steps (beta {result['beta']:g}{over}): {result['n_steps']} "
             f"steps in {result['n_trajectories']} trajectories, {result['n_boot']} cluster resamples; push = beta |A| "
             f"q (x 1e-3), OCSD's advantage minus GRPO's")
    low, high = f"{ci:.0%} low", f"{ci:.0%} high"
    large = f"|q| >= {result.get('large', LARGE_Q):g}"
    return format_table(["label", "steps", "A != 0", "q > 0", "mean q", low, high, "mean |q|", large, "push", low,
                         high], rows, title=title)


def _main(argv: Sequence[str] | None) -> int:
    parser = command_parser("diagnostics.credit", __doc__.split("\n")[0])
    parser.add_argument("--beta", type=float, default=PAPER_BETA,
                        help=f"OCSD's modulation strength beta in [0, 1] (default {PAPER_BETA}, the paper's)")
    parser.add_argument("--part", choices=PARTS, default="step",
                        help="the tokens of each step to average over: all (default), those of its action, or the rest")
    parser.add_argument("--large", type=float, default=LARGE_Q,
                        help=f"a large |q|, in (0, 1]: the share of tokens at or above it is reported (default "
                             f"{LARGE_Q})")
    args = parser.parse_args(argv)
    _check_beta(args.beta)  # before any data is read
    _check_large(args.large)
    data = load_args(args, properties=training_columns)
    result = credit(data, beta=args.beta, part=args.part, large=args.large, n_boot=args.n_boot, ci=args.ci,
                    seed=args.seed)
    emit(args.json, result, table(result))
    return 0


main = entry_point(_main, "diagnostics.credit")


if __name__ == "__main__":
    sys.exit(main())
