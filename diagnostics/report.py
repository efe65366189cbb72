"""All diagnoses of a run in one Markdown report.

:func:`diagnose` runs :mod:`diagnostics.auroc`, :mod:`diagnostics.robustness`,
:mod:`diagnostics.dratio`, :mod:`diagnostics.tails` and, where the steps carry their advantage and selection (the
command loads them so), :mod:`diagnostics.credit` on data loaded once; :func:`build_report` also writes
``report.md``, ``report.json`` and ``tails_top_words.csv`` into ``--out``. The pictures that ``report.md`` shows
(AUROC bars, Delta AUROC bars, D bars with intervals, four word clouds, the credit of valid and invalid steps) are
drawn from
``report.json`` into the same folder by ``python -m figures.panels OUT/report.json``, and Fig. 2 by
``python -m figures.fig2_diagnosis --report OUT/report.json``.

Command::

    python -m diagnostics.report --run DIR [--out DIR] [--n-boot 1000] [--json]
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path
from typing import Sequence

import pandas as pd

from diagnostics import auroc, credit, dratio, robustness, tails
from diagnostics.load import DiagData, DiagnosticsError
from diagnostics.options import command_parser, load_args, show_progress
from diagnostics.stats import DegenerateInputWarning
from diagnostics.wordtable import word_table
from ocsd.cli import emit, entry_point, fmt, output_folder, positive_int, write_json

__all__ = ["diagnose", "has_credit_columns", "build_report", "main"]


def diagnose(data: DiagData, *, n_boot: int = 1000, ci: float = 0.95, seed: int = 0, top: int = 30,
             progress: bool = True) -> tuple[dict, pd.DataFrame]:
    """Every diagnosis of the loaded data, each as its command's JSON.

    Parameters
    ----------
    data : DiagData
    n_boot, ci, seed : bootstrap settings, shared by every diagnosis.
    top : int, default 30
        Top words per tail.
    progress : bool, default True
        Show the matched bootstrap's progress bar (stderr).

    Returns
    -------
    (dict, pandas.DataFrame)
        ``{"auroc", "robustness", "dratio", "tails", "credit", "seconds"}`` (``seconds``: compute time of each;
        ``credit``, :func:`diagnostics.credit.credit` over whole steps at the paper's beta, only where ``data`` was
        loaded with ``properties=diagnostics.credit.training_columns``) and the tail-rate table
        (:func:`diagnostics.tails.tail_rates`).
    """
    jobs = {
        "auroc": lambda: auroc.feedback_auroc(data, n_boot=n_boot, ci=ci, seed=seed),
        "robustness": lambda: robustness.robustness(data, n_boot=n_boot, ci=ci, seed=seed, progress=progress),
        "dratio": lambda: dratio.dratio(data, n_boot=n_boot, ci=ci, seed=seed),
        "tails": lambda: tails.tails(data, top=top, words=word_table(data, centre=True)),
    }
    if has_credit_columns(data):
        jobs["credit"] = lambda: _credit(data, n_boot=n_boot, ci=ci, seed=seed)
    result, timings = {}, {}
    for name, job in jobs.items():
        t0 = time.perf_counter()
        result[name] = job()
        timings[name] = time.perf_counter() - t0
    result["tails"], rates = result["tails"]
    if result.get("credit") is None:
        result.pop("credit", None)
    result["seconds"] = timings
    return result, rates


def has_credit_columns(data: DiagData) -> bool:
    """Whether the steps carry what :mod:`diagnostics.credit` reads (their GRPO advantage and selection)."""
    return {"advantage", "selected"} <= set(data.steps.columns)


def _credit(data: DiagData, **settings) -> dict | None:
    """:func:`diagnostics.credit.credit` over whole steps, or None (with a warning) where no step is valid or
    invalid, so that the rest of the report is still written."""
    try:
        return credit.credit(data, **settings)
    except DiagnosticsError as exc:
        warnings.warn(f"the credit is left out of the report: {exc}", DegenerateInputWarning, stacklevel=3)
        return None


def _credit_markdown(res: dict, pct: str) -> list[str]:
    """The credit section of ``report.md`` (:func:`diagnostics.credit.credit`'s result)."""
    def row(name, part):
        q, push, size, large = part["q"], part["push"], part["abs_q"], part["share_large"]
        counts = f"{part['n']} | {fmt(part['share_advantage_nonzero'])}" if "n" in part else " | "
        return (f"| {name} | {counts} | {fmt(q['estimate'], 4)} [{fmt(q['ci_low'], 4)}, {fmt(q['ci_high'], 4)}] | "
                f"{fmt(size['estimate'], 4)} | {fmt(large['estimate'])} | {fmt(1e3 * push['estimate'], 2)} "
                f"[{fmt(1e3 * push['ci_low'], 2)}, {fmt(1e3 * push['ci_high'], 2)}] |")

    return [
        "## OCSD's token weights on valid and invalid steps", "",
        f"Per step, q = token mean of tanh(e/2), its size |q|, the share of tokens with |q| >= {res['large']:g}, and "
        f"the push beta |A| q (beta {res['beta']:g}; OCSD's token advantage minus GRPO's, 0 on unselected steps, in "
        f"thousandths): {res['n_steps']} steps in {res['n_trajectories']} trajectories, the statistics of "
        "`python -m diagnostics.credit`.", "",
        f"| label | steps | A != 0 | mean q [{pct} CI] | mean \\|q\\| | \\|q\\| >= {res['large']:g} | "
        f"push x 1e-3 [{pct} CI] |", "|---|---|---|---|---|---|---|",
        *[row(k, v) for k, v in res["labels"].items()], row("invalid - valid", res["difference"]), "",
        "![credit](credit.png)", "",
    ]


def _markdown(result: dict, data: DiagData, *, n_boot: int, ci: float, top: int, source: str) -> str:
    """``report.md``: the tables of every diagnosis and links to the PNGs."""
    sig, res_rob = result["auroc"]["signals"], result["robustness"]
    res_auroc, res_d, res_t = result["auroc"], result["dratio"], result["tails"]
    cats = res_d["categories"]
    pct = f"{ci:.0%}"
    lines = [
        "# Replay-support diagnosis", "",
        "The pictures are drawn into this folder by `python -m figures.panels report.json`.", "",
        f"Input: {source or 'checkpoints'}; {data.n_checkpoints} checkpoint(s) (global steps "
        f"{int(data.global_steps.min())}-{int(data.global_steps.max())}), env `{data.env}`, "
        f"{len(data.steps)} analysed steps, {n_boot} trajectory-cluster resamples, {pct} percentile intervals.", "",
        "## Feedback AUROC", "",
        f"{res_auroc['n_steps']} labelled steps ({res_auroc['n_valid']} valid, {res_auroc['n_invalid']} invalid; "
        f"ambiguous excluded) in {res_auroc['n_trajectories']} trajectories.", "",
        f"| signal | AUROC | {pct} CI |", "|---|---|---|",
        *[f"| {k} | {fmt(v['auroc'])} | [{fmt(v['ci_low'])}, {fmt(v['ci_high'])}] |"
          for k, v in sig.items()], "", "![AUROC](auroc.png)", "",
        "## Delta AUROC (residual - full)", "",
        f"| setting | dAUROC | {pct} CI | steps |", "|---|---|---|---|",
        *[f"| {k} | {fmt(v['delta'])} | [{fmt(v['ci_low'])}, {fmt(v['ci_high'])}] | {v['n_steps']} |"
          for k, v in res_rob.items()], "", "![Delta AUROC](delta_auroc.png)", "",
        "## Relative residual contribution D per functional role", "",
        f"Checkpoints weighted equally; entity lexicon: {res_d['lexicon_source']}.", "",
        f"| role | mean D | {pct} CI | words |", "|---|---|---|---|",
        *[f"| {k} | {fmt(v['mean'])} | [{fmt(v['ci_low'])}, {fmt(v['ci_high'])}] | {v['n_words']} |"
          for k, v in cats.items()], "", "![D ratio](dratio.png)", "",
        "## Tail-enriched words", "",
        f"Upper 5% tails of checkpoint-centred delta_F, delta_A, e and the lower 5% tail of e; size = "
        f"tail rate x log(1 + count). Top {top} words per tail in `tails_top_words.csv`.", "",
        "| tail | top words |", "|---|---|",
        *[f"| {k} | {', '.join(w['word'] for w in v[:15])} |" for k, v in res_t["top"].items()], "",
        "| top-set pair | Jaccard |", "|---|---|",
        *[f"| {k} | {fmt(v)} |" for k, v in res_t["overlap"].items()], "",
        *[f"![{k}]({tails.cloud_file(k)})" for k in res_t["clouds"]], "",
        *(_credit_markdown(result["credit"], pct) if "credit" in result else []),
    ]
    return "\n".join(lines)


def build_report(data: DiagData, out_dir, *, n_boot: int = 1000, ci: float = 0.95, seed: int = 0, top: int = 30,
                 progress: bool = True, source: str = "") -> dict:
    """Compute every diagnosis (:func:`diagnose`) and write ``report.md``, ``report.json`` and the tail words' CSV.

    Returns
    -------
    dict
        ``{"auroc", "robustness", "dratio", "tails", "credit", "files", "seconds"}`` (each as its command's JSON;
        ``credit`` as :func:`diagnose` says), as written to ``report.json``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    computed, rates = diagnose(data, n_boot=n_boot, ci=ci, seed=seed, top=top, progress=progress)
    timings = computed.pop("seconds")
    t0 = time.perf_counter()
    files = {"csv": str(tails.write_csv(rates, out_dir, top=top))}
    timings["tails"] += time.perf_counter() - t0
    computed["tails"]["files"] = dict(files)
    result = {**computed, "files": files, "seconds": timings}
    (out_dir / "report.md").write_text(_markdown(result, data, n_boot=n_boot, ci=ci, top=top, source=source))
    files["report"] = str(out_dir / "report.md")
    write_json(out_dir / "report.json", result)
    return result


def _main(argv: Sequence[str] | None) -> int:
    parser = command_parser("diagnostics.report", __doc__.split("\n")[0], progress=True)
    parser.add_argument("--out", type=output_folder, default="diagnostics_out",
                        help="output folder (default diagnostics_out)")
    parser.add_argument("--top", type=positive_int("--top"), default=30, help="top words per tail (30)")
    args = parser.parse_args(argv)
    data = load_args(args, properties=credit.training_columns)
    result = build_report(data, args.out, n_boot=args.n_boot, ci=args.ci, seed=args.seed, top=args.top,
                          progress=show_progress(args), source=", ".join(args.run or args.ckpt))
    table = "\n\n".join([auroc.table(result["auroc"], args.ci), robustness.table(result["robustness"], args.ci),
                         dratio.table(result["dratio"], args.ci), tails.table(result["tails"]),
                         *([credit.table(result["credit"])] if "credit" in result else []),
                         f"wrote {result['files']['report']}\n"
                         f"pictures: python -m figures.panels {Path(args.out) / 'report.json'}"])
    emit(args.json, result, table)
    return 0


main = entry_point(_main, "diagnostics.report")


if __name__ == "__main__":
    sys.exit(main())
