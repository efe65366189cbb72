"""Audit of a replay-view design: is it more observation-specific than Full?

A researcher's new view (any :class:`ocsd.replay.views.ReplayView`, referenced as ``module:Class``) is paired
with its Observation-Ablated twin (the view's ``ablated_twin`` attribute, ``--twin``, default ``ablated``), and
the stored selected steps of a run are re-scored under student, Full, Observation-Ablated, the view and its twin
with each checkpoint's own weights (:mod:`rescoring.rescore`). The paper's diagnostic battery then runs twice
on the same steps, side by side: on the baseline (Full and Ablated, ``--baseline``) and on the design, where
the design's signals are

* support   view - student        (the design's delta_F),
* ablated   twin - student        (its delta_A),
* residual  view - twin           (its e).

Before scoring, every step is checked for structural matching: the view and its twin must render the same
token ids outside observation segments (segment-structured views, :class:`ocsd.replay.views.TemplateView`);
views that only return ids cannot be checked and the report says so.

The report answers, point by point, whether the design is more observation-specific than the baseline:

1. structurally matched to its twin;
2. feedback AUROC of the residual, design minus baseline (paired trajectory-cluster bootstrap);
3. the residual's gain over its own support (raw Delta AUROC), design against baseline;
4. mean D over the environment-facing roles (Action, Entity/State), design against baseline;
5. observation-swap sensitivity (:mod:`rescoring.swap`): the drop of the residual's AUROC when o_{k+1} is
   swapped, design against baseline (not applicable when the view does not show o_{k+1});
6. word tails: Jaccard overlap of the residual+ and support+ top words (lower: the residual picks other
   words than its support).

The verdicts are :mod:`diagnostics.verdicts`: yes or no only where the intervals separate the two.

Command::

    python -m rescoring.audit --run DIR --view module:Class [--twin NAME] [--baseline full]
        [--ckpt-steps N,N] [--donors 5] [--per-category 40] [--donor-text any|differ] [--model PATH] [--device cpu] [--out DIR]
        [--n-boot 1000] [--seed 0] [--json]

Writes ``audit.md``, ``audit.json``, the design's tail words (``tails_top_words.csv``) and every audited step's
signals on both sides (``audit_steps.csv``: run, checkpoint, trajectory, step, feedback label, then ``baseline_`` and
``design_`` ablated, full and residual step scores) to ``--out`` (default ``DIR/audit_<view name>``); ``python -m
figures.panels OUT/audit.json`` draws ``audit.png`` and the design's word clouds into that folder, and ``python -m
rescoring.audit_pool`` pools the steps of several audits (runs, checkpoints) into one comparison. Until the audit is
written each checkpoint's scores are kept in ``--out``'s ``.scores/`` (:mod:`rescoring.score_cache`): the same
command run again after a stop (an error, Ctrl-C) scores only the checkpoints not scored yet.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from diagnostics import tails
from diagnostics.bootstrap import paired_delta_auroc
from diagnostics.load import SIGNALS, DiagnosticsError, from_replay
from diagnostics.options import show_progress
from rescoring.rescore import (Checkpoint, Rescorer, check_bootstrap, check_out, check_weights_flags,
                               check_scorer_tokenizer, checkpoint_rescorers, parse_steps, rescoring_entry_point,
                               rescoring_parser, run_checkpoints, run_label, weights_label)
from diagnostics.stats import DegenerateInputWarning
from diagnostics.verdicts import audit_points
from rescoring.score_cache import SCORES_FOLDER, ScoreCache
from rescoring.swap import swap_auroc, swap_drop, swap_plan, swap_scores
from ocsd.cli import emit, fmt, format_table, output_folder, positive_int, write_json
from ocsd.records import CHECKPOINT_COLUMN
from ocsd.replay.render import RenderedStep
from ocsd.replay.stored import stored_records
from ocsd.replay.views import ABLATED_OBSERVATION, BLANK, ReplayView, get_view, load_view

__all__ = ["STEPS_FILE", "STEP_COLUMNS", "SIDES", "Design", "audit", "main", "step_scores", "structural_match"]

SIDES = ("baseline", "design")
"""The two sides of an audit: the baseline pair of views and the design under audit."""

STEP_COLUMNS = ("run", "global_step", "traj_uid", "step_idx", "feedback_label",
                *(f"{side}_{signal}" for side in SIDES for signal in SIGNALS))
"""The columns of ``audit_steps.csv``, one row per audited step."""

STEPS_FILE = "audit_steps.csv"

@dataclass(frozen=True)
class Design:
    """A view and its Observation-Ablated twin."""

    view: ReplayView
    twin: ReplayView

    @classmethod
    def of(cls, view: str | ReplayView, twin: str | ReplayView | None = None) -> "Design":
        """``view`` (a name, ``module:Class`` or object) with ``twin``, else the view's ``ablated_twin``."""
        try:
            v = get_view(view)
            t = get_view(twin if twin is not None else getattr(v, "ablated_twin", "ablated"))
        except ValueError as exc:
            raise DiagnosticsError(str(exc)) from None
        if v.name == t.name:
            raise DiagnosticsError(f"the view and its twin are both named {v.name!r}: give the twin with --twin")
        return cls(v, t)


# ----------------------------------------------------------------------------------------------
# structural matching
# ----------------------------------------------------------------------------------------------


def _outside_observations(rendered) -> list[tuple[str, tuple[int, ...]]]:
    return [(s.kind, tuple(s.ids)) for s in rendered.segments if s.kind != "observation"]


def structural_match(steps: Sequence[RenderedStep], design: Design) -> dict:
    """Whether the view and its twin differ only inside observation segments, step by step.

    Returns
    -------
    dict
        ``{"checked", "matched", "method": "segments"|"unavailable", "first_mismatch": str|None,
        "shows_observations": bool|None}``; ``matched`` is None when the view returns ids only.
    """
    v, t = design.view.name, design.twin.name
    if not steps or any(s.views.get(v) is None or s.views.get(t) is None for s in steps):
        return {"checked": len(steps), "matched": None, "method": "unavailable", "first_mismatch": None,
                "shows_observations": None,
                "note": "the view or its twin returns token ids only (no segments): observation spans are unknown"}
    matched, first = 0, None
    shows = False
    for s in steps:
        a, b = _outside_observations(s.views[v]), _outside_observations(s.views[t])
        shows = shows or any(seg.kind == "observation" and seg.text not in (
            ABLATED_OBSERVATION, ABLATED_OBSERVATION + BLANK) for seg in s.views[v].segments)
        if a == b:
            matched += 1
        elif first is None:
            kinds = [k for k, _ in a]
            where = next((f"segment {i} ({ka} in the view, {kb} in the twin)"
                          for i, ((ka, ia), (kb, ib)) in enumerate(zip(a, b)) if (ka, ia) != (kb, ib)),
                         f"the number of segments ({len(a)} vs {len(b)}: {kinds} vs {[k for k, _ in b]})")
            first = f"step {s.step.key}: {where} outside the observations differs"
    return {"checked": len(steps), "matched": matched, "method": "segments", "first_mismatch": first,
            "shows_observations": shows}


# ----------------------------------------------------------------------------------------------
# re-scoring and the battery
# ----------------------------------------------------------------------------------------------


def _rescore_checkpoint(ckpt: Checkpoint, rescorer: Rescorer, baseline: Design, design: Design, *,
                        progress: bool) -> tuple[pd.DataFrame, pd.DataFrame, dict, list[str]]:
    """Token log-probs of the checkpoint's selected scored steps under the five views.

    Returns ``(steps, tokens, structure, skipped)``; tokens carry ``logp_student`` and ``logp_<pair>_<side>``
    for pair in (base, design) and side in (view, twin).
    """
    from ocsd.replay.views import StudentView

    sel = ckpt.steps[ckpt.steps["selected"].to_numpy(bool) & ckpt.steps["scored"].to_numpy(bool)]
    keys = [(str(u), int(k)) for u, k in zip(sel["traj_uid"], sel["step_idx"])]
    records = stored_records(ckpt.steps, ckpt.tokens, ckpt.meta["env"], keys=keys,
                             where=str(ckpt.folder / "replay" / "steps.parquet"))
    ordered = [records[k] for k in keys]
    base_r, skipped_b = rescorer.render(ordered, [baseline.view, baseline.twin])
    design_r, skipped_d = rescorer.render(ordered, [design.view, design.twin])
    student_r, skipped_s = rescorer.render(ordered, [StudentView()])
    structure = structural_match(design_r, design)
    by = [{r.step.key: r for r in group} for group in (base_r, design_r, student_r)]
    kept = [k for k in keys if all(f"{k[0]}:{k[1]}" in group for group in by)]
    contexts, responses = [], []
    for u, k in kept:
        b, d, s = (group[f"{u}:{k}"] for group in by)
        contexts.append({"student": s.contexts["student"], "base_view": b.contexts[baseline.view.name],
                         "base_twin": b.contexts[baseline.twin.name], "design_view": d.contexts[design.view.name],
                         "design_twin": d.contexts[design.twin.name]})
        responses.append(b.response_ids)
    scored = rescorer.score(contexts, responses, keys=[f"{u}:{k}" for u, k in kept], progress=progress,
                            desc=f"audit scoring {ckpt.name}")
    step_rows = sel.set_index(["traj_uid", "step_idx"]).loc[kept].reset_index()
    tok = ckpt.tokens.set_index(["traj_uid", "step_idx"])
    frames = []
    for (u, k), logp in zip(kept, scored):
        rows = tok.loc[(u, k)].sort_values("token_idx")
        frames.append(pd.DataFrame({"global_step": ckpt.global_step, "traj_uid": u, "step_idx": k,
                                    "token_idx": rows["token_idx"].to_numpy(), "token": rows["token"].to_numpy(),
                                    **{f"logp_{name}": values for name, values in logp.items()}}))
    tokens = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    skipped = sorted(set(skipped_b) | set(skipped_d) | set(skipped_s))
    return step_rows, tokens, structure, skipped


def _diag_data(steps: pd.DataFrame, tokens: pd.DataFrame, env: str, pair: str, total_steps: int):
    tok = tokens.rename(columns={f"logp_{pair}_view": "logp_full", f"logp_{pair}_twin": "logp_ablated"})
    return from_replay(steps, tok, [{"env": env}], total_steps=total_steps)


def step_scores(data: dict, run: str) -> pd.DataFrame:
    """Every audited step's signals on both sides, one row per step (the columns :data:`STEP_COLUMNS`).

    Parameters
    ----------
    data : dict
        ``{"baseline", "design"}`` -> :class:`diagnostics.load.DiagData` of the same steps.
    run : str
        The run's label, written in every row.
    """
    keys = ["global_step", "traj_uid", "step_idx", "feedback_label"]
    base, design = (data[side].steps.reset_index(drop=True) for side in SIDES)
    if not base[[*keys, "ckpt"]].equals(design[[*keys, "ckpt"]]):
        raise AssertionError("baseline and design steps differ")  # both come from the same step table
    columns = {f"{side}_{signal}": frame[f"S_{signal}"].to_numpy()
               for side, frame in zip(SIDES, (base, design)) for signal in SIGNALS}
    table = pd.DataFrame({"run": run, **{k: base[k].to_numpy() for k in keys}, **columns})
    return table[list(STEP_COLUMNS)]


def audit(run: str | Path, view: str | ReplayView, *, twin: str | ReplayView | None = None,
          baseline: str = "full", ckpt_steps: Sequence[int] | None = None, donors: int = 5, per_category: int = 40,
          swap: bool = True, same_text: bool = True, model: str | None = None, device: str | None = None,
          dtype: str | None = None, n_boot: int = 1000, ci: float = 0.95, seed: int = 0, top: int = 30,
          progress: bool = True, score_cache: str | Path | None = None) -> tuple[dict, dict, pd.DataFrame]:
    """Audit ``view`` against ``baseline`` on the selected steps of ``run`` (module docstring).

    Parameters
    ----------
    ckpt_steps : sequence of int, optional
        Checkpoints to use (default: every complete checkpoint of the run).
    score_cache : str or path-like, optional
        A folder for the scores of each checkpoint (:class:`rescoring.score_cache.ScoreCache`): an audit stopped
        after some checkpoints were scored scores only the others when run again.

    Returns
    -------
    result : dict
        ``{"view", "twin", "baseline", "structure", "baseline": battery, "design": battery, "residual_gain",
        "support_gain", "swap", "points", "n_steps", "unrendered", ...}``; a battery is
        :func:`diagnostics.report.diagnose`'s output.
    rates : dict
        ``{"baseline", "design"}`` -> tail-rate tables (for the word clouds).
    steps : pandas.DataFrame
        Every audited step's signals on both sides (:func:`step_scores`).
    """
    base, design = Design.of(baseline), Design.of(view, twin)
    check_scorer_tokenizer(run, model)
    ckpts = run_checkpoints(run, ckpt_steps, model=model, default="all")
    env = str(ckpts[0].meta["env"])
    step_frames, token_frames, unrendered = [], [], []
    structure = {"checked": 0, "matched": 0, "method": "segments", "first_mismatch": None, "shows_observations": False}
    swap_frames: dict[str, list[pd.DataFrame]] = {"baseline": [], "design": []}
    shows = {"baseline": False, "design": False}
    short = 0
    cache = ScoreCache(score_cache) if score_cache is not None else None
    for ckpt, rescorer in checkpoint_rescorers(run, ckpts, device=device, dtype=dtype, cache=cache):
        st, tok, ck_structure, skipped = _rescore_checkpoint(ckpt, rescorer, base, design, progress=progress)
        structure = _merge_structure(structure, ck_structure)
        unrendered += [f"{ckpt.name}: {reason}" for reason in skipped]
        step_frames.append(st.assign(**{CHECKPOINT_COLUMN: str(ckpt.folder)}))
        token_frames.append(tok.assign(**{CHECKPOINT_COLUMN: str(ckpt.folder)}))
        if swap:  # the targets and donors of rescoring.swap
            plan = swap_plan(ckpt, donors=donors, per_category=per_category, seed=seed, same_text=same_text)
            short += len(plan.short)
            for side, pair in (("baseline", base), ("design", design)):
                frame, shown = _swap_frame(ckpt, plan, rescorer, pair, progress=progress)
                swap_frames[side].append(frame)
                shows[side] = shows[side] or shown
        last = rescorer
    steps, tokens = pd.concat(step_frames, ignore_index=True), pd.concat(token_frames, ignore_index=True)
    if tokens.empty:
        raise DiagnosticsError(f"{run}: no selected step could be rendered under every view ({unrendered[:1]})")
    total = int(max(c.global_step for c in ckpts))
    data = {side: _diag_data(steps, tokens, env, pair, total) for side, pair in (("baseline", "base"),
                                                                                ("design", "design"))}
    table = step_scores(data, run_label(run))  # also asserts that both sides hold the same steps, in one order
    battery, rates, gains = _batteries(data, n_boot=n_boot, ci=ci, seed=seed, top=top)
    result = {"run": run_label(run), "view": design.view.name, "twin": design.twin.name,
              "baseline_view": base.view.name, "baseline_twin": base.twin.name, "checkpoints": [c.global_step for c in ckpts],
              "weights": sorted({weights_label(c, model) for c in ckpts}), "device": last.device,
              "dtype": last.dtype,
              "n_steps": int(len(data["baseline"].steps)), "n_boot": n_boot, "ci": ci, "seed": seed,
              "structure": structure, "baseline": battery["baseline"], "design": battery["design"], **gains,
              "unrendered": unrendered}
    if swap:
        result["swap"] = {"donors": donors, "per_category": per_category, "n_insufficient_donors": short,
                          "donor_text": "any" if same_text else "differ"}
        for side in ("baseline", "design"):
            frame = pd.concat(swap_frames[side], ignore_index=True)
            result["swap"][side] = {**swap_auroc(frame, n_boot=n_boot, ci=ci, seed=seed),
                                    "drop": swap_drop(frame, n_boot=n_boot, ci=ci, seed=seed),
                                    "n_steps": int(len(frame)), "shows_observation": shows[side]}
    result["points"] = audit_points(result)
    return result, rates, table


def _swap_frame(ckpt: Checkpoint, plan, rescorer: Rescorer, pair: Design, *, progress: bool
                ) -> tuple[pd.DataFrame, bool]:
    """The realized and swapped scores of one side's pair of views on a checkpoint's swap plan, and whether its view
    shows o_(k+1)."""
    sc = swap_scores(rescorer, plan.records, plan.donors, view=pair.view, twin=pair.twin, progress=progress)
    frame = pd.DataFrame({"checkpoint": ckpt.name, "traj_uid": [u for u, _ in sc.keys],
                          "step_idx": [k for _, k in sc.keys], "category": [plan.category(k) for k in sc.keys],
                          "S_realized": sc.realized, "S_swapped": sc.swapped})
    return frame, sc.shows_observation


def _batteries(data: dict, *, n_boot: int, ci: float, seed: int, top: int) -> tuple[dict, dict, dict]:
    """The diagnosis battery (:func:`diagnostics.report.diagnose`) and tail rates of each side, and the paired gains
    of the design over the baseline."""
    from diagnostics.report import diagnose

    battery, rates = {}, {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateInputWarning)  # missing classes show as nan in the report
        for side in ("baseline", "design"):
            battery[side], rates[side] = diagnose(data[side], n_boot=n_boot, ci=ci, seed=seed, top=top,
                                                  progress=False)
            battery[side].pop("seconds")
        gains = _paired_gains(data["baseline"], data["design"], n_boot=n_boot, ci=ci, seed=seed)
    return battery, rates, gains


def _merge_structure(total: dict, part: dict) -> dict:
    if part["matched"] is None or total["matched"] is None:
        return {**part, "checked": total["checked"] + part["checked"], "matched": None}
    return {"checked": total["checked"] + part["checked"], "matched": total["matched"] + part["matched"],
            "method": "segments", "first_mismatch": total["first_mismatch"] or part["first_mismatch"],
            "shows_observations": bool(total["shows_observations"] or part["shows_observations"])}


def _paired_gains(base, design, *, n_boot: int, ci: float, seed: int) -> dict:
    """Design minus baseline AUROC of the residual and of the support, paired on the same labelled steps (the same
    rows on both sides, as :func:`step_scores` asserts)."""
    lb, ld = base.labelled(), design.labelled()
    y, clusters = lb["y"].to_numpy(bool), lb["cluster"].to_numpy()
    out = {}
    for name, column in (("residual_gain", "S_residual"), ("support_gain", "S_full")):
        res = paired_delta_auroc(y, ld[column].to_numpy(), lb[column].to_numpy(), clusters, n_boot=n_boot, ci=ci,
                                 seed=seed)
        out[name] = res.as_dict("delta")
    return out


# ----------------------------------------------------------------------------------------------
# report
# ----------------------------------------------------------------------------------------------


def _cell(value) -> str:
    """A point's value for a table: text as it is, ``-`` for none, numbers with three digits."""
    return value if isinstance(value, str) else "-" if value is None else fmt(value)


def _markdown(result: dict) -> str:
    pct = f"{result['ci']:.0%}"
    b, d = result["baseline"], result["design"]
    name = f"`{result['view']}` (twin `{result['twin']}`)"
    base = f"`{result['baseline_view']}` (twin `{result['baseline_twin']}`)"
    st = result["structure"]
    lines = [f"# Replay-view audit: {name} against {base}", "",
             f"Run `{result['run']}`, checkpoints {result['checkpoints']}, {result['n_steps']} selected steps re-scored "
             f"with each checkpoint's weights ({', '.join(result['weights'])}; {result['device']}, {result['dtype']}); "
             f"{result['n_boot']} trajectory-cluster resamples, {pct} percentile intervals.", "",
             "## Verdict, point by point", "", "| point | baseline | design | verdict | detail |",
             "|---|---|---|---|---|",
             *[f"| {p['point']} | {_cell(p['baseline'])} | {_cell(p['design'])} | **{p['verdict']}** | {p['detail']} |"
               for p in result["points"]], "",
             "## Structural matching", "",
             (f"{st['matched']} of {st['checked']} steps render the same token ids outside observation segments in "
              f"the view and its twin." if st["matched"] is not None else st.get("note", "not checked")) +
             (f" First mismatch: {st['first_mismatch']}." if st.get("first_mismatch") else ""), "",
             "## Feedback AUROC (valid vs invalid, ambiguous excluded)", "",
             f"| signal | baseline | {pct} CI | design | {pct} CI |", "|---|---|---|---|---|",
             *[f"| {sig} | {fmt(b['auroc']['signals'][sig]['auroc'])} | [{fmt(b['auroc']['signals'][sig]['ci_low'])}, "
               f"{fmt(b['auroc']['signals'][sig]['ci_high'])}] | {fmt(d['auroc']['signals'][sig]['auroc'])} | "
               f"[{fmt(d['auroc']['signals'][sig]['ci_low'])}, {fmt(d['auroc']['signals'][sig]['ci_high'])}] |"
               for sig in ("ablated", "full", "residual")], "",
             "Signals: `ablated` = twin - student, `full` = view - student (support), `residual` = view - twin. "
             f"Design - baseline, paired: residual {fmt(result['residual_gain']['delta'])} "
             f"[{fmt(result['residual_gain']['ci_low'])}, {fmt(result['residual_gain']['ci_high'])}], support "
             f"{fmt(result['support_gain']['delta'])} [{fmt(result['support_gain']['ci_low'])}, "
             f"{fmt(result['support_gain']['ci_high'])}].", "",
             "## Delta AUROC (residual - support)", "",
             "| setting | baseline | design |", "|---|---|---|",
             *[f"| {k} | {fmt(v['delta'])} [{fmt(v['ci_low'])}, {fmt(v['ci_high'])}] | {fmt(d['robustness'][k]['delta'])} "
               f"[{fmt(d['robustness'][k]['ci_low'])}, {fmt(d['robustness'][k]['ci_high'])}] |"
               for k, v in b["robustness"].items()], "",
             "## D per functional role", "", "| role | baseline | design |", "|---|---|---|",
             *[f"| {k} | {fmt(v['mean'])} [{fmt(v['ci_low'])}, {fmt(v['ci_high'])}] | "
               f"{fmt(d['dratio']['categories'][k]['mean'])} [{fmt(d['dratio']['categories'][k]['ci_low'])}, "
               f"{fmt(d['dratio']['categories'][k]['ci_high'])}] |" for k, v in b["dratio"]["categories"].items()], ""]
    sw = result.get("swap")
    if sw:
        lines += ["## Observation swap", "",
                  f"{sw['donors']} donors per step, at most {sw['per_category']} steps per category and checkpoint; "
                  f"{sw['n_insufficient_donors']} step(s) without enough donors are not scored.", "",
                  "| | realized | swapped | steps | shows o_(k+1) |", "|---|---|---|---|---|",
                  *[f"| {side} | {fmt(sw[side]['realized']['auroc'])} | {fmt(sw[side]['swapped']['auroc'])} | "
                    f"{sw[side]['n_steps']} | {'yes' if sw[side]['shows_observation'] else 'no'} |"
                    for side in ("baseline", "design")], ""]
    lines += ["## Word tails of the design", "", "| tail | top words |", "|---|---|",
              *[f"| {k} | {', '.join(w['word'] for w in v[:15])} |" for k, v in d["tails"]["top"].items()], "",
              "The pictures are drawn into this folder by `python -m figures.panels audit.json`.", "",
              "![audit](audit.png)", *[f"![{k}]({tails.cloud_file(k)})" for k in d["tails"]["clouds"]], ""]
    if result["unrendered"]:
        lines += [f"{len(result['unrendered'])} selected step(s) could not be rendered under every view and are left "
                  f"out of both sides: {result['unrendered'][0]}", ""]
    return "\n".join(lines)


def build_audit(run, view, out_dir, **kwargs) -> dict:
    """Run :func:`audit` and write ``audit.md``, ``audit.json``, the design's tail words (CSV) and the audited steps'
    signals (``audit_steps.csv``).

    Until they are written, the scores of each checkpoint are kept in ``out_dir/.scores/``: the same command run
    again after a stop scores only what was not scored yet (any change to the steps, views, weights or settings
    scores again). ``python -m figures.panels OUT/audit.json`` draws ``audit.png`` and the design's word clouds."""
    out_dir = Path(out_dir)
    kwargs.setdefault("score_cache", out_dir / SCORES_FOLDER)
    result, rates, steps = audit(run, view, **kwargs)
    out_dir.mkdir(parents=True, exist_ok=True)
    steps.to_csv(out_dir / STEPS_FILE, index=False)
    result["files"] = {"csv": str(tails.write_csv(rates["design"], out_dir, top=kwargs.get("top", 30))),
                       "steps": str(out_dir / STEPS_FILE)}
    (out_dir / "audit.md").write_text(_markdown(result))
    result["files"]["report"] = str(out_dir / "audit.md")
    write_json(out_dir / "audit.json", result)
    if kwargs["score_cache"] == out_dir / SCORES_FOLDER:
        shutil.rmtree(out_dir / SCORES_FOLDER, ignore_errors=True)
    return result


def table(result: dict) -> str:
    """The point-by-point verdict as plain text."""
    rows = [[p["point"], _cell(p["baseline"]), _cell(p["design"]), p["verdict"]] for p in result["points"]]
    return format_table(["point", "baseline", "design", "verdict"], rows,
                        title=f"Audit of {result['view']} (twin {result['twin']}) against {result['baseline_view']} "
                              f"on {result['n_steps']} steps of {result['run']}")


def _parser() -> argparse.ArgumentParser:
    p = rescoring_parser("rescoring.audit", __doc__.split("\n\n")[0],
                         ckpt_help="checkpoints (default: all of the run)")
    p.add_argument("--view", required=True, help="the view under audit: a built-in name or module:Class")
    p.add_argument("--twin", default=None, help="its Observation-Ablated twin (default: the view's ablated_twin, "
                                                "else ablated)")
    p.add_argument("--baseline", default="full", help="the view to compare with (default full, twin ablated)")
    p.add_argument("--no-swap", action="store_true", help="skip the observation-swap comparison")
    p.add_argument("--top", type=positive_int("--top"), default=30, help="top words per tail (30)")
    p.add_argument("--out", type=output_folder, default=None, help="output folder (default RUN/audit_<view>)")
    return p


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    check_bootstrap(args)
    check_weights_flags(args)
    try:
        view = load_view(args.view)
    except ValueError as exc:
        raise DiagnosticsError(f"--view: {exc}") from None
    out = check_out(args.out or Path(args.run) / f"audit_{view.name}",
                    "--out" if args.out else f"--out (default RUN/audit_{view.name})")
    result = build_audit(args.run, view, out, twin=args.twin, baseline=args.baseline,
                         ckpt_steps=parse_steps(args.ckpt_steps), donors=args.donors, per_category=args.per_category,
                         swap=not args.no_swap, same_text=args.donor_text == "any", model=args.model,
                         device=args.device, dtype=args.dtype,
                         n_boot=args.n_boot, ci=args.ci, seed=args.seed, top=args.top,
                         progress=show_progress(args))
    emit(args.json, result, table(result) + f"\n\nwrote {result['files']['report']}\n"
                                            f"pictures: python -m figures.panels {Path(out) / 'audit.json'}")
    return 0


main = rescoring_entry_point(_main, "rescoring.audit")


if __name__ == "__main__":
    sys.exit(main())
