"""Audits of one replay-view design pooled over runs and checkpoints: ``python -m rescoring.audit_pool AUDIT_DIR...``.

``python -m rescoring.audit`` re-scores one run's selected steps; at one checkpoint of a policy that rarely errs it
has 15-25 invalid steps, and its intervals span 0.3 of AUROC. This command reads the ``audit.json`` and
``audit_steps.csv`` of several audits of the same design against the same baseline (each ``AUDIT_DIR`` an ``--out``
folder of ``rescoring.audit``), checks that they compare the same views and share no checkpoint, and computes on
all their labelled steps together (valid against invalid, ambiguous excluded):

* each side's feedback AUROC of the three signals (ablated, full = support, residual);
* the design minus the baseline, paired on the same steps, for the residual and for the support;
* each side's residual gain over its own support (AUROC(residual) - AUROC(full), paired).

under two settings, as :mod:`diagnostics.robustness` defines them: ``raw`` (the step scores as they are, pooled) and
``standard`` (each signal z-scored within its checkpoint first, so that one checkpoint's shift of scale cannot rank
its steps above another's). Intervals are percentile intervals of trajectory-cluster resamples (a trajectory is a
run's checkpoint and ``traj_uid``, so audits never share a cluster); the signals of one comparison are evaluated on
the same resamples. It re-scores nothing. Each audit's own numbers are kept beside the pooled ones (``audits``),
with each side's residual gain over its support computed on that audit's steps (``raw``).

Writes ``audit_pool.json``, ``audit_pool.md`` and every audit's steps together (``audit_steps.csv``) into ``--out``;
``python -m figures.audit_pool OUT/audit_pool.json`` draws the audits and the pooled rows as a forest plot.

    python -m rescoring.audit_pool AUDIT1 AUDIT2 ... --out DIR [--n-boot 1000] [--ci 0.95] [--seed 0] [--json]
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from diagnostics.auroc import signal_aurocs
from diagnostics.bootstrap import paired_delta_auroc
from diagnostics.load import SIGNALS, DiagnosticsError
from diagnostics.robustness import standardize_within
from diagnostics.stats import DegenerateInputWarning
from ocsd.cli import emit, entry_point, fmt, format_table, write_json
from rescoring.audit import SIDES, STEP_COLUMNS, STEPS_FILE
from rescoring.rescore import pool_arguments

__all__ = ["PROTOCOL", "SETTINGS", "audit_gains_over_support", "main", "pool_audits", "pooled_statistics",
           "read_audit"]

PROTOCOL = ("view", "twin", "baseline_view", "baseline_twin")
"""The settings of ``audit.json`` that must agree between pooled audits."""

SETTINGS = ("raw", "standard")
"""The pooled settings: step scores as they are, and z-scored within each checkpoint."""


def read_audit(folder: str | Path) -> tuple[dict, pd.DataFrame]:
    """The ``audit.json`` result and ``audit_steps.csv`` steps of one ``rescoring.audit`` output folder.

    Raises
    ------
    DiagnosticsError
        Naming the folder or file that is missing, unreadable or not an audit's.
    """
    folder = Path(folder)
    result_file, steps_file = folder / "audit.json", folder / STEPS_FILE
    if not result_file.is_file():
        raise DiagnosticsError(f"{folder}: no {result_file} (the --out folder of python -m rescoring.audit)")
    if not steps_file.is_file():
        raise DiagnosticsError(f"{folder}: no {steps_file}; audits written before rescoring.audit kept its steps "
                               "cannot be pooled: run the audit again")
    try:
        result = json.loads(result_file.read_text())
        steps = pd.read_csv(steps_file, dtype={"run": str, "traj_uid": str})
    except (OSError, ValueError) as err:
        raise DiagnosticsError(f"{folder}: cannot read its audit files ({err})") from None
    lacking = [k for k in (*PROTOCOL, "run", "checkpoints", "residual_gain", "support_gain") if k not in result]
    columns = [c for c in STEP_COLUMNS if c not in steps.columns]
    if lacking or columns:
        raise DiagnosticsError(f"{folder}: not a rescoring.audit output (missing {lacking + columns})")
    return result, steps[list(STEP_COLUMNS)]


def _side_scores(lab: pd.DataFrame, side: str, setting: str) -> pd.DataFrame:
    """One side's ``S_ablated``, ``S_full`` and ``S_residual`` beside ``y`` and ``cluster`` (the columns of
    :func:`diagnostics.auroc.signal_aurocs`), z-scored within each checkpoint for ``standard``."""
    scores = np.column_stack([lab[f"{side}_{signal}"].to_numpy(np.float64) for signal in SIGNALS])
    if setting == "standard":
        scores = standardize_within(scores, lab["checkpoint"].to_numpy())
    return pd.DataFrame({"y": lab["y"].to_numpy(), "cluster": lab["cluster"].to_numpy(),
                         **{f"S_{signal}": scores[:, i] for i, signal in enumerate(SIGNALS)}})


def pooled_statistics(steps: pd.DataFrame, *, n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> dict:
    """The pooled comparison of ``steps`` (rows of ``audit_steps.csv`` of one or more audits; module docstring).

    Returns
    -------
    dict
        ``{"n_steps", "n_valid", "n_invalid", "n_trajectories", "n_checkpoints", "raw": ..., "standard": ...}``;
        each setting is ``{"baseline"|"design": {signal: {auroc, ci_low, ci_high}}, "residual_gain"|"support_gain":
        {delta, ci_low, ci_high} (design - baseline), "gain_over_support": {"baseline"|"design": {delta, ci_low,
        ci_high}}}``. ``standard`` z-scores each signal over its checkpoint's labelled steps.

    Raises
    ------
    DiagnosticsError
        When the labelled steps lack valid or invalid ones (an AUROC needs both).
    """
    lab = _labelled(steps)
    y, clusters = lab["y"].to_numpy(), lab["cluster"].to_numpy()
    out = {"n_steps": int(len(lab)), "n_valid": int(y.sum()), "n_invalid": int((~y).sum()),
           "n_trajectories": int(clusters.max() + 1) if len(clusters) else 0,
           "n_checkpoints": int(lab["checkpoint"].nunique())}
    if out["n_valid"] == 0 or out["n_invalid"] == 0:
        raise DiagnosticsError(f"the pooled audits have {out['n_valid']} valid and {out['n_invalid']} invalid "
                               "labelled steps: an AUROC needs both")
    kw = {"n_boot": n_boot, "ci": ci, "seed": seed}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateInputWarning)  # resamples without both classes are ignored
        for setting in SETTINGS:
            scores = {side: _side_scores(lab, side, setting) for side in SIDES}
            entry = {side: signal_aurocs(scores[side], **kw) for side in SIDES}
            for name, column in (("residual_gain", "S_residual"), ("support_gain", "S_full")):
                entry[name] = paired_delta_auroc(y, scores["design"][column], scores["baseline"][column],
                                                 clusters, **kw).as_dict("delta")
            entry["gain_over_support"] = _gains_over_support(y, scores, clusters, **kw)
            out[setting] = entry
    return out


def _labelled(steps: pd.DataFrame) -> pd.DataFrame:
    """The valid and invalid rows of ``steps`` with their ``checkpoint``, label ``y`` (valid) and trajectory
    ``cluster``."""
    lab = steps[steps["feedback_label"].isin(["valid", "invalid"])].copy()
    lab["checkpoint"] = lab["run"].astype(str) + "/global_step_" + lab["global_step"].astype(str)
    lab["y"] = lab["feedback_label"].eq("valid")
    lab["cluster"] = pd.factorize(lab["checkpoint"] + "|" + lab["traj_uid"].astype(str))[0]
    return lab


def _gains_over_support(y, scores: dict, clusters, **kw) -> dict:
    """Each side's AUROC(residual) - AUROC(full) paired on the same resamples: ``{side: {delta, ci_low,
    ci_high}}``."""
    return {side: paired_delta_auroc(y, scores[side]["S_residual"], scores[side]["S_full"], clusters,
                                     **kw).as_dict("delta") for side in SIDES}


def audit_gains_over_support(steps: pd.DataFrame, *, n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> dict:
    """Each side's residual gain over its own support on the labelled ``steps`` of one audit (``raw`` scores).

    ``rescoring.audit`` writes the design minus the baseline of each signal; this is the other comparison the
    pooled result makes, per audit, so that a design which keeps the baseline's view (its support the same by
    construction) still shows what its twin changed about the residual's lead over the support.

    Returns
    -------
    dict
        ``{"baseline"|"design": {delta, ci_low, ci_high}}``; ``delta`` is nan when the steps lack a class.
    """
    lab = _labelled(steps)
    y, clusters = lab["y"].to_numpy(), lab["cluster"].to_numpy()
    scores = {side: _side_scores(lab, side, "raw") for side in SIDES}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateInputWarning)
        return _gains_over_support(y, scores, clusters, n_boot=n_boot, ci=ci, seed=seed)


def _audit_row(result: dict, folder: Path, steps: pd.DataFrame, **kw) -> dict:
    """What one audit measured on its own, as the pooled result lists it (with each side's residual gain over its
    support on the audit's own steps)."""
    signals = {side: result[side]["auroc"]["signals"] for side in SIDES}
    counts = result["baseline"]["auroc"]
    return {"folder": str(folder), "run": result["run"], "checkpoints": result["checkpoints"],
            "n_steps": counts["n_steps"], "n_valid": counts["n_valid"], "n_invalid": counts["n_invalid"],
            "dtype": result.get("dtype"), "device": result.get("device"),
            **{side: {s: signals[side][s] for s in ("full", "residual")} for side in SIDES},
            "residual_gain": result["residual_gain"], "support_gain": result["support_gain"],
            "gain_over_support": audit_gains_over_support(steps, **kw)}


def pool_audits(folders: Sequence[str | Path], *, n_boot: int = 1000, ci: float = 0.95,
                seed: int = 0) -> tuple[dict, pd.DataFrame]:
    """The pooled result and the steps of the audits in ``folders`` (at least two, of one design and baseline).

    Raises
    ------
    DiagnosticsError
        With fewer than two audits, when they compare different views (naming the setting) or when two of them
        share a checkpoint (its steps would count twice).
    """
    if len(folders) < 2:
        raise DiagnosticsError(f"pooling needs at least two audits, got {len(folders)}")
    audits = [(Path(f), *read_audit(f)) for f in folders]
    first_folder, first, _ = audits[0]
    for folder, result, _ in audits[1:]:
        for key in PROTOCOL:
            if result[key] != first[key]:
                raise DiagnosticsError(f"{folder} audits {key} {result[key]!r}, {first_folder} {first[key]!r}: "
                                       "only audits of one design against one baseline pool")
    seen: dict[tuple[str, int], Path] = {}
    for folder, _, steps in audits:
        for key in steps[["run", "global_step"]].drop_duplicates().itertuples(index=False, name=None):
            key = (str(key[0]), int(key[1]))
            if key in seen:
                raise DiagnosticsError(f"{key[0]}'s checkpoint {key[1]} is in {seen[key]} and {folder}: its steps "
                                       "would count twice")
            seen[key] = folder
    steps = pd.concat([s for _, _, s in audits], ignore_index=True)
    result = {**{k: first[k] for k in PROTOCOL}, "n_audits": len(audits),
              "runs": sorted({r["run"] for _, r, _ in audits}),
              "checkpoints": [f"{run}/global_step_{step}" for run, step in seen],
              "dtypes": sorted({str(r.get("dtype")) for _, r, _ in audits}),
              **pooled_statistics(steps, n_boot=n_boot, ci=ci, seed=seed), "n_boot": n_boot, "ci": ci, "seed": seed,
              "audits": [_audit_row(r, f, s, n_boot=n_boot, ci=ci, seed=seed) for f, r, s in audits]}
    return result, steps


def _span(entry: dict, key: str = "delta") -> str:
    return f"{fmt(entry[key])} [{fmt(entry['ci_low'])}, {fmt(entry['ci_high'])}]"


def markdown(result: dict) -> str:
    """``audit_pool.md``: the pooled comparison and each audit's own numbers."""
    pct = f"{result['ci']:.0%}"
    design = f"`{result['view']}` (twin `{result['twin']}`)"
    base = f"`{result['baseline_view']}` (twin `{result['baseline_twin']}`)"
    lines = [f"# {design} against {base}, {result['n_audits']} audits pooled", "",
             f"{result['n_steps']} labelled steps ({result['n_valid']} valid, {result['n_invalid']} invalid) of "
             f"{result['n_trajectories']} trajectories at {result['n_checkpoints']} checkpoints "
             f"({', '.join(result['checkpoints'])}); {result['n_boot']} trajectory-cluster resamples, {pct} "
             "percentile intervals. `raw`: step scores as they are; `standard`: each signal z-scored within its "
             "checkpoint.", "",
             "| setting | side | ablated | support (full) | residual | residual - support |",
             "|---|---|---|---|---|---|"]
    for setting in SETTINGS:
        entry = result[setting]
        for side in SIDES:
            lines.append(f"| {setting} | {side} | " + " | ".join(_span(entry[side][s], "auroc") for s in SIGNALS)
                         + f" | {_span(entry['gain_over_support'][side])} |")
    lines += ["", "| setting | residual, design - baseline | support, design - baseline |", "|---|---|---|",
              *[f"| {s} | {_span(result[s]['residual_gain'])} | {_span(result[s]['support_gain'])} |"
                for s in SETTINGS], "",
              "## Each audit", "",
              "| audit | labelled (invalid) | residual, baseline | residual, design | design - baseline | "
              "support, design - baseline | residual - support, baseline | residual - support, design |",
              "|---|---|---|---|---|---|---|---|",
              *[f"| {a['run']} {a['checkpoints']} | {a['n_steps']} ({a['n_invalid']}) | "
                f"{_span(a['baseline']['residual'], 'auroc')} | {_span(a['design']['residual'], 'auroc')} | "
                f"{_span(a['residual_gain'])} | {_span(a['support_gain'])} | "
                f"{_span(a['gain_over_support']['baseline'])} | {_span(a['gain_over_support']['design'])} |"
                for a in result["audits"]], "",
              "The forest plot is drawn by `python -m figures.audit_pool audit_pool.json`.", "",
              "![pooled audits](audit_pool.png)", ""]
    return "\n".join(lines)


def table(result: dict) -> str:
    """The pooled comparison as plain text."""
    rows = [[setting, what, fmt(e["delta"]), fmt(e["ci_low"]), fmt(e["ci_high"])]
            for setting in SETTINGS for what, e in (("residual", result[setting]["residual_gain"]),
                                                    ("support", result[setting]["support_gain"]))]
    pct = f"{result['ci']:.0%}"
    return format_table(["setting", "signal", "design - baseline", f"{pct} low", f"{pct} high"], rows,
                        title=f"{result['view']} (twin {result['twin']}) against {result['baseline_view']}: "
                              f"{result['n_audits']} audits, {result['n_steps']} labelled steps "
                              f"({result['n_invalid']} invalid) at {result['n_checkpoints']} checkpoints")


def write_outputs(result: dict, steps: pd.DataFrame, out: str | Path) -> dict[str, str]:
    """Write ``audit_pool.json``, ``audit_pool.md`` and ``audit_steps.csv`` into ``out``; returns their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = {"json": str(out / "audit_pool.json"), "report": str(out / "audit_pool.md"),
             "steps": str(out / STEPS_FILE)}
    steps.to_csv(files["steps"], index=False)
    Path(files["report"]).write_text(markdown(result))
    write_json(files["json"], {**result, "files": files})
    return files


def _main(argv: Sequence[str] | None) -> int:
    args, out = pool_arguments(argv, "python -m rescoring.audit_pool", __doc__.split("\n\n")[0], metavar="AUDIT_DIR",
                               command="rescoring.audit", result="audit_pool.json")
    result, steps = pool_audits(args.inputs, n_boot=args.n_boot, ci=args.ci, seed=args.seed)
    files = write_outputs(result, steps, out)
    emit(args.json, {**result, "files": files},
         table(result) + f"\n\nwrote {files['report']}, {files['json']} and {files['steps']}\n"
                         f"picture: python -m figures.audit_pool {files['json']}")
    return 0


main = entry_point(_main, "rescoring.audit_pool")


if __name__ == "__main__":
    sys.exit(main())
