"""Observation-swap sensitivity (paper appendix "Observation-Swapping Sensitivity Analysis", Fig. 5).

Does the residual's feedback signal depend on the correspondence between an action and the observation
that followed it, or only on there being observation text? For each chosen checkpoint of a run:

1. **Evaluation steps**: the checkpoint's selected (high-NLL) scored steps, stratified by
   ``progress_label`` into progress / no-progress / invalid; in a seeded random order a step is taken
   while its category has fewer than ``per_category`` steps and its trajectory has none yet (no
   trajectory is reused).
2. **Donors**: for each evaluation step, ``donors`` post-action observations (``obs_next``) drawn without
   replacement from the steps of *other* trajectories of the same checkpoint whose action has the same
   ``operator``, as the appendix samples them (``--donor-text any``). A donor may then read exactly like
   the step's own o_{k+1} (an invalid step often gets "Nothing happens." back); ``--donor-text differ``
   draws only donors whose text differs, so that every donor is a real swap. A step with fewer candidates
   is reported (``insufficient_donors``), never silently dropped.
3. **Scores** with the checkpoint's own actor weights (:mod:`rescoring.rescore`): realized
   e = log pi_F - log pi_A; swapped e_j = log pi_{F, o_{k+1} <- donor j} - log pi_A, where only o_{k+1} is
   replaced (g(a_{k+1}), o_{k+2}, the response and the Ablated view unchanged). Step scores
   S_real = mean_t |e_t| and S_swap = (1/J) sum_j mean_t |e_{j,t}|.
4. **AUROC** of progress (positive) against invalid steps, no-progress excluded, a higher score predicting
   progress (the paper does not say which class a larger |e| predicts; ``--higher invalid`` flips it), for
   S_real and S_swap, with trajectory-cluster bootstrap intervals on the same resamples, pooled over the
   checkpoints and per checkpoint.

Command::

    python -m rescoring.swap --run DIR [--ckpt-steps 10,50,100,150] [--donors 5] [--per-category 40]
        [--donor-text any|differ] [--model PATH] [--device cpu|cuda] [--dtype bfloat16] [--out DIR] [--n-boot 1000] [--seed 0] [--json]

Writes ``swap.json`` (the result below) and ``swap_steps.csv`` (every evaluation step with its donors'
count and both scores) to ``--out`` (default ``DIR/swap``). Until then each checkpoint's scores are kept in
``--out``'s ``.scores/`` (:mod:`rescoring.score_cache`): the same command run again after a stop scores only the
checkpoints not scored yet.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from diagnostics.bootstrap import bootstrap_auroc, paired_delta_auroc
from diagnostics.load import DiagnosticsError
from diagnostics.options import show_progress
from rescoring.rescore import (Checkpoint, Rescorer, check_bootstrap, check_out, check_weights_flags,
                               check_scorer_tokenizer, checkpoint_rescorers, parse_steps, rescoring_entry_point,
                               rescoring_parser, run_checkpoints, run_label, stored_residual_gap, swapped_record,
                               OWN_WEIGHTS, weights_label)
from diagnostics.stats import DegenerateInputWarning
from rescoring.score_cache import SCORES_FOLDER, ScoreCache
from ocsd.cli import emit, format_table, output_folder, write_json
from ocsd.records import PROGRESS_LABELS
from ocsd.replay.stored import stored_records
from ocsd.replay.views import ReplayView, StepRecord, get_view

__all__ = ["ORIENTATION", "SwapPlan", "SwapScores", "assign_donors", "main", "orientation_class", "pooled_statistics",
           "select_targets", "swap_analysis", "swap_plan", "swap_scores"]

CATEGORIES = PROGRESS_LABELS  # progress, no_progress, invalid


def select_targets(steps: pd.DataFrame, per_category: int, rng: np.random.Generator) -> pd.DataFrame:
    """Evaluation steps of one checkpoint: at most ``per_category`` selected scored steps per
    ``progress_label``, at most one per trajectory, taken in a random order.

    Returns
    -------
    pandas.DataFrame
        The chosen rows of ``steps`` in the order they were taken, with a ``category`` column.
    """
    pool = steps[steps["selected"].to_numpy(bool) & steps["scored"].to_numpy(bool)]
    order = rng.permutation(len(pool))
    counts = {c: 0 for c in CATEGORIES}
    used: set[str] = set()
    taken = []
    for i in order:
        row = pool.iloc[int(i)]
        category = str(row["progress_label"])
        if counts[category] >= per_category or row["traj_uid"] in used:
            continue
        counts[category] += 1
        used.add(row["traj_uid"])
        taken.append(int(i))
    out = pool.iloc[taken].copy()
    out["category"] = out["progress_label"].astype(str)
    return out.reset_index(drop=True)


def assign_donors(steps: pd.DataFrame, targets: pd.DataFrame, n_donors: int, rng: np.random.Generator, *,
                  same_text: bool = True) -> tuple[dict[tuple[str, int], list[str]], dict[tuple[str, int], int]]:
    """Donor observations of each target step.

    Candidates of a target are the steps of ``steps`` (every step of the checkpoint) in another trajectory
    with the same ``operator`` (and, with ``same_text=False``, an ``obs_next`` whose text is not the
    target's own); ``n_donors`` of them are drawn without replacement.

    Returns
    -------
    donors : dict
        ``(traj_uid, step_idx) -> [obs_next of each donor]`` for targets with enough candidates.
    short : dict
        ``(traj_uid, step_idx) -> number of candidates`` for the others.
    """
    has_obs = steps[steps["obs_next"].notna()]
    by_operator = {op: rows for op, rows in has_obs.groupby("operator", sort=False)}
    donors, short = {}, {}
    for row in targets.itertuples(index=False):
        key = (str(row.traj_uid), int(row.step_idx))
        rows = by_operator.get(row.operator)
        if rows is None:
            short[key] = 0
            continue
        own = row.obs_next
        ok = (rows["traj_uid"] != row.traj_uid).to_numpy()
        if not same_text:
            ok = ok & (rows["obs_next"] != own).to_numpy()
        candidates = rows["obs_next"].to_numpy(object)[ok]
        if len(candidates) < n_donors:
            short[key] = int(len(candidates))
            continue
        pick = rng.choice(len(candidates), size=n_donors, replace=False)
        donors[key] = [str(candidates[i]) for i in pick]
    return donors, short


@dataclass
class SwapScores:
    """Realized and swapped step scores of the steps that could be scored.

    Attributes
    ----------
    keys : list of (traj_uid, step_idx)
    realized, swapped : numpy.ndarray
        S_real and S_swap of each step, shape (n,).
    residuals : dict
        ``key -> realized token residuals e`` (view minus twin), shape (T,) each.
    skipped : list of str
        Steps that could not be rendered, with the reason.
    shows_observation : bool
        Whether replacing o_{k+1} changed the view's prompt of any step (False: the view does not show it).
    """

    keys: list[tuple[str, int]]
    realized: np.ndarray
    swapped: np.ndarray
    residuals: dict
    skipped: list[str]
    shows_observation: bool = True


def swap_scores(rescorer: Rescorer, records: Mapping[tuple[str, int], StepRecord],
                donors: Mapping[tuple[str, int], Sequence[str]], *, view: ReplayView | str = "full",
                twin: ReplayView | str = "ablated", progress: bool = True) -> SwapScores:
    """S_real and S_swap (mean |view - twin| over tokens; swapped: averaged over the donors) of each record.

    The view and its twin are rendered together as the trainer renders them (one history, shortened to the
    prompt limit); each swapped view is the view on the rendered step with o_{k+1} replaced
    (:func:`rescoring.rescore.swapped_record`). All contexts of a step are scored in one item, so they share
    their common prefix.
    """
    view, twin = get_view(view), get_view(twin)
    keys = [k for k in records if k in donors]
    rendered, skipped = rescorer.render([records[k] for k in keys], [view, twin])
    by_key = {r.step.key: r for r in rendered}
    keys = [k for k in keys if f"{k[0]}:{k[1]}" in by_key]
    steps = [by_key[f"{k[0]}:{k[1]}"] for k in keys]
    n_donors = len(next(iter(donors.values()))) if donors else 0
    swapped = [swapped_record(r.step, d) for r, k in zip(steps, keys) for d in donors[k]]
    swapped_ids = rescorer.contexts(swapped, view) if swapped else []
    contexts, shows = [], False
    for i, r in enumerate(steps):
        ctx = {"view": r.contexts[view.name], "twin": r.contexts[twin.name]}
        ctx.update({f"swap{j}": swapped_ids[i * n_donors + j] for j in range(n_donors)})
        shows = shows or any(ctx[f"swap{j}"] != ctx["view"] for j in range(n_donors))
        contexts.append(ctx)
    scored = rescorer.score(contexts, [r.response_ids for r in steps], keys=[r.step.key for r in steps],
                            progress=progress, desc=f"swap scoring ({view.name})")
    realized, swap, residuals = [], [], {}
    for key, logp in zip(keys, scored):
        e = logp["view"].astype(np.float64) - logp["twin"].astype(np.float64)
        residuals[key] = e
        realized.append(float(np.abs(e).mean()))
        swap.append(float(np.mean([np.abs(logp[f"swap{j}"].astype(np.float64) - logp["twin"]).mean()
                                   for j in range(n_donors)])))
    return SwapScores(keys, np.asarray(realized), np.asarray(swap), residuals, skipped, shows)


def _auroc_pair(y: np.ndarray, realized: np.ndarray, swapped: np.ndarray, clusters: np.ndarray, *, n_boot: int,
                ci: float, seed: int) -> dict:
    nan = {"auroc": float("nan"), "ci_low": float("nan"), "ci_high": float("nan")}
    if y.size == 0 or y.all() or not y.any():
        return {"realized": dict(nan), "swapped": dict(nan)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateInputWarning)
        res = bootstrap_auroc(y, np.column_stack([realized, swapped]), clusters, n_boot=n_boot, ci=ci, seed=seed)
    return {name: r.as_dict("auroc") for name, r in zip(("realized", "swapped"), res)}


def _counts(frame: pd.DataFrame) -> dict:
    return {"n_steps": int(len(frame)), **{f"n_{c}": int((frame["category"] == c).sum()) for c in CATEGORIES}}


@dataclass
class SwapPlan:
    """The evaluation steps of one checkpoint and their donors (:func:`swap_plan`).

    Attributes
    ----------
    targets : pandas.DataFrame
        :func:`select_targets`' rows.
    donors : dict
        ``(traj_uid, step_idx) -> donor observations`` of the targets with enough of them.
    short : dict
        ``(traj_uid, step_idx) -> candidates`` of the others.
    records : dict
        ``(traj_uid, step_idx) -> StepRecord`` of every target (:func:`ocsd.replay.stored.stored_records`).
    """

    targets: pd.DataFrame
    donors: dict
    short: dict
    records: dict

    def category(self, key: tuple[str, int]) -> str:
        """The progress category of the target ``key``."""
        row = self.targets[(self.targets["traj_uid"] == key[0]) & (self.targets["step_idx"] == key[1])]
        return str(row["category"].iloc[0])


def swap_plan(ckpt: Checkpoint, *, donors: int, per_category: int, seed: int, same_text: bool = True) -> SwapPlan:
    """The targets and donors of a checkpoint, drawn by a generator seeded with ``[seed, global_step]``, so that
    ``rescoring.swap`` and ``rescoring.audit`` evaluate the same steps with the same donors."""
    rng = np.random.default_rng([seed, ckpt.global_step])
    targets = select_targets(ckpt.steps, per_category, rng)
    donor_obs, short = assign_donors(ckpt.steps, targets, donors, rng, same_text=same_text)
    keys = [(str(u), int(k)) for u, k in zip(targets["traj_uid"], targets["step_idx"])]
    records = stored_records(ckpt.steps, ckpt.tokens, ckpt.meta["env"], keys=keys,
                             where=str(ckpt.folder / "replay" / "steps.parquet"))
    return SwapPlan(targets, donor_obs, short, records)


def checkpoint_swap(ckpt: Checkpoint, rescorer: Rescorer, *, donors: int, per_category: int, seed: int,
                    same_text: bool = True, progress: bool = True) -> tuple[pd.DataFrame, list[dict], list[str], float]:
    """One checkpoint: targets, donors (:func:`swap_plan`) and the Full view's realized and swapped scores.

    Returns
    -------
    steps : pandas.DataFrame
        Scored evaluation steps: ``global_step, checkpoint, traj_uid, step_idx, category, operator,
        S_realized, S_swapped``.
    short : list of dict
        Targets without enough donors: ``global_step, traj_uid, step_idx, category, available``.
    skipped : list of str
        Targets that could not be rendered.
    gap : float
        :func:`rescoring.rescore.stored_residual_gap` of the re-scored realized residuals.
    """
    plan = swap_plan(ckpt, donors=donors, per_category=per_category, seed=seed, same_text=same_text)
    scores = swap_scores(rescorer, plan.records, plan.donors, progress=progress)
    info = plan.targets.set_index(["traj_uid", "step_idx"])
    rows = [{"global_step": ckpt.global_step, "checkpoint": ckpt.name, "traj_uid": u, "step_idx": k,
             "category": info.loc[(u, k), "category"], "operator": info.loc[(u, k), "operator"],
             "S_realized": r, "S_swapped": s} for (u, k), r, s in zip(scores.keys, scores.realized, scores.swapped)]
    short_rows = [{"global_step": ckpt.global_step, "traj_uid": u, "step_idx": k,
                   "category": str(info.loc[(u, k), "category"]), "available": n} for (u, k), n in plan.short.items()]
    columns = ["global_step", "checkpoint", "traj_uid", "step_idx", "category", "operator", "S_realized", "S_swapped"]
    return (pd.DataFrame(rows, columns=columns), short_rows, scores.skipped,
            stored_residual_gap(ckpt.tokens, scores.residuals))


def swap_auroc(steps: pd.DataFrame, *, higher: str = "progress", n_boot: int = 1000, ci: float = 0.95,
               seed: int = 0) -> dict:
    """AUROC (progress positive, invalid negative, no-progress excluded) of S_realized and S_swapped with
    trajectory-cluster bootstrap intervals; ``higher="invalid"`` scores with the negated values."""
    binary, y, clusters = _binary(steps)
    sign = 1.0 if higher == "progress" else -1.0
    return _auroc_pair(y, sign * binary["S_realized"].to_numpy(float), sign * binary["S_swapped"].to_numpy(float),
                       clusters, n_boot=n_boot, ci=ci, seed=seed)


def swap_drop(steps: pd.DataFrame, *, higher: str = "progress", n_boot: int = 1000, ci: float = 0.95,
              seed: int = 0) -> dict:
    """AUROC(S_realized) - AUROC(S_swapped) on the same steps, with a paired trajectory-cluster bootstrap
    interval: ``{"delta", "ci_low", "ci_high"}`` (nan without both classes)."""
    binary, y, clusters = _binary(steps)
    sign = 1.0 if higher == "progress" else -1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateInputWarning)
        res = paired_delta_auroc(y, sign * binary["S_realized"].to_numpy(float), sign * binary["S_swapped"].to_numpy(float),
                                 clusters, n_boot=n_boot, ci=ci, seed=seed)
    return res.as_dict("delta")


def _binary(steps: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Progress and invalid steps, their labels (progress = 1) and trajectory clusters."""
    binary = steps[steps["category"].isin(["progress", "invalid"])]
    clusters = pd.factorize(binary["checkpoint"].astype(str) + "|" + binary["traj_uid"].astype(str))[0]
    return binary, (binary["category"] == "progress").to_numpy(), clusters


ORIENTATION = "higher mean |e| predicts {}"
"""``swap.json``'s ``orientation``, formatted with ``higher`` (``progress`` or ``invalid``)."""


def orientation_class(orientation: str) -> str:
    """The ``higher`` class a ``swap.json`` ``orientation`` names (the inverse of :data:`ORIENTATION`).

    Raises
    ------
    DiagnosticsError
        When ``orientation`` is not :data:`ORIENTATION` of ``progress`` or ``invalid``.
    """
    for higher in ("progress", "invalid"):
        if orientation == ORIENTATION.format(higher):
            return higher
    raise DiagnosticsError(f"orientation {orientation!r} is not {ORIENTATION.format('progress')!r} or "
                           f"{ORIENTATION.format('invalid')!r}")


def pooled_statistics(steps: pd.DataFrame, *, higher: str = "progress", n_boot: int = 1000, ci: float = 0.95,
                      seed: int = 0) -> dict:
    """The realized and swapped AUROCs, their paired ``drop``, the category counts and ``n_trajectories`` of all
    ``steps`` together (trajectories are ``checkpoint`` and ``traj_uid``): the pooled keys of ``swap.json``."""
    return {**swap_auroc(steps, higher=higher, n_boot=n_boot, ci=ci, seed=seed),
            "drop": swap_drop(steps, higher=higher, n_boot=n_boot, ci=ci, seed=seed), **_counts(steps),
            "n_trajectories": int(steps.groupby(["checkpoint", "traj_uid"]).ngroups)}


def swap_analysis(run: str | Path, *, ckpt_steps: Sequence[int] | None = None, donors: int = 5,
                  per_category: int = 40, model: str | None = None, device: str | None = None,
                  dtype: str | None = None, higher: str = "progress", same_text: bool = True, n_boot: int = 1000,
                  ci: float = 0.95, seed: int = 0, progress: bool = True,
                  score_cache: str | Path | None = None) -> tuple[dict, pd.DataFrame]:
    """The observation-swap analysis of a run (see the module docstring); with ``score_cache``, a folder that keeps
    each checkpoint's scores (:class:`rescoring.score_cache.ScoreCache`), an analysis stopped after some
    checkpoints scores only the others when run again.

    Returns
    -------
    result : dict
        ``{"realized": {auroc, ci_low, ci_high}, "swapped": {...}, "drop": {delta, ci_low, ci_high} (realized
        minus swapped, paired), "n_steps", "n_progress", "n_no_progress",
        "n_invalid", "n_trajectories", "per_checkpoint": [...], "insufficient_donors": [...],
        "unrendered": [...], ...}`` (the settings too).
    steps : pandas.DataFrame
        Every scored evaluation step (:func:`checkpoint_swap`).
    """
    if donors < 1 or per_category < 1:
        raise DiagnosticsError(f"--donors and --per-category must be >= 1, got {donors} and {per_category}")
    if higher not in ("progress", "invalid"):
        raise DiagnosticsError(f"--higher must be 'progress' or 'invalid', got {higher!r}")
    check_scorer_tokenizer(run, model)
    ckpts = run_checkpoints(run, ckpt_steps, model=model)
    frames, short, unrendered, per_ckpt = [], [], [], []
    cache = ScoreCache(score_cache) if score_cache is not None else None
    for ckpt, rescorer in checkpoint_rescorers(run, ckpts, device=device, dtype=dtype, cache=cache):
        frame, ck_short, ck_skipped, gap = checkpoint_swap(ckpt, rescorer, donors=donors, per_category=per_category,
                                                           seed=seed, same_text=same_text, progress=progress)
        frames.append(frame)
        short += ck_short
        unrendered += [f"{ckpt.name}: {reason}" for reason in ck_skipped]
        per_ckpt.append({"global_step": ckpt.global_step, "checkpoint": ckpt.name,
                         "weights": weights_label(ckpt, model), **_counts(frame), "n_insufficient_donors": len(ck_short),
                         **swap_auroc(frame, higher=higher, n_boot=n_boot, ci=ci, seed=seed),
                         "rescored_max_abs_diff": gap})
    steps = pd.concat(frames, ignore_index=True)
    result = {**pooled_statistics(steps, higher=higher, n_boot=n_boot, ci=ci, seed=seed),
              "n_insufficient_donors": len(short), "n_boot": n_boot, "ci": ci, "donors": donors,
              "per_category": per_category, "donor_text": "any" if same_text else "differ", "seed": seed,
              "run": run_label(run), "model": OWN_WEIGHTS if model is None else model, "device": rescorer.device,
              "dtype": rescorer.dtype,
              "checkpoints": [c.global_step for c in ckpts],
              "orientation": ORIENTATION.format(higher), "per_checkpoint": per_ckpt,
              "insufficient_donors": short, "unrendered": unrendered}
    return result, steps


def table(result: dict) -> str:
    """Plain-text rendering of :func:`swap_analysis`'s result."""
    rows = [[scope, r["n_progress"], r["n_invalid"], *(r[k][f] for k in ("realized", "swapped")
                                                        for f in ("auroc", "ci_low", "ci_high"))]
            for scope, r in [("pooled", result)] + [(p["checkpoint"], p) for p in result["per_checkpoint"]]]
    ci = f"{result['ci']:.0%}"
    title = (f"Observation swap: AUROC of mean |e| for progress vs invalid steps ({result['orientation']}); "
             f"{result['donors']} donors per step, {result['n_insufficient_donors']} step(s) without enough donors")
    return format_table(["checkpoint", "progress", "invalid", "realized", f"{ci} low", f"{ci} high", "swapped",
                         f"{ci} low", f"{ci} high"], rows, title=title)


def write_outputs(result: dict, steps: pd.DataFrame, out: str | Path) -> dict[str, str]:
    """Write ``swap.json`` and ``swap_steps.csv`` to ``out``; returns their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = {"json": str(out / "swap.json"), "steps": str(out / "swap_steps.csv")}
    write_json(files["json"], result)
    steps.to_csv(files["steps"], index=False)
    return files


def _parser() -> argparse.ArgumentParser:
    p = rescoring_parser("rescoring.swap", __doc__.split("\n\n")[0],
                         ckpt_help="global steps of the checkpoints (default: the paper's 10,50,100,150 that exist, "
                                   "else all)")
    p.add_argument("--higher", choices=("progress", "invalid"), default="progress",
                   help="which class a larger mean |e| predicts in the AUROC (default progress)")
    p.add_argument("--out", type=output_folder, default=None, help="output folder (default RUN/swap)")
    return p


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    check_bootstrap(args)
    check_weights_flags(args)
    out = check_out(args.out or Path(args.run) / "swap", "--out" if args.out else "--out (default RUN/swap)")
    result, steps = swap_analysis(args.run, ckpt_steps=parse_steps(args.ckpt_steps), donors=args.donors,
                                  per_category=args.per_category, model=args.model, device=args.device,
                                  dtype=args.dtype, higher=args.higher, same_text=args.donor_text == "any",
                                  n_boot=args.n_boot, ci=args.ci,
                                  seed=args.seed, progress=show_progress(args), score_cache=out / SCORES_FOLDER)
    files = write_outputs(result, steps, out)
    shutil.rmtree(out / SCORES_FOLDER, ignore_errors=True)  # kept only until the results are written
    if result["insufficient_donors"]:
        print(f"warning: {len(result['insufficient_donors'])} evaluation step(s) had fewer than {args.donors} donor "
              f"observations and are not scored; they are listed in {files['json']} (insufficient_donors)",
              file=sys.stderr)
    if result["unrendered"]:
        print(f"warning: {len(result['unrendered'])} evaluation step(s) could not be rendered: "
              f"{result['unrendered'][0]}", file=sys.stderr)
    emit(args.json, result, table(result) + f"\n\nwrote {files['json']} and {files['steps']}")
    return 0


main = rescoring_entry_point(_main, "rescoring.swap")


if __name__ == "__main__":
    sys.exit(main())
