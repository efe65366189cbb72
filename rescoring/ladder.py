"""The diagnosis across scorer models on the same steps: ``python -m rescoring.ladder``.

For every ``--model`` the stored steps of every ``--run`` (the checkpoints ``--ckpt-steps``) are scored again by that
model (:mod:`rescoring.rescore_run`, into ``OUT/<model>/<run>/``; a complete earlier re-scoring is reused, so a ladder
can be built over several sessions), then the whole battery runs on them:

- feedback AUROC of the Ablated, Full and residual step scores with trajectory-cluster intervals
  (:func:`diagnostics.auroc.feedback_auroc`);
- Delta AUROC (residual - Full) raw, standard, matched and per stage, paired
  (:func:`diagnostics.robustness.robustness`);
- the AUROCs within strata of evidence length and their paired difference (:func:`diagnostics.strata.strata_auroc`);
- D per functional role (:func:`diagnostics.dratio.dratio`) and the tails' top words (:func:`diagnostics.tails.tails`);
- the observation swap with the scorer's own weights (:func:`rescoring.swap.swap_analysis`; ``--no-swap`` skips it),
  whose scores are kept in ``OUT/<model>/<run>/swap/`` and reused like the re-scorings;
- between every two rungs, on the steps both hold, the paired differences of the AUROCs and of Delta AUROC (raw):
  whether the residual's gain over Full changes with the scorer (:func:`diagnostics.scorers.scorer_contrasts`).

Each is computed on the steps of all runs pooled (clusters are trajectories of a checkpoint of a run) and per run.
``--model stored`` adds the runs' own stored scores (the policy that generated the steps, on-policy) as a rung
without re-scoring and without the swap (which needs the checkpoints' weights). ``ladder.json`` holds every number;
``python -m figures.ladder OUT/ladder.json`` draws the AUROCs and the paired Delta AUROC against model size.

Command::

    python -m rescoring.ladder --run DIR [--run DIR ...] --model M [--model M ...] --out OUT [--ckpt-steps 1,10]
        [--device cuda] [--dtype bfloat16] [--no-swap] [--donors 5] [--per-category 40] [--n-boot 1000] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Sequence

import pandas as pd

from diagnostics import auroc, dratio, robustness, scorers, strata, tails
from diagnostics.load import DiagnosticsError, load
from diagnostics.options import add_bootstrap_options, show_progress
from diagnostics.stats import DegenerateInputWarning
from ocsd.cli import emit, fmt, format_table, output_folder, positive_int, write_json
from ocsd.records import checkpoint_dirs, read_run_info
from rescoring.rescore import check_bootstrap, check_weights_flags, parse_steps, rescoring_entry_point
from rescoring.rescore_run import rescore_run
from rescoring.swap import swap_analysis, swap_auroc, swap_drop, write_outputs

__all__ = ["STORED", "model_slug", "battery", "paired", "ladder", "table", "main"]

STORED = "stored"
"""The ``--model`` that stands for the runs' own stored scores."""


def model_slug(model: str) -> str:
    """A folder name for a model: its name, or the last parts of a folder path."""
    name = "_".join(Path(model).parts[-2:]) if ("/" in model or Path(model).is_dir()) else model
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "model"


def _complete(folder: Path, model: str, steps: Sequence[int] | None) -> bool:
    """Whether ``folder`` is a re-scoring of ``model`` holding every wanted checkpoint."""
    try:
        info = read_run_info(folder)
    except Exception:  # absent or unreadable: score again
        return False
    have = {s for s, p in checkpoint_dirs(folder) if (p / "replay" / "meta.json").is_file()}
    return info.get("scorer") == model and bool(have) and (steps is None or set(steps) <= have)


def _missing(run: Path, folder: Path, steps: Sequence[int] | None) -> list[int] | None:
    """The wanted checkpoints (``None``: all of the run's) that ``folder`` does not hold re-scored yet."""
    def complete(root: Path) -> set[int]:
        if not root.is_dir():
            return set()
        return {s for s, p in checkpoint_dirs(root) if (p / "replay" / "meta.json").is_file()}

    have = complete(folder)
    if not have:
        return None if steps is None else list(steps)
    return [s for s in (steps if steps is not None else sorted(complete(run))) if s not in have]


def _parameters(folder: Path) -> int | None:
    """The scorer's parameter count that :func:`rescoring.rescore_run.rescore_run` wrote into ``run.json``."""
    return read_run_info(folder).get("scorer_parameters")


def battery(paths: Sequence[Path], *, n_boot: int, ci: float, seed: int, top: int = 10) -> dict:
    """Every statistic of the ladder on the steps of ``paths`` pooled (module docstring).

    Returns
    -------
    dict
        ``{"auroc", "robustness", "strata", "dratio", "tails"}``, each its command's JSON (the tails' top ``top``
        words per tail and the overlaps only).
    """
    data = load(list(paths), properties=strata.PROPERTIES["evidence_words"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateInputWarning)  # a missing class shows as nan
        result = {"auroc": auroc.feedback_auroc(data, n_boot=n_boot, ci=ci, seed=seed),
                  "robustness": robustness.robustness(data, n_boot=n_boot, ci=ci, seed=seed),
                  "strata": strata.strata_auroc(data, "evidence_words", n_boot=n_boot, ci=ci, seed=seed),
                  "dratio": dratio.dratio(data, n_boot=n_boot, ci=ci, seed=seed)}
        words, _ = tails.tails(data, top=top)
    result["tails"] = {"top": {k: [w["word"] for w in v] for k, v in words["top"].items()},
                       "overlap": words["overlap"]}
    return result


def _swap_steps(folder: Path, model: str, steps, *, device, dtype, donors, per_category, seed,
                progress) -> pd.DataFrame:
    """The realized and swapped scores of a re-scored run's swap targets: computed with the scorer's weights and
    kept in ``FOLDER/swap/`` (``swap.json``, ``swap_steps.csv``), or read from there when an earlier ladder with the
    same settings wrote them (the statistics are computed again, the scores are not)."""
    out = folder / "swap"
    settings = {"model": model, "donors": donors, "per_category": per_category, "seed": seed,
                "checkpoints": sorted(steps) if steps else None}
    if (out / "swap.json").is_file() and (out / "swap_steps.csv").is_file():
        kept = json.loads((out / "swap.json").read_text())
        if kept.get("ladder_settings") == settings:
            return pd.read_csv(out / "swap_steps.csv", dtype={"traj_uid": str, "checkpoint": str})
    result, frame = swap_analysis(folder, ckpt_steps=steps, model=model, device=device, dtype=dtype, donors=donors,
                                  per_category=per_category, seed=seed, progress=progress)
    write_outputs({**result, "ladder_settings": settings}, frame, out)
    return frame


def _swap(folders: dict[str, Path], model: str, steps, *, device, dtype, donors, per_category, n_boot, ci, seed,
          progress) -> dict:
    """The observation swap of each re-scored run with the scorer's weights, and of all of them pooled."""
    per_run, frames = {}, []
    for run, folder in folders.items():
        frame = _swap_steps(folder, model, steps, device=device, dtype=dtype, donors=donors,
                            per_category=per_category, seed=seed, progress=progress)
        per_run[run] = {**swap_auroc(frame, n_boot=n_boot, ci=ci, seed=seed),
                        "drop": swap_drop(frame, n_boot=n_boot, ci=ci, seed=seed), "n_steps": int(len(frame))}
        frames.append(frame)  # its checkpoint names hold the run's folder: trajectories stay apart when pooled
    pooled = pd.concat(frames, ignore_index=True)
    return {**swap_auroc(pooled, n_boot=n_boot, ci=ci, seed=seed),
            "drop": swap_drop(pooled, n_boot=n_boot, ci=ci, seed=seed), "n_steps": int(len(pooled)),
            "per_run": per_run}


def _checkpoints(folder: Path, steps) -> list[Path]:
    """What the diagnostics load of a run or its re-scoring: the wanted checkpoints, or all of it."""
    return [folder / f"global_step_{s}" for s in steps] if steps else [folder]


def _rung_paths(rung: dict, steps) -> list[Path]:
    """The checkpoint folders of a rung's scores (all its runs)."""
    return [p for folder in rung["folders"].values() for p in _checkpoints(Path(folder), steps)]


def paired(model_a: str, data_a, model_b: str, data_b, *, n_boot: int, ci: float, seed: int) -> dict:
    """Rung A - rung B on the steps both scored (their loaded data), paired
    (:func:`diagnostics.scorers.scorer_contrasts`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateInputWarning)
        result = scorers.scorer_contrasts(data_a, data_b, n_boot=n_boot, ci=ci, seed=seed)
    return {"a": model_a, "b": model_b, **result}


def _rung(model: str, runs: Sequence[Path], out: Path, steps, *, device, dtype, swap: bool, donors: int,
          per_category: int, n_boot: int, ci: float, seed: int, progress: bool) -> dict:
    """One model's rung: its re-scored runs (scored now or reused) and every statistic of them."""
    t0 = time.perf_counter()
    if model == STORED:
        folders, params = {r.name: r for r in runs}, None
    else:
        folders = {r.name: out / model_slug(model) / r.name for r in runs}
        for run, folder in zip(runs, folders.values()):
            if not _complete(folder, model, steps):
                rescore_run(run, model, folder, ckpt_steps=_missing(run, folder, steps), device=device,
                            dtype=dtype, progress=progress)
        params = _parameters(next(iter(folders.values())))
    score_s = time.perf_counter() - t0
    paths = [p for folder in folders.values() for p in _checkpoints(folder, steps)]
    rung = {"model": model, "parameters": params, "folders": {k: str(v) for k, v in folders.items()},
            "pooled": battery(paths, n_boot=n_boot, ci=ci, seed=seed), "per_run": {}}
    for run, folder in folders.items():
        part = _checkpoints(folder, steps)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateInputWarning)
            data = load(part)
            rung["per_run"][run] = {"auroc": auroc.feedback_auroc(data, n_boot=n_boot, ci=ci, seed=seed),
                                    "delta_raw": robustness.robustness(data, n_boot=n_boot, ci=ci, seed=seed)["raw"]}
    if swap and model != STORED:
        rung["pooled"]["swap"] = _swap(folders, model, steps, device=device, dtype=dtype, donors=donors,
                                       per_category=per_category, n_boot=n_boot, ci=ci, seed=seed, progress=progress)
    rung["seconds"] = {"scoring": score_s, "total": time.perf_counter() - t0}
    return rung


def ladder(runs: Sequence[str | Path], models: Sequence[str], out: str | Path, *, ckpt_steps: Sequence[int] | None,
           device: str | None = None, dtype: str | None = None, swap: bool = True, donors: int = 5,
           per_category: int = 40, n_boot: int = 1000, ci: float = 0.95, seed: int = 0, progress: bool = True) -> dict:
    """Build the ladder (module docstring) and write ``OUT/ladder.json``; returns what it wrote."""
    runs, out = [Path(r) for r in runs], Path(out)
    names = [r.name for r in runs]
    if len(set(names)) < len(names):
        raise DiagnosticsError(f"--run: two runs share a folder name ({names}); their re-scorings would collide")
    if len(set(models)) < len(models):
        raise DiagnosticsError(f"--model: a model is named twice ({list(models)})")
    for r in runs:
        if not r.is_dir():
            raise DiagnosticsError(f"--run: {r} is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    result = {"runs": [str(r) for r in runs], "models": list(models), "ckpt_steps": ckpt_steps, "n_boot": n_boot,
              "ci": ci, "seed": seed, "device": device, "dtype": dtype, "rungs": {}, "paired": []}
    loaded = {}  # each rung's steps, loaded once for all its pairs
    for model in models:
        rung = _rung(model, runs, out, ckpt_steps, device=device, dtype=dtype, swap=swap, donors=donors,
                     per_category=per_category, n_boot=n_boot, ci=ci, seed=seed, progress=progress)
        loaded[model] = load(_rung_paths(rung, ckpt_steps))
        result["paired"] += [paired(model, loaded[model], earlier, loaded[earlier], n_boot=n_boot, ci=ci, seed=seed)
                             for earlier in result["rungs"]]
        result["rungs"][model] = rung
        write_json(out / "ladder.json", result)  # what is done so far survives a later failure
    return result


def table(result: dict) -> str:
    """The pooled AUROCs, Delta AUROCs and swap drop of each rung, then every two rungs paired."""
    rows = []
    for model, rung in result["rungs"].items():
        p = rung["pooled"]
        sig, rob, st = p["auroc"]["signals"], p["robustness"], p["strata"]
        cell = lambda d, k="auroc": f"{fmt(d[k])} [{fmt(d['ci_low'])}, {fmt(d['ci_high'])}]"  # noqa: E731
        swap = p.get("swap")
        rows.append([model, rung["parameters"] or "", cell(sig["ablated"]), cell(sig["full"]), cell(sig["residual"]),
                     cell(rob["raw"], "delta"), cell(rob["matched"], "delta"), cell(st["delta"]["within"], "delta"),
                     cell(swap["drop"], "delta") if swap else "", p["auroc"]["n_steps"]])
    text = format_table(["model", "parameters", "ablated", "full", "residual", "dAUROC raw", "dAUROC matched",
                         "dAUROC within strata", "swap drop", "steps"], rows,
                        title="Feedback AUROC and Delta AUROC (residual - full) by scorer model, runs pooled")
    pairs = result.get("paired") or []
    if not pairs:
        return text
    cell = lambda d: f"{fmt(d['delta'])} [{fmt(d['ci_low'])}, {fmt(d['ci_high'])}]"  # noqa: E731
    rows = [[f"{p['a']} - {p['b']}", cell(p["contrasts"]["full"]), cell(p["contrasts"]["residual"]),
             cell(p["contrasts"]["delta"]), p["n_steps"]] for p in pairs]
    return text + "\n\n" + format_table(
        ["scorers", "full", "residual", "dAUROC raw", "steps"], rows,
        title="Paired across scorers on the same steps: the change of each AUROC and of Delta AUROC")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rescoring.ladder", description=__doc__.split("\n")[0])
    p.add_argument("--run", action="append", required=True, metavar="DIR", help="a run folder (repeatable)")
    p.add_argument("--model", action="append", required=True,
                   help=f"a scorer model (name or folder; repeatable); '{STORED}' for the runs' own stored scores")
    p.add_argument("--out", required=True, type=output_folder, metavar="DIR", help="where the re-scorings and "
                                                                                  "ladder.json go")
    p.add_argument("--ckpt-steps", default=None, metavar="N,N,...", help="checkpoints (default: all of each run)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: each run's device when available)")
    p.add_argument("--dtype", default=None, help="float32, bfloat16, ... (default: each run's dtype)")
    p.add_argument("--no-swap", action="store_true", help="skip the observation swap")
    p.add_argument("--donors", type=positive_int("--donors"), default=5, help="donor observations per step (5)")
    p.add_argument("--per-category", type=positive_int("--per-category"), default=40,
                   help="swap targets per category and checkpoint (40)")
    add_bootstrap_options(p)
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    p.add_argument("--json", action="store_true", help="print one JSON object and nothing else on stdout")
    return p


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    check_weights_flags(args)
    check_bootstrap(args)
    result = ladder(args.run, args.model, args.out, ckpt_steps=parse_steps(args.ckpt_steps), device=args.device,
                    dtype=args.dtype, swap=not args.no_swap, donors=args.donors, per_category=args.per_category,
                    n_boot=args.n_boot, ci=args.ci, seed=args.seed, progress=show_progress(args))
    emit(args.json, result, table(result) + f"\n\nwrote {Path(args.out) / 'ladder.json'}\n"
                                            f"figure: python -m figures.ladder {Path(args.out) / 'ladder.json'}")
    return 0


main = rescoring_entry_point(_main, "rescoring.ladder")

if __name__ == "__main__":
    sys.exit(main())
