"""The point-by-point verdicts of a replay-view audit (:mod:`rescoring.audit`).

Each point compares the design (a view and its twin) with the baseline (Full and Ablated) on one diagnostic.
A verdict says yes or no only where the intervals separate the two: a paired design-minus-baseline interval
that excludes 0, or two intervals that do not overlap. The word-tail overlap has no interval; it is compared
by value and says so.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ocsd.cli import fmt

__all__ = ["ENV_ROLES", "VERDICTS", "audit_points"]

ENV_ROLES = ("Action", "Entity/State")
"""Roles whose words name what the environment answers about (paper Fig. 2b)."""


def _point(name: str, baseline, design, verdict: str, detail: str) -> dict:
    return {"point": name, "baseline": baseline, "design": design, "verdict": verdict, "detail": detail}


VERDICTS = {"design": "more observation-specific: yes", "baseline": "more observation-specific: no",
            "overlap": "no clear difference", "undetermined": "undetermined (a class or a value is missing)"}


def _by_interval(design: Mapping, base: Mapping) -> str:
    """``design`` when the design's interval lies above the baseline's, ``baseline`` when below, else
    ``overlap`` (``undetermined`` with a missing value). Entries are ``{ci_low, ci_high}``."""
    values = [design["ci_low"], design["ci_high"], base["ci_low"], base["ci_high"]]
    if not all(np.isfinite(v) for v in values):
        return "undetermined"
    if design["ci_low"] > base["ci_high"]:
        return "design"
    if design["ci_high"] < base["ci_low"]:
        return "baseline"
    return "overlap"


def _excludes_zero(entry: Mapping) -> str:
    """``design`` / ``baseline`` when a paired design-minus-baseline interval lies above / below 0."""
    if not (np.isfinite(entry["ci_low"]) and np.isfinite(entry["ci_high"])):
        return "undetermined"
    return "design" if entry["ci_low"] > 0 else "baseline" if entry["ci_high"] < 0 else "overlap"


def audit_points(result: dict) -> list[dict]:
    """The points of an audit result (:func:`rescoring.audit.audit`): structural match, residual AUROC,
    raw Delta AUROC, D of the environment roles, swap sensitivity and word-tail overlap, each a dict
    ``{"point", "baseline", "design", "verdict", "detail"}``."""
    base, des = result["baseline"], result["design"]
    pct = f"{result['ci']:.0%}"
    points = []
    st = result["structure"]
    if st["matched"] is None:
        points.append(_point("structural match", None, None, "undetermined",
                             "the view returns ids only: observation spans cannot be located"))
    else:
        ok = st["matched"] == st["checked"]
        points.append(_point("structural match", None, f"{st['matched']}/{st['checked']} steps",
                             "matched" if ok else "not matched",
                             "ids differ only inside observation segments" if ok else st["first_mismatch"]))
    gain = result["residual_gain"]
    points.append(_point("feedback AUROC of the residual", base["auroc"]["signals"]["residual"]["auroc"],
                         des["auroc"]["signals"]["residual"]["auroc"], VERDICTS[_excludes_zero(gain)],
                         f"design - baseline = {fmt(gain['delta'])} [{fmt(gain['ci_low'])}, {fmt(gain['ci_high'])}], "
                         f"paired {pct} cluster-bootstrap interval"))
    b_raw, d_raw = base["robustness"]["raw"], des["robustness"]["raw"]
    points.append(_point("residual gain over its support (raw Delta AUROC)", b_raw["delta"], d_raw["delta"],
                         VERDICTS[_by_interval(d_raw, b_raw)],
                         f"AUROC(residual) - AUROC(support); {pct} intervals baseline [{fmt(b_raw['ci_low'])}, "
                         f"{fmt(b_raw['ci_high'])}], design [{fmt(d_raw['ci_low'])}, {fmt(d_raw['ci_high'])}]"))
    cats_b, cats_d = base["dratio"]["categories"], des["dratio"]["categories"]
    outcomes = {role: _by_interval(cats_d[role], cats_b[role]) for role in ENV_ROLES}
    wins = [r for r, o in outcomes.items() if o == "design"]
    losses = [r for r, o in outcomes.items() if o == "baseline"]
    verdict = ("undetermined" if all(o == "undetermined" for o in outcomes.values()) else
               "design" if wins and not losses else "baseline" if losses and not wins else "overlap")
    points.append(_point(f"D of {' and '.join(ENV_ROLES)} words", _env_d(base["dratio"]), _env_d(des["dratio"]),
                         VERDICTS[verdict],
                         "mean over the two roles; " + ", ".join(f"{r}: {outcomes[r]}" for r in ENV_ROLES) +
                         f" ({pct} intervals per role)"))
    sw = result.get("swap")
    if sw is None or not sw["design"].get("shows_observation", False):
        points.append(_point("observation-swap sensitivity", None, None, "not applicable",
                             "the view does not show o_{k+1}" if sw is not None else "no swap analysis (--no-swap)"))
    else:
        drops = [sw[side]["drop"] for side in ("baseline", "design")]
        points.append(_point("observation-swap sensitivity (AUROC drop when o_{k+1} is swapped)", drops[0]["delta"],
                             drops[1]["delta"], VERDICTS[_by_interval(drops[1], drops[0])],
                             f"realized - swapped AUROC of mean |residual| (paired {pct} intervals: baseline "
                             f"[{fmt(drops[0]['ci_low'])}, {fmt(drops[0]['ci_high'])}], design "
                             f"[{fmt(drops[1]['ci_low'])}, {fmt(drops[1]['ci_high'])}]); a larger drop depends more "
                             f"on the action-observation correspondence"))
    overlap = [r["tails"]["overlap"].get("full+|residual+", np.nan) for r in (base, des)]
    tails_verdict = ("undetermined" if not all(np.isfinite(overlap)) else
                     "design" if overlap[1] < overlap[0] else "baseline" if overlap[1] > overlap[0] else "overlap")
    points.append(_point("word tails: Jaccard(residual+, support+)", overlap[0], overlap[1],
                         VERDICTS[tails_verdict] + " (by value, no interval)",
                         "lower: the residual's top words differ more from its support's"))
    return points


def _env_d(dratio: dict) -> float:
    cats = dratio["categories"]
    values = [cats[r]["mean"] for r in ENV_ROLES if r in cats and np.isfinite(cats[r]["mean"])]
    return float(np.mean(values)) if values else float("nan")
